//! The runner: turns stored tasks into executions of fresh guests, and keeps the store's
//! promises under crashes.
//!
//! A [`Runner`] is started explicitly and runs beside (never inside) any request. It claims
//! tasks (exactly, on [`Runner::submit`]; or whatever is due, when `recover` is on), renews
//! their leases while the guest runs, commits outcomes with the lease's generation, parks
//! guests that wait too long for input, stops attempts whose task was cancelled or reaped,
//! and drains on shutdown. Store time decides when retries are due; local timers only make
//! the runner look sooner.

mod attempt;
pub mod budget;
mod catalog;
mod instrument;
mod spans;
mod task_io;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::budget::{Slot, Slots};
use crate::spans::ClaimTime;
use snodo_core::config::{SettingError, millis};
use snodo_core::model::{Scope, Task, TaskId, Work};
use snodo_core::store::{ClaimRequest, Claimed, Lease, NewTask, Reaped, Store, StoreError};
use snodo_wasm::CancelToken;

pub use catalog::{
    Catalog, CatalogConflict, CatalogSource, CatalogTool, Catalogs, ComponentPolicy,
    DEFAULT_TTL_MS, Executors, Fallback, RETAINED_CATALOGS, Resolved, TASK_RESULT_TOOL, TOOL_CALL,
    Unresolved, tool_call_work,
};
pub use instrument::{
    EventChannel, Instrumentation, JobOutcome, NoInstrumentation, RunnerEvent,
    TracingInstrumentation,
};
pub use task_io::{InputWaiters, TaskIo};

/// Runner settings, and the `[runner]` section of the configuration file (times in
/// milliseconds, under the names with `_ms`). The fields the file does not name are set by
/// `snodo serve` from other sections (`outbound.journal_task_bytes`,
/// `limits.stored_bytes_per_tenant`) or are the runtime's (the tracer).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerOptions {
    /// Who claims, for operators (e.g. the host name).
    #[serde(skip)]
    pub owner: String,
    /// Pick up unclaimed work, expired leases and due retries with `claim_next` (default
    /// true).
    pub recover: bool,
    /// Lease length (`lease_ms`, default 30 000; at most an hour).
    #[serde(rename = "lease_ms", with = "millis")]
    pub lease: Duration,
    /// How often a running attempt renews its lease (`heartbeat_ms`, default 10 000; well
    /// under `lease`).
    #[serde(rename = "heartbeat_ms", with = "millis")]
    pub heartbeat: Duration,
    /// How often expired tasks are reaped (`reap_interval_ms`, default 60 000); `None`
    /// never, which the file cannot ask for (tasks past their TTL would hold their place
    /// under the task caps for good).
    #[serde(rename = "reap_interval_ms", with = "millis::option")]
    pub reap_interval: Option<Duration>,
    /// Most attempts running at once on this node, all tenants together (default 64).
    pub max_concurrent: usize,
    /// Most attempts of one tenant running at once on this node (default 48). Work of a
    /// tenant at its share waits (in a per-tenant queue served round-robin, or in the
    /// store for the recovery loop) while other tenants' work starts.
    pub max_running_per_tenant: usize,
    /// How often a task may be recovered (its claim ended without the worker letting go:
    /// a lost lease or a crashed process) before it fails with `data.kind = "limit"`
    /// instead of running again (default 10).
    pub max_recoveries: u32,
    /// How often an attempt of a task may fail to start its guest on this node (the host
    /// refused to instantiate it: a memory limit below the component's initial memory, a
    /// fuel limit on an engine without metering, every instance slot busy) before the task
    /// fails with `data.kind = "limit"` instead of being released and claimed again
    /// (default 5).
    pub max_start_failures: u32,
    /// What recovery does with a task whose component version is no longer deployed:
    /// `pinned` (the default: it fails) or `latest` (it runs the deployed version). The
    /// catalog applies it ([`Catalog::set_component_policy`]).
    pub component_policy: ComponentPolicy,
    /// How long a runner loop that panicked stays down before it runs again; doubled after
    /// each panic up to [`MAX_LOOP_BACKOFF`], and back to this once the loop has run that
    /// long without one.
    #[serde(skip)]
    pub loop_backoff: Duration,
    /// How long a guest may wait for input before it is released (`park_after_ms`,
    /// default 30 000).
    #[serde(rename = "park_after_ms", with = "millis")]
    pub park_after: Duration,
    /// The shortest sleep of a task that parks it (`sleep_park_after_ms`, default 1 000):
    /// its guest is stopped, its slot freed and its wake time committed, and a fresh guest
    /// replays it when the time comes. Shorter sleeps wait in place. 0 parks every sleep
    /// that has time left; shorter than `attempt_wall_clock_ms`.
    #[serde(rename = "sleep_park_after_ms", with = "millis")]
    pub sleep_park_after: Duration,
    /// The most due tasks the recovery loop claims in one commit (`claim_batch`, 1 to 32):
    /// as many as there are free slots, up to this. A wake or a recovery burst then costs a
    /// commit a batch rather than a commit a task. Unset: [`CLAIM_BATCH_SHARED`] on a
    /// shared store, whose claims are transactions of a few milliseconds, and 1 on the
    /// others, whose claims cost less than what a batch loses to the requests that take
    /// the same free slots meanwhile (docs/performance.md).
    pub claim_batch: Option<usize>,
    /// The wall clock of an attempt whose tool sets none (`limits.wall_clock_ms`): time in
    /// imports, waiting for input and waiting for a CPU turn included. An attempt past it
    /// is stopped and its task fails with `data.limit = "wall_clock"`, so a guest that only
    /// sleeps cannot hold an execution slot for longer (`attempt_wall_clock_ms`, default
    /// 900 000; longer than `park_after`).
    #[serde(rename = "attempt_wall_clock_ms", with = "millis")]
    pub attempt_wall_clock: Duration,
    /// The most bytes one task's outbound journal holds (`outbound.journal_task_bytes`,
    /// default 8 MiB); a response that would pass it fails its request.
    #[serde(skip)]
    pub journal_task_bytes: u64,
    /// The most bytes one scope's stored tasks and journals may hold
    /// (`limits.stored_bytes_per_tenant`): given with every creation that names no cap of
    /// its own and with every journal entry, which the store refuses past it. `None`
    /// (the default) never refuses.
    #[serde(skip)]
    pub stored_bytes_per_tenant: Option<u64>,
    /// How long a cancelled guest may keep running before it is stopped
    /// (`cancel_grace_ms`).
    #[serde(rename = "cancel_grace_ms", with = "millis")]
    pub cancel_grace: Duration,
    /// How often the recovery loop looks for due work when nothing woke it.
    #[serde(skip)]
    pub poll_interval: Duration,
    /// How long shutdown lets attempts finish before releasing them (`drain_timeout_ms`,
    /// default 10 000).
    #[serde(rename = "drain_timeout_ms", with = "millis")]
    pub drain_timeout: Duration,
    /// Where attempts' spans go, and which are sampled (disabled by default).
    #[serde(skip)]
    pub tracer: snodo_core::spans::Tracer,
    /// What keeps tasks before the reaper removes them (`[archive]`); none by default,
    /// and then the reaper removes them at once.
    #[serde(skip)]
    pub archive: Option<Arc<dyn Archive>>,
}

