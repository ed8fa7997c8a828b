//! Durable sleeps: a sleep past the threshold parks its task with no guest and no slot, the
//! task wakes once at its time (never before) on the store's clock across a restart, and
//! its replay returns from the sleep at once; short sleeps wait in place; cancel, the TTL,
//! a replay that asks for another sleep and a shutdown each end a sleep the way they must.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use snodo_core::model::{ManualClock, RetryPolicy, Task, TaskStatus, Timestamp};
use snodo_core::store::{MemoryStore, Store};
use snodo_runner::{JobOutcome, RunnerOptions};

use crate::common;
use crate::runs::{
    Recorder, T0, await_task, cancel_in_store, completed, count, create, error_of, expiring,
    kind_of, opts, recorded_guests, redb_on, starts, stops, task,
};

/// A task of `test_sleep` with `args`, without retries.
async fn sleeper(store: &dyn Store, args: Value) -> snodo_core::model::TaskId {
    create(store, "test_sleep", args, RetryPolicy::none()).await
}

/// Waits until the task sleeps in the store: no claim, a wake time.
async fn asleep(store: &dyn Store, rec: &Recorder, id: &snodo_core::model::TaskId) -> Task {
    await_task(store, rec, id, |t| t.wake_at.is_some() && t.claim.is_none()).await
}

