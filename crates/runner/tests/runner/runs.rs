//! The runner with real guests and real stores: exact retries across a restart, exhaustion,
//! failures that consume no retries, cancellation of a guest that ignores its token, fencing
//! of a reclaimed task's old attempt, parking many tasks without live guests, reaping and
//! graceful shutdown. Time is the store's ManualClock; state is awaited, never slept for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use snodo_core::model::{ManualClock, RetryPolicy, Scope, Task, TaskId, TaskStatus, Timestamp};
use snodo_core::store::{
    Action, Committed, MemoryStore, NewTask, RedbStore, Store, StoreResult, Transition,
};
use snodo_runner::{
    Catalog, Executors, Instrumentation, JobOutcome, Runner, RunnerEvent, RunnerOptions, Submitted,
    tool_call_work,
};
use tokio::sync::OnceCell;

use crate::common;

pub(crate) const T0: u64 = 1_700_000_000_000;

static COMPONENTS: OnceCell<common::Guests> = OnceCell::const_new();

async fn registry() -> Arc<Catalog> {
    let c = COMPONENTS
        .get_or_init(|| common::load_guests(128, 32 << 20))
        .await;
    let r = Catalog::new()
        .with_component(&c.fixtures)
        .and_then(|r| r.with_component(&c.examples))
        .and_then(|r| r.with_component(&c.hostile))
        .expect("catalog");
    Arc::new(r)
}

/// Records every event, and wakes waiters when one arrives.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) events: Mutex<Vec<RunnerEvent>>,
    notify: tokio::sync::Notify,
}

impl Instrumentation for Recorder {
    fn event(&self, event: &RunnerEvent) {
        self.events.lock().expect("lock").push(event.clone());
        self.notify.notify_waiters();
    }
}

impl Recorder {
    /// What `pick` takes from every event recorded so far, in order.
    fn picked<T>(&self, pick: impl Fn(&RunnerEvent) -> Option<T>) -> Vec<T> {
        self.events
            .lock()
            .expect("lock")
            .iter()
            .filter_map(pick)
            .collect()
    }

    pub(crate) async fn until(&self, what: &str, pred: impl Fn(&[RunnerEvent]) -> bool) {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let notified = self.notify.notified();
                if pred(&self.events.lock().expect("lock")) {
                    return;
                }
                // Some conditions (the runner's own bookkeeping) change without an event.
                tokio::select! {
                    () = notified => {}
                    () = common::tick() => {}
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }

    pub(crate) fn stopped(&self, task: &TaskId) -> Vec<JobOutcome> {
        stops(&self.events.lock().expect("lock"), task)
    }

    /// Waits until any attempt has started.
    async fn started(&self, what: &str) {
        self.until(what, |e| {
            e.iter()
                .any(|e| matches!(e, RunnerEvent::JobStarted { .. }))
        })
        .await;
    }

    /// Waits until the recovery loop has looked at the queue `n` more times.
    pub(crate) async fn more_polls(&self, n: usize) {
        let from = self.claim_nexts();
        // The predicate gets the events (the lock is held): count from them, not from self.
        self.until("more claim_next polls", |e| {
            count_claim_nexts(e) >= from + n
        })
        .await;
    }

    fn claim_nexts(&self) -> usize {
        count_claim_nexts(&self.events.lock().expect("lock"))
    }
}

// The predicates of `Recorder::until` get the events (the lock is held): these read them.

/// How many attempts of `task` started.
pub(crate) fn starts(events: &[RunnerEvent], task: &TaskId) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, RunnerEvent::JobStarted { task: t, .. } if t == task))
        .count()
}

/// The outcomes of the attempts of `task` that stopped, in order.
pub(crate) fn stops(events: &[RunnerEvent], task: &TaskId) -> Vec<JobOutcome> {
    events
        .iter()
        .filter_map(|e| match e {
            RunnerEvent::JobStopped {
                task: t, outcome, ..
            } if t == task => Some(*outcome),
            _ => None,
        })
        .collect()
}

fn count_claim_nexts(events: &[RunnerEvent]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(
                e,
                RunnerEvent::StoreOp {
                    op: "claim_next",
                    ..
                }
            )
        })
        .count()
}

pub(crate) fn opts(recover: bool) -> RunnerOptions {
    RunnerOptions {
        owner: "test".into(),
        recover,
        poll_interval: Duration::from_millis(5),
        reap_interval: None,
        heartbeat: Duration::from_millis(200),
        lease: Duration::from_secs(30),
        cancel_grace: Duration::from_millis(200),
        park_after: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(10),
        max_concurrent: 64,
        max_running_per_tenant: 64,
        ..RunnerOptions::default()
    }
}

pub(crate) async fn create(
    store: &dyn Store,
    tool: &str,
    args: Value,
    policy: RetryPolicy,
) -> TaskId {
    let id = TaskId::generate();
    let mut new = NewTask::new(
        id,
        Scope::new("acme"),
        tool_call_work(&id, tool, args).with_retry_policy(policy),
    );
    new.client_capabilities = json!({"elicitation": {}});
    store.create(new).await.expect("create").id
}

/// A recorder and a runner over `store` that runs what `executors` resolve, with `options`.
fn recorded(
    store: &Arc<dyn Store>,
    executors: Arc<dyn Executors>,
    options: RunnerOptions,
) -> (Arc<Recorder>, Runner) {
    let rec = Arc::new(Recorder::default());
    let runner = Runner::start(store.clone(), executors, options, rec.clone());
    (rec, runner)
}

/// A recorder and a runner over `store` that runs the example guests, with `options`.
pub(crate) async fn recorded_guests(
    store: &Arc<dyn Store>,
    options: RunnerOptions,
) -> (Arc<Recorder>, Runner) {
    recorded(store, registry().await, options)
}

/// A memory store, a recorder and a runner over the fixtures, without recovery.
async fn fixtures_runner() -> (Arc<dyn Store>, Arc<Recorder>, Runner) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (rec, runner) = recorded_guests(&store, opts(false)).await;
    (store, rec, runner)
}

