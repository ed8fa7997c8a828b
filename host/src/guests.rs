//! The example guests where the build puts them: the components `snodo serve`, `snodo
//! stress` and `snodo bench` use when none is named.

use std::path::{Path, PathBuf};

/// Where `cargo build -p snodo-test-guests` puts the example guests.
pub(crate) const GUESTS_DIR: &str = "target/guests/wasm32-wasip2/release";

/// The example guest `file` where the build puts it.
pub(crate) fn guest(file: &str) -> PathBuf {
    Path::new(GUESTS_DIR).join(file)
}

/// The example guests that exist, or why there are none.
pub(crate) fn default_components() -> Result<Vec<PathBuf>, String> {
    let found: Vec<PathBuf> = ["fixtures.wasm", "examples.wasm"]
        .into_iter()
        .map(guest)
        .filter(|p| p.exists())
        .collect();
    if found.is_empty() {
        return Err(format!(
            "no components: pass --component, or build the example guests (cargo build -p snodo-test-guests puts them in {GUESTS_DIR})"
        ));
    }
    Ok(found)
}
