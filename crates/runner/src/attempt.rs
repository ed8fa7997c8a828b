//! One attempt: start, heartbeat, execute, commit the outcome with the lease's generation.

use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use snodo_core::model::{EventId, EventKind, TaskEvent, TaskStatus};
use snodo_core::store::{Authority, Claimed, Committed, Effect, Lease, StoreError};
use snodo_wasm::{AttemptError, CancelToken, Execution, GuestOutcome};

use super::TaskIo;
use crate::spans::{self as trace, AttemptSpans, ClaimTime, Spans};
use snodo_core::spans::SpanKind;

use super::{Inner, JobOutcome, RunnerEvent, Running, Submitted, Unresolved, submit_inner, timed};

/// One job's instrumentation. `JobStarted` is sent once the `started` event committed, and
/// then exactly one `JobStopped`, however the attempt ends: with the outcome it reports,
/// or, when its future is dropped (stopped by the reaper, a replacing claim or shutdown),
/// with the reason the stopper left in `stop_reason`. A job that never started sends
/// neither.
struct Job<'a> {
    inner: &'a Inner,
    task: snodo_core::model::TaskId,
    generation: u64,
    began: Instant,
    started: bool,
    outcome: Option<JobOutcome>,
    stop_reason: Arc<Mutex<Option<JobOutcome>>>,
    spans: Spans,
}

impl Job<'_> {
    fn started(&mut self, attempt: u32, trace_id: Option<String>) {
        self.started = true;
        self.inner.instr.event(&RunnerEvent::JobStarted {
            task: self.task,
            generation: self.generation,
            attempt,
            recovered: attempt > 1,
            trace_id,
        });
    }

    fn stop(mut self, outcome: JobOutcome) {
        self.outcome = Some(outcome);
    }
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        if !self.started {
            return;
        }
        let outcome = self
            .outcome
            .take()
            .unwrap_or_else(|| self.stop_reason.lock().unwrap_or(JobOutcome::Aborted));
        self.inner.instr.event(&RunnerEvent::JobStopped {
            task: self.task,
            generation: self.generation,
            outcome,
            elapsed: self.began.elapsed(),
        });
        let failed = matches!(
            outcome,
            JobOutcome::Failed
                | JobOutcome::RetryExhausted
                | JobOutcome::LeaseLost
                | JobOutcome::Aborted
        );
        trace::with(&self.spans, |s| s.finish(outcome.as_str(), failed));
    }
}

async fn commit(
    inner: &Inner,
    lease: &Lease,
    what: &'static str,
    kind: EventKind,
    spans: &Spans,
) -> Result<Committed, StoreError> {
    // Deterministic per claim generation: a commit retried after an unknown reply is a
    // replay of the same event, never a second one.
    let event = TaskEvent::new(EventId::for_claim(lease.generation(), what), kind);
    let start = std::time::SystemTime::now();
    let began = Instant::now();
    // A store that did not answer (a dropped connection, a restarting database) may or may
    // not have committed: the same event again is a replay or the first commit, never a
    // second one. Tried again while a quarter of the lease is left, so a task whose
    // outcome is known does not wait out its lease to be recovered and run again.
    let give_up = began + inner.opts.lease / 4;
    let mut pause = Duration::from_millis(25);
    // A read of the task meanwhile may wait for this commit (Runner::settled).
    let _settling = (what == "outcome").then(|| inner.settling.begin(lease.task_id()));
    let r = loop {
        let r = timed(
            inner,
            "transition",
            inner
                .store
                .transition(Authority::Worker(lease), event.clone(), None),
        )
        .await;
        match r {
            Err(StoreError::Unavailable(_)) if Instant::now() + pause < give_up => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            r => break r,
        }
    };
    store_step(spans, what, start, began.elapsed(), r.as_ref().err());
    r
}

/// A store commit of the attempt, as a step of its span.
pub(crate) fn store_step(
    spans: &Spans,
    what: &'static str,
    start: std::time::SystemTime,
    took: Duration,
    error: Option<&StoreError>,
) {
    trace::with(spans, |s| {
        s.step(
            &format!("store {what}"),
            SpanKind::Client,
            start,
            took,
            vec![("db.operation.name", what.into())],
            error.map(|e| e.kind().to_owned()),
        );
    });
}

