//! Contract group `durability_across_reopen`: what a durable store acknowledged is there after a reopen; old claims are fenced.

#[allow(unused_imports)]
use super::*;

/// What a durable store acknowledged is there after a reopen; old claims are fenced.
pub async fn durability_across_reopen(b: &mut dyn Backend) {
    if !b.durable() {
        eprintln!("durability_across_reopen: skipped, this backend is volatile by design");
        return;
    }
    let clock = clock();
    let store = b.open(&clock).await;
    let done = create(&*store, "acme").await;
    let done_lease = store.claim(&done, &cr()).await.expect("claim").lease;
    commit_as_worker(&*store, &done_lease, ev_id("fin", completed("persisted"))).await;
    let parked = create(&*store, "acme").await;
    let l = store.claim(&parked, &cr()).await.expect("claim").lease;
    ask(&*store, &l, "q", elicit("?")).await.expect("request");
    let running = create(&*store, "acme").await;
    let old = store.claim(&running, &cr()).await.expect("claim");
    let before_done = read(&*store, "acme", &done).await;
    let before_parked = read(&*store, "acme", &parked).await;
    drop(store);

    let store = b.open(&clock).await;
    assert_eq!(read(&*store, "acme", &done).await, before_done);
    let replay = store
        .transition(
            Authority::Worker(&done_lease),
            ev_id("fin", completed("persisted")),
            None,
        )
        .await;
    assert!(replay.is_ok(), "event ids survive a reopen: {replay:?}");
    // Leases of the previous process are fenced at once, without waiting for expiry.
    let p = read(&*store, "acme", &parked).await;
    assert_eq!(p.status, TaskStatus::InputRequired);
    assert_eq!(p.claim, None);
    assert_eq!(p.inputs, before_parked.inputs);
    assert_eq!(
        store.renew(&old.lease, LEASE).await.err(),
        Some(StoreError::LeaseLost)
    );
    let next = next_due(&*store, "running is due").await;
    assert_eq!(next.task.id, running);
    assert!(next.lease.generation() > old.lease.generation());
    assert!(
        nothing_due(&*store).await,
        "the parked task waits for its answer"
    );
}
