//! Contract groups `stored_caps` and `stored_bytes_caps`: a scope's stored tasks, terminal ones included, and their bytes (records and journals) are counted exactly and capped until they are removed.

#[allow(unused_imports)]
use super::*;

use super::journal::entry;
use crate::store::JournalBounds;

fn capped(tenant: &str, stored: u64) -> NewTask {
    let mut n = new_task(tenant);
    n.max_stored_in_scope = Some(stored);
    n
}

/// A scope's stored tasks, terminal ones included, are counted exactly and capped until
/// they are reaped; the count survives a reopen and holds under concurrent creations.
pub async fn stored_caps(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut n = capped("keeper", 3);
        n.ttl_ms = Some(1_000);
        ids.push(store.create(n).await.expect("under the cap").id);
    }
    let over = capped("keeper", 3);
    let over_id = over.id;
    assert_eq!(
        store.create(over).await.err(),
        Some(StoreError::StoredLimit { max: 3 })
    );
    assert!(store.inspect(&over_id).await.expect("inspect").is_none());
    // Another scope has its own count.
    store
        .create(capped("neighbour", 1))
        .await
        .expect("another scope");

    // A terminal task still counts as stored, though no longer as live.
    let lease = store.claim(&ids[0], &cr()).await.expect("claim").lease;
    as_worker(&*store, &lease, completed("done")).await;
    assert_eq!(
        store.create(capped("keeper", 3)).await.err(),
        Some(StoreError::StoredLimit { max: 3 }),
        "a completed task is still stored"
    );
    let mut live_only = new_task("keeper");
    live_only.max_live_in_scope = Some(3);
    live_only.ttl_ms = Some(5_000);
    store
        .create(live_only)
        .await
        .expect("two live tasks are under a live cap of three");
    assert_eq!(
        store.create(capped("keeper", 4)).await.err(),
        Some(StoreError::StoredLimit { max: 4 }),
        "a creation without a stored cap is counted too"
    );

    // Both caps at once: the live cap is named when it is the one reached.
    let mut both = capped("keeper", 100);
    both.max_live_in_scope = Some(3);
    assert_eq!(
        store.create(both).await.err(),
        Some(StoreError::LiveLimit { max: 3 })
    );

    // Reaping frees the places the first three held.
    clock.advance(1_000);
    assert_eq!(store.reap(100).await.expect("reap").len(), 3);
    store
        .create(capped("keeper", 4))
        .await
        .expect("three places freed by the reap");
    store
        .create(capped("keeper", 3))
        .await
        .expect("two stored, under three");
    assert_eq!(
        store.create(capped("keeper", 3)).await.err(),
        Some(StoreError::StoredLimit { max: 3 })
    );

    // An operator's delete frees a finished task's place before its TTL; an unfinished
    // task is refused (its worker must hear of the end: cancel it first).
    let kept = store
        .create(capped("pruned", 2))
        .await
        .expect("under the cap")
        .id;
    let (done, lease) = claimed(&*store, "pruned").await;
    as_worker(&*store, &lease, completed("done")).await;
    assert_eq!(
        store.create(capped("pruned", 2)).await.err(),
        Some(StoreError::StoredLimit { max: 2 })
    );
    let delete = |id| {
        let store = store.clone();
        async move {
            let a = access(&*store, "pruned", Action::Cancel, &id).await;
            store.delete_finished(&a).await
        }
    };
    assert!(matches!(delete(kept).await, Err(StoreError::Invalid(_))));
    assert_eq!(
        read(&*store, "pruned", &kept).await.status,
        TaskStatus::Working
    );
    let read_only = access(&*store, "pruned", Action::Read, &done).await;
    assert_eq!(
        store.delete_finished(&read_only).await.err(),
        wrong_action(Action::Read)
    );
    delete(done).await.expect("a finished task is deleted");
    assert_eq!(store.inspect(&done).await.expect("inspect"), None);
    assert!(
        store
            .authorize(&tenant("pruned"), Action::Cancel, &done.to_string())
            .await
            .is_err(),
        "gone for every operation"
    );
    store
        .create(capped("pruned", 2))
        .await
        .expect("the deleted task's place is free");

    if b.durable() {
        drop(store);
        let store = b.open(&clock).await;
        assert_eq!(
            store.create(capped("keeper", 3)).await.err(),
            Some(StoreError::StoredLimit { max: 3 }),
            "the count survives a reopen"
        );
        store
            .create(capped("keeper", 4))
            .await
            .expect("exactly three stored after the reopen");
        concurrent(store).await;
    } else {
        concurrent(store).await;
    }
}