/// Fails a task without running its guest, with `status` as its last message.
async fn fail_unrun(
    inner: &Inner,
    lease: &Lease,
    error: snodo_core::model::JsonRpcError,
    status: &str,
    spans: &Spans,
) -> JobOutcome {
    let kind = EventKind::Failed {
        error,
        status_message: Some(status.into()),
    };
    commit_outcome(inner, lease, kind, spans, JobOutcome::Failed).await
}

/// What a refused commit means for the job.
fn refused(e: &StoreError) -> JobOutcome {
    match e {
        StoreError::Terminal {
            status: TaskStatus::Cancelled,
        } => JobOutcome::Cancelled,
        _ => JobOutcome::LeaseLost,
    }
}

/// Runs one claimed attempt to its end: the start, the guest under a heartbeat, the
/// outcome's commit.
pub(super) async fn run(
    inner: &Arc<Inner>,
    claimed: Claimed,
    cancel: CancelToken,
    lease_cell: Arc<Mutex<Lease>>,
    stop_reason: Arc<Mutex<Option<JobOutcome>>>,
    mut slot: Running,
    claim: ClaimTime,
) {
    let lease = claimed.lease.clone();
    let task_id = *lease.task_id();
    let mut job = Job {
        inner,
        task: task_id,
        generation: lease.generation(),
        began: Instant::now(),
        started: false,
        outcome: None,
        stop_reason,
        spans: None,
    };
    // A refused start (cancelled, superseded) is no job: nothing is reported.
    let Some(task) = begin(&mut job, &claimed, claim).await else {
        return;
    };
    let spans = job.spans.clone();
    let stopped_by = job.stop_reason.clone();
    let stop = |outcome: JobOutcome| job.stop(outcome);

    let resolved = match runnable(inner, &claimed, &lease, &spans).await {
        Ok(r) => r,
        Err(outcome) => {
            slot.free();
            return stop(outcome);
        }
    };

    let lost = AtomicBool::new(false);
    let (component, exec) = execution(inner, &claimed, &task, resolved, &cancel, &slot, &spans);
    // The heartbeat runs inside this future, so however the attempt ends (or is dropped)
    // nothing keeps renewing a lease nobody uses.
    let beat = async {
        heartbeat(inner, &lease_cell, &cancel, &lost).await;
        std::future::pending::<std::convert::Infallible>().await
    };
    let exec_start = std::time::SystemTime::now();
    let mark = spans.as_ref().map_or(0, |s| s.lock().mark());
    let report = tokio::select! {
        report = component.execute(exec) => report,
        never = beat => match never {},
    };
    trace_execution(&spans, work_tool(&claimed.work), exec_start, mark, &report);
    // The guest is gone (its instance dropped with the execution): what is left is the
    // outcome's commit, which needs no execution slot.
    slot.free();
    inner.instr.event(&RunnerEvent::GuestRan {
        task: task_id,
        instantiate: report.instantiate,
        run: report.run,
    });
    // A stopper (shutdown, the reaper, a replacing claim, a client's cancel) that flipped
    // the token owns what happens to the task: a guest that returned because it was told
    // to stop has no outcome of its own to commit, and committing it would end a task that
    // shutdown meant to release for another runner. The stopper leaves its reason before
    // it flips the token, so an outcome caused by the stop always sees the reason.
    if stopped_by.lock().is_some() {
        return;
    }
    let lease = lease_cell.lock().clone();

    let outcome = settle(inner, &lease, task_id, report.outcome, &lost, &spans).await;
    // Nothing to forget on the common path: a node whose guests all start never locks it.
    if !matches!(outcome, JobOutcome::Released) && inner.any_start_failures.load(Ordering::Relaxed)
    {
        inner.start_failures.lock().remove(&task_id);
    }
    stop(outcome);
}

/// Starts `job`: commits the `started` event (unless the claim committed it itself), opens
/// the attempt's spans and reports the job started. The task as started, or `None` when
/// the store refused the start (cancelled, superseded).
async fn begin(
    job: &mut Job<'_>,
    claimed: &Claimed,
    claim: ClaimTime,
) -> Option<snodo_core::model::Task> {
    let inner = job.inner;
    let start_commit = std::time::SystemTime::now();
    let began = Instant::now();
    let task = if claimed.started {
        claimed.task.clone()
    } else {
        let started = commit(inner, &claimed.lease, "started", EventKind::Started, &None);
        started.await.ok()?.task
    };
    job.spans = AttemptSpans::start(
        &inner.opts.tracer,
        &job.task,
        task.span.as_ref(),
        work_tool(&claimed.work),
        job.generation,
        task.attempt,
        &inner.opts.owner,
        claim,
    );
    if !claimed.started {
        store_step(&job.spans, "started", start_commit, began.elapsed(), None);
    }
    if task.inputs.values().any(|e| e.response.is_some()) {
        // A replay that has answers to hand its guest: after a park or a crash.
        trace::with(&job.spans, |s| s.event("resumed", Vec::new()));
    }
    job.started(
        task.attempt,
        claimed.work.trace.as_ref().map(|t| t.trace_id.clone()),
    );
    Some(task)
}

