//! Contract group `event_idempotency`: a repeated event id returns its first commit; reuse for another event is refused.

#[allow(unused_imports)]
use super::*;

/// A repeated event id returns its first commit; reuse for another event is refused.
pub async fn event_idempotency(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let (_, lease) = claimed(&*store, "acme").await;

    let first = commit_as_worker(&*store, &lease, ev_id("start-1", EventKind::Started)).await;
    clock.advance(100);
    let again = commit_as_worker(&*store, &lease, ev_id("start-1", EventKind::Started)).await;
    assert!(again.replayed);
    assert_eq!(again.revision, first.revision);
    assert_eq!(again.task.attempt, 1, "a replay applies nothing");
    assert_eq!(again.task.last_updated_at, first.task.last_updated_at);

    // Same id, different content: refused.
    let err = store
        .transition(
            Authority::Worker(&lease),
            ev_id(
                "start-1",
                EventKind::StatusMessage {
                    message: "x".into(),
                },
            ),
            None,
        )
        .await
        .err();
    assert_eq!(
        err,
        Some(StoreError::EventIdReused {
            id: "start-1".into()
        })
    );

    // The replay answer survives the claim's end: a worker whose completion was committed
    // but whose reply was lost can ask again and learn it committed.
    let done = commit_as_worker(&*store, &lease, ev_id("done-1", completed("ok"))).await;
    let replay = commit_as_worker(&*store, &lease, ev_id("done-1", completed("ok"))).await;
    assert!(replay.replayed);
    assert_eq!(replay.revision, done.revision);
    // A replay even ignores a stale expected revision: it reports, it does not apply.
    let replay = store
        .transition(
            Authority::Worker(&lease),
            ev_id("done-1", completed("ok")),
            Some(0),
        )
        .await
        .expect("replay with stale revision");
    assert_eq!(replay.revision, done.revision);

    // Request events replay too.
    let id = create(&*store, "acme").await;
    let access = access(&*store, "acme", Action::Cancel, &id).await;
    let cancel_1 = || ev_id("cancel-1", cancelled());
    let by = Authority::Request(&access);
    let a = store
        .transition(by, cancel_1(), None)
        .await
        .expect("cancel");
    let b2 = store
        .transition(by, cancel_1(), None)
        .await
        .expect("cancel replay");
    assert!(b2.replayed);
    assert_eq!(a.revision, b2.revision);

    // Another generation reusing an id that an earlier generation committed is refused.
    let id = create(&*store, "acme").await;
    let l1 = store.claim(&id, &cr()).await.expect("claim").lease;
    commit_as_worker(&*store, &l1, ev_id("s", EventKind::Started)).await;
    store.release(&l1).await.expect("release");
    let l2 = store.claim(&id, &cr()).await.expect("reclaim").lease;
    let err = store
        .transition(Authority::Worker(&l2), ev_id("s", EventKind::Started), None)
        .await
        .err();
    assert_eq!(err, Some(StoreError::EventIdReused { id: "s".into() }));
}
