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
//! Reads run on the blocking pool against MVCC snapshots and never wait for the writer.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, Table, TableDefinition, TableHandle,
    WriteTransaction,
};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::model::{Clock, Scope, SystemClock, Task, TaskId, Work};

use super::engine::{self, Ctx, Head, Index, Record, Txn, View};
use super::{StoreError, StoreResult};

/// The file layout version this build writes. A file with a higher version is refused; a
/// file at version 1 is upgraded on open (the live-task counts are built from its tasks).
pub const REDB_SCHEMA_VERSION: u64 = 2;
/// The record layout version this build writes.
const RECORD_VERSION: u32 = 1;
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

fn encode_head(h: &Head) -> Vec<u8> {
    let exp = h.expires_at.map_or(u64::MAX, |t| t.as_millis());
    let mut out = exp.to_be_bytes().to_vec();
    out.extend_from_slice(h.scope.as_str().as_bytes());
    out
}

fn decode_head(bytes: &[u8]) -> StoreResult<Head> {
    let (exp, scope) = bytes
        .split_first_chunk::<8>()
        .ok_or_else(|| StoreError::corrupt("a task head is too short"))?;
    let exp = u64::from_be_bytes(*exp);
    let scope = std::str::from_utf8(scope)
        .map_err(|_| StoreError::corrupt("a task head's scope is not UTF-8"))?;
    Ok(Head {
        scope: Scope::new(scope),
        expires_at: (exp != u64::MAX).then_some(crate::model::Timestamp(exp)),
    })
}
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
const SECRETS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("secrets");

/// The durable embedded store.
///
/// Only one process may open a file at a time; opening it advances the file's boot epoch,
/// which releases every claim the previous process held, so its tasks are due again at once.
pub struct RedbStore {
    db: Arc<Database>,
    /// `None` only while dropping.
    writer: Option<mpsc::Sender<Box<dyn WriteJob>>>,
    writer_thread: Option<std::thread::JoinHandle<()>>,
    clock: Arc<dyn Clock>,
    epoch: u64,
    issuer: u64,
    path: PathBuf,
    fenced: usize,
    key: [u8; 32],
}

impl Drop for RedbStore {
    /// Closing the queue lets the writer finish every write already queued (their callers
    /// are still owed an answer); joining it means the file is closed when drop returns, so
    /// the same process can reopen it at once.
    fn drop(&mut self) {
        self.writer.take();
        if let Some(t) = self.writer_thread.take() {
            let _ = t.join();
        }
    }
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

// ---- encoding ----

#[derive(Serialize)]
struct RecordOut<'a> {
    v: u32,
    task: &'a Task,
    work: &'a Work,
}

#[derive(Deserialize)]
struct RecordIn {
    task: Task,
    work: Work,
}

#[derive(Deserialize)]
struct VersionProbe {
    v: u32,
}

fn encode(record: &Record) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(&RecordOut {
        v: RECORD_VERSION,
        task: &record.task,
        work: &record.work,
    })
    .map_err(|e| StoreError::invalid(format!("the task cannot be encoded: {e}")))
}

fn decode(bytes: &[u8]) -> StoreResult<Record> {
    match serde_json::from_slice::<VersionProbe>(bytes) {
        Ok(p) if p.v == RECORD_VERSION => {}
        Ok(p) => {
            return Err(StoreError::IncompatibleSchema(
                format!(
                    "a task record has layout version {}; this build reads version {RECORD_VERSION}",
                    p.v
                )
                .into(),
            ));
        }
        Err(e) => return Err(StoreError::corrupt(format!("unreadable task record: {e}"))),
    }
    let r: RecordIn = serde_json::from_slice(bytes)
        .map_err(|e| StoreError::corrupt(format!("unreadable task record: {e}")))?;
    Ok(Record {
        task: r.task,
        work: r.work,
    })
}

fn index_key(key: u64, id: &TaskId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&key.to_be_bytes());
    k[8..].copy_from_slice(id.as_bytes());
    k
}

fn id_of_index_key(k: &[u8]) -> StoreResult<TaskId> {
    let bytes: [u8; 16] = k
        .get(8..24)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| StoreError::corrupt("an index key has the wrong length"))?;
    Ok(TaskId::from_bytes(bytes))
}

