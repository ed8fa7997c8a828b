//! Metrics: counters and latency histograms fed by runner instrumentation and the MCP
//! server, rendered in the Prometheus text format at `GET /metrics`.
//!
//! - [`Metrics`] (here): the process-wide state and the MCP server's counters.
//! - `histogram`: the fixed-bucket latency [`Histogram`].
//! - `operations`: the MCP operation histograms, by method, tool and error type.
//! - `events`: what the runner's events count ([`MetricsAndTracing`]).
//! - `text`: the Prometheus text exposition.

mod events;
mod histogram;
mod operations;
mod text;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

pub use events::MetricsAndTracing;
pub use histogram::Histogram;
use operations::Operations;

/// Process-wide counters and histograms. Cheap to update from hot paths (atomics; a
/// mutex only on the first sighting of a new label value).
#[derive(Debug, Default)]
pub struct Metrics {
    /// `mcp.server.operation.duration` of the OpenTelemetry MCP conventions, per method,
    /// tool and error type.
    operations: Operations,
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
    /// Schedule firings by outcome: fired (a task), skipped (missed or refused), lost
    /// (another node fired it first).
    firings: [AtomicU64; 3],
    /// Webhook tries by outcome: delivered (2xx), failed, dead (its last try failed).
    webhook_tries: [AtomicU64; 3],
    /// The archive: tasks kept, batches failed.
    archive: [AtomicU64; 2],
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
    /// The upstreams' listings (the deployer keeps them).
    upstreams: Mutex<Option<std::sync::Arc<crate::deploy::UpstreamCounters>>>,
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

    /// Renders the upstreams' listings and announced changes.
    pub fn set_upstreams(&self, counters: std::sync::Arc<crate::deploy::UpstreamCounters>) {
        *self.upstreams.lock() = Some(counters);
    }

    /// Renders what the span exporter did (`snodo_spans_total`).
    pub fn set_spans(&self, counters: std::sync::Arc<snodo_core::spans::SpanCounters>) {
        *self.spans.lock() = Some(counters);
    }

    /// A task was created by a `tools/call`.
    pub fn task_created(&self) {
        self.tasks_created.fetch_add(1, Ordering::Relaxed);
    }

    /// A pass over the schedules fired, skipped and lost these many firings.
    pub fn schedule_firings(&self, fired: u64, skipped: u64, lost: u64) {
        for (slot, n) in self.firings.iter().zip([fired, skipped, lost]) {
            slot.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A round of webhook deliveries: these many delivered, failed and given up.
    pub fn webhook_tries(&self, delivered: u64, failed: u64, dead: u64) {
        for (slot, n) in self.webhook_tries.iter().zip([delivered, failed, dead]) {
            slot.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The reaper's archive kept these many tasks, and failed these many batches.
    pub fn archived(&self, kept: u64, failed: u64) {
        for (slot, n) in self.archive.iter().zip([kept, failed]) {
            slot.fetch_add(n, Ordering::Relaxed);
        }
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
}