/// What keeps tasks past their TTL before the reaper removes them: an archive.
///
/// The reaper hands it a batch of tasks past their TTL and removes exactly those it kept,
/// only after [`Archive::keep`] returned: no task is reaped unkept. A batch may come again
/// (a crash between keeping and removing, another node's reaper reading the same tasks),
/// so keeping a task twice must leave what keeping it once leaves; a task past its TTL
/// never changes, so both keep the same thing.
#[async_trait::async_trait]
pub trait Archive: std::fmt::Debug + Send + Sync + 'static {
    /// Keeps every task of `tasks` durably, or fails and keeps the reaper from removing
    /// any of them (it tries again at its next round).
    async fn keep(&self, tasks: &[(Task, Work)]) -> Result<(), String>;
}

/// How many tasks past their TTL the reaper hands an archive at once.
pub const ARCHIVE_BATCH: usize = 100;

impl Default for RunnerOptions {
    fn default() -> Self {
        Self {
            owner: "snodo".into(),
            recover: true,
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            reap_interval: Some(Duration::from_secs(60)),
            max_concurrent: 64,
            max_running_per_tenant: 48,
            max_recoveries: 10,
            max_start_failures: 5,
            component_policy: ComponentPolicy::default(),
            loop_backoff: Duration::from_millis(100),
            park_after: Duration::from_secs(30),
            sleep_park_after: Duration::from_secs(1),
            claim_batch: None,
            attempt_wall_clock: Duration::from_secs(15 * 60),
            journal_task_bytes: 8 << 20,
            stored_bytes_per_tenant: None,
            cancel_grace: snodo_wasm::DEFAULT_CANCEL_GRACE,
            poll_interval: Duration::from_millis(500),
            drain_timeout: Duration::from_secs(10),
            tracer: snodo_core::spans::Tracer::disabled(),
            archive: None,
        }
    }
}

impl RunnerOptions {
    /// The rules of `[runner]`, each naming its key (relative to the section).
    pub fn check(&self) -> Result<(), SettingError> {
        if self.reap_interval.is_some_and(|r| r.is_zero()) {
            // Every served task counts against limits.stored_tasks_per_tenant, and a task
            // past its TTL keeps its place until the reaper removes it.
            return Err(SettingError::new(
                "reap_interval_ms",
                "at least 1: without the reaper, tasks past their TTL would hold their place under limits.stored_tasks_per_tenant and limits.live_tasks_per_tenant for good",
            ));
        }
        if self.lease.is_zero() || self.lease > Duration::from_secs(3_600) {
            return Err(SettingError::new("lease_ms", "a lease is 1..=3600000 ms"));
        }
        if self.heartbeat.is_zero() || self.heartbeat >= self.lease {
            return Err(SettingError::new(
                "heartbeat_ms",
                "the heartbeat must be positive and shorter than the lease",
            ));
        }
        if self.attempt_wall_clock <= self.park_after {
            return Err(SettingError::new(
                "attempt_wall_clock_ms",
                format!(
                    "must be longer than runner.park_after_ms ({} ms), or an attempt waiting for input would be stopped before it parks",
                    self.park_after.as_millis()
                ),
            ));
        }
        if self.sleep_park_after >= self.attempt_wall_clock {
            return Err(SettingError::new(
                "sleep_park_after_ms",
                format!(
                    "must be shorter than runner.attempt_wall_clock_ms ({} ms), or a sleep waiting in place would be stopped by the wall clock instead of parking",
                    self.attempt_wall_clock.as_millis()
                ),
            ));
        }
        if self
            .claim_batch
            .is_some_and(|b| !(1..=snodo_core::store::MAX_CLAIM_BATCH).contains(&b))
        {
            return Err(SettingError::new(
                "claim_batch",
                format!("1 to {}", snodo_core::store::MAX_CLAIM_BATCH),
            ));
        }
        if self.max_concurrent == 0 {
            return Err(SettingError::new(
                "max_concurrent",
                "at least one attempt must be able to run",
            ));
        }
        if self.max_running_per_tenant == 0 {
            return Err(SettingError::new(
                "max_running_per_tenant",
                "at least one attempt of a tenant must be able to run",
            ));
        }
        Ok(())
    }
}

/// The longest a panicked runner loop stays down before it runs again.
pub const MAX_LOOP_BACKOFF: Duration = Duration::from_secs(30);

/// `runner.claim_batch` on a shared (PostgreSQL) store unless configured.
pub const CLAIM_BATCH_SHARED: usize = 16;