/// A memory store whose time is a [`ManualClock`] set to [`T0`], and that clock.
fn memory_on_manual_clock() -> (ManualClock, Arc<dyn Store>) {
    let clock = ManualClock::new(Timestamp(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    (clock, store)
}

/// A memory store on a [`ManualClock`] (see [`memory_on_manual_clock`]), and a recorder and
/// a runner of the example guests over it with `options`.
async fn guests_on_manual_clock(
    options: RunnerOptions,
) -> (ManualClock, Arc<dyn Store>, Arc<Recorder>, Runner) {
    let (clock, store) = memory_on_manual_clock();
    let (rec, runner) = recorded_guests(&store, options).await;
    (clock, store, rec, runner)
}

/// A redb store at `path` on `clock` (opened again after a restart the same way).
pub(crate) fn redb_on(path: &std::path::Path, clock: &ManualClock) -> Arc<dyn Store> {
    Arc::new(RedbStore::open_with_clock(path, Arc::new(clock.clone())).expect("open"))
}

/// The value of one of the runner's counters.
pub(crate) fn count(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Creates a task for `tool` and hands it to `runner`.
async fn submitted(
    runner: &Runner,
    store: &dyn Store,
    tool: &str,
    args: Value,
    policy: RetryPolicy,
) -> TaskId {
    let id = create(store, tool, args, policy).await;
    runner.submit(&id).await.expect("submit");
    id
}

/// A task of `slow_compute` for `seconds`, without retries, handed to `runner`.
async fn slow_compute(runner: &Runner, store: &dyn Store, seconds: u64) -> TaskId {
    let args = json!({ "seconds": seconds });
    submitted(runner, store, "slow_compute", args, RetryPolicy::none()).await
}

pub(crate) async fn task(store: &dyn Store, id: &TaskId) -> Task {
    store
        .inspect(id)
        .await
        .expect("inspect")
        .expect("present")
        .0
}

/// Waits until the task satisfies `pred`, re-reading whenever the runner reports anything.
pub(crate) async fn await_task(
    store: &dyn Store,
    rec: &Recorder,
    id: &TaskId,
    pred: impl Fn(&Task) -> bool,
) -> Task {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let notified = rec.notify.notified();
            let t = task(store, id).await;
            if pred(&t) {
                return t;
            }
            // Events arrive with every store operation the runner makes.
            tokio::select! {
                () = notified => {}
                () = common::tick() => {}
            }
        }
    })
    .await
    .expect("the task reached the expected state")
}

/// Waits until the task has ended, and checks that it completed.
pub(crate) async fn completed(store: &dyn Store, rec: &Recorder, id: &TaskId) -> Task {
    let t = await_task(store, rec, id, |t| t.status.is_terminal()).await;
    assert_eq!(t.status, TaskStatus::Completed, "{t:?}");
    t
}

fn result_text(t: &Task) -> String {
    match &t.outcome {
        Some(snodo_core::model::Outcome::Result(r)) => r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        other => panic!("expected a result, got {other:?}"),
    }
}

/// Commits a client's cancellation of `id` (tenant `acme`).
pub(crate) async fn cancel_in_store(store: &dyn Store, id: &TaskId) {
    let access = common::acme_access(store, id, Action::Cancel).await;
    store.cancel(&access, None).await.expect("cancel");
}

fn store_ops(rec: &Recorder, op: &str) -> usize {
    rec.events
        .lock()
        .expect("lock")
        .iter()
        .filter(|e| matches!(e, RunnerEvent::StoreOp { op: o, ok: true, .. } if *o == op))
        .count()
}

/// A memory store behind `layer`.
fn layered_memory(layer: impl snodo_core::store::Layer) -> Arc<dyn Store> {
    Arc::new(snodo_core::store::Layered::over(
        Arc::new(MemoryStore::new()),
        layer,
    ))
}

pub(crate) fn new_task(tool: &str, args: Value) -> NewTask {
    let id = TaskId::generate();
    NewTask::new(id, Scope::new("acme"), tool_call_work(&id, tool, args))
}

/// Creates a task of `tool` with `args` (tenant `acme`) that expires `ttl_ms` after its
/// creation, or never; its id.
pub(crate) async fn expiring(
    store: &dyn Store,
    tool: &str,
    args: Value,
    ttl_ms: Option<u64>,
) -> TaskId {
    let mut new = new_task(tool, args);
    new.ttl_ms = ttl_ms;
    store.create(new).await.expect("create").id
}

