//! The redb adapter's own tests: the contract suite, file checks, crash and fault injection.

use std::sync::Arc;

use crate::store::RedbStore;
use crate::store::contract::FileBackend;

crate::store_contract_suite!(|| FileBackend::new("tasks.redb", |path, clock| {
    Ok(Arc::new(RedbStore::open_with_clock(path, clock)?))
}));

file_store_checks!(crate::store::RedbStore, "tasks.redb", garbage_says: "tasks.redb", leaves: [""]);

mod file {
    use std::io::{Seek, SeekFrom, Write};

    use serde_json::json;

    use redb::ReadableDatabase;

    use super::super::{META, REDB_SCHEMA_VERSION, TASKS};
    use crate::model::{Scope, TaskId, Work};
    use crate::store::contract::finish;
    use crate::store::prelude::*;
    use crate::store::{NewTask, RedbStore, StoreError};

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

    /// Replaces the stored record of a new task, around the store, with what `change`
    /// makes of it, and returns the reopened store and the task's id.
    async fn planted(
        dir: &tempfile::TempDir,
        change: impl FnOnce(&[u8]) -> Vec<u8>,
    ) -> (RedbStore, TaskId) {
        let path = dir.path().join("s.redb");
        let id = populated(&path, 1).await[0];
        let stored = {
            let db = redb::Database::create(&path).expect("raw open");
            let txn = db.begin_read().expect("read");
            let table = txn.open_table(TASKS).expect("tasks");
            let v = table
                .get(id.as_bytes().as_slice())
                .expect("get")
                .expect("row");
            v.value().to_vec()
        };
        let bytes = change(&stored);
        raw_write(&path, |txn| {
            txn.open_table(TASKS)
                .expect("tasks")
                .insert(id.as_bytes().as_slice(), bytes.as_slice())
                .expect("insert");
        });
        (RedbStore::open(&path).expect("open"), id)
    }

    /// What reading a task whose record `change` rewrote reports.
    async fn read_planted(change: impl FnOnce(&[u8]) -> Vec<u8>) -> StoreError {
        let dir = tempfile::tempdir().expect("tmp");
        let (store, id) = planted(&dir, change).await;
        store
            .inspect(&id)
            .await
            .expect_err("the planted record is refused")
    }

