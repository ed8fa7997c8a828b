//! Contract group `renewal_and_expiry`: renewal extends a live lease on the store's clock; expiry ends it.

#[allow(unused_imports)]
use super::*;

/// Renewal extends a live lease on the store's clock; expiry ends it.
pub async fn renewal_and_expiry(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let id = create(&*store, "acme").await;
    let claimed = store.claim(&id, &cr()).await.expect("claim");

    clock.advance(LEASE - 1);
    let renewed = store.renew(&claimed.lease, LEASE).await.expect("renew");
    assert_eq!(renewed.expires_at(), Timestamp(T0 + LEASE - 1 + LEASE));
    assert_eq!(renewed.generation(), claimed.lease.generation());
    // Past the original expiry, the renewed lease holds.
    clock.advance(LEASE - 1);
    assert!(nothing_due(&*store).await);
    let (task, work) = store.worker_snapshot(&renewed).await.expect("snapshot");
    assert_eq!(task.id, id);
    assert_eq!(work, claimed.work);
    // The old copy of the lease still names the same claim.
    store
        .renew(&claimed.lease, 1_000)
        .await
        .expect("same claim");

    // Once expired, renewal is refused.
    clock.advance(1_000);
    assert_eq!(
        store.renew(&renewed, LEASE).await.err(),
        Some(StoreError::LeaseLost)
    );
    assert_eq!(
        store.worker_snapshot(&renewed).await.err(),
        Some(StoreError::LeaseLost)
    );
    assert!(matches!(
        store.renew(&renewed, 0).await,
        Err(StoreError::Invalid(_))
    ));
}