/// Concurrent creations under one cap: exactly the cap's worth commit.
async fn concurrent(store: Arc<dyn Store>) {
    let tries: Vec<_> = (0..24)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.create(capped("crowd", 10)).await })
        })
        .collect();
    let mut admitted = 0;
    for t in tries {
        match t.await.expect("create task") {
            Ok(_) => admitted += 1,
            Err(StoreError::StoredLimit { max: 10 }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(admitted, 10, "exactly the cap's worth of creations commit");
}

fn bytes_capped(tenant: &str, max: u64) -> NewTask {
    let mut n = new_task(tenant);
    n.max_stored_bytes_in_scope = Some(max);
    n
}

/// A scope's stored bytes (its tasks' records and journals) are counted exactly and
/// capped: a creation or a journal entry that would pass the cap is refused and writes
/// nothing, other scopes are unaffected, and removing a task gives its bytes back.
pub async fn stored_bytes_caps(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let bounded = |task_bytes, scope_bytes| JournalBounds {
        task_bytes,
        scope_bytes: Some(scope_bytes),
    };
    // Tasks made alike measure alike: the first one's size sets the cap.
    let mut first = bytes_capped("hoarder", u64::MAX);
    first.ttl_ms = Some(1_000);
    let first = store.create(first).await.expect("no cap in reach");
    let size = first.stored_bytes;
    let small = entry(0, b"ok").encode().len() as u64;
    assert!(size > small + 10, "a record counts its JSON: {size}");
    let cap = 2 * size + small + 10;
    let (kept, lease) = {
        let t = store
            .create(bytes_capped("hoarder", cap))
            .await
            .expect("two records fit");
        assert_eq!(t.stored_bytes, size, "tasks made alike measure alike");
        let lease = store.claim(&t.id, &cr()).await.expect("claim").lease;
        (t.id, lease)
    };

    // A journal entry joins its scope's bytes; one that would pass the cap is refused and
    // not recorded.
    store
        .journal_append_bounded(&lease, &entry(0, b"ok"), bounded(1 << 20, cap))
        .await
        .expect("an entry that fits");
    assert_eq!(
        store
            .journal_append_bounded(&lease, &entry(1, b"ok"), bounded(1 << 20, cap))
            .await
            .err(),
        Some(StoreError::StoredBytesLimit { max: cap })
    );
    assert_eq!(
        store.journal(&lease).await.expect("journal"),
        vec![entry(0, b"ok")],
        "the refused entry was not recorded"
    );
    assert_eq!(
        read(&*store, "hoarder", &kept).await.stored_bytes,
        size + small
    );
    // The append's own bound is still the task's.
    assert!(matches!(
        store
            .journal_append_bounded(&lease, &entry(1, b"ok"), bounded(small, u64::MAX))
            .await,
        Err(StoreError::Invalid(_))
    ));

    // A creation that would pass the cap is refused and stores nothing.
    let over = bytes_capped("hoarder", cap);
    let over_id = over.id;
    assert_eq!(
        store.create(over).await.err(),
        Some(StoreError::StoredBytesLimit { max: cap })
    );
    assert!(store.inspect(&over_id).await.expect("inspect").is_none());
    let mut both = bytes_capped("hoarder", cap);
    both.max_stored_in_scope = Some(2);
    assert_eq!(
        store.create(both).await.err(),
        Some(StoreError::StoredLimit { max: 2 }),
        "the count is named when it is the cap reached"
    );
    // Another scope has its own bytes.
    store
        .create(bytes_capped("neighbour", cap))
        .await
        .expect("another scope");

    // What a task brings later (a result) is kept, never refused; removing the finished
    // task gives back its record and its journal.
    as_worker(&*store, &lease, completed("done")).await;
    assert!(read(&*store, "hoarder", &kept).await.stored_bytes > size + small);
    assert_eq!(
        store.create(bytes_capped("hoarder", cap)).await.err(),
        Some(StoreError::StoredBytesLimit { max: cap })
    );
    let a = access(&*store, "hoarder", Action::Cancel, &kept).await;
    store.delete_finished(&a).await.expect("a finished task");
    store
        .create(bytes_capped("hoarder", cap))
        .await
        .expect("the deleted task's bytes are free");
    assert_eq!(
        store.create(bytes_capped("hoarder", cap)).await.err(),
        Some(StoreError::StoredBytesLimit { max: cap }),
        "exactly the deleted task's bytes"
    );

    // Reaping gives them back too.
    clock.advance(1_000);
    assert_eq!(ids(store.reap(10).await.expect("reap")), vec![first.id]);
    store
        .create(bytes_capped("hoarder", cap))
        .await
        .expect("the reaped task's bytes are free");

    let store = if b.durable() {
        drop(store);
        let store = b.open(&clock).await;
        assert_eq!(
            store.create(bytes_capped("hoarder", cap)).await.err(),
            Some(StoreError::StoredBytesLimit { max: cap }),
            "the bytes survive a reopen"
        );
        store
    } else {
        store
    };

    // Concurrent creations under one cap: exactly the cap's worth commit.
    let probe = store
        .create(bytes_capped("crowd", u64::MAX))
        .await
        .expect("no cap in reach");
    let cap = 10 * probe.stored_bytes;
    let tries: Vec<_> = (0..24)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.create(bytes_capped("crowd", cap)).await })
        })
        .collect();
    let mut admitted = 0;
    for t in tries {
        match t.await.expect("create task") {
            Ok(_) => admitted += 1,
            Err(StoreError::StoredBytesLimit { max }) if max == cap => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(admitted, 9, "exactly the cap's worth of bytes commit");
}
