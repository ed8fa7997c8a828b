//! Online backups of the single-file stores, and restoring one onto a stopped node.
//!
//! A backup is the whole store as of one commit, taken while the store keeps serving: redb
//! copies every table under one read transaction (an MVCC snapshot the writer never waits
//! for), SQLite runs its online backup inside one read transaction of a reader connection (a
//! WAL snapshot). Either way the copy is written under a temporary name beside its path,
//! synced, reopened and counted (table by table, against the counts the snapshot itself
//! gave) and only then linked at its path: a backup cut short by a crash leaves no file
//! at the path, and one reported done was read back whole. A path that exists is never
//! replaced.
//!
//! Restoring checks the backup the same way, refuses while a process holds the store, moves
//! the store it replaces aside (with SQLite's `-wal`/`-shm`, which belong to it) and puts
//! the copy in its place by rename. The restored store's first open advances its boot
//! epoch like any restart, so the claims it held are released and its tasks run again.
#![cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::embedded::io_error;
use super::{StoreError, StoreResult};

/// A backup written and read back: what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    /// Where it is.
    pub path: PathBuf,
    /// The store kind (`redb` or `sqlite`).
    pub kind: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The tasks it holds.
    pub tasks: u64,
    /// The rows of every table, by table.
    pub rows: BTreeMap<String, u64>,
    /// The store's time of the snapshot (ms since the epoch): every write committed before
    /// it is in the copy (0 when the copy was only read back, not taken).
    pub taken_at_ms: u64,
}

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restored {
    /// The backup, as checked before it was put in place.
    pub backup: Backup,
    /// Where the store it replaced now is (`None`: there was none).
    pub kept_aside: Option<PathBuf>,
}

/// The two kinds of file a backup can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A redb file.
    Redb,
    /// An SQLite file.
    Sqlite,
}

impl FileKind {
    /// The kind of the file at `path`, from its first bytes.
    pub fn of(path: &Path) -> StoreResult<Self> {
        use std::io::Read as _;
        let mut head = [0u8; 16];
        let mut f = std::fs::File::open(path).map_err(|e| io_error(path, "cannot open", e))?;
        let n = f
            .read(&mut head)
            .map_err(|e| io_error(path, "cannot read", e))?;
        if head[..n].starts_with(b"SQLite format 3\0") {
            Ok(Self::Sqlite)
        } else if head[..n].starts_with(b"redb") {
            Ok(Self::Redb)
        } else {
            Err(StoreError::corrupt(format!(
                "{}: neither a redb nor an SQLite file, so no snodo backup",
                path.display()
            )))
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Redb => "redb",
            Self::Sqlite => "sqlite",
        }
    }
}

