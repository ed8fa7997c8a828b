//! Contract group `archiving`: what an archive reads before a reap (tasks past their TTL,
//! with their work and journal, unchanged by the reading) and the reap of exactly the ones
//! it kept.

#[allow(unused_imports)]
use super::*;

use super::journal::entry;

/// `expired` reads without removing; `task_journal` reads past the TTL; `reap_ids`
/// removes only the named tasks still stored past their TTL.
pub async fn archiving(b: &mut dyn Backend) {
    let clock = clock();
    let store = b.open(&clock).await;
    let mut n = new_task("acme");
    n.ttl_ms = Some(1_000);
    let done = store.create(n).await.expect("create").id;
    let lease = store.claim(&done, &cr()).await.expect("claim").lease;
    store
        .journal_append(&lease, &entry(0, b"answered"), 1 << 20)
        .await
        .expect("append");
    as_worker(&*store, &lease, completed("exported")).await;
    let mut n = new_task("beta");
    n.ttl_ms = Some(2_000);
    let active = store.create(n).await.expect("create").id;
    let mut n = new_task("acme");
    n.ttl_ms = Some(60_000);
    let live = store.create(n).await.expect("create").id;
    let forever = create(&*store, "acme").await;

    assert_eq!(store.expired(100).await.expect("expired"), vec![]);
    clock.advance(2_000);
    let expired = store.expired(100).await.expect("expired");
    let seen: Vec<TaskId> = expired.iter().map(|(t, _)| t.id).collect();
    assert_eq!(seen, vec![done, active], "the oldest expiry first");
    let (task, work) = &expired[0];
    assert_eq!(task.status, TaskStatus::Completed);
    assert!(task.outcome.is_some(), "the outcome comes with the task");
    assert_eq!(work.input["tool"], "export", "and its work");
    assert_eq!(expired[1].0.status, TaskStatus::Working);
    assert_eq!(
        store.expired(1).await.expect("expired").len(),
        1,
        "the limit bounds one read"
    );
    assert_eq!(
        store.expired(100).await.expect("expired").len(),
        2,
        "reading removes nothing"
    );
    assert_eq!(
        store.task_journal(&done).await.expect("journal"),
        vec![entry(0, b"answered")],
        "the journal is read past the TTL"
    );
    assert_eq!(store.task_journal(&live).await.expect("journal"), vec![]);
    assert_eq!(
        store
            .task_journal(&TaskId::generate())
            .await
            .expect("journal"),
        vec![]
    );

    // Only the named tasks still past their TTL go: a live one named by mistake and an
    // unknown id are left alone.
    let unknown = TaskId::generate();
    let reaped = store
        .reap_ids(&[active, live, unknown, done, done])
        .await
        .expect("reap_ids");
    let mut statuses: Vec<(TaskId, TaskStatus)> = reaped.iter().map(|r| (r.id, r.status)).collect();
    statuses.sort_by_key(|(id, _)| *id);
    let mut want = vec![(done, TaskStatus::Completed), (active, TaskStatus::Working)];
    want.sort_by_key(|(id, _)| *id);
    assert_eq!(statuses, want, "each reported once, with its status");
    assert_eq!(store.inspect(&done).await.expect("inspect"), None);
    assert_eq!(store.task_journal(&done).await.expect("journal"), vec![]);
    assert!(store.inspect(&live).await.expect("inspect").is_some());
    assert!(store.inspect(&forever).await.expect("inspect").is_some());
    assert_eq!(store.expired(100).await.expect("expired"), vec![]);
    assert_eq!(
        store.reap_ids(&[done, active]).await.expect("reap_ids"),
        vec![],
        "removed once"
    );
    assert_eq!(store.reap_ids(&[]).await.expect("reap_ids"), vec![]);
    let many: Vec<TaskId> = (0..=crate::store::MAX_REAP_IDS)
        .map(|_| TaskId::generate())
        .collect();
    assert!(matches!(
        store.reap_ids(&many).await,
        Err(StoreError::Invalid(_))
    ));
}
