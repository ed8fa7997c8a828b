//! Contract groups `stored_caps` and `stored_bytes_caps`: a scope's stored tasks, terminal ones included, and their bytes (records and journals) are counted exactly and capped until they are removed.

#[allow(unused_imports)]
use super::*;

use super::journal::entry;
use crate::store::{JournalBounds, Lease};

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
    terminal_tasks_count_as_stored(&*store).await;
    reaping_frees_the_places_they_held(&*store, &clock).await;
    an_operators_delete_frees_a_finished_tasks_place(&store).await;
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

/// Three tasks fill a cap of three, and a finished one still counts as stored (though no
/// longer as live); another scope has its own count; of two caps reached, the live one is
/// named.
async fn terminal_tasks_count_as_stored(s: &dyn Store) {
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut n = capped("keeper", 3);
        n.ttl_ms = Some(1_000);
        ids.push(s.create(n).await.expect("under the cap").id);
    }
    let over = capped("keeper", 3);
    let over_id = over.id;
    assert_eq!(
        s.create(over).await.err(),
        Some(StoreError::StoredLimit { max: 3 })
    );
    assert!(s.inspect(&over_id).await.expect("inspect").is_none());
    // Another scope has its own count.
    s.create(capped("neighbour", 1))
        .await
        .expect("another scope");

    // A terminal task still counts as stored, though no longer as live.
    let lease = s.claim(&ids[0], &cr()).await.expect("claim").lease;
    as_worker(s, &lease, completed("done")).await;
    assert_eq!(
        s.create(capped("keeper", 3)).await.err(),
        Some(StoreError::StoredLimit { max: 3 }),
        "a completed task is still stored"
    );
    let mut live_only = new_task("keeper");
    live_only.max_live_in_scope = Some(3);
    live_only.ttl_ms = Some(5_000);
    s.create(live_only)
        .await
        .expect("two live tasks are under a live cap of three");
    assert_eq!(
        s.create(capped("keeper", 4)).await.err(),
        Some(StoreError::StoredLimit { max: 4 }),
        "a creation without a stored cap is counted too"
    );

    // Both caps at once: the live cap is named when it is the one reached.
    let mut both = capped("keeper", 100);
    both.max_live_in_scope = Some(3);
    assert_eq!(
        s.create(both).await.err(),
        Some(StoreError::LiveLimit { max: 3 })
    );
}

/// Reaping frees the places the first three held.
async fn reaping_frees_the_places_they_held(s: &dyn Store, clock: &ManualClock) {
    clock.advance(1_000);
    assert_eq!(s.reap(100).await.expect("reap").len(), 3);
    s.create(capped("keeper", 4))
        .await
        .expect("three places freed by the reap");
    s.create(capped("keeper", 3))
        .await
        .expect("two stored, under three");
    assert_eq!(
        s.create(capped("keeper", 3)).await.err(),
        Some(StoreError::StoredLimit { max: 3 })
    );
}

/// An operator's delete frees a finished task's place before its TTL; an unfinished task
/// is refused (its worker must hear of the end: cancel it first).
async fn an_operators_delete_frees_a_finished_tasks_place(store: &Arc<dyn Store>) {
    let kept = store
        .create(capped("pruned", 2))
        .await
        .expect("under the cap")
        .id;
    let (done, lease) = claimed(&**store, "pruned").await;
    as_worker(&**store, &lease, completed("done")).await;
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
        read(&**store, "pruned", &kept).await.status,
        TaskStatus::Working
    );
    let read_only = access(&**store, "pruned", Action::Read, &done).await;
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
    let h = hoard(&*store).await;
    a_journal_entry_joins_its_scopes_bytes(&*store, &h).await;
    a_creation_past_the_bytes_cap_stores_nothing(&*store, h.cap).await;
    a_removed_task_gives_its_bytes_back(&*store, &clock, &h).await;
    let store = if b.durable() {
        drop(store);
        let store = b.open(&clock).await;
        assert_eq!(
            store.create(bytes_capped("hoarder", h.cap)).await.err(),
            Some(StoreError::StoredBytesLimit { max: h.cap }),
            "the bytes survive a reopen"
        );
        store
    } else {
        store
    };

    concurrent_bytes(store).await;
}

/// A scope near its bytes cap: two tasks made alike (the first expires at 1 s, the second
/// is claimed), and room left for one small journal entry.
struct Hoard {
    first: TaskId,
    kept: TaskId,
    lease: Lease,
    /// What each of the two tasks counts when created.
    size: u64,
    /// What one small journal entry counts.
    small: u64,
    cap: u64,
}

