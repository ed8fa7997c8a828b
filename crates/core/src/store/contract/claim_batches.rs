//! Contract group `claim_batches`: one `claim_next` claims up to its batch of due tasks in
//! one commit, in due order, each exactly as a claim of its own would be.

#[allow(unused_imports)]
use super::*;

use crate::store::MAX_CLAIM_BATCH;

/// One `claim_next` claims up to its batch of due tasks in one commit, in due order, each
/// exactly as a claim of its own would be.
pub async fn claim_batches(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let mut ids = Vec::new();
    for tenant in ["acme", "globex", "acme", "acme", "globex"] {
        ids.push(create(&*store, tenant).await);
        clock.advance(1);
    }
    for bad in [0, MAX_CLAIM_BATCH + 1] {
        let mut req = cr();
        req.batch = bad;
        assert!(
            matches!(store.claim_next(&req).await, Err(StoreError::Invalid(_))),
            "a batch of {bad}"
        );
    }

    // Three, the oldest first, passing over a skipped scope.
    let mut req = cr();
    req.batch = 3;
    req.skip_scopes = vec![Scope::new("globex")];
    let next = store.claim_next(&req).await.expect("claim_next");
    assert_eq!(
        claimed(&next),
        [ids[0], ids[2], ids[3]],
        "acme's three, in due order"
    );
    for c in next.claimed.iter().chain(&next.more) {
        assert_eq!(c.task.generation, 1);
        assert_eq!(c.lease.generation(), 1);
        store
            .renew(&c.lease, LEASE)
            .await
            .expect("each lease is live");
    }

    // What is left, however large the batch; then nothing.
    let mut req = cr();
    req.batch = MAX_CLAIM_BATCH;
    let next = store.claim_next(&req).await.expect("claim_next");
    assert_eq!(claimed(&next), [ids[1], ids[4]]);
    let next = store.claim_next(&req).await.expect("claim_next");
    assert!(next.claimed.is_none() && next.more.is_empty());
}

/// The tasks `next` claimed, in its order.
fn claimed(next: &crate::store::NextClaim) -> Vec<TaskId> {
    next.claimed
        .iter()
        .chain(&next.more)
        .map(|c| c.task.id)
        .collect()
}
