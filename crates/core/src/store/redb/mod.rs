//! RedbStore: the embedded durable adapter, on a single redb file.
//!
//! Layout: `tasks` maps the 16 id bytes to the versioned JSON record; `due`, `expiry` and
//! `claimed` are ordered indexes keyed by an 8-byte big-endian key followed by the id;
//! `live` counts each scope's live tasks; `meta` holds the file's schema version and boot
//! epoch.
//!
//! All writes go through one writer thread that commits them with group commit: the
//! operations queued while a commit is in flight are applied in the next write transaction
//! and made durable with one fsync, and no caller hears back before that fsync returned.
//! Reads run in place against MVCC snapshots and never wait for the writer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, TableDefinition};

use crate::model::{Clock, SystemClock, Task, TaskId, Timestamp, Work};

use super::backend::{ReadFn, WriteFn};
use super::embedded::{FileBoot, check_existing_file, create_beside, io_error};
use super::engine::Touches;
use super::group_commit::WriterThread;
use super::{Backend, StoreError, StoreResult};

/// The file layout version this build writes. A file with a higher version is refused; a
/// file at version 1 is upgraded on open (the live-task counts are built from its tasks), and
/// one before version 4 gains the listing indexes and the tallies, built from its tasks.
pub const REDB_SCHEMA_VERSION: u64 = 4;
/// The most operations one group commit applies.
const MAX_BATCH: usize = 512;

const TASKS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("tasks");
const DUE: TableDefinition<'_, &[u8], ()> = TableDefinition::new("due");
const EXPIRY: TableDefinition<'_, &[u8], ()> = TableDefinition::new("expiry");
const CLAIMED: TableDefinition<'_, &[u8], ()> = TableDefinition::new("claimed");
/// Live (non-terminal) tasks per scope, kept by the engine's `save` and `delete`.
const LIVE: TableDefinition<'_, &str, u64> = TableDefinition::new("live");
/// Each task's head (expiry, then scope), so a request is authorized without decoding the
/// record.
const HEADS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("heads");
/// Outbound journal entries: task id (16 bytes) then position (big-endian u32) → entry.
/// Created at open when missing, so a file of an earlier build gains it without an upgrade.
const JOURNAL: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("journal");

/// Stored tasks (terminal ones included) per scope, kept by the engine's `save` and
/// `delete`. Built from the heads at open when missing, so a file of an earlier build gains
/// it without an upgrade.
const STORED: TableDefinition<'_, &str, u64> = TableDefinition::new("stored");
/// Revoked keys → until when (milliseconds), and the same ordered by time for the sweep:
/// until (big-endian u64) then the key → nothing.
const REVOKED: TableDefinition<'_, &str, u64> = TableDefinition::new("revoked");
const REVOKED_AT: TableDefinition<'_, &[u8], ()> = TableDefinition::new("revoked_at");
/// Live tasks per component digest. Built from the tasks at open when missing.
const PINNED: TableDefinition<'_, &str, u64> = TableDefinition::new("pinned");
/// The small tables (components, their metadata, deployments): the space's tag byte, then
/// the key → the value.
const KV: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("kv");
/// The listing indexes (`store/listing.rs`): facet, what it pins, creation time, id → the
/// task's tool. Built from the tasks at open when missing (schema 4).
const LISTING: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("listing");
/// Stored tasks per tenant, tool and status. Built with the listing.
const TALLY: TableDefinition<'_, &str, u64> = TableDefinition::new("tally");

const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
const SECRETS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("secrets");

/// The durable embedded store.
///
/// Only one process may open a file at a time; opening it advances the file's boot epoch,
/// which releases every claim the previous process held, so its tasks are due again at once.
pub struct RedbStore {
    /// Declared first: dropping it finishes the queued writes and joins the thread, which
    /// holds the other handle to the database.
    writer: WriterThread,
    db: Arc<Database>,
    boot: Arc<FileBoot>,
    key: [u8; 32],
}

file_store_accessors!(RedbStore);

/// Opens every data table in `txn` (a read or a write transaction: the same names, their
/// own table types).
macro_rules! open_tables {
    ($txn:expr) => {
        open_tables!($txn, true)
    };
    ($txn:expr, $extra:expr) => {
        Tables {
            journal: if $extra {
                Some($txn.open_table(JOURNAL).map_err(backend)?)
            } else {
                None
            },
            stored: if $extra {
                Some($txn.open_table(STORED).map_err(backend)?)
            } else {
                None
            },
            pinned: if $extra {
                Some($txn.open_table(PINNED).map_err(backend)?)
            } else {
                None
            },
            kv: if $extra {
                Some($txn.open_table(KV).map_err(backend)?)
            } else {
                None
            },
            listing: if $extra {
                Some($txn.open_table(LISTING).map_err(backend)?)
            } else {
                None
            },
            tally: if $extra {
                Some($txn.open_table(TALLY).map_err(backend)?)
            } else {
                None
            },
            revoked: if $extra {
                Some((
                    $txn.open_table(REVOKED).map_err(backend)?,
                    $txn.open_table(REVOKED_AT).map_err(backend)?,
                ))
            } else {
                None
            },
            tasks: $txn.open_table(TASKS).map_err(backend)?,
            indexes: [
                $txn.open_table(DUE).map_err(backend)?,
                $txn.open_table(EXPIRY).map_err(backend)?,
                $txn.open_table(CLAIMED).map_err(backend)?,
            ],
            live: $txn.open_table(LIVE).map_err(backend)?,
            heads: $txn.open_table(HEADS).map_err(backend)?,
        }
    };
}

