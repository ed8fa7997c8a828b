//! SqliteStore: the embedded durable adapter on a single SQLite file.
//!
//! Layout (schema [`SQLITE_SCHEMA_VERSION`], created by this build, never reset): `tasks`
//! holds one row per task, in the shared SQL row mapping (`store::sql`): the scope, status,
//! liveness, due time, expiry and claim in columns, the rest of the task as a versioned JSON
//! body, and the work descriptor as a body of its own written once at creation. Three
//! partial indexes over `(due_at, id)`, `(expires_at, id)` and `(claim_epoch, id)` are the
//! engine's ordered indexes. `live` counts each scope's live tasks; `meta` holds the schema
//! version, the boot epoch and the server key.
//!
//! The file runs in WAL mode with `synchronous=FULL`: a commit returns only once its WAL
//! frames are synced, so every acknowledged write survives a crash. One process at a time:
//! opening takes an exclusive OS lock on a sidecar file `<path>.lock` (which stays on disk;
//! it only ever holds the lock).
//!
//! All writes go through one writer thread that owns the write connection and commits with
//! group commit: the operations queued while a commit is in flight are applied in the next
//! `BEGIN IMMEDIATE` transaction and made durable together, and no caller hears back before
//! that commit returned. Reads run on the blocking pool, each in its own read transaction
//! on one of a few reader connections (WAL snapshots), and never wait for the writer.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use tokio::sync::Semaphore;

use crate::model::{Clock, SystemClock, Task, TaskId, Timestamp, Work};

use super::backend::{ReadFn, WriteFn};
use super::engine::{self, Ctx, Touches};
use super::{Backend, StoreError, StoreResult};

mod backup;
pub(crate) use backup::count_copy;
mod rows;
#[cfg(test)]
mod tests;
mod writer;

use super::embedded::{FileBoot, check_existing_file, create_beside, io_error};
use super::group_commit::WriterThread;
use rows::{Rows, backend, code_of};
use writer::Writer;

/// The file layout version this build writes. A file with a higher version is refused.
pub const SQLITE_SCHEMA_VERSION: u64 = 2;
/// The most operations one group commit applies.
const MAX_BATCH: usize = 512;
/// How many reads run at once, each on its own connection.
const READERS: usize = 4;
/// How long a statement waits for a lock another connection holds (only a process that
/// ignores the sidecar lock, such as an operator's `sqlite3` shell, can hold one for long)
/// before the operation fails as [`StoreError::Unavailable`].
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Prepared statements kept per connection: every statement the adapter runs.
const STATEMENT_CACHE: usize = 64;

/// Schema version 1. `tasks` keeps its rowid: bodies can be large, and a rowid table keeps
/// them out of the id index's pages.
const SCHEMA: &str = "
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value BLOB) WITHOUT ROWID;
CREATE TABLE tasks (
    id BLOB PRIMARY KEY NOT NULL,
    scope TEXT NOT NULL,
    status TEXT NOT NULL,
    live INTEGER NOT NULL,
    due_at INTEGER,
    expires_at INTEGER,
    claim_generation INTEGER,
    claim_token INTEGER,
    claim_epoch INTEGER,
    claim_expires_at INTEGER,
    claim_owner TEXT,
    body BLOB NOT NULL,
    work BLOB NOT NULL
);
CREATE INDEX tasks_due ON tasks (due_at, id) WHERE due_at IS NOT NULL;
CREATE INDEX tasks_expiry ON tasks (expires_at, id) WHERE expires_at IS NOT NULL;
CREATE INDEX tasks_claimed ON tasks (claim_epoch, id) WHERE claim_epoch IS NOT NULL;
CREATE TABLE live (scope TEXT PRIMARY KEY NOT NULL, n INTEGER NOT NULL) WITHOUT ROWID;
";

/// Outbound journal entries, removed with their task by the same writer.
const JOURNAL_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS journal (
    task_id BLOB NOT NULL,
    seq INTEGER NOT NULL,
    entry BLOB NOT NULL,
    PRIMARY KEY (task_id, seq)
);
";

/// Revocations: key → until when, with the time order the sweep reads. Additive like the
/// journal.
const REVOKED_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS revoked (key TEXT PRIMARY KEY NOT NULL, until INTEGER NOT NULL)
    WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS revoked_until ON revoked (until, key);
";