/// A recorder and a runner over `store` with one execution slot, without recovery.
async fn one_slot_runner(store: &Arc<dyn Store>) -> (Arc<Recorder>, Runner) {
    let options = RunnerOptions {
        max_concurrent: 1,
        max_running_per_tenant: 1,
        ..opts(false)
    };
    recorded_guests(store, options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_task_is_claimed_and_started_by_its_creation_commit_when_a_slot_is_free() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (rec, runner) = one_slot_runner(&store).await;
    // The one slot is free: the creation claims and starts the task.
    let held = runner
        .create(new_task("slow_compute", json!({"seconds": 60})))
        .await
        .expect("create");
    assert_eq!(held.claim.as_ref().map(|c| c.generation), Some(1));
    assert_eq!(held.attempt, 1, "started in the creation commit");
    rec.started("the held task started").await;
    assert_eq!(store_ops(&rec, "create_claimed"), 1);
    assert_eq!(store_ops(&rec, "claim"), 0, "no claim of its own");

    // No slot: created unclaimed and queued; it runs when the slot frees.
    let queued = runner
        .create(new_task("flaky", json!({"succeed_on_attempt": 1})))
        .await
        .expect("create");
    assert!(queued.claim.is_none());
    assert_eq!(queued.attempt, 0);
    assert_eq!(task(&*store, &queued.id).await.status, TaskStatus::Working);
    cancel_in_store(&*store, &held.id).await;
    runner.cancel(&held.id);
    completed(&*store, &rec, &queued.id).await;
    assert_eq!(store_ops(&rec, "claim"), 1, "the queued task's own claim");
    runner.shutdown().await;
}

/// A layer that holds every worker's completion commit at its gate.
#[derive(Default, Clone)]
struct HeldCompletions(common::Gate);

#[async_trait::async_trait]
impl snodo_core::store::Layer for HeldCompletions {
    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        if matches!(t.event.kind, snodo_core::model::EventKind::Completed { .. }) {
            self.0.hold().await;
        }
        t.apply(inner).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_gives_its_slot_back_once_its_guest_returned_not_after_its_commit() {
    let gate = HeldCompletions::default();
    let store: Arc<dyn Store> = layered_memory(gate.clone());
    let (rec, runner) = one_slot_runner(&store).await;
    let quick = || new_task("flaky", json!({"succeed_on_attempt": 1}));
    // The first task finds the one slot free. Its guest returns; the commit of its outcome
    // waits at the gate. The slot stood for the guest, which is gone: the second task takes
    // it at once, in its creation commit, while the first task's outcome is uncommitted.
    let mut ids = Vec::new();
    for (held, why) in [
        (1, "the one slot was free: started at creation"),
        (
            2,
            "created, claimed and started in one commit while the first outcome waits",
        ),
    ] {
        let created = runner.create(quick()).await.expect("create");
        assert_eq!(created.attempt, 1, "{why}");
        ids.push(created.id);
        gate.0.until_held(held).await;
        assert_eq!(task(&*store, &ids[0]).await.status, TaskStatus::Working);
    }

    gate.0.open();
    for id in &ids {
        completed(&*store, &rec, id).await;
    }
    assert_eq!(
        store_ops(&rec, "claim"),
        0,
        "neither task needed a claim of its own"
    );
    runner.shutdown().await;
}

/// A layer that writes down every status message a worker commits.
#[derive(Default, Clone)]
struct Statuses(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl snodo_core::store::Layer for Statuses {
    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        let message = match &t.event.kind {
            snodo_core::model::EventKind::StatusMessage { message } => Some(message.clone()),
            _ => None,
        };
        let c = t.apply(inner).await?;
        if let Some(m) = message {
            self.0.lock().expect("lock").push(m);
        }
        Ok(c)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_progress_becomes_its_status_message() {
    let statuses = Statuses::default();
    let store: Arc<dyn Store> = layered_memory(statuses.clone());
    let (rec, runner) = recorded_guests(&store, opts(false)).await;
    let id = submitted(
        &runner,
        &*store,
        "test_tool_with_progress",
        json!({}),
        RetryPolicy::none(),
    )
    .await;
    completed(&*store, &rec, &id).await;
    // The first report commits at once; the later ones within the coalescing interval
    // are folded into one commit that the completion may overtake.
    let committed = statuses.0.lock().expect("lock").clone();
    assert_eq!(
        committed.first().map(String::as_str),
        Some("0 of 100"),
        "{committed:?}"
    );
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_task_runs_and_completes() {
    let (store, rec, runner) = fixtures_runner().await;
    let args = json!({"name": "runner"});
    let id = create(&*store, "greet", args, RetryPolicy::none()).await;
    assert_eq!(
        runner.submit(&id).await.expect("submit"),
        Submitted::Started
    );
    let t = completed(&*store, &rec, &id).await;
    assert_eq!(result_text(&t), "Hello, runner!");
    assert_eq!(t.attempt, 1);
    assert!(t.claim.is_none());
    assert_eq!(
        runner.submit(&id).await.expect("submit"),
        Submitted::Terminal
    );
    assert_eq!(
        runner.submit(&TaskId::generate()).await.expect("submit"),
        Submitted::NotFound
    );
    rec.until("job stopped", |e| !stops(e, &id).is_empty())
        .await;
    assert_eq!(rec.stopped(&id), vec![JobOutcome::Completed]);
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_follow_the_exact_delays_across_a_restart_and_never_run_early() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("tasks.redb");
    let clock = ManualClock::new(Timestamp(T0));
    let store = redb_on(&path, &clock);
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    let policy = RetryPolicy::new([1_000u32, 2_000]).expect("policy");
    let id = create(&*store, "flaky", json!({"succeed_on_attempt": 3}), policy).await;
    runner.wake();
    let t = await_task(&*store, &rec, &id, |t| {
        t.retry_count == 1 && t.claim.is_none()
    })
    .await;
    assert_eq!(t.retry_at, Some(Timestamp(T0 + 1_000)));
    assert_eq!(
        t.status_message.as_deref(),
        Some("attempt 1 failed; retrying")
    );

    // Restart between attempts.
    runner.shutdown().await;
    drop(runner);
    drop(store);
    let store = redb_on(&path, &clock);
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    // Many looks at the queue, none of them early.
    rec.until("claim_next polls", |_| true).await;
    rec.more_polls(10).await;
    assert_eq!(
        task(&*store, &id).await.attempt,
        1,
        "not run before retry_at"
    );
    clock.advance(999);
    rec.more_polls(10).await;
    assert_eq!(
        task(&*store, &id).await.attempt,
        1,
        "1 ms early is still early"
    );
    clock.advance(1);
    let t = await_task(&*store, &rec, &id, |t| {
        t.retry_count == 2 && t.claim.is_none()
    })
    .await;
    assert_eq!(t.attempt, 2);
    assert_eq!(t.retry_at, Some(Timestamp(T0 + 1_000 + 2_000)));
    clock.advance(2_000);
    let t = completed(&*store, &rec, &id).await;
    assert_eq!(result_text(&t), "succeeded on attempt 3");
    runner.shutdown().await;
}

/// The error a failed task ended with.
pub(crate) fn error_of(t: &Task) -> &snodo_core::model::JsonRpcError {
    assert_eq!(t.status, TaskStatus::Failed);
    match &t.outcome {
        Some(snodo_core::model::Outcome::Error(e)) => e,
        other => panic!("a failed task carries its error: {other:?}"),
    }
}

pub(crate) fn kind_of(e: &snodo_core::model::JsonRpcError) -> Value {
    e.data
        .as_ref()
        .map(|d| d["kind"].clone())
        .unwrap_or(Value::Null)
}

// A guest cannot end a task with an MRTR `input_required` or another task handle: the WIT
// `outcome` variant has no way to express either (completed | failed | retry), so that rule
// holds by construction and needs no runtime check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhaustion_fails_with_the_executors_error_and_traps_consume_no_retries() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (rec, runner) = recorded_guests(&store, opts(true)).await;
    let run_to_end = |tool: &'static str, args: Value, policy: RetryPolicy| {
        let (store, rec, runner) = (store.clone(), rec.clone(), runner.clone());
        async move {
            let id = create(&*store, tool, args, policy).await;
            runner.wake();
            await_task(&*store, &rec, &id, |t| t.status.is_terminal()).await
        }
    };

    let p = RetryPolicy::fixed(0, 2).expect("policy");
    let t = run_to_end("flaky", json!({"succeed_on_attempt": 10}), p).await;
    assert_eq!((t.attempt, t.retry_count), (3, 2));
    let e = error_of(&t);
    assert_eq!(
        (e.code, e.message.as_str()),
        (-32000, "the upstream service is unavailable")
    );
    assert_eq!(e.data, Some(json!({"attempt": 3})));

    let t = run_to_end("trap", json!({}), RetryPolicy::fixed(0, 3).expect("policy")).await;
    assert_eq!(
        t.retry_count, 0,
        "a trap is not the tool asking for a retry"
    );
    assert_eq!(
        (error_of(&t).code, kind_of(error_of(&t))),
        (-32603, json!("trap"))
    );

    let t = run_to_end("invalid_outcome", json!({}), RetryPolicy::none()).await;
    assert_eq!(kind_of(error_of(&t)), json!("invalid_outcome"));

    // A 0.3.0 tool ends a failed task with its own status message.
    let t = run_to_end(
        "import_pages",
        json!({"pages": 5, "quota": 3}),
        RetryPolicy::none(),
    )
    .await;
    assert_eq!(error_of(&t).message, "the import quota is exhausted");
    assert_eq!(
        t.status_message.as_deref(),
        Some("imported 3 of 5 pages; the other 2 need a larger quota")
    );

    // A tool that is not deployed fails as component_missing.
    let t = run_to_end("no_such_tool", json!({}), RetryPolicy::none()).await;
    assert_eq!(kind_of(error_of(&t)), json!("component_missing"));
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_stops_a_guest_that_ignores_its_token() {
    let (store, rec, runner) = fixtures_runner().await;
    for tool in ["ignore_cancel", "spin"] {
        let id = submitted(&runner, &*store, tool, json!({}), RetryPolicy::none()).await;
        rec.until("job started", |e| starts(e, &id) > 0).await;
        cancel_in_store(&*store, &id).await;
        let asked = std::time::Instant::now();
        runner.cancel(&id);
        rec.until("job stopped", |e| !stops(e, &id).is_empty())
            .await;
        eprintln!("{tool}: cancel to stopped guest in {:?}", asked.elapsed());
        assert_eq!(rec.stopped(&id), vec![JobOutcome::Cancelled]);
        assert_eq!(task(&*store, &id).await.status, TaskStatus::Cancelled);
    }
    // The attempt leaves the runner's table just after its job reported the stop.
    rec.until("no attempt left", |_| runner.active() == 0).await;
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_tasks_old_attempt_cannot_commit() {
    // A never renews in time; B recovers what A loses.
    let (clock, store, rec_a, a) = guests_on_manual_clock(RunnerOptions {
        heartbeat: Duration::from_secs(3_600),
        ..opts(false)
    })
    .await;
    let id = slow_compute(&a, &*store, 1).await;
    rec_a.started("a started").await;
    clock.advance(30_000);
    let (rec_b, b) = recorded_guests(&store, opts(true)).await;
    rec_b
        .until("b started", |e| {
            e.iter().any(|e| {
                matches!(
                    e,
                    RunnerEvent::JobStarted {
                        generation: 2,
                        recovered: true,
                        ..
                    }
                )
            })
        })
        .await;
    rec_a
        .until("a stopped", |e| !stops(e, &id).is_empty())
        .await;
    assert_eq!(
        rec_a.stopped(&id),
        vec![JobOutcome::LeaseLost],
        "the old generation could not commit"
    );
    let t = completed(&*store, &rec_b, &id).await;
    let outcomes = t
        .events
        .iter()
        .filter(|e| e.id.ends_with("-outcome"))
        .count();
    assert_eq!(outcomes, 1, "one terminal commit");
    assert_eq!(
        t.events
            .iter()
            .find(|e| e.id.ends_with("-outcome"))
            .and_then(|e| e.generation),
        Some(2)
    );
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_parked_tasks_hold_no_guest_and_all_complete_once_answered() {
    const N: usize = 1_000;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (rec, runner) = recorded_guests(
        &store,
        RunnerOptions {
            park_after: Duration::from_millis(1),
            ..opts(true)
        },
    )
    .await;
    let mut ids = Vec::with_capacity(N);
    for i in 0..N {
        ids.push(
            create(
                &*store,
                "confirm_delete",
                json!({"filename": format!("f{i}")}),
                RetryPolicy::none(),
            )
            .await,
        );
    }
    runner.wake();
    rec.until("every guest parked and released", |_| {
        count(&runner.stats().parked_released) >= N as u64 && runner.active() == 0
    })
    .await;
    assert_eq!(runner.active(), 0, "no live guest");
    assert!(runner.waiters().is_empty());
    for id in &ids {
        let t = task(&*store, id).await;
        assert_eq!(t.status, TaskStatus::InputRequired);
        assert!(t.claim.is_none());
    }
    for id in &ids {
        let c = common::confirm(&*store, id).await;
        assert_eq!(c.task.status, TaskStatus::Working);
    }
    runner.wake();
    for (i, id) in ids.iter().enumerate() {
        let t = await_task(&*store, &rec, id, |t| t.status.is_terminal()).await;
        assert_eq!(result_text(&t), format!("Deleted f{i}"));
        let keys: Vec<&String> = t.inputs.keys().collect();
        assert_eq!(keys, vec!["confirm"], "asked once");
    }
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaping_removes_expired_tasks_and_stops_their_attempts() {
    let (clock, store, rec, runner) = guests_on_manual_clock(RunnerOptions {
        reap_interval: Some(Duration::from_millis(5)),
        ..opts(false)
    })
    .await;
    let id = expiring(
        &*store,
        "slow_compute",
        json!({"seconds": 60}),
        Some(10_000),
    )
    .await;
    runner.submit(&id).await.expect("submit");
    rec.started("started").await;
    assert_eq!(runner.active(), 1);
    clock.advance(10_000);
    rec.until("reaped", |e| {
        e.iter()
            .any(|e| matches!(e, RunnerEvent::ReapedActive { .. }))
            && runner.active() == 0
    })
    .await;
    assert!(store.inspect(&id).await.expect("inspect").is_none());
    assert_eq!(
        reaped_active(&rec),
        vec![(id, TaskStatus::Working)],
        "cut-off work is counted, once"
    );
    runner.shutdown().await;
}

/// An archive that records what it was handed, and whether the store still held each task
/// then, and refuses every batch while `refuse` is set.
struct Keeper {
    store: Arc<dyn Store>,
    refuse: std::sync::atomic::AtomicBool,
    calls: AtomicU64,
    kept: Mutex<Vec<(TaskId, bool)>>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keeper")
    }
}

#[async_trait::async_trait]
impl snodo_runner::Archive for Keeper {
    async fn keep(&self, tasks: &[(Task, snodo_core::model::Work)]) -> Result<(), String> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.refuse.load(Ordering::Relaxed) {
            return Err("the archive is unreachable".into());
        }
        for (task, _) in tasks {
            let stored = self
                .store
                .inspect(&task.id)
                .await
                .expect("inspect")
                .is_some();
            self.kept.lock().expect("lock").push((task.id, stored));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_keeps_every_task_before_the_reaper_removes_it() {
    let (clock, store) = memory_on_manual_clock();
    let keeper = Arc::new(Keeper {
        store: store.clone(),
        refuse: true.into(),
        calls: AtomicU64::new(0),
        kept: Mutex::new(Vec::new()),
    });
    let (rec, runner) = recorded_guests(
        &store,
        RunnerOptions {
            reap_interval: Some(Duration::from_millis(5)),
            archive: Some(keeper.clone()),
            ..opts(false)
        },
    )
    .await;
    let running = expiring(
        &*store,
        "slow_compute",
        json!({"seconds": 60}),
        Some(10_000),
    )
    .await;
    runner.submit(&running).await.expect("submit");
    rec.started("started").await;
    let waiting = expiring(
        &*store,
        "slow_compute",
        json!({"seconds": 60}),
        Some(10_000),
    )
    .await;
    clock.advance(10_000);

    // An archive that refuses keeps the reaper from removing anything; it tries again.
    rec.until("two refused rounds", |_| count(&keeper.calls) >= 2)
        .await;
    for id in [running, waiting] {
        assert!(
            store.inspect(&id).await.expect("inspect").is_some(),
            "nothing is reaped unkept"
        );
    }
    assert!(keeper.kept.lock().expect("lock").is_empty());

    keeper.refuse.store(false, Ordering::Relaxed);
    rec.until("both reaped", |e| {
        e.iter()
            .filter(|e| matches!(e, RunnerEvent::ReapedActive { .. }))
            .count()
            == 2
    })
    .await;
    for id in [running, waiting] {
        assert!(store.inspect(&id).await.expect("inspect").is_none());
    }
    let mut kept = keeper.kept.lock().expect("lock").clone();
    kept.sort();
    let mut want = vec![(running, true), (waiting, true)];
    want.sort();
    assert_eq!(kept, want, "each kept once, while it was still stored");
    runner.shutdown().await;
}

/// Every `ReapedActive` the runner reported: the task and its status when removed.
fn reaped_active(rec: &Recorder) -> Vec<(TaskId, TaskStatus)> {
    rec.picked(|e| match e {
        RunnerEvent::ReapedActive { task, status } => Some((*task, *status)),
        _ => None,
    })
}

/// A due task past its TTL is removed by the claim that meets it, before any reap: that
/// removal cut off unfinished work too, and is counted and logged like the reaper's.
#[tokio::test(start_paused = true)]
async fn a_task_removed_at_its_ttl_by_a_claim_is_counted_as_reaped_active() {
    let (clock, store) = memory_on_manual_clock();
    let id = expiring(&*store, "lucky", json!({}), Some(10_000)).await;
    clock.advance(10_000);
    let lucky = Arc::new(SecondTimeLucky::default());
    let (rec, runner) = recorded(&store, Arc::new(Fake(lucky.clone())), opts(true));
    rec.until("the expired task was reported", |e| {
        e.iter()
            .any(|e| matches!(e, RunnerEvent::ReapedActive { .. }))
    })
    .await;
    assert_eq!(reaped_active(&rec), vec![(id, TaskStatus::Working)]);
    assert!(store.inspect(&id).await.expect("inspect").is_none());
    assert_eq!(lucky.runs.load(Ordering::SeqCst), 0, "never ran");
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_what_did_not_drain() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // An engine of its own: under the shared one, a guest that finds the instance pool or
    // the memory budget taken by another test's guests ends at once, and shutdown would
    // find nothing left to release.
    let guests = common::load_guests(8, 32 << 20).await;
    let catalog = Arc::new(
        Catalog::new()
            .with_component(&guests.fixtures)
            .expect("catalog"),
    );
    let (rec, runner) = recorded(
        &store,
        catalog,
        RunnerOptions {
            drain_timeout: Duration::from_millis(50),
            ..opts(false)
        },
    );
    let id = slow_compute(&runner, &*store, 60).await;
    rec.started("started").await;
    let released = runner.shutdown().await;
    assert_eq!(released, 1, "{:#?}", rec.events.lock().expect("lock"));
    let t = task(&*store, &id).await;
    assert_eq!(t.status, TaskStatus::Working);
    assert!(t.claim.is_none(), "released for another runner at once");
    assert!(
        runner.submit(&id).await.is_err(),
        "a stopped runner claims nothing"
    );
}

/// A guest waiting for input does not hold a shutdown: it parks at once (its task keeps its
/// question and waits in the store), so nothing is left to release when the drain ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_waiting_for_input_parks_at_shutdown_instead_of_holding_the_drain() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (rec, runner) = recorded_guests(
        &store,
        RunnerOptions {
            // The idle allowance does not end the wait within the test; a drain that waited
            // for the answer would end in a forced release, which the test would see.
            park_after: Duration::from_secs(3_600),
            drain_timeout: Duration::from_secs(20),
            ..opts(false)
        },
    )
    .await;
    let args = json!({"filename": "kept.txt"});
    let id = submitted(
        &runner,
        &*store,
        "confirm_delete",
        args,
        RetryPolicy::none(),
    )
    .await;
    rec.until("the guest waits for its answer", |_| {
        !runner.waiters().is_empty()
    })
    .await;
    let released = runner.shutdown().await;
    assert_eq!(released, 0, "the waiting attempt parked itself");
    assert_eq!(count(&runner.stats().parked_released), 1);
    let t = task(&*store, &id).await;
    assert_eq!(t.status, TaskStatus::InputRequired);
    assert!(t.claim.is_none(), "released for any runner");
}

/// A layer whose store clock cannot be read; everything else passes through.
struct NoClock;

#[async_trait::async_trait]
impl snodo_core::store::Layer for NoClock {
    async fn now(&self, _: &dyn Store) -> snodo_core::store::StoreResult<Timestamp> {
        Err(snodo_core::store::StoreError::Unavailable(
            "the clock is unreadable".into(),
        ))
    }
}

/// Regression: the retry timer read the store's clock and, when that failed, slept until
/// the Unix epoch plus the retry time (decades); with recovery off the retry never ran.
#[tokio::test]
async fn a_retry_runs_without_reading_the_store_clock() {
    let store: Arc<dyn Store> = layered_memory(NoClock);
    let (rec, runner) = recorded_guests(&store, opts(false)).await;
    let id = submitted(
        &runner,
        &*store,
        "flaky",
        json!({"succeed_on_attempt": 2}),
        RetryPolicy::new([20]).expect("policy"),
    )
    .await;
    rec.until("the retry completed the task", |e| {
        stops(e, &id).contains(&JobOutcome::Completed)
    })
    .await;
    assert_eq!(
        rec.stopped(&id),
        vec![JobOutcome::RetryScheduled, JobOutcome::Completed]
    );
    runner.shutdown().await;
}

/// Regression: the reaper, a replacing attempt and shutdown stopped attempts without
/// `JobStopped`; a refused start reported a stop without a start; the stats counted apart
/// from the events.
#[tokio::test]
async fn every_started_job_stops_exactly_once() {
    let (clock, store, rec, runner) = guests_on_manual_clock(RunnerOptions {
        reap_interval: Some(Duration::from_millis(10)),
        drain_timeout: Duration::from_millis(20),
        ..opts(false)
    })
    .await;
    let hold = |ttl: Option<u64>| {
        let store = store.clone();
        async move { expiring(&*store, "hold", json!({"ms": 600_000}), ttl).await }
    };
    // Reaped while running.
    let reaped = hold(Some(1_000)).await;
    assert_eq!(
        runner.submit(&reaped).await.expect("submit"),
        Submitted::Started
    );
    rec.started("the first job").await;
    clock.advance(2_000);
    rec.until("the reaped job stopped", |e| {
        stops(e, &reaped).contains(&JobOutcome::Reaped)
    })
    .await;
    // A start the store refuses (the task was cancelled) is no job at all.
    let cancelled = hold(None).await;
    cancel_in_store(&*store, &cancelled).await;
    // Released at shutdown.
    let released = hold(None).await;
    runner.submit(&released).await.expect("submit");
    rec.until("the second job started", |e| starts(e, &released) > 0)
        .await;
    runner.shutdown().await;

    let events = rec.events.lock().expect("lock").clone();
    for task in [reaped, cancelled, released] {
        assert_eq!(
            starts(&events, &task),
            rec.stopped(&task).len(),
            "task {task}"
        );
    }
    assert_eq!(rec.stopped(&reaped), vec![JobOutcome::Reaped]);
    assert_eq!(rec.stopped(&released), vec![JobOutcome::Released]);
    assert!(rec.stopped(&cancelled).is_empty());
    let stats = runner.stats();
    assert_eq!((count(&stats.started), count(&stats.finished)), (2, 2));
}

/// Regression: MCP-created work was never pinned to its component, so a recovered task ran
/// whatever was deployed. Now the policy decides, visibly.
#[tokio::test]
async fn a_task_whose_component_version_is_gone_follows_the_policy() {
    use snodo_runner::ComponentPolicy;
    for policy in [ComponentPolicy::Pinned, ComponentPolicy::Latest] {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let mut registry = (*registry().await).clone();
        registry.set_component_policy(policy);
        let (rec, runner) = recorded(&store, Arc::new(registry), opts(false));
        let id = TaskId::generate();
        let work = tool_call_work(&id, "counter", json!({})).with_component_digest("0".repeat(64));
        store
            .create(NewTask::new(id, Scope::new("acme"), work))
            .await
            .expect("create");
        runner.submit(&id).await.expect("submit");
        rec.until("the job stopped", |e| !stops(e, &id).is_empty())
            .await;
        let gone = rec.picked(|e| match e {
            RunnerEvent::PinnedComponentGone { task, ran_latest } if *task == id => {
                Some(*ran_latest)
            }
            _ => None,
        });
        let (task, _) = store.inspect(&id).await.expect("inspect").expect("task");
        match policy {
            ComponentPolicy::Pinned => {
                assert_eq!(gone, vec![false]);
                assert_eq!(task.status, TaskStatus::Failed);
                let Some(snodo_core::model::Outcome::Error(e)) = task.outcome else {
                    panic!("an error");
                };
                assert_eq!(e.data.expect("data")["kind"], "component_missing");
            }
            ComponentPolicy::Latest => {
                assert_eq!(gone, vec![true]);
                assert_eq!(task.status, TaskStatus::Completed);
            }
        }
        runner.shutdown().await;
    }
}

/// Completes on its second execution, asking for a retry on the first: a stand-in for a
/// component, so the runner's own logic runs on a paused clock with no WebAssembly.
#[derive(Default)]
struct SecondTimeLucky {
    runs: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl snodo_wasm::Executable for SecondTimeLucky {
    async fn execute(&self, _exec: snodo_wasm::Execution) -> snodo_wasm::ExecutionReport {
        let n = self.runs.fetch_add(1, Ordering::SeqCst);
        let outcome = if n == 0 {
            snodo_wasm::GuestOutcome::Retry {
                error: snodo_core::model::JsonRpcError::new(-32000, "try later"),
                status_message: "waiting to try again".into(),
            }
        } else {
            empty_result()
        };
        report(outcome)
    }
}

/// A tool result with no content.
fn empty_result() -> snodo_wasm::GuestOutcome {
    let mut result = serde_json::Map::new();
    result.insert("content".into(), json!([]));
    result.insert("isError".into(), json!(false));
    snodo_wasm::GuestOutcome::Completed(result)
}

/// What a stand-in executable reports for `outcome`.
fn report(outcome: snodo_wasm::GuestOutcome) -> snodo_wasm::ExecutionReport {
    snodo_wasm::ExecutionReport {
        outcome: Ok(outcome),
        logs: Vec::new(),
        dropped_logs: 0,
        instantiate: Duration::ZERO,
        run: Duration::ZERO,
    }
}

/// Resolves every work to one stand-in executable.
struct Fake(Arc<dyn snodo_wasm::Executable>);

impl snodo_runner::Executors for Fake {
    fn resolve(
        &self,
        _work: &snodo_core::model::Work,
    ) -> Result<snodo_runner::Resolved, snodo_runner::Unresolved> {
        Ok(snodo_runner::Resolved {
            component: self.0.clone(),
            tool: "lucky".into(),
            arguments: json!({}),
            grants: Default::default(),
            replaced: None,
        })
    }
}

/// A runner over `store` of [`SecondTimeLucky`], without recovery, and a task of it that
/// retries once after a minute: the executor, the recorder, the runner and the task.
async fn lucky_retried_after_a_minute(
    store: &Arc<dyn Store>,
) -> (Arc<SecondTimeLucky>, Arc<Recorder>, Runner, TaskId) {
    let lucky = Arc::new(SecondTimeLucky::default());
    let (rec, runner) = recorded(store, Arc::new(Fake(lucky.clone())), opts(false));
    let policy = RetryPolicy::new([60_000]).expect("policy");
    let id = submitted(&runner, &**store, "lucky", json!({}), policy).await;
    (lucky, rec, runner, id)
}

/// The retry of [`lucky_retried_after_a_minute`]'s task runs on the store's clock: local time
/// runs on past the retry's minute (the paused clock advances whenever the runtime idles, and
/// any local timer runs out) and nothing runs; once the store's clock reaches the retry, the
/// runner's polling claims it and the second run completes the task. Then the runner stops.
async fn retried_on_the_store_clock(
    clock: &ManualClock,
    lucky: &SecondTimeLucky,
    rec: &Recorder,
    runner: Runner,
    id: &TaskId,
) {
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(lucky.runs.load(Ordering::SeqCst), 1);
    clock.advance(60_000);
    rec.until("the retry completed the task", |e| {
        stops(e, id).contains(&JobOutcome::Completed)
    })
    .await;
    assert_eq!(lucky.runs.load(Ordering::SeqCst), 2);
    runner.shutdown().await;
}

/// The runner alone, on a paused tokio clock and the store's ManualClock: a retry is
/// refused before its delay on the store's clock and runs once the delay has passed.
#[tokio::test(start_paused = true)]
async fn a_retry_waits_its_delay_on_the_store_clock_with_a_fake_executor() {
    let (clock, store) = memory_on_manual_clock();
    let (lucky, rec, runner, id) = lucky_retried_after_a_minute(&store).await;
    rec.until("the retry was scheduled", |e| {
        stops(e, &id).contains(&JobOutcome::RetryScheduled)
    })
    .await;
    let (t, _) = store.inspect(&id).await.expect("inspect").expect("task");
    assert_eq!(t.retry_at, Some(Timestamp(T0 + 60_000)));
    retried_on_the_store_clock(&clock, &lucky, &rec, runner, &id).await;
}

/// A layer that commits the first `retry_requested` it sees and then answers as a store
/// whose reply was lost: `Unavailable`, though the commit holds.
#[derive(Default, Clone)]
struct LostRetryReply(Arc<std::sync::atomic::AtomicBool>);

#[async_trait::async_trait]
impl snodo_core::store::Layer for LostRetryReply {
    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        let retry = matches!(
            t.event.kind,
            snodo_core::model::EventKind::RetryRequested { .. }
        );
        let committed = t.apply(inner).await?;
        if retry && !self.0.swap(true, Ordering::SeqCst) {
            return Err(snodo_core::store::StoreError::unavailable(
                "the reply to the commit was lost",
            ));
        }
        Ok(committed)
    }
}

/// The runner tries a commit again when the store's reply was lost; the second try is a
/// replay of the first commit, and must arm the retry that commit scheduled. Without
/// recovery nothing else would ever run the task.
#[tokio::test(start_paused = true)]
async fn a_retry_whose_commit_reply_was_lost_keeps_its_schedule() {
    let clock = ManualClock::new(Timestamp(T0));
    let lost = LostRetryReply::default();
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::Layered::over(
        Arc::new(MemoryStore::with_clock(Arc::new(clock.clone()))),
        lost.clone(),
    ));
    let (lucky, rec, runner, id) = lucky_retried_after_a_minute(&store).await;
    rec.until("the first attempt stopped", |e| !stops(e, &id).is_empty())
        .await;
    assert!(lost.0.load(Ordering::SeqCst), "the reply was lost once");
    assert_eq!(rec.stopped(&id), vec![JobOutcome::RetryScheduled]);
    let (t, _) = store.inspect(&id).await.expect("inspect").expect("task");
    assert_eq!(
        (t.retry_at, t.retry_count),
        (Some(Timestamp(T0 + 60_000)), 1)
    );
    retried_on_the_store_clock(&clock, &lucky, &rec, runner, &id).await;
}

/// An attempt the host cannot start (a fuel limit on an engine without fuel metering, a
/// memory limit below the component's initial memory) used to be released and claimed
/// again forever, a store write each time, counted against neither retries nor
/// recoveries. It now fails once its start failures pass `runner.max_start_failures`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_cannot_start_fails_past_the_start_failure_cap() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let options = RunnerOptions {
        max_start_failures: 3,
        ..opts(true)
    };
    let (rec, runner) = recorded_guests(&store, options).await;
    let unstartable = [
        snodo_core::model::ExecutionLimits {
            fuel: Some(1_000_000),
            ..Default::default()
        },
        snodo_core::model::ExecutionLimits {
            memory_bytes: Some(64 << 10),
            ..Default::default()
        },
    ];
    for limits in unstartable {
        let id = TaskId::generate();
        let mut work = tool_call_work(&id, "slow_compute", json!({"seconds": 0}));
        work.limits = limits;
        store
            .create(NewTask::new(id, Scope::new("acme"), work))
            .await
            .expect("create");
        runner.wake();
        let t = await_task(&*store, &rec, &id, |t| t.status.is_terminal()).await;
        assert_eq!(t.status, TaskStatus::Failed, "{limits:?}");
        let Some(snodo_core::model::Outcome::Error(e)) = &t.outcome else {
            panic!("failed without an error: {t:?}");
        };
        let data = e.data.clone().unwrap_or_default();
        assert_eq!(
            (data["kind"].as_str(), data["limit"].as_str(), e.code),
            (Some("limit"), Some("runner.max_start_failures"), -32603),
            "{limits:?}: {e:?}"
        );
        assert_eq!(t.attempt, 4, "three released starts, then the failing one");
        let failures = rec.picked(|e| match e {
            RunnerEvent::StartFailed { task, failures } if *task == id => Some(*failures),
            _ => None,
        });
        assert_eq!(failures, [1, 2, 3, 4]);
    }
    runner.shutdown().await;
}

/// A layer whose `claim_next` panics, `left` more times.
#[derive(Clone)]
struct PanickingClaims {
    left: Arc<AtomicU64>,
}

impl PanickingClaims {
    fn times(n: u64) -> Self {
        Self {
            left: Arc::new(AtomicU64::new(n)),
        }
    }
}

#[async_trait::async_trait]
impl snodo_core::store::Layer for PanickingClaims {
    async fn claim_next(
        &self,
        inner: &dyn Store,
        request: &snodo_core::store::ClaimRequest,
    ) -> StoreResult<snodo_core::store::NextClaim> {
        let panics = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        assert!(!panics, "claim_next panics (a bug under test)");
        inner.claim_next(request).await
    }
}

/// A panic in the recovery loop used to end it for the life of the process: nothing was
/// claimed again. The loop is supervised: restarted after a backoff, counted, and work
/// created meanwhile is claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_recovery_loop_is_restarted_counted_and_reported() {
    let store: Arc<dyn Store> = layered_memory(PanickingClaims::times(2));
    let options = RunnerOptions {
        loop_backoff: Duration::from_millis(10),
        ..opts(true)
    };
    let (rec, runner) = recorded_guests(&store, options).await;
    let id = create(
        &*store,
        "slow_compute",
        json!({"seconds": 0}),
        RetryPolicy::none(),
    )
    .await;
    runner.wake();
    completed(&*store, &rec, &id).await;
    let restarts = rec.picked(|e| match e {
        RunnerEvent::LoopRestarted {
            name: "recover",
            backoff,
        } => Some(*backoff),
        _ => None,
    });
    assert_eq!(
        restarts,
        [Duration::from_millis(10), Duration::from_millis(20)],
        "each panic is counted, and the backoff doubles"
    );
    assert!(runner.loops_down().is_empty());
    runner.shutdown().await;
}

/// While a panicked loop waits out its backoff the node is not ready: `/readyz` says
/// which loop is down, and shutdown does not wait for the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_loop_that_is_down_makes_the_node_unready() {
    let store: Arc<dyn Store> = layered_memory(PanickingClaims::times(u64::MAX));
    let options = RunnerOptions {
        loop_backoff: Duration::from_secs(3_600),
        ..opts(true)
    };
    let (_rec, runner) = recorded_guests(&store, options).await;
    let server = Arc::new(snodo_server::mcp::McpServer::new(
        store.clone(),
        runner.clone(),
        snodo_server::mcp::ServerConfig {
            name: "snodo-test".into(),
            version: "0".into(),
            catalog: Arc::new(snodo_runner::Catalogs::new(registry().await)),
            limits: Default::default(),
            scopes: Default::default(),
            trace_context: false,
            tracer: Default::default(),
        },
    ));
    let app = snodo_server::http::router(server, snodo_server::http::HttpConfig::default());
    common::eventually("the recovery loop to be down", || async {
        (runner.loops_down() == ["recover"]).then_some(())
    })
    .await;
    let ready = axum::http::Request::get("/readyz")
        .header("host", "localhost")
        .body(axum::body::Body::empty())
        .expect("request");
    let resp = tower::ServiceExt::oneshot(app, ready)
        .await
        .expect("response");
    assert_eq!(resp.status(), 503);
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&body),
        "not ready: the runner's recover loop is not running"
    );
    tokio::time::timeout(Duration::from_secs(20), runner.shutdown())
        .await
        .expect("shutdown does not wait out a loop's backoff");
}

