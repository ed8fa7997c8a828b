//! Contract group `outbox`: an event is written in the commit of each transition a task's
//! subscriptions hear, and only then; events are numbered in commit order and read after a
//! cursor; the sweep removes only what it is told it may; subscriptions' rows change only
//! by a compare-and-set on their revision.

#[allow(unused_imports)]
use super::*;

use crate::model::{HookEvent, MAX_WEBHOOKS, Notify, ScheduleOrigin, Tried, Webhook, WebhookSpec};

fn heard(tenant: &str, to: &[&str], events: &[HookEvent]) -> NewTask {
    let mut new = new_task(tenant);
    new.notify = to
        .iter()
        .map(|n| Notify {
            to: (*n).to_owned(),
            events: events.to_vec(),
        })
        .collect();
    new
}

fn spec(name: &str) -> WebhookSpec {
    WebhookSpec {
        name: name.into(),
        tenant: "acme".into(),
        url: "https://hooks.example.com/in".into(),
        events: vec![],
        tools: vec![],
        on_request: false,
    }
}

fn row(name: &str, cursor: u64) -> Webhook {
    Webhook::new(
        spec(name),
        ScheduleOrigin::Api,
        format!("whsec_{}", "A".repeat(32)),
        RetryPolicy::new([1_000u64]).expect("policy"),
        cursor,
        Timestamp(T0),
    )
}

/// Events are written with the transitions they report, numbered in commit order, read
/// after a cursor and swept as told; rows swap by revision.
pub async fn outbox(b: &mut dyn Backend) {
    let clock = clock();
    let mut store = b.open(&clock).await;
    assert_eq!(store.last_event().await.expect("last"), 0, "a new store");
    let (done, cancelled) = transitions_write_their_events(&*store, &clock).await;
    if b.durable() {
        drop(store);
        store = b.open(&clock).await;
        let kept = store.events_after(0, 10).await.expect("read");
        assert_eq!(
            kept.iter().map(|e| e.task_id.clone()).collect::<Vec<_>>(),
            [done.to_string(), cancelled.to_string()],
            "events survive a reopen"
        );
    }
    sweeping(&*store, &clock).await;
    rows_swap_by_revision(&*store).await;
}

/// A task that names subscriptions makes one event per transition they hear, in the same
/// commit; one that names none makes none. The two tasks: completed, then cancelled.
async fn transitions_write_their_events(
    store: &dyn Store,
    clock: &ManualClock,
) -> (TaskId, TaskId) {
    // Not heard: no event.
    let (quiet, lease) = claimed(store, "acme").await;
    as_worker(store, &lease, completed("quiet")).await;
    assert!(
        store.events_after(0, 10).await.expect("read").is_empty(),
        "{quiet} names none"
    );

    // Heard only when it fails: its completion makes none.
    let picky = store
        .create(heard("acme", &["ops"], &[HookEvent::Failed]))
        .await
        .expect("create")
        .id;
    let lease = store.claim(&picky, &cr()).await.expect("claim").lease;
    as_worker(store, &lease, completed("picky")).await;
    assert!(store.events_after(0, 10).await.expect("read").is_empty());

    clock.advance(5);
    let done = store
        .create(heard("acme", &["ops", "audit"], &[]))
        .await
        .expect("create")
        .id;
    let lease = store.claim(&done, &cr()).await.expect("claim").lease;
    let committed = as_worker(store, &lease, completed("ok")).await;
    let events = store.events_after(0, 10).await.expect("read");
    let [first] = events.as_slice() else {
        panic!("one event for the completion: {events:?}");
    };
    assert_eq!(first.seq, 1);
    assert_eq!(first.event, HookEvent::Completed);
    assert_eq!(first.task_id, done.to_string());
    assert_eq!(
        (first.tenant.as_str(), first.tool.as_str()),
        ("acme", "export")
    );
    assert_eq!(first.to, ["ops", "audit"]);
    assert_eq!(
        first.at, committed.task.last_updated_at,
        "the transition's commit time"
    );
    assert!(
        first.id.starts_with("evt_") && first.id.len() > 20,
        "{}",
        first.id
    );

    let cancelled = store
        .create(heard(
            "acme",
            &["ops"],
            &[HookEvent::Cancelled, HookEvent::Completed],
        ))
        .await
        .expect("create")
        .id;
    cancel(store, "acme", &cancelled).await.expect("cancel");
    let events = store.events_after(0, 10).await.expect("read");
    assert_eq!(events.len(), 2);
    assert_eq!((events[1].seq, events[1].event), (2, HookEvent::Cancelled));
    assert_ne!(events[0].id, events[1].id, "every event its own id");
    assert_eq!(store.last_event().await.expect("last"), 2);
    assert_eq!(
        store.events_after(1, 10).await.expect("read"),
        events[1..],
        "after a cursor"
    );
    assert_eq!(store.events_after(0, 1).await.expect("read"), events[..1]);
    assert!(store.events_after(2, 10).await.expect("read").is_empty());
    (done, cancelled)
}