/// Stored tasks (terminal ones included) per scope. A file of an earlier build gains the
/// table with its counts, from the tasks, in the boot transaction.
const STORED_SCHEMA: &str = "
CREATE TABLE stored (scope TEXT PRIMARY KEY NOT NULL, n INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO stored (scope, n) SELECT scope, count(*) FROM tasks GROUP BY scope;
";

/// The small tables (components, their metadata, deployments): a space, a key, a value.
/// Additive like the journal.
const KV_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv (
    space INTEGER NOT NULL,
    key BLOB NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (space, key)
);
";

/// Live tasks per component digest. A file of an earlier build gains the table with its
/// counts, from the tasks' work descriptors, in the boot transaction.
const PINNED_SCHEMA: &str = "
CREATE TABLE pinned (digest TEXT PRIMARY KEY NOT NULL, n INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO pinned (digest, n)
    SELECT d, count(*) FROM
        (SELECT json_extract(CAST(work AS TEXT), '$.work.componentDigest') AS d
         FROM tasks WHERE live)
    WHERE d IS NOT NULL GROUP BY d;
";

/// The listing indexes (`store/listing.rs`) and the tallies per tenant, tool and status:
/// schema 2. A file of schema 1 gains them, built from its tasks, in the boot transaction
/// (and is then schema 2, which a build of schema 1 refuses: it would not keep them).
const LISTING_SCHEMA: &str = "
CREATE TABLE listing (key BLOB PRIMARY KEY NOT NULL, tool TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE tally (key TEXT PRIMARY KEY NOT NULL, n INTEGER NOT NULL) WITHOUT ROWID;
";

/// The tables schema 1 has.
const TABLES: [&str; 3] = ["live", "meta", "tasks"];

/// The durable embedded store on SQLite.
///
/// Only one process may open a file at a time; opening it advances the file's boot epoch,
/// which releases every claim the previous process held, so its tasks are due again at once.
pub struct SqliteStore {
    /// Declared first: dropping it finishes the queued writes and joins the thread, which
    /// owns the write connection.
    writer: WriterThread,
    readers: Arc<Readers>,
    boot: Arc<FileBoot>,
    key: [u8; 32],
    /// Holds the exclusive lock on `<path>.lock`; declared last, so it is released only
    /// after every connection above is closed.
    _lock: std::fs::File,
}

file_store_accessors!(SqliteStore);

/// The connections reads run on: at most [`READERS`] at once, each taken from `idle` (or
/// opened, if one was lost) for one read transaction and put back after.
struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
}

impl Readers {
    fn open(path: &Path) -> StoreResult<Self> {
        let idle = (0..READERS)
            .map(|_| reader(path))
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Self {
            path: path.to_path_buf(),
            idle: Mutex::new(idle),
            permits: Arc::new(Semaphore::new(READERS)),
        })
    }

    fn take(&self) -> StoreResult<Connection> {
        let idle = self.idle.lock().pop();
        match idle {
            Some(conn) => Ok(conn),
            None => reader(&self.path),
        }
    }

    fn give_back(&self, conn: Connection) {
        self.idle.lock().push(conn);
    }
}

/// Opens a connection to an existing file (never creating one) and sets what every
/// connection needs.
fn connect(path: &Path, flags: OpenFlags) -> StoreResult<Connection> {
    let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(backend)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// A read connection: it may not write, even by mistake.
fn reader(path: &Path) -> StoreResult<Connection> {
    let conn = connect(path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    conn.pragma_update(None, "query_only", true)
        .map_err(backend)?;
    Ok(conn)
}

/// A write connection: every commit is synced before it returns.
fn writer_connection(path: &Path) -> StoreResult<Connection> {
    let conn = connect(path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(backend)?;
    Ok(conn)
}

/// `<path>.lock`.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(".lock");
    PathBuf::from(name)
}

/// Creates the missing directories of `path` (0700), then takes the exclusive lock on
/// `<path>.lock` (created 0600), or refuses: another process has the store open.
fn lock(path: &Path) -> StoreResult<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io_error(path, "cannot create its directory", e))?;
    }
    let at = lock_path(path);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&at)
        .map_err(|e| io_error(&at, "cannot open the lock file", e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::unavailable(format!(
            "{}: the store is already open in another process (it holds {})",
            path.display(),
            at.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(io_error(&at, "cannot lock", e)),
    }
}

/// Makes sure a store file is at `path`, with the store's lock held. An existing file must
/// not be empty and is tightened to 0600 if others could read it. A missing one is created:
/// a new 0600 file under a temporary name beside `path` gets the schema, and only then is
/// it linked at `path`, so the path never names a half-created store (a crash leaves only
/// the temporary name).
fn prepare_file(path: &Path) -> StoreResult<()> {
    match std::fs::metadata(path) {
        Ok(meta) => check_existing_file(path, &meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (_, temp) = create_beside(path, "tasks.sqlite")?;
            let made = initialise(&temp).and_then(|()| {
                std::fs::hard_link(&temp, path).map_err(|e| io_error(path, "cannot create", e))
            });
            let _ = std::fs::remove_file(&temp);
            let mut journal = OsString::from(temp.as_os_str());
            journal.push("-journal");
            let _ = std::fs::remove_file(PathBuf::from(journal));
            made?;
            // The new name must survive a crash as surely as the first acknowledged write.
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_error(dir, "cannot sync the directory", e))
        }
        Err(e) => Err(io_error(path, "cannot read its metadata", e)),
    }
}

/// Writes schema version 1 into the new, empty database at `temp` and closes it, synced
/// (in the rollback-journal mode a new file starts in; the store's first open turns on WAL).
fn initialise(temp: &Path) -> StoreResult<()> {
    let mut conn = writer_connection(temp)?;
    let txn = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend)?;
    create_schema(&txn)?;
    txn.commit().map_err(backend)?;
    conn.close().map_err(|(_, e)| backend(e))
}

