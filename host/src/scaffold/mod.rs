//! `snodo new NAME`: a tool crate that builds into a component and is served by the next
//! command it prints, with a tool that shows the parts an author needs (derived schemas,
//! a per-call mode rule, a confirmation, progress, cancellation) and one that calls out
//! through the host's HTTP.

use std::path::{Path, PathBuf};

const CARGO_TOML: &str = include_str!("Cargo.toml.template");
const LIB_RS: &str = include_str!("lib.rs.template");
const GITIGNORE: &str = "/target\n";

/// What `snodo new` made.
#[derive(Debug)]
pub(crate) struct Scaffolded {
    /// The crate's directory.
    pub(crate) dir: PathBuf,
    /// The component `cargo build --release --target wasm32-wasip2` makes, relative to `dir`.
    pub(crate) component: PathBuf,
}

/// Whether `name` can name a crate: ASCII letters, digits, `-` and `_`, starting with a
/// letter, at most 64 characters.
fn valid_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Writes a tool crate named `name` into `dir` (which must not exist, or be empty), its
/// `snodo-guest` dependency at `sdk`.
pub(crate) fn scaffold(name: &str, dir: &Path, sdk: &Path) -> Result<Scaffolded, String> {
    if !valid_name(name) {
        return Err(format!(
            "{name:?} cannot name a crate: use ASCII letters, digits, '-' and '_', starting with a letter"
        ));
    }
    if !sdk.join("Cargo.toml").is_file() {
        return Err(format!(
            "{} is not the snodo-guest crate (guest-sdk/ in the Snodo repository); pass it with --sdk",
            sdk.display()
        ));
    }
    if dir.exists()
        && std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .next()
            .is_some()
    {
        return Err(format!("{} already exists and is not empty", dir.display()));
    }
    let lib = name.replace('-', "_");
    // TOML basic strings escape backslashes and quotes; a path is written as given.
    let sdk_text = sdk
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{lib}}", &lib)
            .replace("{{sdk}}", &sdk_text)
    };
    let write = |rel: &str, text: String| {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write("Cargo.toml", fill(CARGO_TOML))?;
    write("src/lib.rs", fill(LIB_RS))?;
    write(".gitignore", GITIGNORE.to_owned())?;
    Ok(Scaffolded {
        dir: dir.to_path_buf(),
        component: Path::new("target/wasm32-wasip2/release").join(format!("{lib}.wasm")),
    })
}

/// The SDK beside this binary's sources, when it was built from a checkout that still
/// exists.
pub(crate) fn default_sdk() -> Option<PathBuf> {
    let candidate = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
    candidate
        .canonicalize()
        .ok()
        .filter(|p| p.join("Cargo.toml").is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crate_is_written_with_its_names_and_sdk() {
        let tmp = tempfile::tempdir().expect("tmp");
        let sdk = default_sdk().expect("built from a checkout");
        let dir = tmp.path().join("word-counter");
        let made = scaffold("word-counter", &dir, &sdk).expect("scaffolds");
        assert_eq!(
            made.component,
            Path::new("target/wasm32-wasip2/release/word_counter.wasm")
        );
        let toml = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
        assert!(toml.contains("name = \"word-counter\""), "{toml}");
        assert!(
            toml.contains(&format!("path = \"{}\"", sdk.display())),
            "{toml}"
        );
        assert!(toml.contains("[workspace]"));
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).expect("lib.rs");
        assert!(lib.starts_with("//! word-counter:"));
        assert!(!lib.contains("{{"), "every placeholder is filled");
        // Never over an existing crate.
        let again = scaffold("word-counter", &dir, &sdk).expect_err("not empty");
        assert!(again.contains("not empty"), "{again}");
    }

    #[test]
    fn bad_names_and_missing_sdks_are_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let sdk = default_sdk().expect("built from a checkout");
        for bad in ["", "1tool", "my tool", "a/b", "é"] {
            assert!(
                scaffold(bad, &tmp.path().join("x"), &sdk).is_err(),
                "{bad:?}"
            );
        }
        let e = scaffold("ok", &tmp.path().join("y"), tmp.path()).expect_err("no sdk there");
        assert!(e.contains("--sdk"), "{e}");
    }
}