/// What runs the attempt, and the execution it runs: the task's IO under the claim's
/// lease, its limits (the runner's wall clock unless the work sets one) and its caller.
fn execution(
    inner: &Inner,
    claimed: &Claimed,
    task: &snodo_core::model::Task,
    resolved: crate::Resolved,
    cancel: &CancelToken,
    slot: &Running,
    spans: &Spans,
) -> (Arc<dyn snodo_wasm::Executable>, Execution) {
    let caller = Arc::new(stored_caller(&claimed.work, &task.client_capabilities));
    let io = TaskIo::new(
        inner.store.clone(),
        claimed.lease.clone(),
        task.client_capabilities.clone(),
        inner.waiters.clone(),
    )
    .park_after(inner.opts.park_after)
    .sleep_park_after(inner.opts.sleep_park_after)
    .expires_at(task.expires_at())
    .claimed_at(
        claimed
            .lease
            .expires_at()
            .as_millis()
            .saturating_sub(inner.opts.lease.as_millis() as u64),
    )
    .parked_when(inner.stopping.clone(), inner.opts.drain_timeout)
    .journal_bytes(inner.opts.journal_task_bytes)
    .scope_bytes(inner.opts.stored_bytes_per_tenant)
    .tracked(inner.tasks.clone())
    .traced(spans.clone());
    let exec = Execution {
        task_id: Some(claimed.lease.task_id().to_string()),
        tool: resolved.tool,
        arguments: resolved.arguments,
        idempotency_key: claimed.work.idempotency_key.clone(),
        attempt: task.attempt,
        limits: snodo_core::model::ExecutionLimits {
            wall_clock_ms: claimed
                .work
                .limits
                .wall_clock_ms
                .or(Some(inner.opts.attempt_wall_clock.as_millis() as u64)),
            ..claimed.work.limits
        },
        io: Arc::new(io),
        cancel: cancel.clone(),
        cancel_grace: inner.opts.cancel_grace,
        grants: resolved.grants,
        tenant: slot.tenant(),
        caller,
    };
    (resolved.component, exec)
}

/// The execution's steps in the attempt's span: the instantiation, then the tool's run,
/// which adopts the steps recorded during it (from `mark` on).
fn trace_execution(
    spans: &Spans,
    tool: &str,
    exec_start: std::time::SystemTime,
    mark: usize,
    report: &snodo_wasm::ExecutionReport,
) {
    trace::with(spans, |s| {
        let during = s.mark();
        s.step(
            "instantiate",
            SpanKind::Internal,
            exec_start,
            report.instantiate,
            Vec::new(),
            None,
        );
        let error = match &report.outcome {
            Ok(GuestOutcome::Failed { .. } | GuestOutcome::Retry { .. }) => {
                Some("tool_error".to_owned())
            }
            Ok(GuestOutcome::Completed(_))
            | Err(
                AttemptError::Parked
                | AttemptError::Sleeping { .. }
                | AttemptError::Cancelled
                | AttemptError::Stopped(_)
                | AttemptError::NeedInput(_),
            ) => None,
            Err(e) => Some(attempt_error_type(e)),
        };
        let id = s.step(
            &format!("execute_tool {tool}"),
            SpanKind::Internal,
            exec_start + report.instantiate,
            report.run,
            vec![
                ("gen_ai.operation.name", "execute_tool".into()),
                ("gen_ai.tool.name", tool.into()),
            ],
            error,
        );
        s.adopt(mark, during, id);
    });
}