/// Writes every stored task's listing entries and tallies (a file that had none).
fn build_listing(conn: &Connection) -> StoreResult<()> {
    use super::engine::Txn;
    let records = {
        let mut stmt = conn
            .prepare("SELECT id FROM tasks ORDER BY id")
            .map_err(backend)?;
        stmt.query_map([], |r| r.get::<_, Vec<u8>>(0))
            .map_err(backend)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend)?
    };
    let mut rows = Rows::new(conn);
    for id in records {
        let id = super::sql::id_of(&id)?;
        let Some(rec) = super::engine::View::load(&rows, &id)? else {
            continue;
        };
        let tool = super::listing::tool_of(&rec.work).to_owned();
        rows.move_listing(None, Some(&rec.task), &tool)?;
    }
    Ok(())
}

fn create_schema(conn: &Connection) -> StoreResult<()> {
    conn.execute_batch(SCHEMA).map_err(backend)?;
    meta_set(
        conn,
        "schema_version",
        &Value::Integer(SQLITE_SCHEMA_VERSION as i64),
    )
}

fn meta_get(conn: &Connection, key: &str) -> StoreResult<Option<Value>> {
    conn.prepare_cached("SELECT value FROM meta WHERE key = ?1")
        .and_then(|mut s| s.query_row([key], |r| r.get::<_, Value>(0)).optional())
        .map_err(backend)
}

fn meta_u64(conn: &Connection, key: &str) -> StoreResult<Option<u64>> {
    match meta_get(conn, key)? {
        None => Ok(None),
        Some(Value::Integer(n)) if n >= 0 => Ok(Some(n as u64)),
        Some(other) => Err(StoreError::corrupt(format!(
            "the store's {key} is not a count ({other:?})"
        ))),
    }
}

fn meta_set(conn: &Connection, key: &str, value: &Value) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )
    .and_then(|mut s| s.execute(rusqlite::params![key, value]))
    .map(|_| ())
    .map_err(backend)
}

/// What a database file turned out to hold.
enum Found {
    /// No tables at all: a database nobody wrote to yet, which becomes a store.
    Empty,
    /// A snodo store of a schema version this build reads.
    Store,
}

/// Reads what the database holds, writing nothing: a store of some version, an empty
/// database, or (refused) another program's database.
fn survey(conn: &Connection) -> StoreResult<Found> {
    let tables = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
        )
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(backend)?;
    if tables.is_empty() {
        return Ok(Found::Empty);
    }
    let foreign = |tables: &[String]| {
        let table = tables
            .iter()
            .find(|t| t.as_str() != "meta")
            .or(tables.first())
            .cloned()
            .unwrap_or_default();
        StoreError::corrupt(format!(
            "the file is a SQLite database but not a snodo store (it has a table {table:?} and no snodo schema version)"
        ))
    };
    if !tables.iter().any(|t| t == "meta") {
        return Err(foreign(&tables));
    }
    let version = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get::<_, Value>(0),
        )
        .optional();
    let version = match version {
        Ok(v) => v,
        // A `meta` table without snodo's columns: someone else's.
        Err(e) if code_of(&e) == Some(ErrorCode::Unknown) => {
            return Err(foreign(&tables));
        }
        Err(e) => return Err(backend(e)),
    };
    let version = match version {
        None => return Err(foreign(&tables)),
        Some(Value::Integer(v)) if v >= 1 => v as u64,
        Some(other) => {
            return Err(StoreError::corrupt(format!(
                "the store's schema version is unreadable ({other:?})"
            )));
        }
    };
    if version > SQLITE_SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema(
            format!(
                "the store was written by a newer snodo (schema {version}); this build reads schema {SQLITE_SCHEMA_VERSION}. Upgrade snodo or point it at another data path"
            )
            .into(),
        ));
    }
    if let Some(missing) = TABLES
        .iter()
        .find(|t| !tables.iter().any(|have| have == *t))
    {
        return Err(StoreError::corrupt(format!(
            "the store has no {missing:?} table"
        )));
    }
    Ok(Found::Store)
}