    #[tokio::test]
    async fn a_record_from_a_newer_layout_is_refused_on_read() {
        let err = read_planted(|_| br#"{"v":2,"future":true}"#.to_vec()).await;
        assert!(matches!(err, StoreError::IncompatibleSchema(_)), "{err}");
    }

    #[tokio::test]
    async fn a_damaged_record_is_reported_not_skipped() {
        let err = read_planted(|_| b"{\"v\":1,\"task\":".to_vec()).await;
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    }

    #[tokio::test]
    async fn a_damaged_compressed_record_is_reported_never_misread() {
        type Damage = fn(&[u8]) -> Vec<u8>;
        let damages: [(&str, Damage); 6] = [
            ("a flipped byte in the frame", |b| {
                let mut b = b.to_vec();
                let last = b.len() - 3;
                b[last] ^= 0x5a;
                b
            }),
            ("a truncated frame", |b| b[..b.len() - 4].to_vec()),
            ("a truncated length", |b| b[..3].to_vec()),
            ("a wrong length", |b| {
                let mut b = b.to_vec();
                b[1] = b[1].wrapping_add(1);
                b
            }),
            ("an absurd length", |b| {
                let mut b = b.to_vec();
                b[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
                b
            }),
            ("an unknown first byte", |b| {
                let mut b = b.to_vec();
                b[0] = 0x7f;
                b
            }),
        ];
        for (what, damage) in damages {
            let err = read_planted(damage).await;
            assert!(matches!(err, StoreError::Corrupt(_)), "{what}: {err}");
        }
    }

    #[tokio::test]
    async fn a_record_written_as_plain_json_by_schema_2_still_reads() {
        let dir = tempfile::tempdir().expect("tmp");
        let (store, id) = planted(&dir, |b| {
            let record = crate::store::record::decode(b).expect("decode");
            crate::store::record::encode_json(&record).expect("encode")
        })
        .await;
        let (task, work) = store.inspect(&id).await.expect("read").expect("present");
        assert_eq!(task.id, id);
        assert_eq!(work.kind, "w");
    }

    /// Creates `n` small tool-call tasks (claimed and started at creation) and completes
    /// each, 64 at a time, as a server under load would.
    async fn complete_many(store: &RedbStore, n: usize, ttl_ms: u64) {
        use crate::model::Principal;
        use crate::store::ClaimRequest;
        let one = || async {
            let id = TaskId::generate();
            let input = json!({"tool": "flaky", "arguments": {"succeed_on_attempt": 1}});
            let work = crate::model::Work::new("tool_call", input, id.to_string())
                .with_component_digest(format!("sha256:{}", "ab".repeat(32)))
                .with_principal(Principal::new("default", "anonymous"));
            let mut new = NewTask::new(id, Scope::new("default"), work);
            new.ttl_ms = Some(ttl_ms);
            new.poll_interval_ms = Some(1_000);
            new.client_capabilities = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
            let mut req = ClaimRequest::new(30_000, "host:1");
            req.start = true;
            let c = store.create_claimed(new, &req).await.expect("create");
            finish(store, &c.lease).await.expect("complete");
        };
        for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
            futures_util::future::join_all(chunk.iter().map(|_| one())).await;
        }
    }

    fn file_len(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).expect("metadata").len()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_completed_task_costs_under_a_kilobyte_of_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.redb");
        let n = 8_000;
        let store = RedbStore::open(&path).expect("open");
        complete_many(&store, n, 86_400_000).await;
        drop(store);
        // What the tasks occupy: the pages allocated to data and metadata. The file's
        // length runs ahead of that by whatever its last growth step reserved (redb grows
        // it in steps and reuses the reserve), so the length alone would measure the step.
        let db = redb::Database::create(&path).expect("raw open");
        let stats = db.begin_write().expect("txn").stats().expect("stats");
        let allocated = stats.allocated_pages() * stats.page_size() as u64;
        let per_task = allocated / n as u64;
        eprintln!(
            "{per_task} bytes allocated per small completed task ({} bytes of file)",
            file_len(&path) / n as u64
        );
        assert!(per_task <= 1_024, "{per_task} bytes per task");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_file_stops_growing_under_a_steady_create_and_reap_load() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("s.redb");
        let clock = crate::model::ManualClock::new(crate::model::Timestamp(1_700_000_000_000));
        let store =
            RedbStore::open_with_clock(&path, std::sync::Arc::new(clock.clone())).expect("open");
        let mut sizes = Vec::new();
        for _ in 0..12 {
            complete_many(&store, 1_000, 1_000).await;
            clock.advance(1_001);
            let mut reaped = 0;
            loop {
                let batch = store.reap(256).await.expect("reap").len();
                if batch == 0 {
                    break;
                }
                reaped += batch;
            }
            assert_eq!(reaped, 1_000);
            sizes.push(file_len(&path));
        }
        eprintln!("file size after each create/reap round: {sizes:?}");
        // Each round holds the same number of tasks at its peak. Were reaped pages not
        // reused, twelve rounds would need about six times what two did; reused (and the
        // free tail given back), the file stays within twice the first rounds' size.
        let warm = sizes[..2].iter().max().copied().unwrap_or(0);
        let later = sizes[2..].iter().max().copied().unwrap_or(0);
        assert!(
            later <= 2 * warm,
            "the file grew under a steady load: {sizes:?}"
        );
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
        use crate::model::TaskStatus;
        use crate::store::ClaimRequest;

        // The budgets whose failure struck while tasks were being written: a budget that
        // runs out while the file is created proves nothing about acknowledged writes.
        let mut reached_writes = Vec::new();
        for budget in [3i64, 10, 25, 60, 120, 250, 500] {
            let dir = tempfile::tempdir().expect("tmp");
            let path = dir.path().join("faulty.redb");
            let faults = std::sync::Arc::new(crate::store::Faults::default());
            faults
                .budget
                .store(budget, std::sync::atomic::Ordering::SeqCst);
            let backend = crate::store::FaultyDevice::at(&path, faults).expect("backend");
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
                        finish(&store, &lease).await
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
            if created.len() > 1 {
                reached_writes.push(budget);
            }
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
        assert!(
            reached_writes.len() >= 3,
            "only budgets {reached_writes:?} failed after tasks were acknowledged"
        );
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

    /// A file of a build before stored counts gains them from its tasks at open.
    #[tokio::test]
    async fn a_file_without_stored_counts_gains_them_at_open() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tasks.redb");
        populated(&path, 3).await;
        let digest = crate::model::component_digest(b"pinned");
        {
            let store = RedbStore::open(&path).expect("open");
            let mut n = new_task();
            n.work.component_digest = Some(digest.clone());
            store.create(n).await.expect("create");
        }
        raw_write(&path, |txn| {
            txn.delete_table(super::super::STORED)
                .expect("drop the counts");
            txn.delete_table(super::super::PINNED)
                .expect("drop the pins");
        });
        let store = RedbStore::open(&path).expect("open");
        store.store_component(b"pinned", None).await.expect("store");
        let pins: Vec<u64> = store
            .components()
            .await
            .expect("components")
            .iter()
            .map(|c| c.pinned)
            .collect();
        assert_eq!(pins, [1], "the live task's pin, from its work");
        let capped = |max: u64| {
            let mut n = new_task();
            n.max_stored_in_scope = Some(max);
            n
        };
        assert_eq!(
            store.create(capped(4)).await.err(),
            Some(StoreError::StoredLimit { max: 4 })
        );
        store.create(capped(5)).await.expect("four were stored");
    }

    #[tokio::test]
    async fn another_programs_redb_file_is_refused_never_adopted() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("tasks.redb");
        const OTHER: redb::TableDefinition<'_, &str, u64> = redb::TableDefinition::new("settings");
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

    /// The readiness probe: a failing or stuck writer fails it within its bound, while
    /// a snapshot read (the old probe) keeps answering.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_write_probe_fails_when_the_writer_cannot_commit() {
        use std::sync::atomic::Ordering;
        use std::time::Duration;
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("probe.redb");
        let faults = std::sync::Arc::new(crate::store::Faults::default());
        let backend = crate::store::FaultyDevice::at(&path, faults.clone()).expect("backend");
        let clock = std::sync::Arc::new(crate::model::SystemClock::new());
        let store = RedbStore::open_with_backend(backend, &path, clock).expect("open");
        let bound = Duration::from_millis(200);
        store
            .check_writable(Duration::from_secs(60))
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
        // Committing again is what matters, not how fast: the stalled probe's write is
        // still ahead of this one, and a loaded machine may take a while to sync both.
        store
            .check_writable(Duration::from_secs(60))
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
