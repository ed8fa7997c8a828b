//! Contract group `schedules`: rows change only by a compare-and-set on their revision, and a
//! firing creates its task and moves its row in one commit, or does neither.

#[allow(unused_imports)]
use super::*;

use crate::model::{
    Cadence, DEFAULT_MISSED_AFTER_MS, Firings, MAX_SCHEDULES, Missed, Schedule, ScheduleOrigin,
    ScheduleSpec, firing_id,
};
use crate::store::ScheduleMove;

fn spec(name: &str) -> ScheduleSpec {
    ScheduleSpec {
        name: name.into(),
        tool: "export".into(),
        arguments: Map::new(),
        tenant: "acme".into(),
        subject: "ops".into(),
        cadence: Cadence::Every { ms: 60_000 },
        missed: Missed::Skip,
        missed_after_ms: DEFAULT_MISSED_AFTER_MS,
        catch_up: 10,
    }
}

/// The task a firing of `s` at `at` creates, moving `s` as `after` says.
fn firing(s: &Schedule, at: Timestamp, now: Timestamp) -> NewTask {
    let id = firing_id(s.key, at);
    let after = s.fired(
        at,
        id,
        now,
        Firings {
            next_at: Some(Timestamp(at.as_millis() + 60_000)),
            skipped: 0,
            manual: false,
        },
    );
    let mut new = NewTask::new(
        id,
        Scope::new("acme"),
        Work {
            idempotency_key: id.to_string(),
            ..work()
        },
    );
    new.firing = Some(ScheduleMove {
        expected: s.revision,
        after,
    });
    new
}

/// Rows change only by a compare-and-set on their revision, and a firing creates its task
/// and moves its row in one commit, or does neither.
pub async fn schedules(b: &mut dyn Backend) {
    let clock = clock();
    let mut store = b.open(&clock).await;
    let row = rows_swap_by_revision(&*store).await;
    let (row, task) = firings_commit_with_their_row(&*store, &clock, row).await;
    if b.durable() {
        drop(store);
        store = b.open(&clock).await;
        assert_eq!(
            store.schedule("nightly").await.expect("read"),
            Some(row.clone()),
            "rows survive a reopen"
        );
        assert!(
            store.inspect(&task).await.expect("inspect").is_some(),
            "so does the firing's task"
        );
    }

    removal_and_the_bound(&*store).await;
}

/// Rows are made, changed and refused by revision; the row ready to fire.
async fn rows_swap_by_revision(store: &dyn Store) -> Schedule {
    assert!(store.schedules().await.expect("list").is_empty());
    assert_eq!(store.schedule("nightly").await.expect("read"), None);

    let s0 = Schedule::new(spec("nightly"), ScheduleOrigin::Config, Timestamp(T0));
    store
        .swap_schedule("nightly", None, Some(&s0))
        .await
        .expect("made");
    assert_eq!(
        store.swap_schedule("nightly", None, Some(&s0)).await.err(),
        Some(StoreError::ScheduleConflict {
            name: "nightly".into(),
            current: Some(0)
        }),
        "made twice"
    );
    let other = Schedule::new(spec("hourly"), ScheduleOrigin::Api, Timestamp(T0));
    store
        .swap_schedule("hourly", None, Some(&other))
        .await
        .expect("made");
    let names: Vec<String> = store
        .schedules()
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.spec.name)
        .collect();
    assert_eq!(names, ["hourly", "nightly"], "by name");

    // A change must name its row and be one revision on; a stale one is refused.
    assert!(matches!(
        store.swap_schedule("nightly", Some(0), Some(&s0)).await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.swap_schedule("other", None, Some(&s0)).await,
        Err(StoreError::Invalid(_))
    ));
    let s1 = s0.paused_at(true, Timestamp(T0 + 1));
    store
        .swap_schedule("nightly", Some(0), Some(&s1))
        .await
        .expect("paused");
    assert_eq!(
        store
            .swap_schedule("nightly", Some(0), Some(&s1))
            .await
            .err(),
        Some(StoreError::ScheduleConflict {
            name: "nightly".into(),
            current: Some(1)
        })
    );
    let s2 = s1.paused_at(false, Timestamp(T0 + 2));
    store
        .swap_schedule("nightly", Some(1), Some(&s2))
        .await
        .expect("resumed");
    s2
}

/// A firing creates its task and moves its row in one commit, or does neither; the row
/// and the task after it.
async fn firings_commit_with_their_row(
    store: &dyn Store,
    clock: &ManualClock,
    s2: Schedule,
) -> (Schedule, TaskId) {
    // A firing: the task and the row's move in one commit.
    let at = s2.next_at.expect("a next firing");
    clock.advance(at.as_millis() - T0);
    let fire = firing(&s2, at, at);
    let task = store.create(fire.clone()).await.expect("fired");
    assert_eq!(task.id, firing_id(s2.key, at));
    let s3 = store
        .schedule("nightly")
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(s3.revision, 3);
    assert_eq!(s3.last.as_ref().map(|l| l.task_id), Some(task.id));
    assert_eq!(s3.next_at, Some(Timestamp(at.as_millis() + 60_000)));
    assert_eq!(s3.fired, 1);

    // The same firing again, as a second node that planned it too: refused (its derived
    // id is taken, and its row moved), and nothing is written.
    assert_eq!(
        store.create(fire.clone()).await.err(),
        Some(StoreError::AlreadyExists)
    );
    assert_eq!(
        store.schedule("nightly").await.expect("read"),
        Some(s3.clone()),
        "a refused firing moves nothing"
    );
    // A firing planned from a row an operator changed meanwhile creates no task.
    let s4 = s3.paused_at(true, Timestamp(at.as_millis() + 1));
    store
        .swap_schedule("nightly", Some(3), Some(&s4))
        .await
        .expect("paused");
    let late = Timestamp(at.as_millis() + 60_000);
    let stale = firing(&s3, late, late);
    let stale_id = stale.id;
    assert!(matches!(
        store.create_claimed(stale, &cr()).await,
        Err(StoreError::ScheduleConflict { .. })
    ));
    assert!(
        store.inspect(&stale_id).await.expect("inspect").is_none(),
        "no task without its row's move"
    );
    (s4, task.id)
}

/// Removal, and the bound on how many exist.
async fn removal_and_the_bound(store: &dyn Store) {
    assert_eq!(
        store.swap_schedule("hourly", Some(1), None).await.err(),
        Some(StoreError::ScheduleConflict {
            name: "hourly".into(),
            current: Some(0)
        })
    );
    store
        .swap_schedule("hourly", Some(0), None)
        .await
        .expect("removed");
    assert_eq!(store.schedule("hourly").await.expect("read"), None);
    assert_eq!(
        store.swap_schedule("hourly", Some(0), None).await.err(),
        Some(StoreError::ScheduleConflict {
            name: "hourly".into(),
            current: None
        })
    );
    for i in 1..MAX_SCHEDULES {
        let name = format!("s{i:04}");
        let s = Schedule::new(spec(&name), ScheduleOrigin::Api, Timestamp(T0));
        store
            .swap_schedule(&name, None, Some(&s))
            .await
            .expect("made");
    }
    let one_more = Schedule::new(spec("one-more"), ScheduleOrigin::Api, Timestamp(T0));
    match store.swap_schedule("one-more", None, Some(&one_more)).await {
        Err(StoreError::Invalid(e)) => assert!(e.0.contains("at most 1000"), "{e}"),
        other => panic!("past the bound: {other:?}"),
    }
    assert_eq!(store.schedules().await.expect("list").len(), MAX_SCHEDULES);
}