/// The host could not start the attempt's guest. The task is released to be claimed again,
/// up to `runner.max_start_failures` times on this node; past that it fails with
/// `data.kind = "limit"`: a permanent cause (a memory limit below the component's initial
/// memory, a fuel limit on an engine without metering) would otherwise be claimed, refused
/// and released forever, a store write each time.
///
/// Counted per node, in memory: with several nodes a task fails after at most the cap on
/// each node that claims it, and a restart counts afresh. (`runner::
/// an_attempt_that_cannot_start_fails_past_the_start_failure_cap`)
async fn start_failed(
    inner: &Inner,
    lease: &Lease,
    task_id: snodo_core::model::TaskId,
    reason: String,
    spans: &Spans,
) -> JobOutcome {
    /// Tasks whose start failures this node remembers; past it the map starts over (a
    /// task then gets a few more tries, never fewer).
    const REMEMBERED: usize = 4_096;
    let failures = {
        let mut counts = inner.start_failures.lock();
        if counts.len() >= REMEMBERED && !counts.contains_key(&task_id) {
            counts.clear();
        }
        inner.any_start_failures.store(true, Ordering::Relaxed);
        let n = counts.entry(task_id).or_insert(0);
        *n += 1;
        *n
    };
    inner.instr.event(&RunnerEvent::StartFailed {
        task: task_id,
        failures,
    });
    let max = inner.opts.max_start_failures;
    if failures <= max {
        return match release(inner, lease, spans).await {
            Ok(()) => JobOutcome::Released,
            Err(e) => refused(&e),
        };
    }
    inner.start_failures.lock().remove(&task_id);
    tracing::warn!(task = %task_id, failures, %reason, "task failed: its guest could not start");
    let error = snodo_core::model::JsonRpcError::new(
        snodo_core::model::codes::INTERNAL_ERROR,
        format!(
            "the tool could not start {failures} times (runner.max_start_failures = {max}): \
             {reason}"
        ),
    )
    .with_data(serde_json::json!({
        "kind": "limit",
        "limit": "runner.max_start_failures",
        "max": max,
        "detail": reason,
    }));
    fail_unrun(
        inner,
        lease,
        error,
        "stopped: its guest could not start",
        spans,
    )
    .await
}

/// What runs the claimed task, or how the attempt ended without running it: a task that
/// took its attempt down too often (a crash or a stall every time) fails instead of being
/// replayed forever, and so does one whose tool is not deployed.
async fn runnable(
    inner: &Inner,
    claimed: &Claimed,
    lease: &Lease,
    spans: &Spans,
) -> Result<crate::Resolved, JobOutcome> {
    let task_id = *lease.task_id();
    if claimed.task.recoveries > inner.opts.max_recoveries {
        let max = inner.opts.max_recoveries;
        let error = snodo_core::model::JsonRpcError::new(
            snodo_core::model::codes::INTERNAL_ERROR,
            format!("the task was recovered more than {max} times (runner.max_recoveries)"),
        )
        .with_data(serde_json::json!({
            "kind": "limit",
            "limit": "runner.max_recoveries",
            "max": max,
            "recoveries": claimed.task.recoveries,
        }));
        tracing::warn!(task = %task_id, recoveries = claimed.task.recoveries, "task failed: recovered too often");
        let status = "stopped: its attempts kept ending without an outcome";
        return Err(fail_unrun(inner, lease, error, status, spans).await);
    }

    let resolved = match inner.executors.resolve(&claimed.work) {
        Ok(r) => {
            if let Some(pinned) = &r.replaced {
                tracing::warn!(
                    task = %task_id,
                    pinned = %pinned,
                    "the task's component version is gone; running the deployed one (runner.component_policy = \"latest\")"
                );
                inner.instr.event(&RunnerEvent::PinnedComponentGone {
                    task: task_id,
                    ran_latest: true,
                });
            }
            r
        }
        Err(Unresolved {
            reason,
            pinned_gone,
        }) => {
            if pinned_gone {
                tracing::warn!(task = %task_id, %reason, "the task's component version is gone; failing it");
                inner.instr.event(&RunnerEvent::PinnedComponentGone {
                    task: task_id,
                    ran_latest: false,
                });
            }
            let error = AttemptError::Trap(String::new()).to_rpc_error();
            let error = snodo_core::model::JsonRpcError::new(
                error.code,
                format!("the tool cannot run: {reason}"),
            )
            .with_data(serde_json::json!({"kind": "component_missing", "detail": reason}));
            return Err(fail_unrun(inner, lease, error, "the tool is not deployed", spans).await);
        }
    };
    Ok(resolved)
}