/// Maps a redb error into the contract's terms.
fn backend(e: impl Into<redb::Error>) -> StoreError {
    let e: redb::Error = e.into();
    match &e {
        redb::Error::Corrupted(_) => StoreError::corrupt(&e),
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            StoreError::corrupt(format!("not a readable snodo store: {e}"))
        }
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            StoreError::corrupt(format!("the file is truncated: {e}"))
        }
        redb::Error::UpgradeRequired(v) => StoreError::IncompatibleSchema(
            format!("the file uses redb format {v}, which this build cannot read").into(),
        ),
        redb::Error::DatabaseAlreadyOpen => {
            StoreError::unavailable("the store file is already open in another process")
        }
        _ => StoreError::unavailable(&e),
    }
}

// ---- tables ----

/// The data tables, opened in one transaction.
struct Tables<T, I, L> {
    tasks: T,
    indexes: [I; 3],
    live: L,
    heads: T,
}

fn slot(index: Index) -> usize {
    match index {
        Index::Due => 0,
        Index::Expiry => 1,
        Index::Claimed => 2,
    }
}

impl<T, I, L> View for Tables<T, I, L>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
    I: ReadableTable<&'static [u8], ()>,
    L: ReadableTable<&'static str, u64>,
{
    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        match self.heads.get(id.as_bytes().as_slice()).map_err(backend)? {
            Some(v) => decode_head(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn live_count(&self, scope: &Scope) -> StoreResult<u64> {
        Ok(self
            .live
            .get(scope.as_str())
            .map_err(backend)?
            .map_or(0, |v| v.value()))
    }

    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        match self.tasks.get(id.as_bytes().as_slice()).map_err(backend)? {
            Some(v) => decode(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn index_upto(&self, index: Index, upto: u64, limit: usize) -> StoreResult<Vec<TaskId>> {
        let hi = index_key(upto, &TaskId::from_bytes([0xff; 16]));
        let mut out = Vec::new();
        for entry in self.indexes[slot(index)]
            .range::<&[u8]>(..=hi.as_slice())
            .map_err(backend)?
            .take(limit)
        {
            let (k, _) = entry.map_err(backend)?;
            out.push(id_of_index_key(k.value())?);
        }
        Ok(out)
    }
}

type WriteTables<'t> = Tables<
    Table<'t, &'static [u8], &'static [u8]>,
    Table<'t, &'static [u8], ()>,
    Table<'t, &'static str, u64>,
>;

/// Opens every data table in `txn` (a read or a write transaction: the same names, their
/// own table types).
macro_rules! open_tables {
    ($txn:expr) => {
        Tables {
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

impl<'t> WriteTables<'t> {
    fn open(txn: &'t WriteTransaction) -> StoreResult<Self> {
        Ok(open_tables!(txn))
    }
}

impl Txn for WriteTables<'_> {
    fn put(&mut self, record: &Record) -> StoreResult<()> {
        let bytes = encode(record)?;
        self.tasks
            .insert(record.task.id.as_bytes().as_slice(), bytes.as_slice())
            .map_err(backend)?;
        Ok(())
    }

    fn remove(&mut self, id: &TaskId) -> StoreResult<()> {
        self.tasks
            .remove(id.as_bytes().as_slice())
            .map_err(backend)?;
        self.heads
            .remove(id.as_bytes().as_slice())
            .map_err(backend)?;
        Ok(())
    }

    fn created(&mut self, task: &Task) -> StoreResult<()> {
        self.heads
            .insert(
                task.id.as_bytes().as_slice(),
                encode_head(&Head::of(task)).as_slice(),
            )
            .map_err(backend)?;
        Ok(())
    }

    fn index_put(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.indexes[slot(index)]
            .insert(index_key(key, id).as_slice(), ())
            .map_err(backend)?;
        Ok(())
    }

    fn index_del(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.indexes[slot(index)]
            .remove(index_key(key, id).as_slice())
            .map_err(backend)?;
        Ok(())
    }

    fn set_live_count(&mut self, scope: &Scope, count: u64) -> StoreResult<()> {
        if count == 0 {
            self.live.remove(scope.as_str()).map_err(backend)?;
        } else {
            self.live.insert(scope.as_str(), count).map_err(backend)?;
        }
        Ok(())
    }
}

// ---- the writer ----

/// One queued write: run inside the batch's transaction, then told whether it committed.
trait WriteJob: Send {
    /// Applies the operation. Returns whether it failed in the backend (which poisons the
    /// whole batch) and the continuation that delivers its answer after the commit.
    fn run(self: Box<Self>, tables: &mut WriteTables<'_>, ctx: &Ctx) -> (bool, Box<dyn Reply>);
    /// The batch failed before this job ran.
    fn fail(self: Box<Self>, err: StoreError);
}

trait Reply: Send {
    fn deliver(self: Box<Self>, commit: Result<(), StoreError>);
}

struct Job<F, T> {
    f: F,
    tx: oneshot::Sender<StoreResult<T>>,
}

struct Pending<T> {
    result: StoreResult<T>,
    tx: oneshot::Sender<StoreResult<T>>,
}

impl<T: Send> Reply for Pending<T> {
    fn deliver(self: Box<Self>, commit: Result<(), StoreError>) {
        let answer = match commit {
            Ok(()) => self.result,
            Err(e) => Err(e),
        };
        // The caller may have stopped waiting; the write stands either way.
        let _ = self.tx.send(answer);
    }
}

impl<F, T> WriteJob for Job<F, T>
where
    F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send,
    T: Send + 'static,
{
    fn run(self: Box<Self>, tables: &mut WriteTables<'_>, ctx: &Ctx) -> (bool, Box<dyn Reply>) {
        let result = (self.f)(tables, ctx);
        let backend_failure = matches!(
            result,
            Err(StoreError::Unavailable(_)
                | StoreError::Corrupt(_)
                | StoreError::IncompatibleSchema(_))
        );
        (
            backend_failure,
            Box::new(Pending {
                result,
                tx: self.tx,
            }),
        )
    }

    fn fail(self: Box<Self>, err: StoreError) {
        let _ = self.tx.send(Err(err));
    }
}

struct Writer {
    db: Arc<Database>,
    clock: Arc<dyn Clock>,
    epoch: u64,
    issuer: u64,
}

impl Writer {
    fn run(self, rx: mpsc::Receiver<Box<dyn WriteJob>>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.commit_batch(batch);
        }
    }

    /// Applies `batch` in one write transaction and answers every job after the commit.
    /// A backend failure or a panic in any job aborts the whole transaction: every job
    /// then gets the error and nothing of the batch is written.
    fn commit_batch(&self, batch: Vec<Box<dyn WriteJob>>) {
        let ctx = Ctx {
            now: self.clock.now(),
            epoch: self.epoch,
            issuer: self.issuer,
        };
        let mut txn = match self.db.begin_write() {
            Ok(t) => t,
            Err(e) => return fail_all(batch, backend(e)),
        };
        if let Err(e) = txn.set_durability(Durability::Immediate) {
            return fail_all(batch, backend(e));
        }
        let mut replies: Vec<Box<dyn Reply>> = Vec::with_capacity(batch.len());
        let mut failure = None;
        {
            let mut tables = match WriteTables::open(&txn) {
                Ok(t) => t,
                Err(e) => return fail_all(batch, e),
            };
            let mut jobs = batch.into_iter();
            for job in jobs.by_ref() {
                match catch_unwind(AssertUnwindSafe(|| job.run(&mut tables, &ctx))) {
                    Ok((false, reply)) => replies.push(reply),
                    Ok((true, reply)) => {
                        failure = Some(StoreError::unavailable(
                            "a write in the same commit failed in the backend; nothing was written",
                        ));
                        replies.push(reply);
                        break;
                    }
                    Err(_) => {
                        failure = Some(StoreError::unavailable(
                            "a store operation panicked; its commit was abandoned",
                        ));
                        break;
                    }
                }
            }
            if let Some(err) = &failure {
                fail_all(jobs.collect(), err.clone());
            }
        }
        let outcome = match failure {
            Some(err) => {
                let _ = txn.abort();
                Err(err)
            }
            None => txn.commit().map_err(backend),
        };
        for reply in replies {
            reply.deliver(outcome.clone());
        }
    }
}

fn fail_all(batch: Vec<Box<dyn WriteJob>>, err: StoreError) {
    for job in batch {
        job.fail(err.clone());
    }
}

// ---- opening ----

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
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let io = |what: &str, e: std::io::Error| {
        StoreError::unavailable(format!("{}: {what}: {e}", path.display()))
    };
    match std::fs::metadata(path) {
        Ok(meta) => {
            if meta.len() == 0 {
                return Err(StoreError::corrupt(format!(
                    "{}: the file is empty, so it is not a snodo store (only a missing path \
                     creates one); remove it, or restore it from a backup",
                    path.display()
                )));
            }
            if meta.permissions().mode() & 0o077 != 0 {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| io("others can read it and it cannot be made 0600", e))?;
            }
            Ok(PrivateFile::Existing)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| io("cannot create its directory", e))?;
            }
            let name = path
                .file_name()
                .map_or_else(|| "tasks.redb".into(), |n| n.to_string_lossy().into_owned());
            let temp = path.with_file_name(format!(".{name}.new-{:016x}", engine::random_u64()));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)
                .map_err(|e| io("cannot create", e))?;
            Ok(PrivateFile::Created { file, temp })
        }
        Err(e) => Err(io("cannot read its metadata", e)),
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
        let issuer = engine::random_u64();
        // redb reports most damage as errors but can panic on some malformed pages; a
        // damaged file must be reported, never take the process down.
        let opened = catch_unwind(AssertUnwindSafe(|| {
            let db = create().map_err(backend)?;
            let (epoch, fenced, key) = Self::boot(&db, clock.as_ref(), issuer)?;
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
        let (tx, rx) = mpsc::channel();
        let writer = Writer {
            db: db.clone(),
            clock: clock.clone(),
            epoch,
            issuer,
        };
        let writer_thread = std::thread::Builder::new()
            .name("snodo-redb-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::unavailable(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            db,
            writer: Some(tx),
            writer_thread: Some(writer_thread),
            clock,
            epoch,
            issuer,
            path,
            fenced,
            key,
        })
    }

    /// Checks the schema version, advances the boot epoch and fences old claims, in one
    /// durable commit.
    fn boot(db: &Database, clock: &dyn Clock, issuer: u64) -> StoreResult<(u64, usize, [u8; 32])> {
        let mut txn = db.begin_write().map_err(backend)?;
        txn.set_durability(Durability::Immediate).map_err(backend)?;
        let (epoch, fenced, key) = {
            let mut meta = txn.open_table(META).map_err(backend)?;
            let version = meta
                .get("schema_version")
                .map_err(backend)?
                .map(|v| v.value());
            match version {
                Some(v) if v > REDB_SCHEMA_VERSION => {
                    return Err(StoreError::IncompatibleSchema(
                        format!(
                            "the store was written by a newer snodo (schema {v}); this build reads schema {REDB_SCHEMA_VERSION}. Upgrade snodo or point it at another data path"
                        )
                        .into(),
                    ));
                }
                Some(v) if v < REDB_SCHEMA_VERSION => {
                    // Version 1 had no live-task counts and no heads: build both from the
                    // stored tasks once.
                    let tasks = txn.open_table(TASKS).map_err(backend)?;
                    let mut heads = txn.open_table(HEADS).map_err(backend)?;
                    let mut live: std::collections::HashMap<String, u64> = Default::default();
                    for entry in tasks.iter().map_err(backend)? {
                        let (k, v) = entry.map_err(backend)?;
                        let rec = decode(v.value())?;
                        if !rec.task.status.is_terminal() {
                            *live.entry(rec.task.scope.as_str().to_owned()).or_insert(0) += 1;
                        }
                        heads
                            .insert(k.value(), encode_head(&Head::of(&rec.task)).as_slice())
                            .map_err(backend)?;
                    }
                    drop((tasks, heads));
                    let mut counts = txn.open_table(LIVE).map_err(backend)?;
                    for (scope, n) in &live {
                        counts.insert(scope.as_str(), *n).map_err(backend)?;
                    }
                    drop(counts);
                    meta.insert("schema_version", REDB_SCHEMA_VERSION)
                        .map_err(backend)?;
                }
                Some(_) => {}
                None => {
                    // No schema version: a database nobody wrote to yet (new, or a first
                    // start interrupted before its first commit) becomes a store; one that
                    // holds anything else is some other program's, and is not touched.
                    let foreign = txn
                        .list_tables()
                        .map_err(backend)?
                        .map(|t| t.name().to_owned())
                        .find(|name| name != META.name());
                    if let Some(table) = foreign {
                        return Err(StoreError::corrupt(format!(
                            "the file is a redb database but not a snodo store (it has a table {table:?} and no schema version)"
                        )));
                    }
                    meta.insert("schema_version", REDB_SCHEMA_VERSION)
                        .map_err(backend)?;
                }
            }
            let prev = meta.get("boot_epoch").map_err(backend)?.map(|v| v.value());
            let epoch = prev.unwrap_or(0) + 1;
            meta.insert("boot_epoch", epoch).map_err(backend)?;
            drop(meta);
            let mut tables = WriteTables::open(&txn)?;
            let ctx = Ctx {
                now: clock.now(),
                epoch,
                issuer,
            };
            let fenced = engine::fence_previous_epochs(&mut tables, &ctx)?;
            drop(tables);
            let mut secrets = txn.open_table(SECRETS).map_err(backend)?;
            let stored = secrets
                .get("server_key")
                .map_err(backend)?
                .map(|v| <[u8; 32]>::try_from(v.value()));
            let key = match stored {
                Some(Ok(k)) => k,
                Some(Err(_)) => {
                    return Err(StoreError::corrupt("the server key has the wrong length"));
                }
                None => {
                    let k = engine::random_key();
                    secrets
                        .insert("server_key", k.as_slice())
                        .map_err(backend)?;
                    k
                }
            };
            (epoch, fenced, key)
        };
        txn.commit().map_err(backend)?;
        Ok((epoch, fenced, key))
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This process's boot epoch (1 for a new file).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many claims of earlier processes were released when this one opened the file:
    /// the tasks that will be recovered.
    pub fn fenced_claims(&self) -> usize {
        self.fenced
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

    fn ctx(&self) -> Ctx {
        Ctx {
            now: self.clock.now(),
            epoch: self.epoch,
            issuer: self.issuer,
        }
    }

    async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.writer
            .as_ref()
            .ok_or_else(|| StoreError::unavailable("the store is closing"))?
            .send(Box::new(Job { f, tx }))
            .map_err(|_| StoreError::unavailable("the store's writer thread has stopped"))?;
        rx.await
            .map_err(|_| StoreError::unavailable("the store's writer thread has stopped"))?
    }

    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        F: FnOnce(&dyn View, &Ctx) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let db = self.db.clone();
        let ctx = self.ctx();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(backend)?;
            let tables = open_tables!(txn);
            f(&tables, &ctx)
        })
        .await
        .map_err(|e| {
            if e.is_panic() {
                // Reads run only redb and our decoder; a panic there means a damaged page.
                StoreError::corrupt(
                    "reading the store failed a consistency check; the file is likely damaged",
                )
            } else {
                StoreError::unavailable(format!("a store read was abandoned: {e}"))
            }
        })?
    }
}

embedded_store!(RedbStore);

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::model::ManualClock;
    use crate::store::contract::Backend;
    use crate::store::{RedbStore, Store};

    struct Redb {
        dir: tempfile::TempDir,
    }

    #[async_trait::async_trait]
    impl Backend for Redb {
        fn durable(&self) -> bool {
            true
        }

        async fn open(&mut self, clock: &ManualClock) -> Arc<dyn Store> {
            let path = self.dir.path().join("tasks.redb");
            let clock = Arc::new(clock.clone());
            let store =
                tokio::task::spawn_blocking(move || RedbStore::open_with_clock(&path, clock))
                    .await
                    .expect("open task panicked")
                    .expect("open the redb store");
            Arc::new(store)
        }
    }

    crate::store_contract_suite!(|| Redb {
        dir: tempfile::tempdir().expect("temp dir"),
    });

    mod file {
        use std::io::{Seek, SeekFrom, Write};

        use serde_json::json;

        use super::super::{META, REDB_SCHEMA_VERSION, TASKS};
        use crate::model::{Scope, TaskId, Work};
        use crate::store::{NewTask, RedbStore, Store, StoreError};

        fn new_task() -> NewTask {
            let id = TaskId::generate();
            NewTask::new(
                id,
                Scope::new("t"),
                Work::new("w", json!({}), id.to_string()),
            )
        }

        /// Writes through redb directly, around the store, to fake what another build or
        /// damage could leave.
        fn raw_write(path: &std::path::Path, write: impl FnOnce(&redb::WriteTransaction)) {
            let db = redb::Database::create(path).expect("raw open");
            let txn = db.begin_write().expect("txn");
            write(&txn);
            txn.commit().expect("commit");
        }

        async fn populated(path: &std::path::Path, n: usize) -> Vec<TaskId> {
            let store = RedbStore::open(path).expect("open");
            let mut ids = Vec::new();
            for _ in 0..n {
                ids.push(store.create(new_task()).await.expect("create").id);
            }
            ids
        }

        #[tokio::test]
        async fn every_open_advances_the_boot_epoch_and_keeps_the_server_key() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.redb");
            let mut key = None;
            for expected in 1..=3 {
                let store = RedbStore::open(&path).expect("open");
                assert_eq!(store.epoch(), expected);
                assert_eq!(store.path(), path);
                let k = store.server_key().await.expect("key");
                assert_eq!(*key.get_or_insert(k), k, "the key survives reopening");
            }
        }

        #[tokio::test]
        async fn a_second_open_in_the_same_moment_is_refused() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.redb");
            let _first = RedbStore::open(&path).expect("open");
            let err = RedbStore::open(&path).expect_err("second open");
            assert!(
                matches!(&err, StoreError::Unavailable(m) if m.contains("already open")),
                "{err}"
            );
        }

        #[tokio::test]
        async fn a_file_from_a_newer_schema_is_refused() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.redb");
            populated(&path, 1).await;
            raw_write(&path, |txn| {
                txn.open_table(META)
                    .expect("meta")
                    .insert("schema_version", REDB_SCHEMA_VERSION + 1)
                    .expect("insert");
            });
            let err = RedbStore::open(&path).expect_err("newer schema");
            assert!(matches!(err, StoreError::IncompatibleSchema(_)), "{err}");
            assert!(err.to_string().contains("newer snodo"), "{err}");
        }

        /// Stores `bytes` as the record of a new task, around the store, and returns what
        /// reading it back reports.
        async fn read_planted(bytes: &'static [u8]) -> StoreError {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.redb");
            let id = populated(&path, 1).await[0];
            raw_write(&path, |txn| {
                txn.open_table(TASKS)
                    .expect("tasks")
                    .insert(id.as_bytes().as_slice(), bytes)
                    .expect("insert");
            });
            let store = RedbStore::open(&path).expect("open");
            store
                .inspect(&id)
                .await
                .expect_err("the planted record is refused")
        }

        #[tokio::test]
        async fn a_record_from_a_newer_layout_is_refused_on_read() {
            let err = read_planted(br#"{"v":2,"future":true}"#).await;
            assert!(matches!(err, StoreError::IncompatibleSchema(_)), "{err}");
        }

        #[tokio::test]
        async fn a_damaged_record_is_reported_not_skipped() {
            let err = read_planted(b"{\"v\":1,\"task\":").await;
            assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        }

        #[tokio::test]
        async fn a_file_that_is_not_a_store_is_reported() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.redb");
            std::fs::write(&path, vec![0x5a; 64 * 1024]).expect("write");
            let err = RedbStore::open(&path).expect_err("garbage");
            assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
            assert!(err.to_string().contains("s.redb"), "names the file: {err}");
            // Nothing was reset: the bytes are as they were.
            assert_eq!(std::fs::read(&path).expect("read"), vec![0x5a; 64 * 1024]);
        }

        #[tokio::test]
        async fn a_truncated_file_is_reported_never_reset() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.redb");
            populated(&path, 50).await;
            let len = std::fs::metadata(&path).expect("meta").len();
            for keep in [len / 2, 4096, 100] {
                let copy = dir.path().join(format!("cut-{keep}.redb"));
                std::fs::copy(&path, &copy).expect("copy");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&copy)
                    .expect("open copy")
                    .set_len(keep)
                    .expect("truncate");
                let res = RedbStore::open(&copy);
                let err = res.expect_err("a truncated file must not open as an empty store");
                assert!(
                    matches!(err, StoreError::Corrupt(_)),
                    "truncated to {keep} bytes: {err}"
                );
            }
        }

        /// Against a model: whatever the store acknowledged before the device failed is
        /// there after a reopen, failures are reported as errors (never a panic, never a
        /// hang), and the file opens again.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn io_failures_lose_no_acknowledged_write() {
            use crate::model::{EventKind, TaskEvent, TaskStatus};
            use crate::store::{Authority, ClaimRequest};

            for budget in [3i64, 10, 25, 60, 120, 250, 500] {
                let dir = tempfile::tempdir().expect("tmp");
                let path = dir.path().join("faulty.redb");
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .expect("file");
                let faults = std::sync::Arc::new(crate::store::Faults::default());
                faults
                    .budget
                    .store(budget, std::sync::atomic::Ordering::SeqCst);
                let backend = crate::store::FaultyDevice::new(file, faults).expect("backend");
                let clock = std::sync::Arc::new(crate::model::SystemClock::new());
                let store = match RedbStore::open_with_backend(backend, &path, clock) {
                    Ok(s) => s,
                    Err(e) => {
                        assert!(
                            matches!(e, StoreError::Unavailable(_) | StoreError::Corrupt(_)),
                            "{e}"
                        );
                        continue;
                    }
                };
                let mut created = Vec::new();
                let mut completed = Vec::new();
                let mut failed_at = None;
                for i in 0..200 {
                    let id = match store.create(new_task()).await {
                        Ok(t) => t.id,
                        Err(e) => {
                            assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
                            failed_at = Some(i);
                            break;
                        }
                    };
                    created.push(id);
                    if i % 2 == 0 {
                        let done = async {
                            let lease = store
                                .claim(&id, &ClaimRequest::new(60_000, "t"))
                                .await?
                                .lease;
                            let kind = EventKind::Completed {
                                result: json!({"content": [{"type": "text", "text": "ok"}]}),
                            };
                            store
                                .transition(
                                    Authority::Worker(&lease),
                                    TaskEvent::random(kind),
                                    None,
                                )
                                .await
                        };
                        match done.await {
                            Ok(_) => completed.push(id),
                            Err(e) => {
                                assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
                                failed_at = Some(i);
                                break;
                            }
                        }
                    }
                }
                assert!(
                    failed_at.is_some(),
                    "budget {budget}: the device never failed"
                );
                drop(store);

                let reopened = RedbStore::open(&path)
                    .unwrap_or_else(|e| panic!("budget {budget}: reopen failed: {e}"));
                for id in &created {
                    let (t, _) = reopened
                        .inspect(id)
                        .await
                        .expect("read")
                        .unwrap_or_else(|| {
                            panic!("budget {budget}: acknowledged task {id} is missing")
                        });
                    if completed.contains(id) {
                        assert_eq!(t.status, TaskStatus::Completed, "budget {budget}: {id}");
                    }
                }
            }
        }

        #[tokio::test]
        async fn damaged_pages_are_reported() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.redb");
            let ids = populated(&path, 200).await;
            let len = std::fs::metadata(&path).expect("meta").len();
            {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("open");
                // Overwrite everything past the header region with garbage.
                f.seek(SeekFrom::Start(8192)).expect("seek");
                f.write_all(&vec![0xa5; (len - 8192) as usize])
                    .expect("write");
            }
            let opened = RedbStore::open(&path);
            let store = match opened {
                Err(e) => {
                    assert!(matches!(e, StoreError::Corrupt(_)), "{e}");
                    return;
                }
                Ok(s) => s,
            };
            // If the header survived, every read of a damaged page must fail loudly.
            let mut failures = 0;
            for id in &ids {
                match store.inspect(id).await {
                    Err(StoreError::Corrupt(_)) => failures += 1,
                    Err(other) => panic!("unexpected error {other}"),
                    Ok(Some(_)) => panic!("a damaged page was read as valid data"),
                    Ok(None) => panic!("a damaged page made a task vanish silently"),
                }
            }
            assert_eq!(failures, ids.len());
        }

        #[tokio::test]
        async fn an_empty_file_is_refused_never_initialised() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("tasks.redb");
            std::fs::write(&path, b"").expect("write");
            let err = RedbStore::open(&path).expect_err("an empty file is not a store");
            assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
            assert!(
                err.to_string().contains("tasks.redb"),
                "names the file: {err}"
            );
            assert!(err.to_string().contains("empty"), "{err}");
            assert_eq!(
                std::fs::metadata(&path).expect("meta").len(),
                0,
                "untouched"
            );
        }

        #[tokio::test]
        async fn another_programs_redb_file_is_refused_never_adopted() {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("tasks.redb");
            const OTHER: redb::TableDefinition<'_, &str, u64> =
                redb::TableDefinition::new("settings");
            raw_write(&path, |txn| {
                txn.open_table(OTHER)
                    .expect("table")
                    .insert("answer", 42)
                    .expect("insert");
            });
            let err = RedbStore::open(&path).expect_err("not a snodo store");
            assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
            assert!(err.to_string().contains("not a snodo store"), "{err}");
            assert!(err.to_string().contains("settings"), "{err}");
            // Nothing was added to it and its data is intact.
            use redb::{ReadableDatabase, TableHandle};
            let db = redb::Database::open(&path).expect("raw open");
            let txn = db.begin_read().expect("read");
            let tables: Vec<String> = txn
                .list_tables()
                .expect("tables")
                .map(|t| t.name().to_owned())
                .collect();
            assert_eq!(tables, vec!["settings".to_owned()]);
            let value = txn
                .open_table(OTHER)
                .expect("table")
                .get("answer")
                .expect("get")
                .map(|v| v.value());
            assert_eq!(value, Some(42));
        }

        #[tokio::test]
        async fn a_new_store_is_private_and_an_existing_one_is_tightened() {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &std::path::Path| {
                std::fs::metadata(p).expect("meta").permissions().mode() & 0o777
            };
            let dir = tempfile::tempdir().expect("tmp");
            let data = dir.path().join("data");
            let path = data.join("nested").join("tasks.redb");
            drop(RedbStore::open(&path).expect("create"));
            assert_eq!(mode(&data), 0o700);
            assert_eq!(mode(&data.join("nested")), 0o700);
            assert_eq!(mode(&path), 0o600);
            let names: Vec<_> = std::fs::read_dir(data.join("nested"))
                .expect("list")
                .map(|e| e.expect("entry").file_name())
                .collect();
            assert_eq!(names, ["tasks.redb"], "only the store, no temporary name");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                .expect("loosen");
            let store = RedbStore::open(&path).expect("reopen");
            assert_eq!(store.epoch(), 2, "the same store, reopened");
            assert_eq!(mode(&path), 0o600);
        }

        /// The readiness probe: a failing or stuck writer fails it within its bound, while
        /// a snapshot read (the old probe) keeps answering.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_write_probe_fails_when_the_writer_cannot_commit() {
            use std::sync::atomic::Ordering;
            use std::time::Duration;
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("probe.redb");
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .expect("file");
            let faults = std::sync::Arc::new(crate::store::Faults::default());
            let backend = crate::store::FaultyDevice::new(file, faults.clone()).expect("backend");
            let clock = std::sync::Arc::new(crate::model::SystemClock::new());
            let store = RedbStore::open_with_backend(backend, &path, clock).expect("open");
            let bound = Duration::from_millis(200);
            store
                .check_writable(bound)
                .await
                .expect("a healthy store commits");

            faults.stall(true);
            store.now().await.expect("reads still answer");
            let err = store
                .check_writable(bound)
                .await
                .expect_err("a stuck writer fails the probe");
            assert!(
                matches!(&err, StoreError::Unavailable(m) if m.contains("200 ms")),
                "{err}"
            );
            faults.stall(false);
            store
                .check_writable(bound)
                .await
                .expect("unstuck, it commits again");

            // After a failed write redb refuses every later one until the file is reopened,
            // so the probe stays red: readiness reflects that only a restart helps.
            faults.failing.store(true, Ordering::SeqCst);
            store.now().await.expect("reads still answer");
            let err = store.check_writable(bound).await.expect_err("writes fail");
            assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
            faults.failing.store(false, Ordering::SeqCst);
            let err = store
                .check_writable(bound)
                .await
                .expect_err("still refused");
            assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        }
    }
}
