//! Contract group `reaping`: reaping removes whole aggregates at createdAt + ttlMs, active ones included.

#[allow(unused_imports)]
use super::*;

/// Reaping removes whole aggregates at createdAt + ttlMs, active ones included.
pub async fn reaping(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let forever = create(&*store, "acme").await;
    let mut n = new_task("acme");
    n.ttl_ms = Some(1_000);
    let short = store.create(n).await.expect("create").id;
    let mut n = new_task("acme");
    n.ttl_ms = Some(2_000);
    let active = store.create(n).await.expect("create").id;
    let lease = store.claim(&active, &cr()).await.expect("claim").lease;

    clock.advance(999);
    assert_eq!(store.reap(100).await.expect("reap"), vec![]);
    clock.advance(1);
    assert_eq!(ids(store.reap(100).await.expect("reap")), vec![short]);
    assert_eq!(store.inspect(&short).await.expect("inspect"), None);
    assert_eq!(store.reap(100).await.expect("reap"), vec![]);

    // The active one goes at its own TTL even while claimed; its worker is cut off.
    clock.advance(1_000);
    assert_eq!(
        store.renew(&lease, LEASE).await.err(),
        Some(StoreError::NotFound),
        "past TTL the task is gone for its worker too, before the reap"
    );
    let reaped = store.reap(100).await.expect("reap");
    assert_eq!(ids(reaped.clone()), vec![active]);
    assert_eq!(reaped[0].status, TaskStatus::Working, "reported as cut off");
    assert_eq!(store.inspect(&active).await.expect("inspect"), None);

    // No TTL: never reaped.
    clock.advance(10 * 365 * 24 * 3_600_000);
    assert_eq!(store.reap(100).await.expect("reap"), vec![]);
    assert_eq!(read(&*store, "acme", &forever).await.id, forever);

    // The limit bounds one call.
    for _ in 0..5 {
        let mut n = new_task("acme");
        n.ttl_ms = Some(10);
        store.create(n).await.expect("create");
    }
    clock.advance(10);
    assert_eq!(store.reap(3).await.expect("reap").len(), 3);
    assert_eq!(store.reap(3).await.expect("reap").len(), 2);

    // An expired task never reaches a runner even before the reaper runs. Whoever removes
    // it reports it as the reaper would, unfinished: cut-off work is counted wherever it
    // goes (an adapter may remove it in the claim that passes it or in the next one).
    let mut n = new_task("acme");
    n.ttl_ms = Some(10);
    let doomed = store.create(n).await.expect("create").id;
    clock.advance(10);
    let first = store.claim_next(&cr()).await.expect("claim_next");
    let claimed = first.claimed.expect("forever is due");
    assert_eq!(claimed.task.id, forever, "the expired task is skipped");
    let then = store.claim_next(&cr()).await.expect("claim_next");
    assert!(then.claimed.is_none());
    let removed: Vec<_> = first.reaped.into_iter().chain(then.reaped).collect();
    assert_eq!(
        removed,
        vec![crate::store::Reaped {
            id: doomed,
            status: TaskStatus::Working
        }],
        "the removal is reported, as cut off"
    );
    assert_eq!(store.inspect(&doomed).await.expect("inspect"), None);
    assert_eq!(store.reap(100).await.expect("reap"), vec![], "removed once");
}