/// Commits what the guest's execution came to, under `lease`, and says how the job ended.
async fn settle(
    inner: &Arc<Inner>,
    lease: &Lease,
    task_id: snodo_core::model::TaskId,
    outcome: Result<GuestOutcome, AttemptError>,
    lost: &AtomicBool,
    spans: &Spans,
) -> JobOutcome {
    match outcome {
        Ok(GuestOutcome::Completed(result)) => {
            let result = serde_json::Value::Object(result);
            let kind = EventKind::Completed { result };
            commit_outcome(inner, lease, kind, spans, JobOutcome::Completed).await
        }
        Ok(GuestOutcome::Failed {
            error,
            status_message,
        }) => {
            let kind = EventKind::Failed {
                error,
                status_message,
            };
            commit_outcome(inner, lease, kind, spans, JobOutcome::Failed).await
        }
        Ok(GuestOutcome::Retry {
            error,
            status_message,
        }) => {
            let kind = EventKind::RetryRequested {
                error,
                status_message: Some(status_message),
            };
            retry(inner, lease, task_id, kind, spans).await
        }
        Err(
            e @ (AttemptError::Trap(_)
            | AttemptError::Limit(_)
            | AttemptError::InvalidOutcome(_)
            | AttemptError::JournalDivergence(_)
            | AttemptError::NeedInput(_)),
        ) => {
            // Not the tool's own answer: fail without consuming retries.
            let kind = EventKind::Failed {
                error: e.to_rpc_error(),
                status_message: Some(e.to_string()),
            };
            commit_outcome(inner, lease, kind, spans, JobOutcome::Failed).await
        }
        Err(AttemptError::Parked) => {
            trace::with(spans, |s| s.event("parked", Vec::new()));
            let _ = release(inner, lease, spans).await;
            JobOutcome::Parked
        }
        Err(AttemptError::Sleeping { wait_ms, .. }) => {
            // The sleep's commit gave the claim up already; the recovery loop is told when
            // it ends, so it looks then rather than at its next poll.
            crate::due_in(inner, task_id, Duration::from_millis(wait_ms));
            JobOutcome::Slept
        }
        Err(AttemptError::Unavailable(reason)) if !lost.load(Ordering::Acquire) => {
            start_failed(inner, lease, task_id, reason, spans).await
        }
        Err(AttemptError::Cancelled | AttemptError::Stopped(_) | AttemptError::Unavailable(_)) => {
            if lost.load(Ordering::Acquire) {
                JobOutcome::LeaseLost
            } else {
                // Cancelled in the store, or stopped for another reason with the lease
                // still ours: give it back so the task is due again at once.
                match release(inner, lease, spans).await {
                    Ok(()) => JobOutcome::Released,
                    Err(e) => refused(&e),
                }
            }
        }
    }
}

/// Commits the outcome `kind`: `done` once committed, else what the refusal means.
async fn commit_outcome(
    inner: &Inner,
    lease: &Lease,
    kind: EventKind,
    spans: &Spans,
    done: JobOutcome,
) -> JobOutcome {
    match commit(inner, lease, "outcome", kind, spans).await {
        Ok(_) => done,
        Err(e) => refused(&e),
    }
}

/// Commits the guest's request to be retried (`kind`), and looks again when the retry is
/// due; past the retry policy the task failed instead.
async fn retry(
    inner: &Arc<Inner>,
    lease: &Lease,
    task_id: snodo_core::model::TaskId,
    kind: EventKind,
    spans: &Spans,
) -> JobOutcome {
    match commit(inner, lease, "outcome", kind, spans).await {
        Ok(Committed {
            effect: Effect::RetryScheduled { retry_at, .. },
            task: committed_task,
            ..
        }) => {
            // Both instants are the store's clock: the wait needs no clock read.
            let wait = retry_at
                .as_millis()
                .saturating_sub(committed_task.last_updated_at.as_millis());
            trace::with(spans, |s| {
                s.event(
                    "retry_scheduled",
                    vec![
                        ("snodo.retry.due_at_ms", retry_at.as_millis().into()),
                        ("snodo.retry.count", committed_task.retry_count.into()),
                    ],
                );
            });
            schedule_retry(inner.clone(), task_id, Duration::from_millis(wait));
            JobOutcome::RetryScheduled
        }
        Ok(_) => JobOutcome::RetryExhausted,
        Err(e) => refused(&e),
    }
}

/// Gives the claim back (the task is due again, or waits for its answers).
async fn release(inner: &Inner, lease: &Lease, spans: &Spans) -> Result<(), StoreError> {
    store_op(
        spans,
        "release",
        timed(inner, "release", inner.store.release(lease)),
    )
    .await
}