/// Runs until it is dropped, writing down when each attempt began and when its future was
/// dropped.
#[derive(Default)]
struct Hangs {
    log: Mutex<Vec<String>>,
    changed: tokio::sync::Notify,
}

impl Hangs {
    fn note(&self, what: String) {
        self.log.lock().expect("lock").push(what);
        self.changed.notify_waiters();
    }

    async fn until(&self, n: usize) -> Vec<String> {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let changed = self.changed.notified();
                let log = self.log.lock().expect("lock").clone();
                if log.len() >= n {
                    return log;
                }
                changed.await;
            }
        })
        .await
        .expect("the attempts were logged")
    }
}

struct Dropped<'a>(&'a Hangs, u32);

impl Drop for Dropped<'_> {
    fn drop(&mut self) {
        self.0.note(format!("end {}", self.1));
    }
}

#[async_trait::async_trait]
impl snodo_wasm::Executable for Hangs {
    async fn execute(&self, exec: snodo_wasm::Execution) -> snodo_wasm::ExecutionReport {
        self.note(format!("start {}", exec.attempt));
        let _dropped = Dropped(self, exec.attempt);
        std::future::pending::<snodo_wasm::ExecutionReport>().await
    }
}

/// A task reclaimed by the runner that already runs it (its lease ran out on the store's
/// clock while its guest hung): the old attempt is stopped, its guest dropped, before the
/// new one starts, so two guests of one task never overlap on a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_on_the_same_runner_stops_the_old_attempt_before_the_new_one_starts() {
    let (clock, store) = memory_on_manual_clock();
    let hangs = Arc::new(Hangs::default());
    let options = RunnerOptions {
        // No renewal moves the lease while the store's clock jumps past it.
        heartbeat: Duration::from_secs(3_000),
        lease: Duration::from_secs(30),
        // The second guest hangs too: shutdown releases it at once.
        drain_timeout: Duration::ZERO,
        ..opts(true)
    };
    let (rec, runner) = recorded(&store, Arc::new(Fake(hangs.clone())), options);
    let id = create(&*store, "hangs", json!({}), RetryPolicy::none()).await;
    runner.wake();
    assert_eq!(hangs.until(1).await, ["start 1"]);
    clock.advance(31_000);
    runner.wake();
    assert_eq!(hangs.until(3).await, ["start 1", "end 1", "start 2"]);
    rec.until("the first attempt reported its replacement", |e| {
        stops(e, &id) == [JobOutcome::Superseded]
    })
    .await;
    let t = task(&*store, &id).await;
    assert_eq!((t.generation, t.recoveries), (2, 1));
    runner.shutdown().await;
}

