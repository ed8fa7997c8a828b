//! The SQLite adapter's own tests: the contract suite, file checks and the group commit.

use std::sync::Arc;

use crate::store::SqliteStore;
use crate::store::contract::FileBackend;

crate::store_contract_suite!(|| FileBackend::new("tasks.sqlite", |path, clock| {
    Ok(Arc::new(SqliteStore::open_with_clock(path, clock)?))
}));

file_store_checks!(crate::store::SqliteStore, "tasks.sqlite", garbage_says: "not a SQLite database",
    leaves: ["", "-wal", "-shm", ".lock"]);

mod file {
    use std::path::Path;

    use rusqlite::Connection;
    use serde_json::json;

    use super::super::SQLITE_SCHEMA_VERSION;
    use crate::model::{Scope, TaskId, TaskStatus, Work};
    use crate::store::contract::finish;
    use crate::store::prelude::*;
    use crate::store::{ClaimRequest, NewTask, SqliteStore, StoreError};

    fn new_task(scope: &str) -> NewTask {
        let id = TaskId::generate();
        NewTask::new(
            id,
            Scope::new(scope),
            Work::new("w", json!({"n": 1}), id.to_string()),
        )
    }

    /// A connection around the store, to look at or fake what another build or damage
    /// could leave. The store must be closed.
    fn raw(path: &Path) -> Connection {
        Connection::open(path).expect("raw open")
    }

    async fn populated(path: &Path, n: usize) -> Vec<TaskId> {
        let store = SqliteStore::open(path).expect("open");
        let mut ids = Vec::new();
        for _ in 0..n {
            ids.push(store.create(new_task("t")).await.expect("create").id);
        }
        ids
    }

    #[tokio::test]
    async fn data_and_live_counts_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sqlite");
        let ids = {
            let store = SqliteStore::open(&path).expect("open");
            let mut ids = Vec::new();
            for _ in 0..5 {
                ids.push(store.create(new_task("a")).await.expect("create").id);
            }
            ids.push(store.create(new_task("b")).await.expect("create").id);
            // Finish one of scope a: four live there, one in b.
            let lease = store
                .claim(&ids[0], &ClaimRequest::new(60_000, "t"))
                .await
                .expect("claim")
                .lease;
            finish(&store, &lease).await.expect("complete");
            // And leave one claimed: the next open fences it.
            store
                .claim(&ids[1], &ClaimRequest::new(60_000, "t"))
                .await
                .expect("claim");
            ids
        };

        let store = SqliteStore::open(&path).expect("reopen");
        assert_eq!(store.epoch(), 2);
        assert_eq!(store.fenced_claims(), 1);
        let (done, _) = store.inspect(&ids[0]).await.expect("read").expect("kept");
        assert_eq!(done.status, TaskStatus::Completed);
        let (fenced, work) = store.inspect(&ids[1]).await.expect("read").expect("kept");
        assert_eq!((fenced.claim, fenced.recoveries), (None, 1));
        assert_eq!(work, Work::new("w", json!({"n": 1}), ids[1].to_string()));
        for id in &ids {
            assert!(store.inspect(id).await.expect("read").is_some(), "{id}");
        }
        // Exactly four live tasks in a: a cap of four refuses, five admits.
        let mut capped = new_task("a");
        capped.max_live_in_scope = Some(4);
        assert_eq!(
            store.create(capped).await.err(),
            Some(StoreError::LiveLimit { max: 4 })
        );
        let mut admitted = new_task("a");
        admitted.max_live_in_scope = Some(5);
        store.create(admitted).await.expect("under the cap");
        drop(store);
        let counts: Vec<(String, i64)> = raw(&path)
            .prepare("SELECT scope, n FROM live ORDER BY scope")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(counts, [("a".to_owned(), 5), ("b".to_owned(), 1)]);

