//! Contract group `revocations`: a revoked key stays revoked, for every handle on the store and across a reopen, until its time has passed and later revocations clear it.

#[allow(unused_imports)]
use super::*;

/// A revoked key stays revoked, for every handle on the store and across a reopen, until
/// its time has passed and later revocations clear it.
pub async fn revocations(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let now = Timestamp(T0);
    assert!(!store.revoked("session-a").await.expect("read"));
    store
        .revoke("session-a", Timestamp(T0 + 10_000))
        .await
        .expect("revoke");
    assert!(store.revoked("session-a").await.expect("read"));
    assert!(!store.revoked("session-b").await.expect("read"));
    // Revoking again is harmless, and an earlier time does not shorten it.
    store
        .revoke("session-a", Timestamp(T0 + 1))
        .await
        .expect("again");
    // Keys are bounded; an empty one is refused.
    assert!(matches!(
        store.revoke("", Timestamp(T0 + 1)).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.revoke(&"k".repeat(513), Timestamp(T0 + 1)).await,
        Err(StoreError::Invalid(_))
    ));
    // Something already past needs no remembering.
    store.revoke("lapsed", now).await.expect("revoke");
    assert!(!store.revoked("lapsed").await.expect("read"));

    let store = if b.durable() {
        drop(store);
        b.open(&clock).await
    } else {
        store
    };
    assert!(
        store.revoked("session-a").await.expect("read"),
        "a revocation survives a reopen"
    );

    // Past its time (and the earlier time did not shorten it), later revocations sweep it.
    clock.advance(9_999);
    store
        .revoke("session-c", Timestamp(T0 + 100_000))
        .await
        .expect("revoke");
    assert!(store.revoked("session-a").await.expect("read"), "not yet");
    clock.advance(1);
    for i in 0..3 {
        store
            .revoke(&format!("later-{i}"), Timestamp(T0 + 100_000))
            .await
            .expect("revoke");
    }
    assert!(
        !store.revoked("session-a").await.expect("read"),
        "swept by later revocations once its time passed"
    );
    assert!(store.revoked("session-c").await.expect("read"));
    // Many lapsed ones do not pile up: each new revocation clears more than one.
    for i in 0..20 {
        store
            .revoke(&format!("short-{i}"), Timestamp(T0 + 10_001 + i))
            .await
            .expect("revoke");
    }
    clock.advance(100);
    for i in 0..10 {
        store
            .revoke(&format!("after-{i}"), Timestamp(T0 + 200_000))
            .await
            .expect("revoke");
    }
    for i in 0..20 {
        assert!(
            !store.revoked(&format!("short-{i}")).await.expect("read"),
            "short-{i} was swept"
        );
    }
}