/// Completes at once.
struct Completes;

#[async_trait::async_trait]
impl snodo_wasm::Executable for Completes {
    async fn execute(&self, _exec: snodo_wasm::Execution) -> snodo_wasm::ExecutionReport {
        report(empty_result())
    }
}

/// A commit that takes an hour is awaited: the attempt reports no failure and no lost lease
/// while it waits, and the task completes once the store answers. (Time is tokio's paused
/// clock: an hour passes while the commit is held.)
#[tokio::test(start_paused = true)]
async fn a_slow_commit_is_awaited_never_failed_by_a_timeout() {
    let gate = HeldCompletions::default();
    let (_clock, inner) = memory_on_manual_clock();
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::Layered::over(inner, gate.clone()));
    let options = RunnerOptions {
        heartbeat: Duration::from_secs(600),
        ..opts(false)
    };
    let (rec, runner) = recorded(&store, Arc::new(Fake(Arc::new(Completes))), options);
    let id = submitted(
        &runner,
        &*store,
        "completes",
        json!({}),
        RetryPolicy::none(),
    )
    .await;
    gate.0.until_held(1).await;
    tokio::time::sleep(Duration::from_secs(3_600)).await;
    assert!(stops(&rec.events.lock().expect("lock"), &id).is_empty());
    assert_eq!(task(&*store, &id).await.status, TaskStatus::Working);
    gate.0.open();
    rec.until("the held completion committed", |e| {
        stops(e, &id) == [JobOutcome::Completed]
    })
    .await;
    assert_eq!(task(&*store, &id).await.status, TaskStatus::Completed);
    runner.shutdown().await;
}