mod backup;
pub(crate) use backup::count_copy;
mod boot;
mod codec;
mod tables;
#[cfg(test)]
mod tests;
mod writer;

use super::record::decode;
use codec::*;
use tables::*;
use writer::*;

/// A store file for [`RedbStore::open_with_clock`]: to be created, or found.
enum PrivateFile {
    /// A new, empty file (0600) under a temporary name beside the store's path: redb
    /// initialises it, the boot commits, and only then is it linked at the path, so the
    /// path never names a half-created store (a crash leaves only the temporary name).
    Created {
        /// The open file.
        file: std::fs::File,
        /// Its temporary name.
        temp: PathBuf,
    },
    /// The file at the path, which redb must find a database in.
    Existing,
}

/// Prepares `path`: if it does not exist, creates its missing directories (0700) and a new
/// file (0600) under a temporary name; otherwise checks the file is not empty and that only
/// its owner can read it, tightening it if not.
fn private_file(path: &Path) -> StoreResult<PrivateFile> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::metadata(path) {
        Ok(meta) => check_existing_file(path, &meta).map(|()| PrivateFile::Existing),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| io_error(path, "cannot create its directory", e))?;
            }
            let (file, temp) = create_beside(path, "tasks.redb")?;
            Ok(PrivateFile::Created { file, temp })
        }
        Err(e) => Err(io_error(path, "cannot read its metadata", e)),
    }
}

impl RedbStore {
    /// Opens the store at `path` (creating it if missing) on the system clock.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock::new()))
    }

    /// Opens the store at `path` on `clock`.
    ///
    /// Only a path that does not exist creates a store: its missing directories are made
    /// 0700 and the file 0600 (it holds the server key and every task's input). An
    /// existing file is tightened to 0600 if others could read it, then opened; an empty
    /// file, a file that is not redb, or a redb file that is not a snodo store is refused
    /// ([`StoreError::Corrupt`]), never initialised. Refuses a file written by a newer
    /// schema ([`StoreError::IncompatibleSchema`]) and reports a damaged or truncated one
    /// ([`StoreError::Corrupt`]); never resets data. Advances the boot epoch and releases
    /// the previous process's claims before returning.
    pub fn open_with_clock(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        let (file, temp) = match private_file(&path)? {
            PrivateFile::Existing => {
                let at = path.clone();
                return Self::open_from(path, clock, move || Database::builder().open(&at));
            }
            PrivateFile::Created { file, temp } => (file, temp),
        };
        let opened = Self::open_from(path.clone(), clock, move || {
            Database::builder().create_with_backend(redb::backends::FileBackend::new(file)?)
        });
        // Publish the booted store at its path; a link (unlike a rename) never replaces a
        // file another process created there in the meantime.
        let published = opened.and_then(|store| {
            std::fs::hard_link(&temp, &path).map_err(|e| {
                StoreError::unavailable(format!("{}: cannot create: {e}", path.display()))
            })?;
            Ok(store)
        });
        let _ = std::fs::remove_file(&temp);
        published
    }

    /// Opens a store on a custom redb storage backend (`label` names it in errors). Used to
    /// inject I/O faults in tests; the guarantees are those of the backend.
    pub fn open_with_backend(
        backend: impl redb::StorageBackend,
        label: impl Into<PathBuf>,
        clock: Arc<dyn Clock>,
    ) -> StoreResult<Self> {
        Self::open_from(label.into(), clock, move || {
            Database::builder().create_with_backend(backend)
        })
    }

    fn open_from(
        path: PathBuf,
        clock: Arc<dyn Clock>,
        create: impl FnOnce() -> Result<Database, redb::DatabaseError>,
    ) -> StoreResult<Self> {
        let in_file = |err: StoreError| match err {
            StoreError::Corrupt(m) => StoreError::corrupt(format!("{}: {m}", path.display())),
            StoreError::IncompatibleSchema(m) => {
                StoreError::IncompatibleSchema(format!("{}: {m}", path.display()).into())
            }
            other => other,
        };
        let issuer = crate::ids::random_u64();
        // redb reports most damage as errors but can panic on some malformed pages; a
        // damaged file must be reported, never take the process down.
        let opened = catch_unwind(AssertUnwindSafe(|| {
            let db = create().map_err(backend)?;
            let (epoch, fenced, key) = boot::boot(&db, clock.as_ref(), issuer)?;
            Ok::<_, StoreError>((db, epoch, fenced, key))
        }));
        let (db, epoch, fenced, key) = match opened {
            Ok(r) => r.map_err(in_file)?,
            Err(_) => {
                return Err(in_file(StoreError::corrupt(
                    "the file is damaged (reading it failed a consistency check)",
                )));
            }
        };
        let db = Arc::new(db);
        let boot = FileBoot::new(path, clock, epoch, issuer, fenced);
        let writer = Writer {
            db: db.clone(),
            boot: boot.clone(),
        };
        Ok(Self {
            writer: WriterThread::spawn("snodo-redb-writer", move |rx| writer.run(rx))?,
            db,
            boot,
            key,
        })
    }

    /// Reads one task from the file at `path` without opening it as a store: no boot epoch
    /// is advanced and no claim is touched, so an operator can look at a store a stopped or
    /// crashed server left (a running server holds the file's lock: ask it instead).
    ///
    /// A file a crashed process left must be repaired before redb reads it, which a
    /// read-only open cannot do. Such a file is opened for writing once, which makes redb
    /// rebuild its free-space map from the committed data, exactly as the next server start
    /// would; no task, epoch or claim changes.
    pub fn inspect_file(path: impl AsRef<Path>, id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
        let path = path.as_ref();
        let in_file = |e: StoreError| match e {
            StoreError::Corrupt(m) => StoreError::corrupt(format!("{}: {m}", path.display())),
            other => other,
        };
        if !path.exists() {
            return Err(StoreError::unavailable(format!(
                "{}: no such file",
                path.display()
            )));
        }
        // The handle must outlive the read: dropping it closes the file under the reader.
        let db: Box<dyn ReadableDatabase> = match redb::ReadOnlyDatabase::open(path) {
            Ok(db) => Box::new(db),
            Err(redb::DatabaseError::RepairAborted) => {
                let db = catch_unwind(AssertUnwindSafe(|| Database::builder().open(path)))
                    .map_err(|_| {
                        StoreError::corrupt(format!(
                            "{}: the file is damaged (repairing it failed a consistency check)",
                            path.display()
                        ))
                    })?
                    .map_err(|e| in_file(backend(e)))?;
                Box::new(db)
            }
            Err(e) => return Err(in_file(backend(e))),
        };
        let txn = db.begin_read().map_err(backend)?;
        let tasks = match txn.open_table(TASKS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(backend(e)),
        };
        match tasks.get(id.as_bytes().as_slice()).map_err(backend)? {
            Some(v) => decode(v.value()).map(|r| Some((r.task, r.work))),
            None => Ok(None),
        }
    }

    /// Runs a full integrity check of the file (every page's checksum). Slow on big files:
    /// an operator tool, not a startup step.
    pub fn verify(path: impl AsRef<Path>) -> StoreResult<bool> {
        let mut db = Database::builder().open(path.as_ref()).map_err(backend)?;
        db.check_integrity().map_err(backend)
    }
}