/// Refuses a backup's destination that exists: a backup never replaces a file.
pub(crate) fn check_destination(to: &Path) -> StoreResult<()> {
    if to.exists() {
        return Err(StoreError::invalid(format!(
            "{}: the file exists; a backup never replaces one (name a new file)",
            to.display()
        )));
    }
    match to.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) if !dir.is_dir() => Err(StoreError::invalid(format!(
            "{}: no such directory",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// Syncs the copy at `temp`, links it at `to` (a link never replaces a file another process
/// made there meanwhile), removes the temporary name and syncs the directory, so the path
/// names a whole, durable copy or nothing.
fn publish(temp: &Path, to: &Path) -> StoreResult<()> {
    let synced = std::fs::File::open(temp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_error(temp, "cannot sync the copy", e));
    let linked = synced
        .and_then(|()| std::fs::hard_link(temp, to).map_err(|e| io_error(to, "cannot create", e)));
    let _ = std::fs::remove_file(temp);
    linked?;
    sync_dir(to);
    Ok(())
}

/// Syncs the directory holding `path` (its new or renamed entries), where that can be done.
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
}

/// Checks that `read` (the copy's counts, read back) agrees with `taken` (the snapshot's),
/// table by table.
fn agree(
    path: &Path,
    taken: &BTreeMap<String, u64>,
    read: &BTreeMap<String, u64>,
) -> StoreResult<()> {
    if taken == read {
        return Ok(());
    }
    let differ: Vec<String> = taken
        .keys()
        .chain(read.keys())
        .filter(|t| taken.get(*t) != read.get(*t))
        .map(|t| {
            format!(
                "{t}: {} taken, {} read back",
                taken.get(t).copied().unwrap_or(0),
                read.get(t).copied().unwrap_or(0)
            )
        })
        .collect();
    Err(StoreError::corrupt(format!(
        "{}: the copy does not hold what was copied ({})",
        path.display(),
        differ.join("; ")
    )))
}

/// Checks a copy's layout `version` (its file's `path`) against the newest this build
/// writes, `ours`: a copy without one is no store, a newer one is not this build's to read.
pub(crate) fn check_layout(path: &Path, version: Option<u64>, ours: u64) -> StoreResult<()> {
    match version {
        Some(v) if v <= ours => Ok(()),
        Some(v) => Err(StoreError::IncompatibleSchema(
            format!(
                "{}: layout version {v} is newer than this build's",
                path.display()
            )
            .into(),
        )),
        None => Err(StoreError::corrupt(format!(
            "{}: no layout version, so not a snodo store",
            path.display()
        ))),
    }
}

/// Ends a backup whose copy at `temp` is `copied` (the snapshot's counts, or why it
/// failed): the copy is read back with `read_back` and must count as taken, then it is
/// published at `to`. On any failure the temporary file is removed and nothing is at `to`.
pub(crate) fn conclude(
    temp: &Path,
    to: &Path,
    kind: FileKind,
    taken_at_ms: u64,
    copied: StoreResult<BTreeMap<String, u64>>,
    read_back: fn(&Path) -> StoreResult<BTreeMap<String, u64>>,
) -> StoreResult<Backup> {
    let checked = copied.and_then(|taken| {
        agree(to, &taken, &read_back(temp)?)?;
        Ok(taken)
    });
    match checked {
        Ok(taken) => {
            publish(temp, to)?;
            described(to, kind, taken, taken_at_ms)
        }
        Err(e) => {
            let _ = std::fs::remove_file(temp);
            Err(e)
        }
    }
}

/// The backup at `path`, read back: its kind, integrity and counts (nothing is written).
pub fn verify(path: &Path) -> StoreResult<Backup> {
    let kind = FileKind::of(path)?;
    let rows = count(path, kind)?;
    described(path, kind, rows, 0)
}

/// The rows of every table of the copy at `path`, of kind `kind`, after its integrity check.
#[cfg_attr(
    not(any(feature = "redb", feature = "sqlite")),
    allow(unused_variables)
)]
fn count(path: &Path, kind: FileKind) -> StoreResult<BTreeMap<String, u64>> {
    match kind {
        #[cfg(feature = "redb")]
        FileKind::Redb => super::redb::count_copy(path),
        #[cfg(feature = "sqlite")]
        FileKind::Sqlite => super::sqlite::count_copy(path),
        #[allow(unreachable_patterns)]
        other => Err(StoreError::invalid(format!(
            "this build reads no {} file",
            other.name()
        ))),
    }
}

/// What a copy at `path` holding `rows` is.
pub(crate) fn described(
    path: &Path,
    kind: FileKind,
    rows: BTreeMap<String, u64>,
    taken_at_ms: u64,
) -> StoreResult<Backup> {
    let bytes = std::fs::metadata(path)
        .map_err(|e| io_error(path, "cannot read its metadata", e))?
        .len();
    Ok(Backup {
        path: path.to_owned(),
        kind: kind.name().into(),
        bytes,
        tasks: rows.get("tasks").copied().unwrap_or(0),
        rows,
        taken_at_ms,
    })
}

/// Puts the backup at `from` in place of the store at `to` (of the same kind), which no
/// process may hold: the backup is checked first, the store it replaces is moved aside to
/// `<to>.before-restore-<ms>`, and the copy is renamed into place. `from` is left as it was.
pub fn restore(from: &Path, to: &Path, kind: FileKind) -> StoreResult<Restored> {
    let backup = verify(from)?;
    let found = FileKind::of(from)?;
    if found != kind {
        return Err(StoreError::invalid(format!(
            "{} is a {} backup; the store at {} is {}",
            from.display(),
            found.name(),
            to.display(),
            kind.name()
        )));
    }
    // Held while the copy is put in place: a node starting meanwhile waits or refuses.
    let _held = hold(to, kind)?;
    let (_, temp) = super::embedded::create_beside(to, "store")?;
    let copied = std::fs::copy(from, &temp)
        .map_err(|e| io_error(&temp, "cannot copy the backup", e))
        .and_then(|_| {
            std::fs::File::open(&temp)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_error(&temp, "cannot sync", e))
        });
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    let kept_aside = if to.exists() {
        let stamp = crate::model::wall_millis();
        let aside = suffixed(to, &format!(".before-restore-{stamp}"));
        std::fs::rename(to, &aside).map_err(|e| io_error(to, "cannot move aside", e))?;
        // The old store's write-ahead log and its index belong to it, never to the copy.
        for side in ["-wal", "-shm"] {
            let from = suffixed(to, side);
            if from.exists() {
                let _ = std::fs::rename(&from, suffixed(&aside, side));
            }
        }
        Some(aside)
    } else {
        None
    };
    std::fs::rename(&temp, to).map_err(|e| io_error(to, "cannot put the backup in place", e))?;
    sync_dir(to);
    Ok(Restored { backup, kept_aside })
}