/// What [`Runner::submit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// An attempt started.
    Started,
    /// No execution slot is free for its tenant now: it starts when one is (the task is
    /// due in the store and queued here).
    Queued,
    /// Another live lease holds the task.
    Busy,
    /// A retry backoff runs; the task is due then.
    NotDue,
    /// The task waits for an answer to its question; the answer submits it again.
    Parked,
    /// The task has finished.
    Terminal,
    /// No such task (or it expired).
    NotFound,
}

/// A running attempt on this node.
struct Local {
    id: u64,
    cancel: CancelToken,
    lease: Arc<Mutex<Lease>>,
    handle: Option<JoinHandle<()>>,
    /// Why the attempt was stopped from outside, for its `JobStopped` event.
    stop_reason: Arc<Mutex<Option<JobOutcome>>>,
}

/// The tasks whose outcome this node is committing, each with what wakes those waiting for
/// the commit to end ([`Runner::settled`]).
#[derive(Default)]
pub(crate) struct Settling(Mutex<HashMap<TaskId, Arc<Notify>>>);

impl Settling {
    /// Marks `task` settling until the guard is dropped (the commit answered, or failed).
    pub(crate) fn begin(&self, task: &TaskId) -> SettlingGuard<'_> {
        self.0.lock().entry(*task).or_default();
        SettlingGuard {
            settling: self,
            task: *task,
        }
    }

    /// Waits, at most `within`, until `task` is no longer settling: whether it was.
    async fn wait(&self, task: &TaskId, within: Duration) -> bool {
        let Some(done) = self.0.lock().get(task).cloned() else {
            return false;
        };
        let committed = done.notified();
        tokio::pin!(committed);
        committed.as_mut().enable();
        // The commit may have ended between the lookup and the registration.
        if !self.0.lock().contains_key(task) {
            return true;
        }
        let _ = tokio::time::timeout(within, committed).await;
        true
    }
}

/// Ends a task's settling when dropped, waking whoever waits for it.
pub(crate) struct SettlingGuard<'a> {
    settling: &'a Settling,
    task: TaskId,
}

impl Drop for SettlingGuard<'_> {
    fn drop(&mut self) {
        if let Some(done) = self.settling.0.lock().remove(&self.task) {
            done.notify_waiters();
        }
    }
}

/// Counters an operator can read, counted from the same events the instrumentation
/// receives, so they always agree with the metrics.
#[derive(Debug, Default)]
pub struct RunnerStats {
    /// Attempts started.
    pub started: AtomicU64,
    /// Attempts that ended, by any outcome.
    pub finished: AtomicU64,
    /// Retries scheduled.
    pub retries: AtomicU64,
    /// Attempts of tasks that had been claimed before.
    pub recoveries: AtomicU64,
    /// Guests released while parked on input.
    pub parked_released: AtomicU64,
    /// Guests released while sleeping (their tasks sleep in the store).
    pub slept: AtomicU64,
    /// Attempts running now.
    pub active: AtomicUsize,
}

/// Counts [`RunnerStats`] from the events, then passes them on.
struct Counted {
    stats: Arc<RunnerStats>,
    next: Arc<dyn Instrumentation>,
}

