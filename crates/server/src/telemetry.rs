//! Metrics: counters and latency histograms fed by runner instrumentation and the MCP
//! server, rendered in the Prometheus text format at `GET /metrics`.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use snodo_runner::{Instrumentation, JobOutcome, RunnerEvent, TracingInstrumentation};

/// Bucket upper bounds in seconds.
const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; 16],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}",
                self.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// The most label sets `mcp_server_operation_duration_seconds` keeps; beyond them, new
/// tool names and error codes are counted under `_other` (deployments can rename tools
/// for ever, and a guest may fail with any code).
const MAX_OPERATION_SERIES: usize = 2_048;

/// One series of the operation-duration histogram: method, tool, `error.type`.
type OperationKey = (&'static str, Option<String>, Option<String>);

/// A Prometheus label value: backslashes, quotes and newlines escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Process-wide counters and histograms. Cheap to update from hot paths (atomics; a
/// mutex only on the first sighting of a new label value).
#[derive(Debug, Default)]
pub struct Metrics {
    /// `mcp.server.operation.duration` of the OpenTelemetry MCP conventions, per method,
    /// tool and error type.
    operations: Mutex<BTreeMap<OperationKey, std::sync::Arc<Histogram>>>,
    attempts_started: AtomicU64,
    attempts_finished: Mutex<BTreeMap<&'static str, u64>>,
    recoveries: AtomicU64,
    store_ops: Mutex<BTreeMap<&'static str, std::sync::Arc<Histogram>>>,
    instantiate: Histogram,
    execute: Histogram,
    tasks_created: AtomicU64,
    tasks_cancelled: AtomicU64,
    sync_calls: AtomicU64,
    /// Unfinished tasks removed by their TTL.
    reaped_active: AtomicU64,
    /// Tasks whose pinned component version was gone: failed, or run on the deployed one.
    pinned_failed: AtomicU64,
    pinned_ran_latest: AtomicU64,
    /// Restarts of the runner's loops after a panic, by loop.
    loop_restarts: Mutex<BTreeMap<&'static str, u64>>,
    /// Attempts whose guest could not be started.
    start_failures: AtomicU64,
    /// Refusals by the limit (configuration key) that refused.
    limits_hit: Mutex<BTreeMap<&'static str, u64>>,
    /// This node's identity, rendered as `snodo_node_info{node="..."} 1`.
    node: Mutex<Option<String>>,
    /// Outbound HTTP's counters (the engine keeps them).
    outbound: Mutex<Option<std::sync::Arc<snodo_wasm::outbound::Outbound>>>,
    /// Components the trust policy refused (the deployer keeps them).
    trust: Mutex<Option<std::sync::Arc<crate::trust::TrustCounters>>>,
    spans: Mutex<Option<std::sync::Arc<snodo_core::spans::SpanCounters>>>,
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names this node in the exposition (`snodo_node_info`), so a scrape of several nodes
    /// tells them apart.
    pub fn set_node(&self, node: &str) {
        *self.node.lock() = Some(node.to_owned());
    }

    /// Renders the counters of the engine's outbound side.
    pub fn set_outbound(&self, outbound: std::sync::Arc<snodo_wasm::outbound::Outbound>) {
        *self.outbound.lock() = Some(outbound);
    }

    /// Renders the trust policy's refusals.
    pub fn set_trust(&self, counters: std::sync::Arc<crate::trust::TrustCounters>) {
        *self.trust.lock() = Some(counters);
    }

    /// Renders what the span exporter did (`snodo_spans_total`).
    pub fn set_spans(&self, counters: std::sync::Arc<snodo_core::spans::SpanCounters>) {
        *self.spans.lock() = Some(counters);
    }

    /// A task was created by a `tools/call`.
    pub fn task_created(&self) {
        self.tasks_created.fetch_add(1, Ordering::Relaxed);
    }

    /// A task was cancelled by a `tasks/cancel`.
    pub fn task_cancelled(&self) {
        self.tasks_cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// A `tools/call` ran synchronously.
    pub fn sync_call(&self) {
        self.sync_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// A budget refused a request; `limit` is its configuration key.
    pub fn limit_hit(&self, limit: &'static str) {
        *self.limits_hit.lock().entry(limit).or_insert(0) += 1;
    }

    /// Records one MCP operation: its method, the tool a `tools/call` named (when the
    /// catalog serves it), its `error.type` (`None` for a result; a JSON-RPC error code, or
    /// `tool_error`) and how long it took.
    pub fn operation(
        &self,
        method: &'static str,
        tool: Option<String>,
        error: Option<String>,
        took: Duration,
    ) {
        let histogram = {
            let mut ops = self.operations.lock();
            let key = (method, tool, error);
            match ops.get(&key) {
                Some(h) => h.clone(),
                None => {
                    // At the cap a new tool or error code joins `_other`: the methods are
                    // fixed, so at most two series per method follow.
                    let key = if ops.len() >= MAX_OPERATION_SERIES {
                        let other = |l: Option<String>| l.map(|_| "_other".to_owned());
                        (key.0, other(key.1), other(key.2))
                    } else {
                        key
                    };
                    ops.entry(key).or_default().clone()
                }
            }
        };
        histogram.observe(took);
    }

    fn render_operations(&self, out: &mut String) {
        let ops = self.operations.lock().clone();
        if ops.is_empty() {
            return;
        }
        let name = "mcp_server_operation_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} MCP requests served, by method, tool and error type (mcp.server.operation.duration).\n# TYPE {name} histogram"
        );
        for ((method, tool, error), h) in ops {
            let mut labels = format!("mcp_method_name=\"{method}\"");
            if let Some(t) = tool {
                let _ = write!(labels, ",gen_ai_tool_name=\"{}\"", escape_label(&t));
            }
            if let Some(e) = error {
                let _ = write!(labels, ",error_type=\"{e}\"");
            }
            h.render(out, name, &labels);
        }
    }

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
        self.render_operations(&mut out);
        out
    }

    /// The outbound counters, by tool: refused requests by reason, requests a limit ended
    /// by limit, and requests sent or answered from a journal.
    fn render_outbound(&self, out: &mut String) {
        let Some(outbound) = self.outbound.lock().clone() else {
            return;
        };
        let c = outbound.counters();
        let _ = writeln!(
            out,
            "# HELP snodo_outbound_refused_total Outbound requests the host refused, by tool and reason.\n# TYPE snodo_outbound_refused_total counter"
        );
        for ((tool, reason), n) in &c.refused {
            let _ = writeln!(
                out,
                "snodo_outbound_refused_total{{tool=\"{}\",reason=\"{reason}\"}} {n}",
                escape_label(tool)
            );
        }
        let _ = writeln!(
            out,
            "# HELP snodo_outbound_limited_total Outbound requests ended by a limit, by tool and limit.\n# TYPE snodo_outbound_limited_total counter"
        );
        for ((tool, limit), n) in &c.limited {
            let _ = writeln!(
                out,
                "snodo_outbound_limited_total{{tool=\"{}\",limit=\"{limit}\"}} {n}",
                escape_label(tool)
            );
        }
        let _ = writeln!(
            out,
            "# HELP snodo_outbound_requests_total Outbound requests answered, by tool and source (sent, or replayed from a task's journal).\n# TYPE snodo_outbound_requests_total counter"
        );
        for (source, map) in [("sent", &c.sent), ("journal", &c.replayed)] {
            for (tool, n) in map {
                let _ = writeln!(
                    out,
                    "snodo_outbound_requests_total{{tool=\"{}\",source=\"{source}\"}} {n}",
                    escape_label(tool)
                );
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use snodo_core::model::TaskId;

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

    #[test]
    fn operation_series_are_bounded_and_their_labels_escaped() {
        let m = Metrics::new();
        let ms = Duration::from_millis(1);
        let tool_error = Some("tool_error".to_owned());
        m.operation("tools/call", Some("we\"ird".into()), tool_error, ms);
        m.operation("tasks/get", None, Some("-32602".into()), ms);
        for i in 0..MAX_OPERATION_SERIES + 50 {
            m.operation("tools/call", Some(format!("tool-{i}")), None, ms);
        }
        // Past the cap, any error code a guest fails with shares one series too.
        for code in 0..100 {
            let error = Some((-40_000 - code).to_string());
            m.operation("tools/call", None, error, ms);
        }
        let text = m.render(0, 0, 0);
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="we\"ird",error_type="tool_error"} 1"#
        ));
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tasks/get",error_type="-32602"} 1"#
        ));
        let series = text
            .lines()
            .filter(|l| l.starts_with("mcp_server_operation_duration_seconds_count"))
            .count();
        // The first two series and 2,046 tools fill the cap; the last 52 tools share one,
        // and the 100 codes another.
        assert_eq!(
            series,
            MAX_OPERATION_SERIES + 2,
            "the overflow shares two series"
        );
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",error_type="_other"} 100"#
        ));
        assert!(text.contains(
            r#"mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="_other"} 52"#
        ));
    }
}
