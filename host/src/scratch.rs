//! A store opened for one run of a command that measures or exercises it (`snodo stress`,
//! `snodo bench runner`): fresh unless a file is named, and removed afterwards.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use snodo::store::{MemoryStore, PgOptions, PgStore, RedbStore, SqliteStore, Store};

/// A store of one of the four kinds, and what to remove once the run is over.
pub(crate) struct ScratchStore {
    /// The store.
    pub(crate) store: Arc<dyn Store>,
    /// A PostgreSQL schema made for this run.
    schema: Option<PgOptions>,
}

impl ScratchStore {
    /// Opens `kind`: `memory`; `redb` or `sqlite` at `file` (created if it does not exist);
    /// `postgres` at `pg_url` in a new schema named `schema`, which [`ScratchStore::remove`]
    /// drops.
    pub(crate) async fn open(
        kind: &str,
        file: &Path,
        pg_url: &str,
        schema: String,
    ) -> Result<Self, String> {
        let err = |e: snodo::store::StoreError| e.to_string();
        let (store, schema): (Arc<dyn Store>, _) = match kind {
            "memory" => (Arc::new(MemoryStore::new()), None),
            "redb" => (Arc::new(RedbStore::open(file).map_err(err)?), None),
            "sqlite" => (Arc::new(SqliteStore::open(file).map_err(err)?), None),
            "postgres" => {
                let mut pg = PgOptions::new(pg_url, snodo::serve::default_node_id());
                pg.schema = schema;
                let store = PgStore::open(pg.clone()).await.map_err(err)?;
                (Arc::new(store), Some(pg))
            }
            other => {
                return Err(format!(
                    "--store {other:?}: use memory, redb, sqlite or postgres"
                ));
            }
        };
        Ok(Self { store, schema })
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