impl Instrumentation for Counted {
    fn event(&self, event: &RunnerEvent) {
        let s = &self.stats;
        match event {
            RunnerEvent::JobStarted { recovered, .. } => {
                s.started.fetch_add(1, Ordering::Relaxed);
                s.active.fetch_add(1, Ordering::Relaxed);
                if *recovered {
                    s.recoveries.fetch_add(1, Ordering::Relaxed);
                }
            }
            RunnerEvent::JobStopped { outcome, .. } => {
                s.finished.fetch_add(1, Ordering::Relaxed);
                s.active.fetch_sub(1, Ordering::Relaxed);
                match outcome {
                    JobOutcome::RetryScheduled => {
                        s.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    JobOutcome::Parked => {
                        s.parked_released.fetch_add(1, Ordering::Relaxed);
                    }
                    JobOutcome::Slept => {
                        s.slept.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        self.next.event(event);
    }
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) executors: Arc<dyn Executors>,
    pub(crate) opts: RunnerOptions,
    pub(crate) instr: Arc<dyn Instrumentation>,
    pub(crate) waiters: Arc<InputWaiters>,
    pub(crate) stats: Arc<RunnerStats>,
    /// Execution slots: per tenant and for the node.
    pub(crate) running: Arc<Slots>,
    /// Tasks waiting for a slot, per tenant, served round-robin.
    queue: Mutex<FairQueue>,
    attempts: Mutex<HashMap<TaskId, Local>>,
    attempts_changed: Notify,
    next_id: AtomicU64,
    wake: Notify,
    /// When the recovery loop, idle, looks again, and the earliest wake it was told of.
    looking: Mutex<Looking>,
    /// Cancelled when shutdown begins: loops and retry timers end on it.
    pub(crate) stopping: CancellationToken,
    /// Every attempt and retry timer, so shutdown can wait until none holds the store.
    pub(crate) tasks: TaskTracker,
    /// The loops that should be running, and whether each is (a panicked loop is down for
    /// its backoff).
    loops_up: Mutex<Vec<(&'static str, bool)>>,
    /// Start failures per task on this node (see [`RunnerOptions::max_start_failures`]).
    start_failures: Mutex<HashMap<TaskId, u32>>,
    /// The tasks whose outcome this node is committing ([`Runner::settled`]).
    pub(crate) settling: Settling,
    /// Whether `start_failures` was ever written: until then an attempt's end skips it.
    any_start_failures: std::sync::atomic::AtomicBool,
}

/// The idle recovery loop's plan: when it looks for due work next (`None` while it is
/// claiming), and the earliest time a sleep that parked here is due that the loop has not
/// passed yet. The store answers when the next task is due with every empty claim; the hint
/// covers a sleep committed after that answer.
#[derive(Default)]
struct Looking {
    planned: Option<tokio::time::Instant>,
    hint: Option<tokio::time::Instant>,
}

/// Tells the recovery loop that a task is due `wait` from now (a sleep parked on this node),
/// waking it if it planned to look later. Without the recovery loop a timer submits the
/// task then.
pub(crate) fn due_in(inner: &Arc<Inner>, task: TaskId, wait: Duration) {
    if !inner.opts.recover {
        attempt::schedule_retry(inner.clone(), task, wait);
        return;
    }
    let at = tokio::time::Instant::now() + wait;
    let mut looking = inner.looking.lock();
    looking.hint = Some(looking.hint.map_or(at, |h| h.min(at)));
    if looking.planned.is_some_and(|p| at < p) {
        looking.planned = Some(at);
        inner.wake.notify_one();
    }
}

/// The runner. Cloning shares it.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
    loops: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Runner {
    /// Starts a runner over `store`, resolving work with `executors`.
    pub fn start(
        store: Arc<dyn Store>,
        executors: Arc<dyn Executors>,
        opts: RunnerOptions,
        instr: Arc<dyn Instrumentation>,
    ) -> Self {
        let stats = Arc::new(RunnerStats::default());
        let instr: Arc<dyn Instrumentation> = Arc::new(Counted {
            stats: stats.clone(),
            next: instr,
        });
        let inner = Arc::new(Inner {
            store,
            executors,
            running: Slots::new(
                "runner.max_running_per_tenant",
                opts.max_running_per_tenant.max(1),
                "runner.max_concurrent",
                opts.max_concurrent.max(1),
            ),
            queue: Mutex::new(FairQueue::default()),
            opts,
            instr,
            waiters: Arc::new(InputWaiters::new()),
            stats,
            attempts: Mutex::new(HashMap::new()),
            attempts_changed: Notify::new(),
            settling: Settling::default(),
            next_id: AtomicU64::new(1),
            wake: Notify::new(),
            looking: Mutex::new(Looking::default()),
            stopping: CancellationToken::new(),
            tasks: TaskTracker::new(),
            loops_up: Mutex::new(Vec::new()),
            start_failures: Mutex::new(HashMap::new()),
            any_start_failures: std::sync::atomic::AtomicBool::new(false),
        });
        let mut loops = Vec::new();
        if inner.opts.recover {
            loops.push(supervise(&inner, "recover", recover_loop));
        }
        if let Some(every) = inner.opts.reap_interval {
            loops.push(supervise(&inner, "reap", move |inner| {
                reap_loop(inner, every)
            }));
        }
        Self {
            inner,
            loops: Arc::new(Mutex::new(loops)),
        }
    }

    /// The registry parked attempts wait on; the request path notifies it after the store
    /// accepted input (see [`Runner::input_accepted`]).
    pub fn waiters(&self) -> &Arc<InputWaiters> {
        &self.inner.waiters
    }

    /// Counters.
    pub fn stats(&self) -> &RunnerStats {
        &self.inner.stats
    }

    /// The options it was started with.
    pub fn options(&self) -> &RunnerOptions {
        &self.inner.opts
    }

    /// Whether at least `n` parked guests were released and no attempt runs now: a
    /// batch of tasks waiting for input has settled into the store.
    pub fn settled_parked(&self, n: u64) -> bool {
        self.inner.stats.parked_released.load(Ordering::Relaxed) >= n && self.active() == 0
    }

    /// The runner's loops (`recover`, `reap`) that are not running now: a loop that
    /// panicked is down until its backoff ends. `/readyz` reports them.
    pub fn loops_down(&self) -> Vec<&'static str> {
        self.inner
            .loops_up
            .lock()
            .iter()
            .filter(|(_, up)| !up)
            .map(|(name, _)| *name)
            .collect()
    }

    /// Attempts running on this node now.
    pub fn active(&self) -> usize {
        self.lock_attempts().len()
    }

    fn lock_attempts(&self) -> parking_lot::MutexGuard<'_, HashMap<TaskId, Local>> {
        self.inner.attempts.lock()
    }

    /// Claims exactly `task` and runs it, or queues it when its tenant has no free
    /// execution slot (then it starts when one frees).
    pub async fn submit(&self, task: &TaskId) -> Result<Submitted, StoreError> {
        submit_inner(&self.inner, task, None).await
    }

    /// Creates `new` and runs it. With an execution slot free for its tenant, the task is
    /// created, claimed and started in one commit (a commit fewer than creating and then
    /// submitting) and its attempt begins at once; otherwise it is created unclaimed and
    /// queued here, like a submit that found no slot. Returns the committed task.
    ///
    /// Once the store acknowledged the creation the attempt starts even if the caller's
    /// future is dropped: a task claimed here with no attempt would wait out its lease.
    pub async fn create(&self, mut new: NewTask) -> Result<Task, StoreError> {
        let inner = &self.inner;
        if new.max_stored_bytes_in_scope.is_none() {
            new.max_stored_bytes_in_scope = inner.opts.stored_bytes_per_tenant;
        }
        let scope = new.scope.clone();
        let slot = match inner.running.try_acquire(scope.as_str()) {
            Ok(slot) if !inner.stopping.is_cancelled() => slot,
            _ => {
                let task = inner.store.create(new).await?;
                if !inner.stopping.is_cancelled() {
                    enqueue(inner, scope, task.id);
                }
                return Ok(task);
            }
        };
        // The commit runs apart from the caller, which waits only for its answer: the
        // committed task and its `Start`.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let inner = inner.clone();
        self.inner.tasks.spawn(async move {
            let req = start_request(&inner);
            let (created, claim) = ClaimTime::of(
                "create_claimed",
                timed(
                    &inner,
                    "create_claimed",
                    inner.store.create_claimed(new, &req),
                ),
            )
            .await;
            match created {
                Ok(claimed) => {
                    let task = claimed.task.clone();
                    let start = Start {
                        inner: inner.clone(),
                        claimed: Some((claimed, slot, claim)),
                    };
                    // A caller that went away drops what was sent to it, and with it the
                    // `Start`: the attempt starts all the same.
                    let _ = tx.send(Ok((task, start)));
                }
                Err(e) => {
                    drop(slot);
                    slot_freed(&inner);
                    let _ = tx.send(Err(e));
                }
            }
        });
        let (task, start) = rx
            .await
            .map_err(|_| StoreError::unavailable("the task creation was abandoned"))??;
        // Started from the caller's own task, which runs on to send its reply before this
        // worker turns to the attempt.
        drop(start);
        Ok(task)
    }

    /// Tells the runner that the store committed a cancellation of `task`: the attempt's
    /// token flips now and its guest is stopped after the grace period. (Runners on other
    /// nodes learn it from their next lease renewal.)
    pub fn cancel(&self, task: &TaskId) {
        if let Some(a) = self.lock_attempts().get(task) {
            a.cancel.cancel();
        }
    }

    /// Tells the runner that the store accepted input for `task`. A live waiting guest is
    /// woken; a parked task whose last question was answered is started again.
    pub async fn input_accepted(&self, task: &TaskId, complete: bool) {
        self.inner.waiters.notify(task);
        let live = self.lock_attempts().contains_key(task);
        if complete && !live {
            // Started beside the caller (a tasks/update must not wait for an execution
            // slot); the recovery loop, here or on another node, finds it otherwise.
            let runner = self.clone();
            let task = *task;
            self.inner.tasks.spawn(async move {
                let _ = runner.submit(&task).await;
            });
        }
    }

    /// Tells the runner that another node accepted input for `task` (a shared store
    /// announced it): a guest waiting on it here re-reads its answers, and the recovery
    /// loop looks for due work (a parked task whose last question was answered).
    pub fn remote_input_accepted(&self, task: &TaskId) {
        self.inner.waiters.notify(task);
        if !self.lock_attempts().contains_key(task) {
            self.wake();
        }
    }

    /// Tells the runner that another node cancelled `task`. An attempt here is stopped
    /// once the store confirms the task finished: the announcement is a hint, the store
    /// the authority. (Without the announcement the next heartbeat finds it.)
    pub async fn remote_cancelled(&self, task: &TaskId) {
        if !self.lock_attempts().contains_key(task) {
            return;
        }
        if let Ok(Some((t, _))) = self.inner.store.inspect(task).await
            && t.status.is_terminal()
        {
            self.cancel(task);
        }
    }

    /// Runs `work` beside the runner's attempts and timers: shutdown waits for it. The
    /// request path hands its committed changes over through this, so a request dropped
    /// mid-commit cannot drop the hand-off.
    pub fn spawn_tracked<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.inner.tasks.spawn(work);
    }

    /// Waits, at most `within`, for the commit of `task`'s outcome when this node is
    /// committing one (its guest has returned): whether it was. A read of a task about to
    /// finish then answers the status it reaches, not the one it is leaving: on a store
    /// whose commit waits for the disk, a client polling at short intervals otherwise sees
    /// it working once or twice more. A task not settling here returns `false` at once.
    pub async fn settled(&self, task: &TaskId, within: Duration) -> bool {
        self.inner.settling.wait(task, within).await
    }

    /// Wakes the recovery loop (e.g. after creating tasks).
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Stops claiming, lets running attempts finish within the drain timeout, then stops
    /// the rest and releases their leases so another runner can take them at once.
    /// Returns how many attempts were released.
    pub async fn shutdown(&self) -> usize {
        // Loops and retry timers end on this token.
        self.inner.stopping.cancel();
        let loops: Vec<JoinHandle<()>> = std::mem::take(&mut *self.loops.lock());
        for l in loops {
            let _ = l.await;
        }
        let drained = tokio::time::timeout(self.inner.opts.drain_timeout, async {
            loop {
                let changed = self.inner.attempts_changed.notified();
                if self.lock_attempts().is_empty() {
                    return;
                }
                changed.await;
            }
        })
        .await;
        let mut released = 0;
        if drained.is_err() {
            released = self.release_rest().await;
        }
        // Wait until no attempt or timer holds the store any more.
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        released
    }

    async fn release_rest(&self) -> usize {
        let rest: Vec<Local> = self.lock_attempts().drain().map(|(_, a)| a).collect();
        let mut released = 0;
        for mut a in rest {
            stop_local(&mut a, JobOutcome::Released).await;
            let lease = a.lease.lock().clone();
            if timed(&self.inner, "release", self.inner.store.release(&lease))
                .await
                .is_ok()
            {
                released += 1;
            }
        }
        self.inner.attempts_changed.notify_waiters();
        released
    }
}

pub(crate) async fn submit_inner(
    inner: &Arc<Inner>,
    task: &TaskId,
    scope: Option<&Scope>,
) -> Result<Submitted, StoreError> {
    if inner.stopping.is_cancelled() {
        return Err(StoreError::unavailable("the runner is shutting down"));
    }
    let scope = match scope {
        Some(s) => s.clone(),
        None => match inner.store.inspect(task).await? {
            Some((t, _)) => t.scope,
            None => return Ok(Submitted::NotFound),
        },
    };
    let slot = match inner.running.try_acquire(scope.as_str()) {
        Ok(slot) => slot,
        Err(_) => {
            enqueue(inner, scope, *task);
            return Ok(Submitted::Queued);
        }
    };
    let req = start_request(inner);
    let (claimed, claim) = ClaimTime::of(
        "claim",
        timed(inner, "claim", inner.store.claim(task, &req)),
    )
    .await;
    let claimed = match claimed {
        Ok(c) => c,
        Err(e) => {
            // The slot goes unused: whoever waits for one may have it.
            drop(slot);
            slot_freed(inner);
            return match e {
                StoreError::Busy { .. } => Ok(Submitted::Busy),
                StoreError::NotDue { .. } => Ok(Submitted::NotDue),
                StoreError::Parked => Ok(Submitted::Parked),
                StoreError::Terminal { .. } => Ok(Submitted::Terminal),
                StoreError::NotFound => Ok(Submitted::NotFound),
                e => Err(e),
            };
        }
    };
    spawn_attempt(inner.clone(), claimed, slot, claim).await;
    Ok(Submitted::Started)
}

/// Queues `task` to start when its tenant has a free execution slot (it is due in the store
/// meanwhile, so another node may take it first).
fn enqueue(inner: &Inner, scope: Scope, task: TaskId) {
    inner.queue.lock().push(scope, task);
}

/// The claim request of an attempt that runs at once: a slot is held, so the claim's
/// commit starts the attempt too.
fn start_request(inner: &Inner) -> ClaimRequest {
    let mut req = ClaimRequest::new(
        inner.opts.lease.as_millis() as u64,
        inner.opts.owner.clone(),
    );
    req.start = true;
    req
}

/// Flips the token, aborts the attempt's future (dropping its guest) and waits for it. Its
/// job, if it started, reports `why` as its outcome.
async fn stop_local(a: &mut Local, why: JobOutcome) {
    *a.stop_reason.lock() = Some(why);
    a.cancel.cancel();
    if let Some(h) = a.handle.take() {
        h.abort();
        let _ = h.await;
    }
}

/// Runs a store call, reporting its duration.
pub(crate) async fn timed<T>(
    inner: &Inner,
    op: &'static str,
    fut: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let started = std::time::Instant::now();
    let r = fut.await;
    inner.instr.event(&RunnerEvent::StoreOp {
        op,
        elapsed: started.elapsed(),
        ok: r.is_ok(),
    });
    r
}

/// The attempt of a task created claimed and started, not yet running: it starts when this
/// is dropped, wherever that happens (in the caller once it has its answer, or with the
/// channel that carried it if the caller went away), so a committed start is never left
/// without its attempt.
struct Start {
    inner: Arc<Inner>,
    claimed: Option<(Claimed, Slot, ClaimTime)>,
}

impl Drop for Start {
    fn drop(&mut self) {
        let Some((claimed, slot, claim)) = self.claimed.take() else {
            return;
        };
        let inner = self.inner.clone();
        if inner.attempts.lock().contains_key(claimed.lease.task_id()) {
            // Not for a task just created; an earlier attempt would first be stopped.
            let tasks = inner.tasks.clone();
            tasks.spawn(spawn_attempt(inner, claimed, slot, claim));
        } else {
            launch(inner, claimed, slot, claim);
        }
    }
}

/// Starts an attempt for a fresh claim. A previous local attempt of the same task is
/// stopped first (its token flips, its guest is dropped, and we wait for it to end), so a
/// late result or input request of the old attempt can never overlap the new one.
async fn spawn_attempt(inner: Arc<Inner>, claimed: Claimed, slot: Slot, claim: ClaimTime) {
    let task = *claimed.lease.task_id();
    let old = inner.attempts.lock().remove(&task);
    if let Some(mut old) = old {
        stop_local(&mut old, JobOutcome::Superseded).await;
    }
    launch(inner, claimed, slot, claim);
}

/// Spawns the attempt of `claimed` and records it as this node's attempt of its task, which
/// has none running.
fn launch(inner: Arc<Inner>, claimed: Claimed, slot: Slot, claim: ClaimTime) {
    let task = *claimed.lease.task_id();
    let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
    let cancel = CancelToken::new();
    let lease = Arc::new(Mutex::new(claimed.lease.clone()));
    let stop_reason: Arc<Mutex<Option<JobOutcome>>> = Arc::default();
    let (go, ready) = tokio::sync::oneshot::channel::<()>();
    let handle = {
        let inner = inner.clone();
        let cancel = cancel.clone();
        let lease = lease.clone();
        let stop_reason = stop_reason.clone();
        // Tracked until the future is gone (finished or aborted), so shutdown can wait for
        // every attempt to let go of the store.
        inner.clone().tasks.spawn(async move {
            // Gives the slot back however this future ends (finished or aborted); the
            // attempt lets go of it sooner, once its guest is gone.
            let running = Running {
                slot: Some(slot),
                inner: inner.clone(),
            };
            if ready.await.is_err() {
                return;
            }
            attempt::run(&inner, claimed, cancel, lease, stop_reason, running, claim).await;
            let mut attempts = inner.attempts.lock();
            if attempts.get(&task).is_some_and(|a| a.id == id) {
                attempts.remove(&task);
            }
            drop(attempts);
            inner.attempts_changed.notify_waiters();
        })
    };
    inner.attempts.lock().insert(
        task,
        Local {
            id,
            stop_reason,
            cancel,
            lease,
            handle: Some(handle),
        },
    );
    let _ = go.send(());
}

/// Runs the loop `run` makes under supervision: a panic is logged and counted
/// ([`RunnerEvent::LoopRestarted`]), the loop is reported down for its backoff, then runs
/// again. It ends when the loop returns (shutdown) or shutdown begins while it is down.
///
/// Invariant: a panic never ends a runner loop for the life of the process
/// (`runner::a_panicking_recovery_loop_is_restarted_counted_and_reported`).
fn supervise<F, Fut>(inner: &Arc<Inner>, name: &'static str, run: F) -> JoinHandle<()>
where
    F: Fn(Arc<Inner>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    inner.loops_up.lock().push((name, true));
    let inner = inner.clone();
    tokio::spawn(async move {
        let set_up = |up: bool| {
            if let Some(entry) = inner.loops_up.lock().iter_mut().find(|(n, _)| *n == name) {
                entry.1 = up;
            }
        };
        let mut backoff = inner.opts.loop_backoff;
        loop {
            set_up(true);
            let began = std::time::Instant::now();
            match tokio::spawn(run(inner.clone())).await {
                Err(e) if e.is_panic() => {}
                // Returned (shutdown began) or aborted with the runtime.
                _ => return,
            }
            set_up(false);
            if began.elapsed() >= MAX_LOOP_BACKOFF {
                backoff = inner.opts.loop_backoff;
            }
            inner
                .instr
                .event(&RunnerEvent::LoopRestarted { name, backoff });
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = inner.stopping.cancelled() => return,
            }
            backoff = (backoff * 2).min(MAX_LOOP_BACKOFF);
        }
    })
}

/// What one look at the queue found.
enum Looked {
    /// A task was claimed (and started, or given back at once when its tenant's share was
    /// taken meanwhile).
    Claimed,
    /// Nothing was due; the store said how long until something is, when it could.
    Idle { due_in_ms: Option<u64> },
}

/// Claims the task due longest (passing over tenants at their share, so their backlog
/// cannot hold the slot) and starts it.
async fn claim_due(inner: &Arc<Inner>, base: &ClaimRequest) -> Result<Looked, StoreError> {
    let mut req = base.clone();
    // As many tasks as there are free slots, in one commit (a slot taken meanwhile by
    // another path gives its claim back below).
    req.batch = inner
        .running
        .claimable()
        .clamp(1, inner.opts.claim_batch.unwrap_or(1));
    req.skip_scopes = inner
        .running
        .saturated_tenants()
        .into_iter()
        .map(Scope::new)
        .collect();
    let (next, claim) = ClaimTime::of(
        "claim_next",
        timed(inner, "claim_next", inner.store.claim_next(&req)),
    )
    .await;
    let next = next?;
    removed_at_ttl(inner, &next.reaped).await;
    let Some(first) = next.claimed else {
        return Ok(Looked::Idle {
            due_in_ms: next.next_due_in_ms,
        });
    };
    for claimed in std::iter::once(first).chain(next.more) {
        match inner.running.try_acquire(claimed.task.scope.as_str()) {
            Ok(slot) => spawn_attempt(inner.clone(), claimed, slot, claim).await,
            // Another path took the share meanwhile, or the batch held more of a tenant's
            // tasks than its share: give the claim back at once.
            Err(_) => {
                let _ = timed(inner, "release", inner.store.release(&claimed.lease)).await;
            }
        }
    }
    Ok(Looked::Claimed)
}

async fn recover_loop(inner: Arc<Inner>) {
    let mut failing = false;
    let req = ClaimRequest::new(
        inner.opts.lease.as_millis() as u64,
        inner.opts.owner.clone(),
    );
    loop {
        if inner.stopping.is_cancelled() {
            return;
        }
        // Wait for a free slot on this node (an ending attempt wakes this loop).
        if !inner.running.has_global_room() {
            tokio::select! {
                () = inner.wake.notified() => {}
                () = inner.stopping.cancelled() => return,
            }
            continue;
        }
        let mut due_in_ms = None;
        match claim_due(&inner, &req).await {
            Ok(looked) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("claim_next succeeds again: claiming resumed");
                }
                match looked {
                    Looked::Claimed => continue,
                    Looked::Idle { due_in_ms: d } => due_in_ms = d,
                }
            }
            Err(e) => {
                // Once per outage at warn: a store that stays down for an hour must not
                // write two lines a second.
                if std::mem::replace(&mut failing, true) {
                    tracing::debug!(error = %e, "claim_next failed");
                } else {
                    tracing::warn!(error = %e, "claim_next failed: no work is claimed until the store answers");
                }
            }
        }
        // Idle: look again at the poll interval, or sooner when a task is due sooner (a
        // sleep, a retry, a lease running out), by the store's answer or a sleep parked
        // here since.
        let now = tokio::time::Instant::now();
        let mut deadline = now + inner.opts.poll_interval;
        if let Some(ms) = due_in_ms.filter(|ms| *ms > 0) {
            deadline = deadline.min(now + Duration::from_millis(ms));
        }
        {
            let mut looking = inner.looking.lock();
            if let Some(hint) = looking.hint {
                deadline = deadline.min(hint.max(now));
            }
            looking.planned = Some(deadline);
        }
        tokio::select! {
            () = inner.wake.notified() => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = inner.stopping.cancelled() => return,
        }
        let mut looking = inner.looking.lock();
        looking.planned = None;
        if looking
            .hint
            .is_some_and(|h| h <= tokio::time::Instant::now())
        {
            looking.hint = None;
        }
    }
}

