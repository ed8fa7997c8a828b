//! Archives in a directory: each task past its TTL kept as one line of JSON under its id,
//! its journal with it when asked, the same bytes however often it is kept, and read back
//! for `snodo archive show`. (The reaper's hand-off is the runner's test; a bucket is the
//! interop test's, against a real S3-compatible server.)

use std::sync::Arc;

use serde_json::json;
use snodo_core::model::{
    EventKind, JournalEntry, JournalRequest, JournalResponse, ManualClock, Scope, TaskEvent,
    TaskId, TaskStatus, Timestamp,
};
use snodo_core::store::{Authority, ClaimRequest, NewTask, RedbStore, Store};
use snodo_runner::{Archive as _, tool_call_work};
use snodo_server::archive::{ARCHIVE_FORMAT, ArchiveSettings, TaskArchive};
use snodo_server::telemetry::Metrics;

/// A task of `tool` for `tenant` that expires after `ttl_ms`.
async fn create(store: &dyn Store, tenant: &str, tool: &str, ttl_ms: u64) -> TaskId {
    let id = TaskId::generate();
    let mut new = NewTask::new(
        id,
        Scope::new(tenant),
        tool_call_work(&id, tool, json!({"filename": "q3.csv"})),
    );
    new.ttl_ms = Some(ttl_ms);
    store.create(new).await.expect("create").id
}

/// A redb store in `dir` on a manual clock.
fn redb_on_clock(dir: &std::path::Path) -> (ManualClock, Arc<dyn Store>) {
    let clock = ManualClock::new(Timestamp(1_800_000_000_000));
    let store =
        RedbStore::open_with_clock(dir.join("tasks.redb"), Arc::new(clock.clone())).expect("open");
    (clock, Arc::new(store))
}

fn entry(seq: u32, body: &[u8]) -> JournalEntry {
    JournalEntry {
        seq,
        request: JournalRequest {
            method: "POST".into(),
            url: format!("https://api.example.com/exports/{seq}"),
            body_sha256: "0".repeat(64),
        },
        response: JournalResponse {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_vec(),
        },
    }
}

fn archive_in(dir: &std::path::Path, journal: bool, store: &Arc<dyn Store>) -> TaskArchive {
    let settings = ArchiveSettings {
        directory: Some(dir.to_path_buf()),
        journal,
        ..ArchiveSettings::default()
    };
    settings.check().expect("settings");
    TaskArchive::open(&settings)
        .expect("open")
        .keeping(store.clone(), Arc::new(Metrics::new()))
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(
                    p.strip_prefix(dir)
                        .expect("under")
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_directory_archive_keeps_each_task_once_as_a_line_read_back_by_id() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (clock, store) = redb_on_clock(tmp.path());
    let done = create(&*store, "acme", "export", 1_000).await;
    let lease = store
        .claim(&done, &ClaimRequest::new(30_000, "test"))
        .await
        .expect("claim")
        .lease;
    let body = [0u8, 255, b'{', b'\n'];
    store
        .journal_append(&lease, &entry(0, &body), 1 << 20)
        .await
        .expect("append");
    store
        .transition(
            Authority::Worker(&lease),
            TaskEvent::random(EventKind::Completed {
                result: json!({"content": [{"type": "text", "text": "exported 3 rows"}]}),
            }),
            None,
        )
        .await
        .expect("complete");
    let cut_off = create(&*store, "beta", "export", 1_000).await;
    clock.advance(1_000);
    let expired = store.expired(100).await.expect("expired");
    assert_eq!(expired.len(), 2);

    // Without journals: one object per task, named by the id's last two digits and the id.
    let plain_dir = tmp.path().join("plain");
    let plain = archive_in(&plain_dir, false, &store);
    plain.keep(&expired).await.expect("keep");
    let mut want: Vec<String> = [done, cut_off]
        .iter()
        .map(|id| {
            let id = id.to_string();
            format!("{}/{id}.ndjson", &id[30..])
        })
        .collect();
    want.sort();
    assert_eq!(files(&plain_dir), want);
    let record = plain.read(&done).await.expect("read").expect("archived");
    assert_eq!(record.format, ARCHIVE_FORMAT);
    assert_eq!(record.journal, None, "journals are kept only when asked");

    // With journals: the same task, its journal's body byte for byte.
    let dir = tmp.path().join("archive");
    let archive = archive_in(&dir, true, &store);
    archive.keep(&expired).await.expect("keep");
    let path = dir.join(archive.key(&done).as_ref());
    let first = std::fs::read(&path).expect("object");
    assert_eq!(first.last(), Some(&b'\n'), "one line, ended");
    assert_eq!(
        first.iter().filter(|b| **b == b'\n').count(),
        1,
        "the task is one line"
    );
    let record = archive.read(&done).await.expect("read").expect("archived");
    assert_eq!(record.task.summary.id, done);
    assert_eq!(record.task.summary.tenant, "acme");
    assert_eq!(record.task.summary.status, TaskStatus::Completed);
    assert_eq!(record.task.arguments, json!({"filename": "q3.csv"}));
    assert_eq!(
        record.task.outcome,
        Some(json!({"result": {"content": [{"type": "text", "text": "exported 3 rows"}]}}))
    );
    let kinds: Vec<&str> = record
        .task
        .history
        .entries
        .iter()
        .map(|e| e.kind.name())
        .collect();
    assert_eq!(kinds.first(), Some(&"created"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"completed"), "{kinds:?}");
    let journal = record.journal.expect("the journal");
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].request.url, "https://api.example.com/exports/0");
    use base64::Engine as _;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(&journal[0].body_base64)
            .expect("base64"),
        body
    );
    let cut = archive
        .read(&cut_off)
        .await
        .expect("read")
        .expect("archived");
    assert_eq!(cut.task.summary.status, TaskStatus::Working);
    assert_eq!(cut.journal, Some(vec![]));

    // Kept again (another node's reaper, or a crash before the removal): the same bytes,
    // still one object per task.
    archive.keep(&expired).await.expect("keep again");
    assert_eq!(std::fs::read(&path).expect("object"), first);
    assert_eq!(files(&dir).len(), 2);

    // An id the archive never kept reads as absent; a damaged object is named.
    assert!(
        archive
            .read(&TaskId::generate())
            .await
            .expect("read")
            .is_none()
    );
    std::fs::write(&path, b"{\"format\":\"other\"}\n").expect("damage");
    let e = archive.read(&done).await.expect_err("damaged");
    assert!(e.to_string().contains("not an archived task"), "{e}");
}

#[tokio::test]
async fn an_archive_that_cannot_be_written_refuses_the_batch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (clock, store) = redb_on_clock(tmp.path());
    let id = create(&*store, "acme", "export", 10).await;
    clock.advance(10);
    let expired = store.expired(100).await.expect("expired");
    let dir = tmp.path().join("archive");
    let archive = archive_in(&dir, false, &store);
    // The subdirectory this task's object goes in is taken by a file.
    let id = id.to_string();
    std::fs::write(dir.join(&id[30..]), b"in the way").expect("block");
    let e = archive.keep(&expired).await.expect_err("refused");
    assert!(e.contains(&id), "the message names the task: {e}");
    assert!(
        store
            .inspect(&expired[0].0.id)
            .await
            .expect("inspect")
            .is_some(),
        "keeping removes nothing"
    );
}
