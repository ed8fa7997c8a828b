//! `snodo new NAME [--lang rust|python|js]`: a tool project that builds into a component
//! with one command and is served by the next command it prints, with a tool that shows
//! the parts an author needs (derived schemas, a per-call mode rule, a confirmation,
//! progress, cancellation); in Rust also one that calls out through the host's HTTP, in
//! Python and JavaScript a resource and a prompt.

use std::path::{Path, PathBuf};

const CARGO_TOML: &str = include_str!("Cargo.toml.template");
const LIB_RS: &str = include_str!("lib.rs.template");
const GITIGNORE: &str = "/target\n";
const PY_APP: &str = include_str!("python/app.py.template");
const PY_BUILD: &str = include_str!("python/build.sh.template");
const PY_GITIGNORE: &str = "/.venv\n__pycache__/\n*.wasm\n";
const JS_PACKAGE: &str = include_str!("js/package.json.template");
const JS_APP: &str = include_str!("js/app.js.template");
const JS_GITIGNORE: &str = "/node_modules\n*.wasm\n";
/// npm installs a `file:` dependency as a copy with its own dependencies (not a bare link
/// to a checkout whose `node_modules` may not exist).
const JS_NPMRC: &str = "install-links=true\n";

/// The language a tool is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    /// A Rust crate with the snodo-guest crate (guest-sdk/).
    Rust,
    /// A Python app with the snodo-guest package (guest-sdk-python/) and componentize-py.
    Python,
    /// A JavaScript app with the snodo-guest npm package (guest-sdk-js/) and componentize-js.
    Js,
}

impl Lang {
    /// The SDK directory in a checkout, relative to the repository root.
    pub(crate) fn sdk_dir(self) -> &'static str {
        match self {
            Lang::Rust => "guest-sdk",
            Lang::Python => "guest-sdk-python",
            Lang::Js => "guest-sdk-js",
        }
    }

    /// A file every SDK directory of this language holds.
    fn sdk_marker(self) -> &'static str {
        match self {
            Lang::Rust => "Cargo.toml",
            Lang::Python => "snodo_guest/__init__.py",
            Lang::Js => "bin/build.mjs",
        }
    }
}

/// What `snodo new` made.
#[derive(Debug)]
pub(crate) struct Scaffolded {
    /// The crate's directory.
    pub(crate) dir: PathBuf,
    /// The component the build command makes, relative to `dir`.
    pub(crate) component: PathBuf,
    /// The one command that builds it, run in `dir`.
    pub(crate) build: &'static str,
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

/// Writes a tool project named `name` in `lang` into `dir` (which must not exist, or be
/// empty), its `snodo-guest` SDK at `sdk`.
pub(crate) fn scaffold(
    name: &str,
    dir: &Path,
    sdk: &Path,
    lang: Lang,
) -> Result<Scaffolded, String> {
    if !valid_name(name) {
        return Err(format!(
            "{name:?} cannot name a tool project: use ASCII letters, digits, '-' and '_', starting with a letter"
        ));
    }
    if !sdk.join(lang.sdk_marker()).is_file() {
        return Err(format!(
            "{} is not the snodo-guest SDK for {lang:?} ({}/ in the Snodo repository); pass it with --sdk",
            sdk.display(),
            lang.sdk_dir()
        ));
    }
    // Python and JavaScript build against Snodo's WIT, beside the SDK in a checkout.
    let wit = sdk.join("../wit");
    if lang != Lang::Rust && !wit.join("tasks.wit").is_file() {
        return Err(format!(
            "{} holds no Snodo WIT (wit/tasks.wit beside the SDK); pass the SDK of a Snodo checkout with --sdk",
            wit.display()
        ));
    }
    let wit = wit.canonicalize().unwrap_or(wit);
    if dir.exists()
        && std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .next()
            .is_some()
    {
        return Err(format!("{} already exists and is not empty", dir.display()));
    }
    let lib = name.replace('-', "_");
    // TOML, JSON and sh double-quoted strings all escape backslashes and quotes so; a path
    // is written as given otherwise.
    let quoted = |p: &Path| {
        p.display()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
    };
    let sdk_text = quoted(sdk);
    let wit_text = quoted(&wit);
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{lib}}", &lib)
            .replace("{{sdk}}", &sdk_text)
            .replace("{{wit}}", &wit_text)
    };
    let write = |rel: &str, text: String| {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    match lang {
        Lang::Rust => {
            write("Cargo.toml", fill(CARGO_TOML))?;
            write("src/lib.rs", fill(LIB_RS))?;
            write(".gitignore", GITIGNORE.to_owned())?;
            Ok(Scaffolded {
                dir: dir.to_path_buf(),
                component: Path::new("target/wasm32-wasip2/release").join(format!("{lib}.wasm")),
                build: "cargo build --release --target wasm32-wasip2",
            })
        }
        Lang::Python => {
            write("app.py", fill(PY_APP))?;
            write("build.sh", fill(PY_BUILD))?;
            write(".gitignore", PY_GITIGNORE.to_owned())?;
            executable(&dir.join("build.sh"))?;
            Ok(Scaffolded {
                dir: dir.to_path_buf(),
                component: PathBuf::from(format!("{lib}.wasm")),
                build: "./build.sh",
            })
        }
        Lang::Js => {
            write("package.json", fill(JS_PACKAGE))?;
            write("app.js", fill(JS_APP))?;
            write(".gitignore", JS_GITIGNORE.to_owned())?;
            write(".npmrc", JS_NPMRC.to_owned())?;
            Ok(Scaffolded {
                dir: dir.to_path_buf(),
                component: PathBuf::from(format!("{lib}.wasm")),
                build: "npm install && npm run build",
            })
        }
    }
}