/// An attempt's execution slot, given back when its guest is gone (see [`Running::free`])
/// or when the attempt's future ends, however it ends; the queue is served then.
pub(crate) struct Running {
    slot: Option<Slot>,
    inner: Arc<Inner>,
}

impl Running {
    /// The tenant whose slot it is (empty once freed).
    pub(crate) fn tenant(&self) -> Arc<str> {
        self.slot
            .as_ref()
            .map_or_else(|| Arc::from(""), |s| s.tenant().clone())
    }

    /// Gives the slot back now. A slot stands for an executing guest (its instance, its
    /// memory, its share of the cores); an attempt whose guest has returned only waits for
    /// its outcome's commit, which holds nothing a slot budgets. Keeping the slot through
    /// that commit would let the store's latency decide how much work runs: under load
    /// new tasks would find their tenant's share taken by attempts that only wait, and be
    /// created unclaimed and claimed in a commit of their own.
    pub(crate) fn free(&mut self) {
        if self.slot.take().is_some() {
            slot_freed(&self.inner);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.free();
    }
}

/// A slot was given back: start queued work of the tenants that have room, round-robin,
/// and let the recovery loop look again.
fn slot_freed(inner: &Arc<Inner>) {
    inner.wake.notify_one();
    let next = {
        let mut q = inner.queue.lock();
        q.pop_fair(&inner.running)
    };
    if let Some((scope, task)) = next {
        let inner = inner.clone();
        // A submit that does not use its slot frees it again, which serves the next one.
        // Tracked: shutdown waits for it.
        inner.clone().tasks.spawn(async move {
            let _ = submit_inner(&inner, &task, Some(&scope)).await;
        });
    }
}

/// Tasks waiting for an execution slot, one queue per tenant, served round-robin so one
/// tenant's backlog never delays another tenant's next task by more than one turn.
#[derive(Default)]
struct FairQueue {
    by_tenant: HashMap<Scope, VecDeque<TaskId>>,
    turn: VecDeque<Scope>,
    /// Every queued id, so a task submitted twice is queued once.
    queued: HashSet<TaskId>,
}

impl FairQueue {
    fn push(&mut self, scope: Scope, task: TaskId) {
        if !self.queued.insert(task) {
            return;
        }
        let q = self.by_tenant.entry(scope.clone()).or_default();
        if q.is_empty() {
            self.turn.push_back(scope);
        }
        q.push_back(task);
    }