/// Runs the store operation `op`, recorded as a step `store {what}` of the attempt's span.
pub(crate) async fn store_op<T>(
    spans: &Spans,
    what: &'static str,
    op: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let start = std::time::SystemTime::now();
    let began = Instant::now();
    let r = op.await;
    store_step(spans, what, start, began.elapsed(), r.as_ref().err());
    r
}

/// Renews the lease every heartbeat; on refusal (lease lost, task cancelled, reaped) flips
/// the attempt's token so the guest stops.
async fn heartbeat(
    inner: &Inner,
    lease_cell: &Mutex<Lease>,
    cancel: &CancelToken,
    lost: &AtomicBool,
) {
    let lease_ms = inner.opts.lease.as_millis() as u64;
    loop {
        tokio::time::sleep(inner.opts.heartbeat).await;
        let lease = lease_cell.lock().clone();
        match timed(inner, "renew", inner.store.renew(&lease, lease_ms)).await {
            Ok(renewed) => {
                *lease_cell.lock() = renewed;
                // A guest waiting for input re-reads its answers once a beat: on a shared
                // store an answer accepted by another node reaches it even when that
                // node's announcement was lost.
                inner.waiters.notify(lease.task_id());
            }
            // A slow store is not a lost lease; try again at the next beat.
            Err(StoreError::Unavailable(_)) => {}
            Err(e) => {
                if !matches!(e, StoreError::Terminal { .. }) {
                    lost.store(true, Ordering::Release);
                }
                cancel.cancel();
                return;
            }
        }
    }
}

/// Looks again when the retry is due, `wait` after the retry was committed. The persisted
/// `retry_at` decides: an early claim is refused by the store, so this timer can only make
/// the retry prompt, never early.
pub(crate) fn schedule_retry(inner: Arc<Inner>, task: snodo_core::model::TaskId, wait: Duration) {
    let tasks = inner.tasks.clone();
    tasks.spawn(async move {
        // Shutdown ends the timer; the retry is due in the store for the next start.
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = inner.stopping.cancelled() => return,
        }
        if inner.opts.recover {
            inner.wake.notify_one();
            return;
        }
        // Nobody else looks without the recovery loop: try until the store agrees it is
        // due (the local clock may run ahead of the store's) or the task is settled.
        loop {
            match submit_inner(&inner, &task, None).await {
                Ok(Submitted::NotDue) | Err(_) => {}
                Ok(_) => return,
            }
            tokio::select! {
                () = tokio::time::sleep(inner.opts.poll_interval) => {}
                () = inner.stopping.cancelled() => return,
            }
        }
    });
}

/// The caller every attempt of a task is shown: the principal and grant stored with its
/// work, and the capabilities its creating client declared, the same on every attempt.
fn stored_caller(
    work: &snodo_core::model::Work,
    capabilities: &serde_json::Value,
) -> snodo_wasm::GuestCaller {
    let (tenant, subject) = work
        .principal
        .as_ref()
        .map(|p| (p.tenant.clone(), p.subject.clone()))
        .unwrap_or_default();
    let grant = work.grant.clone().unwrap_or_default();
    snodo_wasm::GuestCaller {
        tenant,
        subject,
        scopes: grant.scopes,
        claims: grant.claims,
        client_capabilities: capabilities.clone(),
    }
}

/// The tool a work runs (its `tool` for a tool call, else its kind).
fn work_tool(work: &snodo_core::model::Work) -> &str {
    work.input
        .get("tool")
        .and_then(serde_json::Value::as_str)
        .unwrap_or(&work.kind)
}

/// An attempt error's type, for a span's status: its kind, never its text.
fn attempt_error_type(e: &AttemptError) -> String {
    match e {
        AttemptError::Trap(_) => "trap",
        AttemptError::Limit(_) => "limit",
        AttemptError::InvalidOutcome(_) => "invalid_outcome",
        AttemptError::JournalDivergence(_) => "journal_divergence",
        AttemptError::NeedInput(_) => "need_input",
        AttemptError::Parked => "parked",
        AttemptError::Sleeping { .. } => "sleeping",
        AttemptError::Cancelled => "cancelled",
        AttemptError::Stopped(_) => "stopped",
        AttemptError::Unavailable(_) => "unavailable",
    }
    .to_owned()
}