/// Names the file in a message about its content.
fn in_file(path: &Path) -> impl Fn(StoreError) -> StoreError + '_ {
    move |err| match err {
        StoreError::Corrupt(m) => StoreError::corrupt(format!("{}: {m}", path.display())),
        StoreError::IncompatibleSchema(m) => {
            StoreError::IncompatibleSchema(format!("{}: {m}", path.display()).into())
        }
        other => other,
    }
}

impl SqliteStore {
    /// Opens the store at `path` (creating it if missing) on the system clock.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with_clock(path, Arc::new(SystemClock::new()))
    }

    /// Opens the store at `path` on `clock`.
    ///
    /// Refuses with [`StoreError::Unavailable`] while another process (or another handle in
    /// this one) has the file open: the lock on `<path>.lock` says so. Only a path that does
    /// not exist creates a store: its missing directories are made 0700 and the file 0600
    /// (it holds the server key and every task's input). An existing file is tightened to
    /// 0600 if others could read it, then opened; an empty file, a file that is not SQLite,
    /// or a SQLite database that is not a snodo store is refused ([`StoreError::Corrupt`]),
    /// never initialised. Refuses a file written by a newer schema
    /// ([`StoreError::IncompatibleSchema`]) and reports a damaged one
    /// ([`StoreError::Corrupt`]); never resets data. Advances the boot epoch and releases
    /// the previous process's claims before returning.
    pub fn open_with_clock(path: impl AsRef<Path>, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        let lock = lock(&path)?;
        prepare_file(&path)?;
        Self::open_locked(path, clock, lock)
    }

    fn open_locked(path: PathBuf, clock: Arc<dyn Clock>, lock: std::fs::File) -> StoreResult<Self> {
        let issuer = crate::ids::random_u64();
        let in_file = in_file(&path);
        let mut conn = writer_connection(&path).map_err(&in_file)?;
        let (epoch, fenced, key) =
            Self::boot(&mut conn, clock.as_ref(), issuer).map_err(&in_file)?;
        // Only now, with the file known to be ours: WAL mode is recorded in the file.
        let mode = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
            .map_err(backend)
            .map_err(&in_file)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::unavailable(format!(
                "{}: SQLite cannot use WAL mode here (it stays in {mode:?} mode)",
                path.display()
            )));
        }
        let readers = Arc::new(Readers::open(&path).map_err(&in_file)?);
        drop(in_file);
        let boot = FileBoot::new(path, clock, epoch, issuer, fenced);
        let writer = Writer {
            conn,
            boot: boot.clone(),
        };
        Ok(Self {
            writer: WriterThread::spawn("snodo-sqlite-writer", move |rx| writer.run(rx))?,
            readers,
            boot,
            key,
            _lock: lock,
        })
    }

    /// Checks the schema version (creating the schema in an empty database), advances the
    /// boot epoch, creates the server key once and fences old claims, in one immediate
    /// transaction committed durably. A refusal rolls back: nothing is written.
    fn boot(
        conn: &mut Connection,
        clock: &dyn Clock,
        issuer: u64,
    ) -> StoreResult<(u64, usize, [u8; 32])> {
        let txn = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(backend)?;
        match survey(&txn)? {
            Found::Empty => create_schema(&txn)?,
            // Schema 1 is the first; a later build upgrades older files here.
            Found::Store => {}
        }
        // The outbound journal's table is additive: a file of an earlier build gains it
        // here, and an earlier build ignores it.
        txn.execute_batch(JOURNAL_SCHEMA).map_err(backend)?;
        txn.execute_batch(REVOKED_SCHEMA).map_err(backend)?;
        txn.execute_batch(KV_SCHEMA).map_err(backend)?;
        let has = |table: &str| -> StoreResult<bool> {
            txn.query_row(
                "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .map_err(backend)
        };
        if !has("stored")? {
            txn.execute_batch(STORED_SCHEMA).map_err(backend)?;
        }
        if !has("pinned")? {
            txn.execute_batch(PINNED_SCHEMA).map_err(backend)?;
        }
        if !has("listing")? {
            txn.execute_batch(LISTING_SCHEMA).map_err(backend)?;
            build_listing(&txn)?;
        }
        if meta_u64(&txn, "schema_version")? != Some(SQLITE_SCHEMA_VERSION) {
            meta_set(
                &txn,
                "schema_version",
                &Value::Integer(SQLITE_SCHEMA_VERSION as i64),
            )?;
        }
        let epoch = meta_u64(&txn, "boot_epoch")?.unwrap_or(0) + 1;
        meta_set(&txn, "boot_epoch", &Value::Integer(epoch as i64))?;
        let key = match meta_get(&txn, "server_key")? {
            Some(Value::Blob(k)) => <[u8; 32]>::try_from(k.as_slice())
                .map_err(|_| StoreError::corrupt("the server key has the wrong length"))?,
            Some(_) => return Err(StoreError::corrupt("the server key is not a blob")),
            None => {
                let k = crate::ids::random_bytes::<32>();
                meta_set(&txn, "server_key", &Value::Blob(k.to_vec()))?;
                k
            }
        };
        let ctx = Ctx {
            now: clock.now(),
            epoch,
            issuer,
        };
        let fenced = engine::fence_previous_epochs(&mut Rows::new(&txn), &ctx)?;
        txn.commit().map_err(backend)?;
        Ok((epoch, fenced, key))
    }

    /// Reads one task from the file at `path` without opening it as a store: no boot epoch
    /// is advanced, no claim is touched and the lock is not taken, so an operator can look
    /// at a store a stopped or crashed server left (or a running one's last commits).
    pub fn inspect_file(path: impl AsRef<Path>, id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
        let path = path.as_ref();
        let in_file = in_file(path);
        if !path.is_file() {
            return Err(StoreError::unavailable(format!(
                "{}: no such file",
                path.display()
            )));
        }
        let mut conn = connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(&in_file)?;
        let txn = conn.transaction().map_err(backend).map_err(&in_file)?;
        match survey(&txn).map_err(&in_file)? {
            Found::Empty => Ok(None),
            Found::Store => engine::inspect(&Rows::new(&txn), id).map_err(&in_file),
        }
    }
}

