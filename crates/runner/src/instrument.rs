//! Runner instrumentation: bounded job and store-operation events, and a `tracing` bridge.
//!
//! Events carry identities, kinds and durations only: never work input, results, errors
//! or input responses.

use std::time::Duration;

use snodo_core::model::TaskId;

/// How a job (one attempt) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// Completed (a result was committed).
    Completed,
    /// Failed (an error was committed).
    Failed,
    /// A retry was scheduled.
    RetryScheduled,
    /// The retry policy was used up; the task failed.
    RetryExhausted,
    /// The task was cancelled.
    Cancelled,
    /// The lease was lost; another attempt will recover the task.
    LeaseLost,
    /// Released while waiting for input.
    Parked,
    /// Released while sleeping: the task is due again when its sleep ends.
    Slept,
    /// Released at shutdown or because the host was busy.
    Released,
    /// Stopped because the reaper removed its task (TTL).
    Reaped,
    /// Stopped because a newer claim of the same task started on this node.
    Superseded,
    /// Its future was dropped for no recorded reason.
    Aborted,
}

impl JobOutcome {
    /// A stable name for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Completed => "completed",
            JobOutcome::Failed => "failed",
            JobOutcome::RetryScheduled => "retry_scheduled",
            JobOutcome::RetryExhausted => "retry_exhausted",
            JobOutcome::Cancelled => "cancelled",
            JobOutcome::LeaseLost => "lease_lost",
            JobOutcome::Parked => "parked",
            JobOutcome::Slept => "slept",
            JobOutcome::Released => "released",
            JobOutcome::Reaped => "reaped",
            JobOutcome::Superseded => "superseded",
            JobOutcome::Aborted => "aborted",
        }
    }
}

/// One instrumentation event.
#[derive(Debug, Clone, PartialEq)]
pub enum RunnerEvent {
    /// An attempt started.
    JobStarted {
        /// The task.
        task: TaskId,
        /// The claim generation.
        generation: u64,
        /// The attempt number.
        attempt: u32,
        /// The task had been claimed before (a recovery or a retry).
        recovered: bool,
        /// The trace the task continues (its caller's), when it has one.
        trace_id: Option<String>,
    },
    /// An attempt ended.
    JobStopped {
        /// The task.
        task: TaskId,
        /// The claim generation.
        generation: u64,
        /// How it ended.
        outcome: JobOutcome,
        /// How long it ran.
        elapsed: Duration,
    },
    /// A guest was instantiated and ran.
    GuestRan {
        /// The task.
        task: TaskId,
        /// Time to instantiate.
        instantiate: Duration,
        /// Time in `execute` (parked time included).
        run: Duration,
    },
    /// A task that had not finished was removed at its TTL (it ran out while the task was
    /// working or waiting for input), by the reaper or by a claim that found it due.
    ReapedActive {
        /// The task.
        task: TaskId,
        /// Its status when removed.
        status: snodo_core::model::TaskStatus,
    },
    /// A task's pinned component version is no longer deployed: it ran the deployed one
    /// (`ran_latest`) or failed, as `runner.component_policy` says.
    PinnedComponentGone {
        /// The task.
        task: TaskId,
        /// Whether the deployed version ran in its place.
        ran_latest: bool,
    },
    /// A background loop of the runner (`recover`, `reap`) panicked; it runs again after
    /// `backoff`.
    LoopRestarted {
        /// The loop.
        name: &'static str,
        /// How long it stays down first.
        backoff: Duration,
    },
    /// An attempt could not start its guest (the host refused to instantiate it); the task
    /// is due again, and fails once its start failures pass `runner.max_start_failures`.
    StartFailed {
        /// The task.
        task: TaskId,
        /// Start failures of the task on this node so far, this one included.
        failures: u32,
    },
    /// A store operation the runner made.
    StoreOp {
        /// `claim`, `claim_next`, `renew`, `release`, `transition`, `reap`.
        op: &'static str,
        /// How long it took.
        elapsed: Duration,
        /// Whether it succeeded.
        ok: bool,
    },
}