/// A layer that commits every `create_claimed` and then holds its answer at its gate.
#[derive(Default, Clone)]
struct HeldCreations(common::Gate);

#[async_trait::async_trait]
impl snodo_core::store::Layer for HeldCreations {
    async fn create_claimed(
        &self,
        inner: &dyn Store,
        new: NewTask,
        request: &snodo_core::store::ClaimRequest,
    ) -> StoreResult<snodo_core::store::Claimed> {
        let claimed = inner.create_claimed(new, request).await?;
        self.0.hold().await;
        Ok(claimed)
    }
}

/// A task created, claimed and started in one commit whose caller went away before the
/// answer came still gets its attempt: the claim is not left to wait out its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_task_starts_though_its_caller_left_before_the_answer() {
    let gate = HeldCreations::default();
    let store: Arc<dyn Store> = layered_memory(gate.clone());
    let (rec, runner) = recorded(&store, Arc::new(Fake(Arc::new(Completes))), opts(false));
    let new = new_task("completes", json!({}));
    let id = new.id;
    let caller = tokio::spawn({
        let runner = runner.clone();
        async move { runner.create(new).await }
    });
    gate.0.until_held(1).await;
    caller.abort();
    assert!(caller.await.is_err(), "the caller went away mid-commit");
    gate.0.open();
    completed(&*store, &rec, &id).await;
    assert_eq!(
        store_ops(&rec, "claim"),
        0,
        "started by its creation's claim"
    );
    runner.shutdown().await;
}

