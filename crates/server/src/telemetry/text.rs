//! The Prometheus text exposition of [`Metrics`]: every family's help, type and lines, and
//! the label escaping they share.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use snodo_runner::JobOutcome;

use super::Metrics;

/// A Prometheus label value: backslashes, quotes and newlines escaped.
pub(super) fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Renders the Prometheus text exposition, with `active` attempts, `sync` guest
    /// executions on the request path and open subscription `streams` as gauges.
    pub fn render(&self, active: usize, sync: usize, streams: usize) -> String {
        let mut out = String::new();
        self.render_node(&mut out);
        self.render_counters(&mut out);
        self.render_finished(&mut out);
        let _ = writeln!(
            out,
            "# HELP snodo_active_guests Attempts running now.\n# TYPE snodo_active_guests gauge\nsnodo_active_guests {active}\n# HELP snodo_sync_calls_active Synchronous guest executions running now.\n# TYPE snodo_sync_calls_active gauge\nsnodo_sync_calls_active {sync}\n# HELP snodo_streams_open Open subscription streams.\n# TYPE snodo_streams_open gauge\nsnodo_streams_open {streams}"
        );
        let restarts = self.loop_restarts.lock().clone();
        labelled(
            &mut out,
            "snodo_runner_loop_restarts_total",
            "Runner loops restarted after a panic, by loop.",
            "loop",
            ["recover", "reap"].map(|n| (n, restarts.get(n).copied().unwrap_or(0))),
        );
        let refusals = self.limits_hit.lock().clone();
        labelled(
            &mut out,
            "snodo_limit_refusals_total",
            "Requests refused by a budget, by limit.",
            "limit",
            refusals,
        );
        self.render_outbound(&mut out);
        self.render_upstreams(&mut out);
        if let Some(spans) = self.spans.lock().clone() {
            let _ = writeln!(
                out,
                "# HELP snodo_spans_total Spans sent to the OTLP collector, or dropped (queue full, export failed).\n# TYPE snodo_spans_total counter"
            );
            for (outcome, n) in [
                ("exported", &spans.exported),
                ("dropped_queue_full", &spans.dropped),
                ("dropped_export_failed", &spans.failed),
            ] {
                let _ = writeln!(
                    out,
                    "snodo_spans_total{{outcome=\"{outcome}\"}} {}",
                    n.load(Ordering::Relaxed)
                );
            }
        }
        if let Some(trust) = self.trust.lock().clone() {
            let _ = writeln!(
                out,
                "# HELP snodo_components_refused_total Components the trust policy refused, by reason.\n# TYPE snodo_components_refused_total counter"
            );
            for (reason, n) in trust.counts() {
                let _ = writeln!(
                    out,
                    "snodo_components_refused_total{{reason=\"{}\"}} {n}",
                    reason.as_str()
                );
            }
        }
        self.render_histograms(&mut out);
        self.operations.render(&mut out);
        out
    }

    /// The outbound counters, by tool: refused requests by reason, requests a limit ended
    /// by limit, and requests sent or answered from a journal.
    fn render_outbound(&self, out: &mut String) {
        let Some(outbound) = self.outbound.lock().clone() else {
            return;
        };
        let c = outbound.counters();
        by_tool(
            out,
            "snodo_outbound_refused_total",
            "Outbound requests the host refused, by tool and reason.",
            "reason",
            c.refused
                .iter()
                .map(|((tool, r), n)| (tool.as_str(), *r, *n)),
        );
        by_tool(
            out,
            "snodo_outbound_limited_total",
            "Outbound requests ended by a limit, by tool and limit.",
            "limit",
            c.limited
                .iter()
                .map(|((tool, l), n)| (tool.as_str(), *l, *n)),
        );
        let answered = [("sent", &c.sent), ("journal", &c.replayed)];
        by_tool(
            out,
            "snodo_outbound_requests_total",
            "Outbound requests answered, by tool and source (sent, or replayed from a task's journal).",
            "source",
            answered.iter().flat_map(|(source, by)| {
                by.iter().map(move |(tool, n)| (tool.as_str(), *source, *n))
            }),
        );
    }

    /// Writes `snodo_node_info`, when this node has been named.
    fn render_node(&self, out: &mut String) {
        if let Some(node) = &*self.node.lock() {
            let node = escape_label(node);
            let _ = writeln!(
                out,
                "# HELP snodo_node_info This node's identity.\n# TYPE snodo_node_info gauge\nsnodo_node_info{{node=\"{node}\"}} 1"
            );
        }
    }

    /// Writes the plain counters, then the pinned-component counter family.
    fn render_counters(&self, out: &mut String) {
        for (name, help, v) in [
            (
                "snodo_tasks_created_total",
                "Tasks created by tools/call.",
                &self.tasks_created,
            ),
            (
                "snodo_tasks_cancelled_total",
                "Tasks cancelled by tasks/cancel.",
                &self.tasks_cancelled,
            ),
            (
                "snodo_tasks_reaped_active_total",
                "Tasks removed by their TTL before they finished (working or waiting for input).",
                &self.reaped_active,
            ),
            (
                "snodo_sync_calls_total",
                "tools/call requests run synchronously.",
                &self.sync_calls,
            ),
            (
                "snodo_attempts_started_total",
                "Task attempts started.",
                &self.attempts_started,
            ),
            (
                "snodo_recoveries_total",
                "Attempts of tasks that had run before (recovery or retry).",
                &self.recoveries,
            ),
            (
                "snodo_attempt_start_failures_total",
                "Attempts whose guest the host could not start.",
                &self.start_failures,
            ),
        ] {
            counter(out, name, help, v.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP snodo_pinned_component_gone_total Tasks whose component version was no longer deployed, by what runner.component_policy did.\n# TYPE snodo_pinned_component_gone_total counter\nsnodo_pinned_component_gone_total{{action=\"failed\"}} {}\nsnodo_pinned_component_gone_total{{action=\"ran_latest\"}} {}",
            self.pinned_failed.load(Ordering::Relaxed),
            self.pinned_ran_latest.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP snodo_schedule_firings_total Schedule firings this node decided, by outcome: fired (its task created), skipped (missed, or its task refused), lost (another node fired it first).
# TYPE snodo_schedule_firings_total counter"
        );
        for (outcome, n) in ["fired", "skipped", "lost"].iter().zip(&self.firings) {
            let _ = writeln!(
                out,
                "snodo_schedule_firings_total{{outcome=\"{outcome}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP snodo_webhook_tries_total Webhook tries this node made, by outcome: delivered (the receiver answered 2xx), failed, dead (the last try of an event failed: a dead letter).
# TYPE snodo_webhook_tries_total counter"
        );
        for (outcome, n) in ["delivered", "failed", "dead"]
            .iter()
            .zip(&self.webhook_tries)
        {
            let _ = writeln!(
                out,
                "snodo_webhook_tries_total{{outcome=\"{outcome}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP snodo_archive_total What this node's reaper archived: kept (tasks written to the archive, then removable), failed (batches the archive refused: their tasks stay stored).
# TYPE snodo_archive_total counter"
        );
        for (outcome, n) in ["kept", "failed"].iter().zip(&self.archive) {
            let _ = writeln!(
                out,
                "snodo_archive_total{{outcome=\"{outcome}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
    }

    /// Writes the upstreams' listings by outcome and their announced tool changes.
    fn render_upstreams(&self, out: &mut String) {
        let Some(counters) = self.upstreams.lock().clone() else {
            return;
        };
        let each = counters.snapshot();
        let _ = writeln!(
            out,
            "# HELP snodo_upstream_listings_total Listings of each upstream's tools, by outcome.\n# TYPE snodo_upstream_listings_total counter"
        );
        for (upstream, [listed, failed, _]) in &each {
            for (outcome, n) in [("listed", listed), ("failed", failed)] {
                let _ = writeln!(
                    out,
                    "snodo_upstream_listings_total{{upstream=\"{upstream}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP snodo_upstream_changes_total Tool changes each upstream announced (list_changed).\n# TYPE snodo_upstream_changes_total counter"
        );
        for (upstream, [_, _, changes]) in &each {
            let _ = writeln!(
                out,
                "snodo_upstream_changes_total{{upstream=\"{upstream}\"}} {changes}"
            );
        }
    }

    /// Writes what finished attempts add up to: attempts by outcome, tasks by terminal
    /// status, retries scheduled and parked guests released.
    fn render_finished(&self, out: &mut String) {
        let finished = self.attempts_finished.lock().clone();
        let outcomes = [
            JobOutcome::Completed,
            JobOutcome::Failed,
            JobOutcome::RetryScheduled,
            JobOutcome::RetryExhausted,
            JobOutcome::Cancelled,
            JobOutcome::LeaseLost,
            JobOutcome::Parked,
            JobOutcome::Slept,
            JobOutcome::Released,
            JobOutcome::Reaped,
            JobOutcome::Superseded,
            JobOutcome::Aborted,
        ]
        .map(|o| (o.as_str(), finished.get(o.as_str()).copied().unwrap_or(0)));
        labelled(
            out,
            "snodo_attempts_finished_total",
            "Task attempts finished, by outcome.",
            "outcome",
            outcomes,
        );
        // Tasks by the terminal status they reached in this process (a current-state gauge
        // would need a store scan per scrape).
        let _ = writeln!(
            out,
            "# HELP snodo_tasks_finished_total Tasks that reached a terminal status, by status.\n# TYPE snodo_tasks_finished_total counter"
        );
        let count = |o: JobOutcome| finished.get(o.as_str()).copied().unwrap_or(0);
        let by_status = [
            ("completed", count(JobOutcome::Completed)),
            (
                "failed",
                count(JobOutcome::Failed) + count(JobOutcome::RetryExhausted),
            ),
            ("cancelled", self.tasks_cancelled.load(Ordering::Relaxed)),
        ];
        for (status, v) in by_status {
            let _ = writeln!(out, "snodo_tasks_finished_total{{status=\"{status}\"}} {v}");
        }
        counter(
            out,
            "snodo_retries_scheduled_total",
            "Retries scheduled from retry policies.",
            count(JobOutcome::RetryScheduled),
        );
        counter(
            out,
            "snodo_parked_guests_released_total",
            "Guests released while waiting for input.",
            count(JobOutcome::Parked),
        );
        counter(
            out,
            "snodo_sleeping_guests_released_total",
            "Guests released while sleeping past runner.sleep_park_after_ms.",
            count(JobOutcome::Slept),
        );
    }

    /// Writes the latency histograms: store operations by op, instantiation, execution.
    fn render_histograms(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP snodo_store_operation_seconds Store operations made by the runner.\n# TYPE snodo_store_operation_seconds histogram"
        );
        let ops = self.store_ops.lock().clone();
        for (op, h) in ops {
            h.render(
                out,
                "snodo_store_operation_seconds",
                &format!("op=\"{op}\""),
            );
        }
        let _ = writeln!(
            out,
            "# HELP snodo_instantiation_seconds Time to instantiate a guest.\n# TYPE snodo_instantiation_seconds histogram"
        );
        self.instantiate
            .render(out, "snodo_instantiation_seconds", "");
        let _ = writeln!(
            out,
            "# HELP snodo_execution_seconds Time guests spent in execute (parked time included).\n# TYPE snodo_execution_seconds histogram"
        );
        self.execute.render(out, "snodo_execution_seconds", "");
    }
}

/// A plain counter: its help and type, then its one line.
fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

/// A counter family by tool and one more label: its help and type, then one line per
/// (tool, `label` value), the tool's name escaped.
fn by_tool<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, &'a str, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (tool, value, n) in values {
        let tool = escape_label(tool);
        let _ = writeln!(out, "{name}{{tool=\"{tool}\",{label}=\"{value}\"}} {n}");
    }
}

/// A counter family: its help and type, then one line per `label` value.
fn labelled<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (value, n) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use snodo_core::model::TaskId;
    use snodo_runner::{Instrumentation, RunnerEvent};

    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::new();
        let task = TaskId::generate();
        m.event(&RunnerEvent::JobStarted {
            task,
            generation: 2,
            attempt: 2,
            recovered: true,
            trace_id: None,
        });
        m.event(&RunnerEvent::JobStopped {
            task,
            generation: 2,
            outcome: JobOutcome::Completed,
            elapsed: Duration::from_millis(3),
        });
        m.event(&RunnerEvent::StoreOp {
            op: "claim",
            elapsed: Duration::from_micros(300),
            ok: true,
        });
        m.task_created();
        let text = m.render(4, 0, 0);
        assert!(text.contains("snodo_attempts_started_total 1"));
        assert!(text.contains("snodo_recoveries_total 1"));
        assert!(text.contains("snodo_attempts_finished_total{outcome=\"completed\"} 1"));
        assert!(text.contains("snodo_active_guests 4"));
        assert!(
            text.contains("snodo_store_operation_seconds_bucket{op=\"claim\",le=\"0.0005\"} 1")
        );
        assert!(
            text.contains("snodo_store_operation_seconds_bucket{op=\"claim\",le=\"0.00025\"} 0")
        );
        assert!(text.contains("snodo_store_operation_seconds_count{op=\"claim\"} 1"));
        assert!(text.contains("snodo_tasks_created_total 1"));
        assert!(text.contains("snodo_tasks_finished_total{status=\"completed\"} 1"));
    }
}
