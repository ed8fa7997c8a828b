//! A store opened for one run of a command that measures or exercises it (`snodo stress`,
//! `snodo bench runner`): fresh unless a file is named, and removed afterwards.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use snodo::store::{PgOptions, Store, StoreConfig, StoreKind};

/// The PostgreSQL the measuring commands use unless told otherwise (the test database of
/// a local server).
pub(crate) const PG_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

/// A store of any kind, and what to remove once the run is over.
pub(crate) struct ScratchStore {
    /// The store.
    pub(crate) store: Arc<dyn Store>,
    /// A PostgreSQL schema made for this run.
    schema: Option<PgOptions>,
}

impl ScratchStore {
    /// Opens a store of `kind`: `memory`; `redb` or `sqlite` at `file` (created if it does
    /// not exist); `postgres` at `pg_url` in a new schema named `schema`, which
    /// [`ScratchStore::remove`] drops.
    pub(crate) async fn open(
        kind: StoreKind,
        file: &Path,
        pg_url: &str,
        schema: String,
    ) -> Result<Self, String> {
        let config = match kind {
            StoreKind::Memory => StoreConfig::Memory,
            StoreKind::Redb => StoreConfig::Redb(file.to_owned()),
            StoreKind::Sqlite => StoreConfig::Sqlite(file.to_owned()),
            StoreKind::Postgres => {
                let mut pg = PgOptions::new(pg_url, snodo::serve::default_node_id());
                pg.schema = schema;
                StoreConfig::Postgres(pg)
            }
        };
        let opened = config.open().await.map_err(|e| e.to_string())?;
        let schema = match config {
            StoreConfig::Postgres(pg) => Some(pg),
            _ => None,
        };
        Ok(Self {
            store: opened.store,
            schema,
        })
    }

    /// Removes the PostgreSQL schema this run made, if any (the store may still be open:
    /// nothing uses it any more).
    pub(crate) async fn remove(&self) -> Result<(), String> {
        match &self.schema {
            Some(pg) => snodo::store::drop_postgres_schema(pg)
                .await
                .map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// A fresh private directory under the system's temporary directory, named after `what`.
pub(crate) fn temp_dir(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "snodo-{what}-{}-{}",
        std::process::id(),
        snodo::model::TaskId::generate()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}