        // A file of a build before stored counts gains them from its tasks at open.
        raw(&path)
            .execute_batch("DROP TABLE stored; DROP TABLE pinned")
            .expect("drop the counts");
        let store = SqliteStore::open(&path).expect("reopen");
        // No task here pins a component; one that does is counted from its work.
        let digest = crate::model::component_digest(b"pinned");
        let mut pinned = new_task("c");
        pinned.work.component_digest = Some(digest.clone());
        store.create(pinned).await.expect("create");
        drop(store);
        raw(&path)
            .execute_batch("DROP TABLE pinned")
            .expect("drop the pins");
        let store = SqliteStore::open(&path).expect("reopen");
        store.store_component(b"pinned", None).await.expect("store");
        let pins: Vec<(String, u64)> = store
            .components()
            .await
            .expect("components")
            .into_iter()
            .map(|c| (c.digest, c.pinned))
            .collect();
        assert_eq!(pins, [(digest, 1)], "the live task's pin, from its work");
        let mut capped = new_task("a");
        capped.max_stored_in_scope = Some(6);
        assert_eq!(
            store.create(capped).await.err(),
            Some(StoreError::StoredLimit { max: 6 }),
            "six stored in a, the completed one included"
        );
        let mut admitted = new_task("b");
        admitted.max_stored_in_scope = Some(2);
        store.create(admitted).await.expect("one stored in b");
    }

    #[tokio::test]
    async fn a_file_from_a_newer_schema_is_refused_and_left_untouched() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sqlite");
        populated(&path, 3).await;
        raw(&path)
            .execute(
                "UPDATE meta SET value = ?1 WHERE key = 'schema_version'",
                [SQLITE_SCHEMA_VERSION as i64 + 1],
            )
            .expect("plant a newer version");
        let before = std::fs::read(&path).expect("read");
        let err = SqliteStore::open(&path).expect_err("newer schema");
        assert!(matches!(err, StoreError::IncompatibleSchema(_)), "{err}");
        assert!(err.to_string().contains("newer snodo"), "{err}");
        assert!(
            err.to_string().contains("s.sqlite"),
            "names the file: {err}"
        );
        assert_eq!(std::fs::read(&path).expect("read"), before, "untouched");
        let epoch: i64 = raw(&path)
            .query_row("SELECT value FROM meta WHERE key = 'boot_epoch'", [], |r| {
                r.get(0)
            })
            .expect("epoch");
        assert_eq!(epoch, 1, "no boot was recorded");
    }

    #[tokio::test]
    async fn another_programs_database_is_refused_never_adopted() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tasks.sqlite");
        raw(&path)
            .execute_batch(
                "CREATE TABLE settings (k TEXT, v INTEGER); INSERT INTO settings VALUES ('a', 42);",
            )
            .expect("other program");
        let before = std::fs::read(&path).expect("read");
        let err = SqliteStore::open(&path).expect_err("not a snodo store");
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert!(err.to_string().contains("not a snodo store"), "{err}");
        assert!(err.to_string().contains("settings"), "{err}");
        assert_eq!(std::fs::read(&path).expect("read"), before, "untouched");

        // A table named `meta` with other columns is someone else's too.
        let other = dir.path().join("other.sqlite");
        raw(&other)
            .execute_batch("CREATE TABLE meta (name TEXT);")
            .expect("other program");
        let err = SqliteStore::open(&other).expect_err("not a snodo store");
        assert!(err.to_string().contains("not a snodo store"), "{err}");
    }

    #[tokio::test]
    async fn damaged_and_newer_records_are_reported_not_skipped() {
        for (body, newer) in [
            (&br#"{"v":2,"task":{}}"#[..], true),
            (&b"{\"v\":1,\"task\":"[..], false),
        ] {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("s.sqlite");
            let id = populated(&path, 1).await[0];
            raw(&path)
                .execute(
                    "UPDATE tasks SET body = ?1 WHERE id = ?2",
                    rusqlite::params![body, id.as_bytes().as_slice()],
                )
                .expect("plant");
            let store = SqliteStore::open(&path).expect("open");
            let err = store.inspect(&id).await.expect_err("refused");
            if newer {
                assert!(matches!(err, StoreError::IncompatibleSchema(_)), "{err}");
            } else {
                assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
            }
        }
    }

    #[tokio::test]
    async fn the_journal_is_write_ahead() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sqlite");
        populated(&path, 1).await;
        let journal: String = raw(&path)
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .expect("mode");
        assert_eq!(journal, "wal");
    }

    #[tokio::test]
    async fn inspect_file_reads_without_booting() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sqlite");
        let id = populated(&path, 1).await[0];
        let (task, _) = SqliteStore::inspect_file(&path, &id)
            .expect("inspect")
            .expect("found");
        assert_eq!(task.id, id);
        assert_eq!(
            SqliteStore::inspect_file(&path, &TaskId::generate()).expect("inspect"),
            None
        );
        assert_eq!(SqliteStore::open(&path).expect("open").epoch(), 2);
    }

    /// Every ordered-index read is served by its partial index, never by a scan of the
    /// table: the contract's cost bound.
    #[tokio::test]
    async fn the_queues_are_read_through_their_indexes() {
        use super::super::rows::{CLAIMED_UPTO, DUE_UPTO, EXPIRY_UPTO};
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sqlite");
        populated(&path, 1).await;
        let conn = raw(&path);
        for (query, index) in [
            (DUE_UPTO, "tasks_due"),
            (EXPIRY_UPTO, "tasks_expiry"),
            (CLAIMED_UPTO, "tasks_claimed"),
        ] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .expect("prepare")
                .query_map([1i64, 10], |r| r.get::<_, String>(3))
                .expect("plan")
                .collect::<Result<_, _>>()
                .expect("rows");
            let plan = plan.join("; ");
            assert!(plan.contains(index), "{query}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{query} sorts: {plan}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_all_commit() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sqlite");
        let store = std::sync::Arc::new(SqliteStore::open(&path).expect("open"));
        let mut handles = Vec::new();
        for _ in 0..200 {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                store.create(new_task("c")).await.map(|t| t.id)
            }));
        }
        let mut ids = Vec::new();
        for h in handles {
            ids.push(h.await.expect("join").expect("create"));
        }
        for id in &ids {
            assert!(store.inspect(id).await.expect("read").is_some());
        }
        let mut capped = new_task("c");
        capped.max_live_in_scope = Some(200);
        assert_eq!(
            store.create(capped).await.err(),
            Some(StoreError::LiveLimit { max: 200 })
        );
    }
}