    /// The next task of the first tenant in turn that has room now.
    fn pop_fair(&mut self, slots: &Slots) -> Option<(Scope, TaskId)> {
        for _ in 0..self.turn.len() {
            let scope = self.turn.pop_front()?;
            if !slots.has_room(scope.as_str()) {
                self.turn.push_back(scope);
                continue;
            }
            let q = self.by_tenant.get_mut(&scope)?;
            let task = q.pop_front();
            if q.is_empty() {
                self.by_tenant.remove(&scope);
            } else {
                self.turn.push_back(scope.clone());
            }
            let task = task?;
            self.queued.remove(&task);
            return Some((scope, task));
        }
        None
    }
}

/// Reports the tasks the store removed at their TTL (by a reap, or on the way of a
/// `claim_next`) and stops their local attempts. Work cut off unfinished is counted and
/// logged wherever it was removed: operators must hear of it.
async fn removed_at_ttl(inner: &Inner, reaped: &[Reaped]) {
    for r in reaped {
        let task = &r.id;
        if !r.status.is_terminal() {
            inner.instr.event(&RunnerEvent::ReapedActive {
                task: *task,
                status: r.status,
            });
        }
        let local = inner.attempts.lock().remove(task);
        if let Some(mut a) = local {
            stop_local(&mut a, JobOutcome::Reaped).await;
            inner.attempts_changed.notify_waiters();
        }
    }
}

async fn reap_loop(inner: Arc<Inner>, every: Duration) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = inner.stopping.cancelled() => return,
        }
        match inner.opts.archive.clone() {
            None => reap_all(&inner).await,
            Some(archive) => archive_and_reap(&inner, &*archive).await,
        }
    }
}

