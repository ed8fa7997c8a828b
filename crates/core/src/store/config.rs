//! Which store: the one place a kind of store is named, configured and opened.
//!
//! `snodo serve`, `inspect`, `migrate`, `stress`, `bench` and the configuration file all say
//! which store they mean with [`StoreKind`], and open it from a [`StoreConfig`]; a new
//! adapter is one more arm here and a folder beside the others.

use std::path::PathBuf;
use std::sync::Arc;

#[cfg(not(all(feature = "redb", feature = "sqlite")))]
use super::StoreError;
#[cfg(feature = "postgres")]
use super::{PgOptions, RemoteChanges};
use super::{Store, StoreResult};

/// A kind of task store.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// The durable embedded store, one process (the default).
    #[default]
    Redb,
    /// A SQLite file: durable, one process.
    Sqlite,
    /// PostgreSQL, shared by any number of nodes.
    Postgres,
    /// Volatile: tests and demos.
    Memory,
}

impl StoreKind {
    /// The kind's name, as the configuration and the command line write it.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Redb => "redb",
            StoreKind::Sqlite => "sqlite",
            StoreKind::Postgres => "postgres",
            StoreKind::Memory => "memory",
        }
    }

    /// Whether the store outlives its process.
    pub fn is_durable(self) -> bool {
        self != StoreKind::Memory
    }
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A store to open: its kind and where it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// Volatile.
    Memory,
    /// The redb file at this path (created, with its directory, if missing).
    Redb(PathBuf),
    /// The SQLite file at this path (created, with its directory, if missing).
    Sqlite(PathBuf),
    /// A PostgreSQL database shared with other nodes.
    #[cfg(feature = "postgres")]
    Postgres(PgOptions),
}

/// A store just opened, and what opening it found.
pub struct OpenedStore {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Its kind.
    pub kind: StoreKind,
    /// The boot epoch a file store advanced to (claims of earlier epochs are fenced).
    pub epoch: Option<u64>,
    /// Claims of a previous process (or of this node's previous life) released at open.
    pub recovered: usize,
    /// Changes other nodes announce (a shared store only).
    #[cfg(feature = "postgres")]
    pub remote: Option<RemoteChanges>,
}

impl StoreConfig {
    /// The kind of store this opens.
    pub fn kind(&self) -> StoreKind {
        match self {
            StoreConfig::Memory => StoreKind::Memory,
            StoreConfig::Redb(_) => StoreKind::Redb,
            StoreConfig::Sqlite(_) => StoreKind::Sqlite,
            #[cfg(feature = "postgres")]
            StoreConfig::Postgres(_) => StoreKind::Postgres,
        }
    }

    /// Opens the store. A file store advances its boot epoch and fences the claims of the
    /// process before it; a kind this build left out is refused, naming its feature.
    pub async fn open(&self) -> StoreResult<OpenedStore> {
        let opened = |store: Arc<dyn Store>, epoch, recovered| OpenedStore {
            store,
            kind: self.kind(),
            epoch,
            recovered,
            #[cfg(feature = "postgres")]
            remote: None,
        };
        match self {
            StoreConfig::Memory => Ok(opened(Arc::new(super::MemoryStore::new()), None, 0)),
            #[cfg(feature = "redb")]
            StoreConfig::Redb(path) => {
                let s = super::RedbStore::open(path)?;
                let (epoch, recovered) = (s.epoch(), s.fenced_claims());
                Ok(opened(Arc::new(s), Some(epoch), recovered))
            }
            #[cfg(feature = "sqlite")]
            StoreConfig::Sqlite(path) => {
                let s = super::SqliteStore::open(path)?;
                let (epoch, recovered) = (s.epoch(), s.fenced_claims());
                Ok(opened(Arc::new(s), Some(epoch), recovered))
            }
            #[cfg(feature = "postgres")]
            StoreConfig::Postgres(options) => {
                let s = super::PgStore::open(options.clone()).await?;
                let (recovered, remote) = (s.fenced_claims(), s.remote_changes());
                let mut o = opened(Arc::new(s), None, recovered);
                o.remote = Some(remote);
                Ok(o)
            }
            #[cfg(not(all(feature = "redb", feature = "sqlite")))]
            other => Err(left_out(other.kind())),
        }
    }
}

/// The error for a kind of store this build was compiled without.
#[cfg(not(all(feature = "redb", feature = "sqlite")))]
fn left_out(kind: StoreKind) -> StoreError {
    StoreError::invalid(format!(
        "this build has no {kind} store: build snodo-core with the `{kind}` feature"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_kind_opens_from_its_config_and_reports_its_boot() {
        let dir = tempfile::tempdir().expect("tmp");
        let memory = StoreConfig::Memory.open().await.expect("memory");
        assert_eq!((memory.kind, memory.epoch), (StoreKind::Memory, None));
        for (config, kind) in [
            (
                StoreConfig::Redb(dir.path().join("t.redb")),
                StoreKind::Redb,
            ),
            (
                StoreConfig::Sqlite(dir.path().join("t.sqlite")),
                StoreKind::Sqlite,
            ),
        ] {
            assert_eq!(config.kind(), kind);
            let first = config.open().await.expect("open");
            assert_eq!((first.kind, first.epoch), (kind, Some(1)), "{kind}");
            drop(first);
            let again = config.open().await.expect("reopen");
            assert_eq!(
                again.epoch,
                Some(2),
                "{kind}: a reopen advances the boot epoch"
            );
        }
        let kinds: Vec<StoreKind> = ["redb", "sqlite", "postgres", "memory"]
            .iter()
            .map(|k| serde_json::from_value(serde_json::json!(k)).expect("kind"))
            .collect();
        assert_eq!(
            kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["redb", "sqlite", "postgres", "memory"]
        );
        assert_eq!(StoreKind::default(), StoreKind::Redb);
    }
}