impl SqliteStore {
    /// Runs `f` on one of the reader connections, on the blocking pool, once one of the
    /// [`READERS`] permits is free; `what` names it if the pool abandons it.
    async fn on_reader<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let permit = self
            .readers
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::unavailable("the store is closed"))?;
        let readers = self.readers.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut conn = readers.take()?;
            let result = f(&mut conn);
            readers.give_back(conn);
            result
        })
        .await
        .map_err(|e| StoreError::unavailable(format!("{what} was abandoned: {e}")))?
    }
}

impl Backend for SqliteStore {
    /// Runs SQLite's backup on a reader connection: a WAL snapshot, so the writer goes on
    /// committing meanwhile.
    async fn backup(&self, to: PathBuf) -> StoreResult<super::Backup> {
        let at = self.ctx().now.as_millis();
        self.on_reader("the backup", move |conn| backup::backup(conn, &to, at))
            .await
    }

    /// Runs `f` inside one write the group-commit writer makes durable before it answers.
    async fn write<T: Send + 'static>(&self, _: Touches<'_>, f: impl WriteFn<T>) -> StoreResult<T> {
        self.writer.submit(f).await
    }

    async fn read<T: Send + 'static>(&self, _: Touches<'_>, f: impl ReadFn<T>) -> StoreResult<T> {
        let ctx = self.ctx();
        self.on_reader("a store read", move |conn| {
            conn.transaction().map_err(backend).and_then(|txn| {
                let out = f(&Rows::new(&txn), &ctx);
                // A read transaction has nothing to keep; ending it releases the snapshot.
                txn.rollback().map_err(backend)?;
                out
            })
        })
        .await
    }

    async fn time(&self) -> StoreResult<Timestamp> {
        Ok(self.ctx().now)
    }

    fn key(&self) -> [u8; 32] {
        self.key
    }
}
