//! What the runner's events add to [`Metrics`], and the instrumentation that sends them to
//! the metrics and to `tracing` both.

use std::sync::atomic::Ordering;

use snodo_runner::{Instrumentation, RunnerEvent, TracingInstrumentation};

use super::Metrics;

impl Instrumentation for Metrics {
    fn event(&self, event: &RunnerEvent) {
        match event {
            RunnerEvent::JobStarted { recovered, .. } => {
                self.attempts_started.fetch_add(1, Ordering::Relaxed);
                if *recovered {
                    self.recoveries.fetch_add(1, Ordering::Relaxed);
                }
            }
            RunnerEvent::JobStopped { outcome, .. } => {
                *self
                    .attempts_finished
                    .lock()
                    .entry(outcome.as_str())
                    .or_default() += 1;
            }
            RunnerEvent::StoreOp { op, elapsed, .. } => {
                let h = self.store_ops.lock().entry(op).or_default().clone();
                h.observe(*elapsed);
            }
            RunnerEvent::ReapedActive { .. } => {
                self.reaped_active.fetch_add(1, Ordering::Relaxed);
            }
            RunnerEvent::LoopRestarted { name, .. } => {
                *self.loop_restarts.lock().entry(name).or_default() += 1;
            }
            RunnerEvent::StartFailed { .. } => {
                self.start_failures.fetch_add(1, Ordering::Relaxed);
            }
            RunnerEvent::PinnedComponentGone { ran_latest, .. } => {
                let n = if *ran_latest {
                    &self.pinned_ran_latest
                } else {
                    &self.pinned_failed
                };
                n.fetch_add(1, Ordering::Relaxed);
            }
            RunnerEvent::GuestRan {
                instantiate, run, ..
            } => {
                self.instantiate.observe(*instantiate);
                self.execute.observe(*run);
            }
        }
    }
}

/// Sends every event to the metrics and to `tracing`.
pub struct MetricsAndTracing(pub std::sync::Arc<Metrics>);

impl Instrumentation for MetricsAndTracing {
    fn event(&self, event: &RunnerEvent) {
        self.0.event(event);
        TracingInstrumentation.event(event);
    }
}
