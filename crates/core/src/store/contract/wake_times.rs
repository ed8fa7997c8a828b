//! Contract group `wake_times`: a sleep gives the claim up until its wake time, which every
//! claim path honours to the millisecond, across a reopen, and which a cancel ends at once.

#[allow(unused_imports)]
use super::*;

/// A sleep gives the claim up until its wake time, which every claim path honours to the
/// millisecond, across a reopen, and which a cancel ends at once.
pub async fn wake_times(b: &mut dyn Backend) {
    let clock = clock();
    let mut store = b.open(&clock).await;
    let (id, lease) = claimed(&*store, "acme").await;
    clock.advance(5);
    let until = Timestamp(T0 + 5 + 60_000);
    let c = as_worker(&*store, &lease, EventKind::Sleeping { until }).await;
    assert_eq!(c.task.status, TaskStatus::Working);
    assert_eq!(c.task.wake_at, Some(until));
    assert!(
        c.task.claim.is_none(),
        "the sleep gives the claim up in its commit"
    );
    assert_eq!(c.task.due_at(), Some(until));
    assert_eq!(
        c.task.status_message.as_deref(),
        Some("sleeping until 2023-11-14T22:14:20.005Z")
    );
    assert_eq!(
        store.renew(&lease, LEASE).await.err(),
        Some(StoreError::LeaseLost),
        "the sleeping attempt's lease is over"
    );

    // Not before its time, by either claim path, and the empty claim says how long to wait.
    clock.advance(59_999);
    assert_eq!(
        store.claim(&id, &cr()).await.err(),
        Some(StoreError::NotDue { retry_at: until })
    );
    let next = store.claim_next(&cr()).await.expect("claim_next");
    assert!(next.claimed.is_none(), "1 ms early is early");
    assert_eq!(next.next_due_in_ms, Some(1));

    if b.durable() {
        drop(store);
        store = b.open(&clock).await;
        assert!(nothing_due(&*store).await, "still asleep after a reopen");
    }
    clock.advance(1);
    let woke = next_due(&*store, "its wake time came").await;
    assert_eq!(woke.task.id, id);
    assert_eq!(woke.task.wake_at, None, "the claim is the wake");
    assert!(woke.task.history.entries.iter().any(|e| matches!(
        e.kind,
        crate::model::HistoryKind::Sleeping { until: u } if u == until
    )));

    // Cancel needs no wake: the sleeping task ends at once, and is never due again.
    let c = as_worker(
        &*store,
        &woke.lease,
        EventKind::Sleeping {
            until: Timestamp(T0 + 3_600_000),
        },
    )
    .await;
    assert_eq!(c.task.wake_at, Some(Timestamp(T0 + 3_600_000)));
    cancel(&*store, "acme", &id).await.expect("cancel");
    let t = read(&*store, "acme", &id).await;
    assert_eq!(
        (t.status, t.wake_at, t.due_at()),
        (TaskStatus::Cancelled, None, None)
    );
    clock.advance(3_600_000);
    assert!(nothing_due(&*store).await);

    // Nothing sleeps: an empty claim has nothing to wait for.
    let next = store.claim_next(&cr()).await.expect("claim_next");
    assert_eq!((next.claimed.is_none(), next.next_due_in_ms), (true, None));
}