/// The sweep removes events numbered below `below` and older than `before`, no others, and
/// the numbers go on from where they were.
async fn sweeping(store: &dyn Store, clock: &ManualClock) {
    let before = store.events_after(0, 10).await.expect("read");
    assert_eq!(before.len(), 2);
    let newest = before[1].at;
    assert_eq!(
        store
            .sweep_events(2, Timestamp(newest.as_millis() + 1), 10)
            .await
            .expect("sweep"),
        1,
        "only the first is below 2"
    );
    assert_eq!(
        store
            .sweep_events(10, before[0].at, 10)
            .await
            .expect("sweep"),
        0,
        "none older than the first's own time"
    );
    assert_eq!(store.events_after(0, 10).await.expect("read"), before[1..]);
    clock.advance(1);
    let id = store
        .create(heard("acme", &["ops"], &[]))
        .await
        .expect("create")
        .id;
    cancel(store, "acme", &id).await.expect("cancel");
    let last = store.events_after(2, 10).await.expect("read");
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].seq, 3, "numbers go on after a sweep");
}

/// Rows are made, changed, settled and removed by revision.
async fn rows_swap_by_revision(store: &dyn Store) {
    let new = row("ops", 0);
    store
        .swap_webhook("ops", None, Some(&new))
        .await
        .expect("make");
    assert_eq!(store.webhook("ops").await.expect("read"), Some(new.clone()));
    assert!(matches!(
        store.swap_webhook("ops", None, Some(&new)).await,
        Err(StoreError::WebhookConflict {
            current: Some(0),
            ..
        })
    ));
    let mut next = new.next();
    let events = store.events_after(0, 10).await.expect("read");
    next.settle(
        &[(events[0].clone(), Tried::Failed("503".into()))],
        3,
        Timestamp(T0),
    );
    store
        .swap_webhook("ops", Some(0), Some(&next))
        .await
        .expect("settle");
    let read = store.webhook("ops").await.expect("read").expect("row");
    assert_eq!((read.cursor, read.retrying.len(), read.revision), (3, 1, 1));
    assert!(matches!(
        store.swap_webhook("ops", Some(0), Some(&next.next())).await,
        Err(StoreError::Invalid(_))
            | Err(StoreError::WebhookConflict {
                current: Some(1),
                ..
            })
    ));
    let mut renamed = next.next();
    renamed.spec.name = "other".into();
    assert!(matches!(
        store.swap_webhook("ops", Some(1), Some(&renamed)).await,
        Err(StoreError::Invalid(_))
    ));
    store
        .swap_webhook("ops", Some(1), None)
        .await
        .expect("remove");
    assert_eq!(store.webhook("ops").await.expect("read"), None);
    assert!(matches!(
        store.swap_webhook("ops", Some(1), None).await,
        Err(StoreError::WebhookConflict { current: None, .. })
    ));
    for i in 0..MAX_WEBHOOKS {
        let name = format!("w{i}");
        store
            .swap_webhook(&name, None, Some(&row(&name, 0)))
            .await
            .expect("make");
    }
    assert_eq!(store.webhooks().await.expect("list").len(), MAX_WEBHOOKS);
    assert!(matches!(
        store
            .swap_webhook("one-more", None, Some(&row("one-more", 0)))
            .await,
        Err(StoreError::Invalid(_))
    ));
}