/// Receives runner events. Called inline: keep it cheap and non-blocking.
pub trait Instrumentation: Send + Sync + 'static {
    /// One event.
    fn event(&self, event: &RunnerEvent);
}

/// Sends every event down a channel, for a caller that wants to watch the runner (the
/// stress workload, the benchmarks).
pub struct EventChannel(pub tokio::sync::mpsc::UnboundedSender<RunnerEvent>);

impl Instrumentation for EventChannel {
    fn event(&self, event: &RunnerEvent) {
        // A receiver that went away is not the runner's problem.
        let _ = self.0.send(event.clone());
    }
}

/// Discards events.
pub struct NoInstrumentation;

impl Instrumentation for NoInstrumentation {
    fn event(&self, _event: &RunnerEvent) {}
}

/// Forwards events to `tracing`, with the task id and generation as fields.
pub struct TracingInstrumentation;

impl Instrumentation for TracingInstrumentation {
    fn event(&self, event: &RunnerEvent) {
        match event {
            RunnerEvent::JobStarted {
                task,
                generation,
                attempt,
                recovered,
                trace_id,
            } => {
                let trace_id = trace_id.as_deref().unwrap_or("");
                // A task's first attempt is routine: its "job stopped" line says how it went
                // and how long it took. Retries and recoveries are what an operator looks for.
                if *recovered || *attempt > 1 {
                    tracing::info!(task = %task, generation, attempt, recovered, trace_id, "job started");
                } else {
                    tracing::debug!(task = %task, generation, attempt, recovered, trace_id, "job started");
                }
            }
            RunnerEvent::JobStopped {
                task,
                generation,
                outcome,
                elapsed,
            } => {
                // A completion or a guest parked on a question or a sleep is the normal end
                // of a job,
                // thousands a second on a busy node: the metrics count them by outcome, and
                // a line each would flood the log (and cost a write each). Every other
                // outcome (failed, retried, cancelled, lease lost, released, reaped,
                // superseded, aborted) is what an operator looks for.
                let elapsed_ms = elapsed.as_millis() as u64;
                let outcome_name = outcome.as_str();
                if matches!(
                    outcome,
                    JobOutcome::Completed | JobOutcome::Parked | JobOutcome::Slept
                ) {
                    tracing::debug!(
                        task = %task,
                        generation,
                        outcome = outcome_name,
                        elapsed_ms,
                        "job stopped"
                    );
                } else {
                    tracing::info!(
                        task = %task,
                        generation,
                        outcome = outcome_name,
                        elapsed_ms,
                        "job stopped"
                    );
                }
            }
            RunnerEvent::GuestRan {
                task,
                instantiate,
                run,
            } => tracing::debug!(
                task = %task,
                instantiate_us = instantiate.as_micros() as u64,
                run_ms = run.as_millis() as u64,
                "guest ran"
            ),
            RunnerEvent::ReapedActive { task, status } => tracing::warn!(
                task = %task,
                status = status.as_str(),
                "an unfinished task reached its TTL and was reaped"
            ),
            RunnerEvent::PinnedComponentGone { task, ran_latest } => tracing::warn!(
                task = %task,
                ran_latest,
                "pinned component version gone"
            ),
            RunnerEvent::LoopRestarted { name, backoff } => tracing::error!(
                runner_loop = name,
                backoff_ms = backoff.as_millis() as u64,
                "a runner loop panicked; it restarts after its backoff"
            ),
            RunnerEvent::StartFailed { task, failures } => tracing::warn!(
                task = %task,
                failures,
                "an attempt could not start its guest"
            ),
            RunnerEvent::StoreOp { op, elapsed, ok } => {
                tracing::debug!(
                    op,
                    elapsed_us = elapsed.as_micros() as u64,
                    ok,
                    "store operation"
                )
            }
        }
    }
}