impl Backend for RedbStore {
    /// Copies every table under one read snapshot on the blocking pool: the writer goes on
    /// committing meanwhile (MVCC), and the snapshot's pages stay until the copy ends.
    async fn backup(&self, to: PathBuf) -> StoreResult<super::Backup> {
        let db = self.db.clone();
        let at = self.ctx().now.as_millis();
        tokio::task::spawn_blocking(move || {
            catch_unwind(AssertUnwindSafe(|| backup::backup(&db, &to, at))).unwrap_or_else(|_| {
                Err(StoreError::corrupt(
                    "copying the store failed a consistency check; the file is likely damaged",
                ))
            })
        })
        .await
        .map_err(|e| StoreError::unavailable(format!("the backup was abandoned: {e}")))?
    }

    /// Runs `f` inside one write the group-commit writer makes durable before it answers.
    async fn write<T: Send + 'static>(&self, _: Touches<'_>, f: impl WriteFn<T>) -> StoreResult<T> {
        self.writer.submit(f).await
    }

    /// Runs `f` over a read snapshot on the calling task. A read is a point lookup or a
    /// bounded index walk over pages redb's cache (or the OS page cache) almost always
    /// holds, so it costs microseconds: handing it to the blocking pool would cost more in
    /// thread hand-offs than the read itself. Reads never wait for the writer (MVCC).
    async fn read<T: Send + 'static>(
        &self,
        touches: Touches<'_>,
        f: impl ReadFn<T>,
    ) -> StoreResult<T> {
        let ctx = self.ctx();
        // Only the reads that need them open the journal's and the revocations' tables.
        let extra = matches!(
            touches,
            Touches::Journal(_)
                | Touches::Revocations
                | Touches::Deployments
                | Touches::Listing
                | Touches::Schedules
                | Touches::Outbox
                | Touches::Audit
        );
        catch_unwind(AssertUnwindSafe(|| {
            let txn = self.db.begin_read().map_err(backend)?;
            let tables = open_tables!(txn, extra);
            f(&tables, &ctx)
        }))
        .unwrap_or_else(|_| {
            // Reads run only redb and our decoder; a panic there means a damaged page.
            Err(StoreError::corrupt(
                "reading the store failed a consistency check; the file is likely damaged",
            ))
        })
    }

    async fn time(&self) -> StoreResult<Timestamp> {
        Ok(self.ctx().now)
    }

    fn key(&self) -> [u8; 32] {
        self.key
    }
}