/// Counts the `claim_next` commits that claimed, and how many each took.
#[derive(Default, Clone)]
struct Batches(Arc<std::sync::Mutex<Vec<usize>>>);

#[async_trait::async_trait]
impl snodo_core::store::Layer for Batches {
    async fn claim_next(
        &self,
        inner: &dyn Store,
        request: &snodo_core::store::ClaimRequest,
    ) -> StoreResult<snodo_core::store::NextClaim> {
        let next = inner.claim_next(request).await?;
        if next.claimed.is_some() {
            self.0.lock().expect("lock").push(1 + next.more.len());
        }
        Ok(next)
    }
}

/// With `claim_batch`, the recovery loop claims as many queued tasks as it has free slots
/// in one commit: twenty tasks waiting in the store run in a few claiming commits, never
/// more than the batch at once, and each runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_tasks_are_claimed_a_batch_per_commit() {
    let batches = Batches::default();
    let store = layered_memory(batches.clone());
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(
            store
                .create(new_task("completes", json!({})))
                .await
                .expect("create")
                .id,
        );
    }
    // Nine slots, one kept for a tenant holding none: eight for this one.
    let options = RunnerOptions {
        claim_batch: Some(8),
        max_concurrent: 9,
        max_running_per_tenant: 8,
        ..opts(true)
    };
    let (rec, runner) = recorded(&store, Arc::new(Fake(Arc::new(Completes))), options);
    for id in &ids {
        completed(&*store, &rec, id).await;
    }
    let events = rec.events.lock().expect("lock").clone();
    for id in &ids {
        assert_eq!(starts(&events, id), 1, "task {id} ran once");
    }
    let sizes = batches.0.lock().expect("lock").clone();
    assert_eq!(
        sizes.iter().sum::<usize>(),
        20,
        "no claim given back: a batch counts only the slots it can take: {sizes:?}"
    );
    assert!(
        sizes.iter().all(|n| (1..=8).contains(n)) && sizes.len() < 20 && sizes[0] == 8,
        "the first commit takes a full batch, none more than 8: {sizes:?}"
    );
    runner.shutdown().await;
}
