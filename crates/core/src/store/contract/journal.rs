//! Contract group `journal`: a task's outbound journal is appended at positions under the
//! attempt's lease, replayed to the next attempt, fenced against stale attempts, bounded,
//! durable, and removed with its task.

#[allow(unused_imports)]
use super::*;

use crate::model::{JournalEntry, JournalRequest, JournalResponse};

/// A journal entry at `seq` answering `body`; the other groups append these too.
pub(super) fn entry(seq: u32, body: &[u8]) -> JournalEntry {
    JournalEntry {
        seq,
        request: JournalRequest {
            method: "POST".into(),
            url: format!("https://api.example.com/tickets/{seq}"),
            body_sha256: "0".repeat(64),
        },
        response: JournalResponse {
            status: 201,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_vec(),
        },
    }
}

const BOUND: u64 = 1 << 20;

/// A task's journal: append at a position, replay, fencing, the bound, reaping.
pub async fn journal(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let id = create(&*store, "acme").await;
    let first = store.claim(&id, &cr()).await.expect("claim");
    assert_eq!(store.journal(&first.lease).await.expect("journal"), vec![]);

    // Positions in any order, with holes (a request that got no response has none); the
    // body is kept byte for byte.
    let binary = [0u8, 255, 10, 13, b'{', 0];
    store
        .journal_append(&first.lease, &entry(2, b"second"), BOUND)
        .await
        .expect("append 2");
    store
        .journal_append(&first.lease, &entry(0, &binary), BOUND)
        .await
        .expect("append 0");
    // A second entry at a position is refused; the first stays as it was.
    let taken = store
        .journal_append(&first.lease, &entry(0, b"other"), BOUND)
        .await
        .expect_err("a second append at a position");
    assert!(
        matches!(&taken, StoreError::Invalid(e) if e.0.contains("position 0")),
        "{taken:?}"
    );
    let recorded = store.journal(&first.lease).await.expect("journal");
    assert_eq!(recorded, vec![entry(0, &binary), entry(2, b"second")]);

    // The attempt is lost; the next one replays what the first recorded, and the first can
    // neither read nor write any more.
    clock.advance(LEASE + 1);
    let second = store.claim(&id, &cr()).await.expect("reclaim");
    assert_eq!(
        store.journal(&second.lease).await.expect("journal"),
        recorded,
        "a new attempt replays the journal"
    );
    assert_eq!(
        store
            .journal_append(&first.lease, &entry(1, b"stale"), BOUND)
            .await,
        Err(StoreError::LeaseLost),
        "a stale attempt's entry is refused"
    );
    assert_eq!(
        store.journal(&first.lease).await,
        Err(StoreError::LeaseLost)
    );
    store
        .journal_append(&second.lease, &entry(1, b"third"), BOUND)
        .await
        .expect("append 1");

    // The bound counts every entry's encoded bytes; past it nothing is written.
    let used: u64 = store
        .journal(&second.lease)
        .await
        .expect("journal")
        .iter()
        .map(|e| e.encode().len() as u64)
        .sum();
    let big = entry(3, &[7u8; 4096]);
    let refused = store
        .journal_append(&second.lease, &big, used + 100)
        .await
        .expect_err("past the bound");
    assert!(
        matches!(&refused, StoreError::Invalid(e) if e.0.contains("journal_task_bytes")),
        "{refused:?}"
    );
    assert_eq!(
        store.journal(&second.lease).await.expect("journal").len(),
        3
    );
    store
        .journal_append(&second.lease, &big, used + big.encode().len() as u64)
        .await
        .expect("exactly at the bound");

    // Durable adapters keep it across a reopen.
    let expected = store.journal(&second.lease).await.expect("journal");
    if b.durable() {
        drop(store);
        let store = b.open(&clock).await;
        clock.advance(LEASE + 1);
        let third = store.claim(&id, &cr()).await.expect("claim after reopen");
        assert_eq!(
            store.journal(&third.lease).await.expect("journal"),
            expected
        );
        journal_ends_with_its_task(&*store, &clock).await;
    } else {
        journal_ends_with_its_task(&*store, &clock).await;
    }
}

/// A finished task takes no more entries, and a reaped one's journal is gone with it.
async fn journal_ends_with_its_task(store: &dyn Store, clock: &ManualClock) {
    let mut n = new_task("acme");
    n.ttl_ms = Some(60_000);
    let id = store.create(n).await.expect("create").id;
    let c = store.claim(&id, &cr()).await.expect("claim");
    store
        .journal_append(&c.lease, &entry(0, b"kept"), BOUND)
        .await
        .expect("append");
    store
        .transition(Authority::Worker(&c.lease), ev(completed("done")), None)
        .await
        .expect("complete");
    assert!(matches!(
        store
            .journal_append(&c.lease, &entry(1, b"late"), BOUND)
            .await,
        Err(StoreError::Terminal { .. })
    ));
    clock.advance(60_000);
    assert_eq!(ids(store.reap(100).await.expect("reap")), vec![id]);
    assert_eq!(store.inspect(&id).await.expect("inspect"), None);
    assert_eq!(
        store.journal(&c.lease).await,
        Err(StoreError::NotFound),
        "the journal went with its task"
    );
}