/// The group commit itself, driven directly: a batch's jobs share one transaction.
mod group_commit {
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::super::engine::{Count, Ctx, Txn};
    use super::super::writer::Writer;
    use super::super::{SqliteStore, StoreError, StoreResult, writer_connection};
    use crate::model::{ManualClock, Timestamp};
    use crate::store::embedded::FileBoot;
    use crate::store::group_commit::{self, WriteJob};
    use crate::store::prelude::*;

    type Reply = oneshot::Receiver<StoreResult<()>>;

    fn job<F>(f: F) -> (Box<dyn WriteJob>, Reply)
    where
        F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<()> + Send + 'static,
    {
        group_commit::job(f)
    }

    fn set(scope: &'static str, n: u64) -> (Box<dyn WriteJob>, Reply) {
        job(move |txn, _| txn.set_count(Count::Live, scope, n))
    }

    fn answer(rx: Reply) -> StoreResult<()> {
        rx.blocking_recv().expect("answered")
    }

    fn counts(path: &std::path::Path) -> Vec<(String, i64)> {
        rusqlite::Connection::open(path)
            .expect("raw")
            .prepare("SELECT scope, n FROM live ORDER BY scope")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    /// A new store file and a writer of its own on it, outside any store.
    fn writer() -> (tempfile::TempDir, std::path::PathBuf, Writer) {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.sqlite");
        drop(SqliteStore::open(&path).expect("create"));
        let clock = Arc::new(ManualClock::new(Timestamp(1)));
        let w = Writer {
            conn: writer_connection(&path).expect("connect"),
            boot: FileBoot::new(path.clone(), clock, 1, 1, 0),
        };
        (dir, path, w)
    }

    #[test]
    fn a_refused_job_leaves_nothing_and_the_others_commit() {
        let (_dir, path, mut w) = writer();
        let (a, ra) = set("a", 1);
        // Writes, then refuses: its write must not survive.
        let (b, rb) = job(|txn, _| {
            txn.set_count(Count::Live, "b", 7)?;
            Err(StoreError::invalid("refused after writing"))
        });
        let (c, rc) = set("c", 3);
        w.commit_batch(vec![a, b, c]);
        assert_eq!(answer(ra), Ok(()));
        assert!(matches!(answer(rb), Err(StoreError::Invalid(_))));
        assert_eq!(answer(rc), Ok(()));
        drop(w);
        assert_eq!(counts(&path), [("a".to_owned(), 1), ("c".to_owned(), 3)]);
    }

    #[test]
    fn a_backend_failure_or_a_panic_aborts_the_whole_batch() {
        let (_dir, path, mut w) = writer();
        let (a, ra) = set("a", 1);
        let (b, rb) = job(|_, _| Err(StoreError::unavailable("the disk went away")));
        let (c, rc) = set("c", 3);
        w.commit_batch(vec![a, b, c]);
        assert!(matches!(answer(ra), Err(StoreError::Unavailable(_))));
        assert_eq!(
            answer(rb),
            Err(StoreError::unavailable("the disk went away")),
            "the culprit hears its own error"
        );
        assert!(matches!(answer(rc), Err(StoreError::Unavailable(_))));

        let (a, ra) = set("a", 1);
        let (b, _rb) = job(|_, _| panic!("a bug"));
        let (c, rc) = set("c", 3);
        w.commit_batch(vec![a, b, c]);
        assert!(matches!(answer(ra), Err(StoreError::Unavailable(m)) if m.contains("panicked")));
        assert!(matches!(answer(rc), Err(StoreError::Unavailable(_))));

        // The connection is still good for the next batch.
        let (d, rd) = set("d", 4);
        w.commit_batch(vec![d]);
        assert_eq!(answer(rd), Ok(()));
        drop(w);
        assert_eq!(counts(&path), [("d".to_owned(), 4)]);
    }

    #[tokio::test]
    async fn the_write_probe_commits() {
        let dir = tempfile::tempdir().expect("tmp");
        let store = SqliteStore::open(dir.path().join("s.sqlite")).expect("open");
        store
            .check_writable(std::time::Duration::from_secs(30))
            .await
            .expect("a healthy store commits");
    }
}