#[cfg(unix)]
fn executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(not(unix))]
fn executable(_: &Path) -> Result<(), String> {
    Ok(())
}

/// The SDK for `lang` beside this binary's sources, when it was built from a checkout that
/// still exists.
pub(crate) fn default_sdk(lang: Lang) -> Option<PathBuf> {
    let candidate = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(lang.sdk_dir());
    candidate
        .canonicalize()
        .ok()
        .filter(|p| p.join(lang.sdk_marker()).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crate_is_written_with_its_names_and_sdk() {
        let tmp = tempfile::tempdir().expect("tmp");
        let sdk = default_sdk(Lang::Rust).expect("built from a checkout");
        let dir = tmp.path().join("word-counter");
        let made = scaffold("word-counter", &dir, &sdk, Lang::Rust).expect("scaffolds");
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
        let again = scaffold("word-counter", &dir, &sdk, Lang::Rust).expect_err("not empty");
        assert!(again.contains("not empty"), "{again}");
    }

    #[test]
    fn bad_names_and_missing_sdks_are_refused() {
        let tmp = tempfile::tempdir().expect("tmp");
        let sdk = default_sdk(Lang::Rust).expect("built from a checkout");
        for bad in ["", "1tool", "my tool", "a/b", "é"] {
            assert!(
                scaffold(bad, &tmp.path().join("x"), &sdk, Lang::Rust).is_err(),
                "{bad:?}"
            );
        }
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let e =
                scaffold("ok", &tmp.path().join("y"), tmp.path(), lang).expect_err("no sdk there");
            assert!(e.contains("--sdk"), "{e}");
        }
        // Each language's SDK is its own: the Rust crate is no Python SDK.
        let e =
            scaffold("ok", &tmp.path().join("z"), &sdk, Lang::Python).expect_err("not Python's");
        assert!(e.contains("guest-sdk-python"), "{e}");
    }

    #[test]
    fn python_and_javascript_projects_are_written_with_their_build_command() {
        let tmp = tempfile::tempdir().expect("tmp");
        let py_sdk = default_sdk(Lang::Python).expect("built from a checkout");
        let made = scaffold(
            "word-counter",
            &tmp.path().join("py"),
            &py_sdk,
            Lang::Python,
        )
        .expect("python");
        assert_eq!(made.build, "./build.sh");
        assert_eq!(made.component, Path::new("word_counter.wasm"));
        let build = std::fs::read_to_string(made.dir.join("build.sh")).expect("build.sh");
        assert!(
            build.contains(&format!("SDK=\"{}\"", py_sdk.display())),
            "{build}"
        );
        assert!(
            build.contains("componentize-py==") && build.contains("-o word_counter.wasm"),
            "{build}"
        );
        let wit = py_sdk.join("../wit").canonicalize().expect("wit");
        assert!(
            build.contains(&format!("WIT=\"{}\"", wit.display())),
            "{build}"
        );
        let app = std::fs::read_to_string(made.dir.join("app.py")).expect("app.py");
        assert!(
            app.contains("def count_words") && app.contains("docs://word-counter"),
            "{app}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(made.dir.join("build.sh"))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o111, 0o111, "build.sh is executable");
        }

        let js_sdk = default_sdk(Lang::Js).expect("built from a checkout");
        let made = scaffold("word-counter", &tmp.path().join("js"), &js_sdk, Lang::Js).expect("js");
        assert_eq!(made.build, "npm install && npm run build");
        let package: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(made.dir.join("package.json")).expect("package.json"),
        )
        .expect("package.json is JSON");
        assert_eq!(
            package["dependencies"]["snodo-guest"],
            format!("file:{}", js_sdk.display())
        );
        assert_eq!(
            package["scripts"]["build"],
            format!(
                "snodo-guest-build app.js -o word_counter.wasm --wit {}",
                wit.display()
            )
        );
        let npmrc = std::fs::read_to_string(made.dir.join(".npmrc")).expect(".npmrc");
        assert_eq!(npmrc, "install-links=true\n");
        for (dir, file) in [("py", "app.py"), ("js", "app.js")] {
            let text = std::fs::read_to_string(tmp.path().join(dir).join(file)).expect("app");
            assert!(
                !text.contains("{{"),
                "every placeholder is filled in {file}"
            );
        }
    }
}
