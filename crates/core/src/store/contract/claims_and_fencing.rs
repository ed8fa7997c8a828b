//! Contract group `claims_and_fencing`: claims: exact and next, generations grow, stale generations are fenced.

#[allow(unused_imports)]
use super::*;

use crate::store::{Claimed, Lease};

/// Claims: exact and next, generations grow, stale generations are fenced.
pub async fn claims_and_fencing(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let s = &*store;
    assert!(nothing_due(s).await, "an empty store");
    let (first, second, c1) = an_exact_claim_holds_its_task(s, &clock).await;
    next_claims_skip_live_ones_and_released_leases_die(s, &clock, second).await;
    an_expired_lease_is_recovered_and_its_holder_fenced(s, &clock, first, &c1.lease).await;
    claims_have_bounds(s).await;
    a_claim_may_start_the_attempt(s).await;
    a_task_may_be_created_claimed(s).await;
}

/// An exact claim takes generation 1 and holds its task against other claims. Returns the
/// two tasks created and the first one's claim.
async fn an_exact_claim_holds_its_task(
    s: &dyn Store,
    clock: &ManualClock,
) -> (TaskId, TaskId, Claimed) {
    let first = create(s, "acme").await;
    clock.advance(1);
    let second = create(s, "acme").await;

    let c1 = s.claim(&first, &cr()).await.expect("claim exact");
    assert_eq!(c1.lease.generation(), 1);
    assert_eq!(c1.lease.task_id(), &first);
    assert_eq!(c1.lease.expires_at(), Timestamp(T0 + 1 + LEASE));
    assert_eq!(
        c1.task.claim.as_ref().map(|c| c.owner.as_str()),
        Some("contract")
    );
    assert_eq!(c1.work.kind, "snodo/tool-call");
    assert_eq!(
        s.claim(&first, &cr()).await.err(),
        Some(StoreError::Busy {
            until: c1.lease.expires_at()
        })
    );
    assert_eq!(
        s.claim(&TaskId::generate(), &cr()).await.err(),
        Some(StoreError::NotFound)
    );

    (first, second, c1)
}

/// `claim_next` skips the live claim and takes the other task; release makes it due at
/// once, with a higher generation next time, and the released lease is dead.
async fn next_claims_skip_live_ones_and_released_leases_die(
    s: &dyn Store,
    clock: &ManualClock,
    second: TaskId,
) {
    let c2 = next_due(s, "second due").await;
    assert_eq!(c2.task.id, second);
    assert!(nothing_due(s).await);

    // Release makes it due at once, with a higher generation next time.
    s.release(&c2.lease).await.expect("release");
    clock.advance(1);
    let c2b = next_due(s, "released is due").await;
    assert_eq!(c2b.task.id, second);
    assert_eq!(c2b.lease.generation(), 2);
    // The released lease is dead.
    for res in [
        s.transition(Authority::Worker(&c2.lease), ev(completed("stale")), None)
            .await
            .map(|_| ()),
        s.renew(&c2.lease, LEASE).await.map(|_| ()),
        s.release(&c2.lease).await,
        s.worker_snapshot(&c2.lease).await.map(|_| ()),
    ] {
        assert_eq!(res.err(), Some(StoreError::LeaseLost));
    }
}

/// An expired lease is recoverable work; the old holder is fenced, the new one commits,
/// and a forged lease is refused.
async fn an_expired_lease_is_recovered_and_its_holder_fenced(
    s: &dyn Store,
    clock: &ManualClock,
    first: TaskId,
    old: &Lease,
) {
    clock.advance(LEASE);
    let c1b = next_due(s, "expired is due").await;
    assert_eq!(c1b.task.id, first, "the longest-due task first");
    assert!(c1b.lease.generation() > old.generation());
    let err = refusal(s, Authority::Worker(old), completed("stale")).await;
    assert_eq!(err, Some(StoreError::LeaseLost));
    let err = ask(s, old, "k", elicit("?")).await.err();
    assert_eq!(err, Some(StoreError::LeaseLost));
    // The new holder commits.
    as_worker(s, &c1b.lease, completed("fresh")).await;
    // A forged lease (right generation, wrong secret) is refused.
    let c = next_due(s, "second again").await;
    let mut forged = c.lease.clone();
    forged.token ^= 1;
    assert_eq!(
        refusal(s, Authority::Worker(&forged), completed("forged")).await,
        Some(StoreError::LeaseLost)
    );
}