/// The attempt that woke, as the guest reported it.
fn woke_on(t: &Task) -> u64 {
    match &t.outcome {
        Some(snodo_core::model::Outcome::Result(r)) => r["structuredContent"]["attempt"]
            .as_u64()
            .unwrap_or_else(|| panic!("a test_sleep result: {r}")),
        other => panic!("expected a result, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_sleep_parks_its_task_and_wakes_it_once_at_its_time_across_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("tasks.redb");
    let clock = ManualClock::new(Timestamp(T0));
    let store = redb_on(&path, &clock);
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    let id = sleeper(&*store, json!({"ms": 60_000, "status": "polling the job"})).await;
    runner.wake();
    let t = asleep(&*store, &rec, &id).await;
    assert_eq!(t.wake_at, Some(Timestamp(T0 + 60_000)));
    assert_eq!(t.status, TaskStatus::Working);
    assert_eq!(
        t.status_message.as_deref(),
        Some("sleeping until 2023-11-14T22:14:20.000Z")
    );
    rec.until("the sleeping attempt ended", |e| {
        stops(e, &id) == [JobOutcome::Slept]
    })
    .await;
    // The attempt leaves the runner's table just after its stop is reported.
    common::eventually("no guest runs while it sleeps", || async {
        (runner.active() == 0).then_some(())
    })
    .await;
    assert_eq!(count(&runner.stats().slept), 1);

    // Restart while it sleeps: the new process looks at the queue again and again, and
    // claims it at its time, not a millisecond before.
    runner.shutdown().await;
    drop(runner);
    drop(store);
    let store = redb_on(&path, &clock);
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    rec.more_polls(10).await;
    clock.advance(59_999);
    rec.more_polls(10).await;
    assert_eq!(task(&*store, &id).await.attempt, 1, "1 ms early is early");
    clock.advance(1);
    let t = completed(&*store, &rec, &id).await;
    // The replay found the sleep in the journal and went on at once: had it slept afresh,
    // it would have parked again until T0 + 120 000.
    assert_eq!((t.attempt, woke_on(&t)), (2, 2));
    assert_eq!(
        starts(&rec.events.lock().expect("lock"), &id),
        1,
        "woken once"
    );
    assert_eq!(t.wake_at, None);
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_shorter_than_the_threshold_waits_in_place() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    let id = sleeper(&*store, json!({"ms": 20})).await;
    runner.wake();
    let t = completed(&*store, &rec, &id).await;
    assert_eq!((t.attempt, woke_on(&t)), (1, 1));
    assert_eq!(count(&runner.stats().slept), 0);
    assert!(
        !t.history
            .entries
            .iter()
            .any(|e| e.kind.name() == "sleeping"),
        "{:?}",
        t.history
    );
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleep_until_wakes_at_that_instant_and_a_past_one_returns_at_once() {
    let clock = ManualClock::new(Timestamp(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    let later = sleeper(&*store, json!({"until_ms": T0 + 5_000})).await;
    let past = sleeper(&*store, json!({"until_ms": T0 - 1})).await;
    runner.wake();
    let t = completed(&*store, &rec, &past).await;
    assert_eq!(woke_on(&t), 1);
    let t = asleep(&*store, &rec, &later).await;
    assert_eq!(t.wake_at, Some(Timestamp(T0 + 5_000)));
    clock.advance(5_000);
    let t = completed(&*store, &rec, &later).await;
    assert_eq!(woke_on(&t), 2);
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_a_sleeping_task_at_once_and_it_never_wakes() {
    let clock = ManualClock::new(Timestamp(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    let id = sleeper(&*store, json!({"ms": 60_000})).await;
    runner.wake();
    asleep(&*store, &rec, &id).await;
    cancel_in_store(&*store, &id).await;
    let t = task(&*store, &id).await;
    assert_eq!((t.status, t.wake_at), (TaskStatus::Cancelled, None));
    clock.advance(60_000);
    rec.more_polls(10).await;
    assert_eq!(
        task(&*store, &id).await.attempt,
        1,
        "a cancelled sleep never wakes"
    );
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_past_the_ttl_fails_the_task_naming_its_ttl() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    let id = expiring(&*store, "test_sleep", json!({"ms": 60_000}), Some(10_000)).await;
    runner.wake();
    let t = await_task(&*store, &rec, &id, |t| t.status.is_terminal()).await;
    let e = error_of(&t);
    assert_eq!(kind_of(e), "limit");
    assert_eq!(
        e.data.as_ref().map(|d| d["limit"].clone()),
        Some(json!("ttl"))
    );
    assert!(e.message.contains("its TTL"), "{}", e.message);
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_asks_for_another_sleep_fails_as_a_divergence() {
    let clock = ManualClock::new(Timestamp(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    // Attempt 1 sleeps 60 001 ms; its replay, attempt 2, asks for 60 002.
    let id = sleeper(&*store, json!({"ms": 60_000, "vary": true})).await;
    runner.wake();
    let t = asleep(&*store, &rec, &id).await;
    assert_eq!(t.wake_at, Some(Timestamp(T0 + 60_001)));
    clock.advance(60_001);
    let t = await_task(&*store, &rec, &id, |t| t.status.is_terminal()).await;
    let e = error_of(&t);
    assert_eq!(kind_of(e), "journal_divergence");
    let detail = e
        .data
        .as_ref()
        .map(|d| d["detail"].to_string())
        .unwrap_or_default();
    assert!(
        detail.contains("a sleep of 60002 ms") && detail.contains("a sleep of 60001 ms"),
        "{detail}"
    );
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_parks_a_sleep_that_waits_in_place() {
    let clock = ManualClock::new(Timestamp(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let options = RunnerOptions {
        sleep_park_after: Duration::from_secs(120),
        ..opts(true)
    };
    let (rec, runner) = recorded_guests(&store, options).await;
    let id = sleeper(&*store, json!({"ms": 90_000, "status": "about to sleep"})).await;
    runner.wake();
    await_task(&*store, &rec, &id, |t| {
        t.status_message.as_deref() == Some("about to sleep")
    })
    .await;
    // The status commit comes before the sleep; the guest is in it or about to be.
    runner.shutdown().await;
    let t = task(&*store, &id).await;
    // What was left of the sleep, from the store's clock (which this test holds at T0)
    // when the shutdown came.
    let wake = t.wake_at.map(Timestamp::as_millis).unwrap_or_default();
    assert!((T0 + 80_000..=T0 + 90_000).contains(&wake), "{t:?}");
    assert!(t.claim.is_none());
    assert_eq!(rec.stopped(&id), [JobOutcome::Slept]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_of_an_earlier_version_sleeps_in_place_as_it_always_did() {
    // `hold` (the hostile component, built for 0.1.0, before `timers`) sleeps on the WASI
    // clock: past the threshold, it still holds its guest and completes on its first
    // attempt.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let options = RunnerOptions {
        sleep_park_after: Duration::from_millis(10),
        ..opts(true)
    };
    let (rec, runner) = recorded_guests(&store, options).await;
    let id = create(&*store, "hold", json!({"ms": 300}), RetryPolicy::none()).await;
    runner.wake();
    let t = completed(&*store, &rec, &id).await;
    assert_eq!(t.attempt, 1);
    assert_eq!(count(&runner.stats().slept), 0);
    runner.shutdown().await;
}