/// Removes every task past its TTL, a thousand at a time.
async fn reap_all(inner: &Inner) {
    loop {
        let reaped = match timed(inner, "reap", inner.store.reap(1_000)).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reap failed");
                return;
            }
        };
        removed_at_ttl(inner, &reaped).await;
        if reaped.len() < 1_000 {
            return;
        }
    }
}

/// Hands the tasks past their TTL to `archive` a batch at a time, and removes each batch
/// once it is kept. A batch the archive fails to keep stays stored (it holds its place
/// under the tenant's caps, and clients still cannot see it) until a later round keeps it.
async fn archive_and_reap(inner: &Inner, archive: &dyn Archive) {
    loop {
        let batch = match timed(inner, "expired", inner.store.expired(ARCHIVE_BATCH)).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "reading the tasks past their TTL failed");
                return;
            }
        };
        if batch.is_empty() {
            return;
        }
        if let Err(e) = archive.keep(&batch).await {
            tracing::warn!(
                error = %e,
                tasks = batch.len(),
                "archiving failed: the tasks past their TTL stay stored until it succeeds"
            );
            return;
        }
        let ids: Vec<TaskId> = batch.iter().map(|(t, _)| t.id).collect();
        let reaped = match timed(inner, "reap", inner.store.reap_ids(&ids)).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reap failed");
                return;
            }
        };
        removed_at_ttl(inner, &reaped).await;
        if batch.len() < ARCHIVE_BATCH {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_read_waits_for_a_settling_commit_and_no_longer_than_told() {
        let settling = Arc::new(Settling::default());
        let task = TaskId::generate();
        let hour = Duration::from_secs(3600);
        assert!(!settling.wait(&task, hour).await, "not settling: no wait");
        let guard = settling.begin(&task);
        let waiting = tokio::spawn({
            let settling = settling.clone();
            async move { settling.wait(&task, hour).await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "waits while the commit runs");
        drop(guard);
        assert!(waiting.await.expect("joined"), "woken by the commit's end");
        assert!(!settling.wait(&task, hour).await, "settled: no wait");
        // A commit that does not end: the read goes on after `within` (paused time).
        let _stuck = settling.begin(&task);
        let began = tokio::time::Instant::now();
        assert!(settling.wait(&task, Duration::from_millis(100)).await);
        assert_eq!(began.elapsed(), Duration::from_millis(100));
    }

    #[test]
    fn queued_work_is_served_round_robin_to_tenants_with_room() {
        let slots = Slots::new("t", 1, "g", 10);
        let mut q = FairQueue::default();
        let (a, b) = (Scope::new("a"), Scope::new("b"));
        let ids: Vec<TaskId> = (0..4).map(|_| TaskId::generate()).collect();
        for id in &ids[..3] {
            q.push(a.clone(), *id);
        }
        q.push(a.clone(), ids[0]);
        q.push(b.clone(), ids[3]);
        assert_eq!(q.pop_fair(&slots), Some((a.clone(), ids[0])));
        assert_eq!(
            q.pop_fair(&slots),
            Some((b.clone(), ids[3])),
            "b's turn comes next"
        );
        let _held = slots.try_acquire("a").expect("slot");
        assert_eq!(q.pop_fair(&slots), None, "a is at its share");
        drop(_held);
        assert_eq!(q.pop_fair(&slots), Some((a.clone(), ids[1])));
        assert_eq!(
            q.pop_fair(&slots),
            Some((a, ids[2])),
            "a duplicate push queued nothing"
        );
        assert_eq!(q.pop_fair(&slots), None);
    }
}
