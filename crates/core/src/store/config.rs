//! Which store: the one place a kind of store is named, configured and opened.
//!
//! `snodo serve`, `inspect`, `migrate`, `stress`, `bench` and the configuration file all say
//! which store they mean with [`StoreKind`], and open it from a [`StoreConfig`]; a new
//! adapter is one more arm here and a folder beside the others.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::SettingError;

#[cfg(not(all(feature = "redb", feature = "sqlite", feature = "postgres")))]
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

/// The `[store]` section of the configuration file: which store, where, and a PostgreSQL
/// store's settings. Turned into the [`StoreConfig`] to open by [`StoreSection::to_config`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    /// `redb` (the default), `sqlite`, `postgres` or `memory`.
    pub kind: StoreKind,
    /// The redb or SQLite file (default `tasks.redb` or `tasks.sqlite` in the data
    /// directory).
    pub path: Option<PathBuf>,
    /// PostgreSQL: the connection string (prefer `url_env`).
    pub url: Option<String>,
    /// PostgreSQL: an environment variable holding the connection string.
    pub url_env: Option<String>,
    /// PostgreSQL: the schema holding Snodo's tables (default `snodo`).
    pub schema: Option<String>,
    /// PostgreSQL: connections this node keeps at most (default 16, at most 1024).
    pub pool: Option<usize>,
    /// PostgreSQL: grouped write transactions in flight at once (default 2, at most the
    /// pool's write connections).
    pub write_groups: Option<usize>,
    /// PostgreSQL: apply pending migrations at start (default false: run `snodo migrate`).
    pub migrate: Option<bool>,
}

impl StoreSection {
    /// The store this section names, for the node `node`: a file store's file is `path`
    /// (already resolved by the caller) or its default name in `data`. Each refusal names
    /// its key, relative to the section.
    pub fn to_config(&self, data: &Path, node: &str) -> Result<StoreConfig, SettingError> {
        self.check_keys()?;
        let file = |default: &str| self.path.clone().unwrap_or_else(|| data.join(default));
        Ok(match self.kind {
            StoreKind::Redb => StoreConfig::Redb(file("tasks.redb")),
            StoreKind::Sqlite => StoreConfig::Sqlite(file("tasks.sqlite")),
            StoreKind::Memory => StoreConfig::Memory,
            #[cfg(feature = "postgres")]
            StoreKind::Postgres => StoreConfig::Postgres(self.postgres(node)?),
            #[cfg(not(feature = "postgres"))]
            StoreKind::Postgres => {
                let _ = node;
                return Err(SettingError::new(
                    "kind",
                    left_out(StoreKind::Postgres).to_string(),
                ));
            }
        })
    }

    /// Refuses the keys the chosen kind does not take.
    fn check_keys(&self) -> Result<(), SettingError> {
        if self.kind != StoreKind::Postgres {
            for (set, key) in [
                (self.url.is_some(), "url"),
                (self.url_env.is_some(), "url_env"),
                (self.schema.is_some(), "schema"),
                (self.pool.is_some(), "pool"),
                (self.write_groups.is_some(), "write_groups"),
                (self.migrate.is_some(), "migrate"),
            ] {
                if set {
                    return Err(SettingError::new(
                        key,
                        "only a PostgreSQL store (kind = \"postgres\") takes this",
                    ));
                }
            }
        }
        if matches!(self.kind, StoreKind::Postgres | StoreKind::Memory) && self.path.is_some() {
            return Err(SettingError::new(
                "path",
                "only a file store (redb or sqlite) takes a path",
            ));
        }
        Ok(())
    }

    /// A PostgreSQL store's options, checked without connecting.
    #[cfg(feature = "postgres")]
    fn postgres(&self, node: &str) -> Result<PgOptions, SettingError> {
        let (url, url_key) = match (&self.url, &self.url_env) {
            (Some(u), None) => (u.clone(), "url"),
            (None, Some(var)) => (
                std::env::var(var).map_err(|_| {
                    SettingError::new(
                        "url_env",
                        format!("the environment variable {var} is not set"),
                    )
                })?,
                "url_env",
            ),
            _ => {
                return Err(SettingError::new(
                    "",
                    "a PostgreSQL store needs exactly one of url and url_env",
                ));
            }
        };
        let mut o = PgOptions::new(url, node);
        o.migrate = self.migrate.unwrap_or(false);
        if let Some(schema) = &self.schema {
            super::sql::check_identifier(schema)
                .map_err(|e| SettingError::new("schema", e.to_string()))?;
            o.schema.clone_from(schema);
        }
        // The schema is known good: what is left to refuse is the connection string.
        o.check()
            .map_err(|e| SettingError::new(url_key, e.to_string()))?;
        if let Some(n) = self.pool {
            if !(1..=1024).contains(&n) {
                return Err(SettingError::new("pool", "1..=1024 connections"));
            }
            o.pool_size = n;
        }
        if let Some(n) = self.write_groups {
            let writes = o.pool_size - o.read_connections();
            if !(1..=writes).contains(&n) {
                return Err(SettingError::new(
                    "write_groups",
                    format!(
                        "1..={writes}: each group holds one of the pool's {writes} write \
                         connections (store.pool)"
                    ),
                ));
            }
            o.write_groups = n;
        }
        Ok(o)
    }
}

/// The error for a kind of store this build was compiled without.
#[cfg(not(all(feature = "redb", feature = "sqlite", feature = "postgres")))]
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