/// Claims have bounds.
async fn claims_have_bounds(s: &dyn Store) {
    assert!(matches!(
        s.claim_next(&ClaimRequest::new(0, "x")).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        s.claim_next(&ClaimRequest::new(crate::store::MAX_LEASE_MS + 1, "x"))
            .await,
        Err(StoreError::Invalid(_))
    ));
}

/// A claim may start the attempt in its own commit; the runner's own `started` commit with
/// the same id is then a replay.
async fn a_claim_may_start_the_attempt(s: &dyn Store) {
    let id = create(s, "acme").await;
    let mut req = cr();
    req.start = true;
    let c = s.claim(&id, &req).await.expect("claim and start");
    assert!(c.started);
    assert_eq!((c.task.attempt, c.task.revision), (1, 1));
    assert_eq!(c.task.status, TaskStatus::Working);
    let again = s
        .transition(
            Authority::Worker(&c.lease),
            TaskEvent::new(
                EventId::for_claim(c.lease.generation(), "started"),
                EventKind::Started,
            ),
            None,
        )
        .await
        .expect("replay");
    assert!(again.replayed);
    assert_eq!((again.task.attempt, again.revision), (1, 1));
    let plain = s
        .claim(&create(s, "acme").await, &cr())
        .await
        .expect("claim");
    assert!(!plain.started);
    assert_eq!(plain.task.attempt, 0);
}

/// A task may be created already claimed (and started), in one commit, or refused whole.
async fn a_task_may_be_created_claimed(s: &dyn Store) {
    let mut req = cr();
    req.start = true;
    let new = new_task("acme");
    let id = new.id;
    let c = s
        .create_claimed(new.clone(), &req)
        .await
        .expect("create claimed");
    assert_eq!(c.task.id, id);
    assert_eq!(c.lease.generation(), 1);
    assert!(c.started);
    assert_eq!((c.task.attempt, c.task.revision), (1, 1));
    assert_eq!(c.task.created_at, c.task.last_updated_at);
    assert_eq!(c.work.kind, "snodo/tool-call");
    assert_eq!(
        s.claim(&id, &cr()).await.err(),
        Some(StoreError::Busy {
            until: c.lease.expires_at()
        })
    );
    let stored = read(s, "acme", &id).await;
    assert_eq!(stored.claim.map(|c| c.generation), Some(1));
    assert_eq!(stored.status, TaskStatus::Working);
    // Refused whole: a taken id, a bad claim request, a full scope.
    assert_eq!(
        s.create_claimed(new, &req).await.err(),
        Some(StoreError::AlreadyExists)
    );
    let bad = new_task("acme");
    let bad_id = bad.id;
    assert!(matches!(
        s.create_claimed(bad, &ClaimRequest::new(0, "x")).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(s.inspect(&bad_id).await.expect("inspect").is_none());
    let mut first = new_task("capped");
    first.max_live_in_scope = Some(1);
    s.create_claimed(first, &req).await.expect("under the cap");
    let mut over = new_task("capped");
    over.max_live_in_scope = Some(1);
    let over_id = over.id;
    assert_eq!(
        s.create_claimed(over, &req).await.err(),
        Some(StoreError::LiveLimit { max: 1 })
    );
    assert!(s.inspect(&over_id).await.expect("inspect").is_none());
    // The lease commits like any other.
    let done = as_worker(s, &c.lease, completed("done")).await;
    assert_eq!(done.task.status, TaskStatus::Completed);
}