/// `path` with `suffix` appended to its file name.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The lock a serving process holds on the store at `path` (redb: the file itself; SQLite:
/// its `<path>.lock`), taken for the restore, or the refusal naming who holds it.
fn hold(path: &Path, kind: FileKind) -> StoreResult<Option<std::fs::File>> {
    let at = match kind {
        FileKind::Redb if !path.exists() => return Ok(None),
        FileKind::Redb => path.to_owned(),
        FileKind::Sqlite => suffixed(path, ".lock"),
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(kind == FileKind::Sqlite)
        .truncate(false)
        .open(&at)
        .map_err(|e| io_error(&at, "cannot open", e))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::unavailable(format!(
            "{}: a process has the store open; stop the node before restoring",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(io_error(&at, "cannot lock", e)),
    }
}

#[cfg(all(test, feature = "redb", feature = "sqlite"))]
mod tests {
    //! Backups taken while writers commit, on both file kinds: the copy holds every task
    //! acknowledged before it began, counts as it was taken, opens as a store, and goes back
    //! in place of a stopped store only.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use serde_json::json;

    use super::*;
    use crate::model::{Scope, TaskId, Work};
    use crate::store::{NewTask, RedbStore, SqliteStore, Store};

    fn new_task() -> NewTask {
        let id = TaskId::generate();
        NewTask::new(
            id,
            Scope::new("t"),
            Work::new("w", json!({"pad": "x".repeat(300)}), id.to_string()),
        )
    }

    async fn a_backup_under_load_holds_what_was_acknowledged_before_it(
        kind: FileKind,
        open: fn(&Path) -> StoreResult<Arc<dyn Store>>,
    ) {
        let dir = tempfile::tempdir().expect("tmp");
        let live = dir.path().join("live");
        let store = open(&live).expect("open");
        let mut before = Vec::new();
        for _ in 0..200 {
            before.push(store.create(new_task()).await.expect("create").id);
        }
        // Writers keep committing through the backup.
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (store, stop) = (store.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        store
                            .create(new_task())
                            .await
                            .expect("create during the backup");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let copy = dir.path().join("copy");
        let taken = store.backup(&copy).await.expect("backup");
        stop.store(true, Ordering::Relaxed);
        let mut during = 0;
        for w in writers {
            during += w.await.expect("writer");
        }
        assert!(during > 0, "the writers committed meanwhile");
        assert!(taken.tasks >= 200, "{taken:?}");
        assert_eq!(FileKind::of(&copy).expect("kind"), kind);
        // A path that exists is never replaced.
        let again = store.backup(&copy).await.expect_err("exists");
        assert!(again.to_string().contains("never replaces"), "{again}");
        // Read back, the copy counts what was taken.
        let read = verify(&copy).expect("verify");
        assert_eq!(read.rows, taken.rows);

        // Restoring onto the store a process holds is refused; once it stops, the copy
        // goes in and the store it replaces is kept aside.
        let refused = restore(&copy, &live, kind).expect_err("held");
        assert!(refused.to_string().contains("stop the node"), "{refused}");
        drop(store);
        let restored = restore(&copy, &live, kind).expect("restore");
        let aside = restored.kept_aside.expect("kept aside");
        assert!(aside.exists());
        let back = open(&live).expect("open the restored store");
        for id in &before {
            assert!(
                back.inspect(id).await.expect("inspect").is_some(),
                "task {id} was acknowledged before the backup"
            );
        }
        // The copy is left as it was: it restores again.
        assert_eq!(verify(&copy).expect("verify").rows, taken.rows);
        // A backup of the other kind is not this store's.
        let other = match kind {
            FileKind::Redb => FileKind::Sqlite,
            FileKind::Sqlite => FileKind::Redb,
        };
        drop(back);
        let wrong = restore(&copy, &dir.path().join("other"), other).expect_err("kind");
        assert!(wrong.to_string().contains("backup"), "{wrong}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_redb_backup_under_load_holds_what_was_acknowledged_before_it() {
        a_backup_under_load_holds_what_was_acknowledged_before_it(FileKind::Redb, |p| {
            Ok(Arc::new(RedbStore::open(p)?))
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_sqlite_backup_under_load_holds_what_was_acknowledged_before_it() {
        a_backup_under_load_holds_what_was_acknowledged_before_it(FileKind::Sqlite, |p| {
            Ok(Arc::new(SqliteStore::open(p)?))
        })
        .await;
    }

    #[test]
    fn a_file_that_is_no_store_is_no_backup() {
        let dir = tempfile::tempdir().expect("tmp");
        let junk = dir.path().join("junk");
        std::fs::write(&junk, b"hello").expect("write");
        let e = verify(&junk).expect_err("junk");
        assert!(
            e.to_string().contains("neither a redb nor an SQLite file"),
            "{e}"
        );
    }
}