/// Journal bounds of `task_bytes` for the task and `scope_bytes` for its scope.
fn bounded(task_bytes: u64, scope_bytes: u64) -> JournalBounds {
    JournalBounds {
        task_bytes,
        scope_bytes: Some(scope_bytes),
    }
}

/// Tasks made alike measure alike: the first one's size sets the cap.
async fn hoard(s: &dyn Store) -> Hoard {
    let mut first = bytes_capped("hoarder", u64::MAX);
    first.ttl_ms = Some(1_000);
    let first = s.create(first).await.expect("no cap in reach");
    let size = first.stored_bytes;
    let small = entry(0, b"ok").encode().len() as u64;
    assert!(size > small + 10, "a record counts its JSON: {size}");
    let cap = 2 * size + small + 10;
    let (kept, lease) = {
        let t = s
            .create(bytes_capped("hoarder", cap))
            .await
            .expect("two records fit");
        assert_eq!(t.stored_bytes, size, "tasks made alike measure alike");
        let lease = s.claim(&t.id, &cr()).await.expect("claim").lease;
        (t.id, lease)
    };

    Hoard {
        first: first.id,
        kept,
        lease,
        size,
        small,
        cap,
    }
}

/// A journal entry joins its scope's bytes; one that would pass the cap is refused and not
/// recorded; the append's own bound is still the task's.
async fn a_journal_entry_joins_its_scopes_bytes(s: &dyn Store, h: &Hoard) {
    let (lease, kept) = (&h.lease, &h.kept);
    let (size, small, cap) = (h.size, h.small, h.cap);
    s.journal_append_bounded(lease, &entry(0, b"ok"), bounded(1 << 20, cap))
        .await
        .expect("an entry that fits");
    assert_eq!(
        s.journal_append_bounded(lease, &entry(1, b"ok"), bounded(1 << 20, cap))
            .await
            .err(),
        Some(StoreError::StoredBytesLimit { max: cap })
    );
    assert_eq!(
        s.journal(lease).await.expect("journal"),
        vec![entry(0, b"ok")],
        "the refused entry was not recorded"
    );
    assert_eq!(read(s, "hoarder", kept).await.stored_bytes, size + small);
    // The append's own bound is still the task's.
    assert!(matches!(
        s.journal_append_bounded(lease, &entry(1, b"ok"), bounded(small, u64::MAX))
            .await,
        Err(StoreError::Invalid(_))
    ));
}

/// A creation that would pass the cap is refused and stores nothing; another scope has its
/// own bytes.
async fn a_creation_past_the_bytes_cap_stores_nothing(s: &dyn Store, cap: u64) {
    let over = bytes_capped("hoarder", cap);
    let over_id = over.id;
    assert_eq!(
        s.create(over).await.err(),
        Some(StoreError::StoredBytesLimit { max: cap })
    );
    assert!(s.inspect(&over_id).await.expect("inspect").is_none());
    let mut both = bytes_capped("hoarder", cap);
    both.max_stored_in_scope = Some(2);
    assert_eq!(
        s.create(both).await.err(),
        Some(StoreError::StoredLimit { max: 2 }),
        "the count is named when it is the cap reached"
    );
    // Another scope has its own bytes.
    s.create(bytes_capped("neighbour", cap))
        .await
        .expect("another scope");
}

/// What a task brings later (a result) is kept, never refused; removing the finished task,
/// by an operator's delete or by the reaper, gives back its record and its journal.
async fn a_removed_task_gives_its_bytes_back(s: &dyn Store, clock: &ManualClock, h: &Hoard) {
    let (kept, cap) = (h.kept, h.cap);
    as_worker(s, &h.lease, completed("done")).await;
    assert!(read(s, "hoarder", &kept).await.stored_bytes > h.size + h.small);
    assert_eq!(
        s.create(bytes_capped("hoarder", cap)).await.err(),
        Some(StoreError::StoredBytesLimit { max: cap })
    );
    let a = access(s, "hoarder", Action::Cancel, &kept).await;
    s.delete_finished(&a).await.expect("a finished task");
    s.create(bytes_capped("hoarder", cap))
        .await
        .expect("the deleted task's bytes are free");
    assert_eq!(
        s.create(bytes_capped("hoarder", cap)).await.err(),
        Some(StoreError::StoredBytesLimit { max: cap }),
        "exactly the deleted task's bytes"
    );

    // Reaping gives them back too.
    clock.advance(1_000);
    assert_eq!(ids(s.reap(10).await.expect("reap")), vec![h.first]);
    s.create(bytes_capped("hoarder", cap))
        .await
        .expect("the reaped task's bytes are free");
}

/// Concurrent creations under one bytes cap: exactly the cap's worth commit.
async fn concurrent_bytes(store: Arc<dyn Store>) {
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
