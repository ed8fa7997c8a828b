//! Builds the example-guests workspace for wasm32-wasip2 and writes the components' paths
//! into `guests.rs`. Guests are fixtures: a guest without a test does not build, and no test
//! needs a hand-built `.wasm`.

use std::path::{Path, PathBuf};
use std::process::Command;

const COMPONENTS: [(&str, &str); 10] = [
    ("FIXTURES", "fixtures.wasm"),
    ("EXAMPLES", "examples.wasm"),
    ("HOSTILE", "hostile.wasm"),
    ("BAD_DESCRIBE", "bad_describe.wasm"),
    ("SLOW_DESCRIBE", "slow_describe.wasm"),
    ("NOT_AN_EXECUTOR", "not-an-executor.wasm"),
    ("SCHEMA_BOMB", "schema_bomb.wasm"),
    ("OUTBOUND", "outbound.wasm"),
    ("CATALOG_V2", "catalog_v2.wasm"),
    ("GATEWAY", "gateway.wasm"),
];

fn main() {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let guests = manifest.parent().expect("example-guests").to_path_buf();
    let root = guests.parent().expect("repository root").to_path_buf();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));

    for watched in [
        guests.join("Cargo.toml"),
        guests.join("Cargo.lock"),
        guests.join("fixtures"),
        guests.join("examples"),
        guests.join("hostile"),
        guests.join("bad-describe"),
        guests.join("slow-describe"),
        guests.join("not-an-executor"),
        guests.join("schema-bomb"),
        guests.join("outbound"),
        guests.join("catalog-v2"),
        guests.join("gateway"),
        guests.join("shared"),
        root.join("guest-sdk"),
        root.join("wit"),
    ] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }

    let target_dir = shared_target_dir(&out);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--locked",
        "--target",
        "wasm32-wasip2",
        "--manifest-path",
    ])
    .arg(guests.join("Cargo.toml"))
    .arg("--target-dir")
    .arg(&target_dir);
    // The outer build's settings are for the host, not for wasm guests.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MAKEFLAGS",
        "MAKEFLAGS",
        "MFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().expect("run cargo to build the example guests");
    assert!(
        status.success(),
        "building the example guests failed; is the wasm32-wasip2 target installed? (scripts/setup installs it)"
    );

    let release = target_dir.join("wasm32-wasip2").join("release");
    let mut consts = String::new();
    for (name, file) in COMPONENTS {
        let path = release.join(file);
        assert!(path.exists(), "{} was not built", path.display());
        consts.push_str(&format!(
            "/// The `{file}` component.\npub const {name}: &str = {:?};\n",
            path.display().to_string()
        ));
    }
    // Compiled code is keyed by the component's digest and the engine's settings, and each
    // entry is sealed with both, so every test of a build may share one cache: a component
    // compiles once per build, not once per test. The scripts' suites use the same directory.
    let cache = match target_dir.parent() {
        Some(target) if target_dir.file_name().is_some_and(|n| n == "guests") => {
            target.join("component-cache")
        }
        _ => out.join("component-cache"),
    };
    consts.push_str(&format!(
        "/// Where tests keep compiled components (shared by every test of this build).\npub const COMPONENT_CACHE: &str = {:?};\n",
        cache.display().to_string()
    ));
    std::fs::write(out.join("guests.rs"), consts).expect("write guests.rs");
}

/// `<target>/guests` when OUT_DIR sits in the usual `<target>/<profile>/build/<pkg>/out`, so
/// debug and check builds share one guest build; `OUT_DIR/guests` otherwise.
fn shared_target_dir(out: &Path) -> PathBuf {
    let mut up = out.ancestors();
    let build = up.nth(2);
    match (build, up.nth(1)) {
        (Some(b), Some(target)) if b.file_name().is_some_and(|n| n == "build") => {
            target.join("guests")
        }
        _ => out.join("guests"),
    }
}
