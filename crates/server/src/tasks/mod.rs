//! Task operations over the store and the runner, committed then handed off: what the MCP
//! methods and the operators both do to tasks, written once. Never speaks a protocol: it
//! answers with store values and [`StoreError`]s, and each edge (`mcp`, `admin`) says them
//! in its own words.
//!
//! [`TaskService`] owns the store, the runner, the metrics it counts with, the server key
//! once read, the change feed, the per-tenant subscription-stream slots and the token that
//! closes long-lived streams at shutdown. `handoff` holds the one way a committed change
//! reaches the runner; `ops` the operations.

mod handoff;
mod ops;

pub(crate) use ops::tool_task;

use std::sync::{Arc, OnceLock};

use snodo_core::model::{Notify, WebhookSpec};
use snodo_core::store::{Changed, NewTask, ObservedStore, Store, StoreError};
use snodo_runner::Runner;
use snodo_runner::budget::{Refusal, Slot, Slots, TenantLimits};
use tokio_util::sync::CancellationToken;

use crate::telemetry::Metrics;

/// The task operations of one server, over its store and runner.
///
/// A cheap handle, like [`Runner`]: its clones share the store, the runner, the metrics,
/// the server key, the change feed, the stream slots and the closing token, so the MCP
/// server and the admin routes holding clones act on one service.
#[derive(Clone)]
pub(crate) struct TaskService {
    store: Arc<dyn Store>,
    runner: Runner,
    metrics: Arc<Metrics>,
    changes: Option<Arc<ObservedStore>>,
    /// Open subscription streams (MCP's and operators'), per tenant.
    stream_slots: Arc<Slots>,
    /// Cancelled at shutdown: open subscription streams end so connections can drain.
    closing: CancellationToken,
    /// The store's server key once read: it is made once per store and never changes, and
    /// every call that may seal a request state or a session needs it.
    key: Arc<OnceLock<[u8; 32]>>,
    /// The webhook subscriptions, as a creation consults them ([`TaskService::hear`]):
    /// refreshed by the webhooks' loop and at every change on this node.
    hearing: Arc<parking_lot::RwLock<Vec<WebhookSpec>>>,
}

impl TaskService {
    /// The operations over `store`, handing off to `runner`; streams are budgeted by
    /// `limits` (`limits.streams_per_tenant`, `limits.streams`).
    pub(crate) fn new(store: Arc<dyn Store>, runner: Runner, limits: &TenantLimits) -> Self {
        Self {
            store,
            runner,
            metrics: Arc::new(Metrics::new()),
            changes: None,
            stream_slots: Slots::new(
                "limits.streams_per_tenant",
                limits.streams_per_tenant.max(1),
                "limits.streams",
                limits.streams.max(1),
            ),
            closing: CancellationToken::new(),
            key: Arc::default(),
            hearing: Arc::default(),
        }
    }

    /// Announces changes from `feed` (the same store, wrapped) to subscription streams.
    pub(crate) fn with_change_feed(mut self, feed: Arc<ObservedStore>) -> Self {
        self.changes = Some(feed);
        self
    }

    /// Counts into `metrics` (shared with the runner's instrumentation).
    pub(crate) fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The store the operations act on.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The runner the committed changes are handed to.
    pub(crate) fn runner(&self) -> &Runner {
        &self.runner
    }

    /// The metrics the service counts into.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The store's server key (it seals request states, session ids and console sessions).
    /// A store that cannot answer is logged here; the caller says so in its own words.
    pub(crate) async fn server_key(&self) -> Result<[u8; 32], StoreError> {
        if let Some(key) = self.key.get() {
            return Ok(*key);
        }
        let key = self.store.server_key().await.inspect_err(|e| {
            tracing::warn!(error = %e, "the server key could not be read");
        })?;
        Ok(*self.key.get_or_init(|| key))
    }

    /// A receiver of the change feed, when the service keeps one.
    pub(crate) fn change_feed(&self) -> Option<tokio::sync::broadcast::Receiver<Changed>> {
        self.changes.as_ref().map(|f| f.subscribe())
    }

    /// A subscription-stream slot of `tenant`, or the refusal naming the budget (counted).
    pub(crate) fn stream_slot(&self, tenant: &str) -> Result<Slot, Refusal> {
        self.stream_slots
            .try_acquire(tenant)
            .inspect_err(|r| self.metrics.limit_hit(r.limit))
    }

    /// Subscription streams open now (all tenants).
    pub(crate) fn streams_open(&self) -> usize {
        self.stream_slots.held()
    }

    /// Replaces the subscriptions creations consult.
    pub(crate) fn set_hearing(&self, specs: Vec<WebhookSpec>) {
        *self.hearing.write() = specs;
    }

    /// Names in `new` the subscriptions of its tenant that hear `tool`, and the one whose
    /// URL the call asked for (`asked`, the `_meta` key `io.snodo/webhook`): the store
    /// writes an event in the commit of each transition they hear. A URL no subscription
    /// of the tenant has is refused: a tenant allows an endpoint by subscribing it.
    pub(crate) fn hear(
        &self,
        new: &mut NewTask,
        tool: &str,
        asked: Option<&str>,
    ) -> Result<(), String> {
        let tenant = new.scope.tenant().to_owned();
        let asked: Vec<String> = asked.map(str::to_owned).into_iter().collect();
        let hearing = self.hearing.read();
        if let Some(url) = asked.first()
            && !hearing.iter().any(|s| s.tenant == tenant && s.url == *url)
        {
            return Err(format!(
                "_meta io.snodo/webhook: tenant {tenant:?} has no webhook subscription for \
                 {url:?}; an operator subscribes an endpoint first (POST /admin/v1/webhooks, \
                 on_request = true)"
            ));
        }
        new.notify = hearing
            .iter()
            .filter(|s| s.hears(&tenant, tool, &asked))
            .map(Notify::of)
            .collect();
        Ok(())
    }

    /// Cancelled at shutdown: long-lived streams end with it.
    pub(crate) fn closing(&self) -> CancellationToken {
        self.closing.clone()
    }

    /// Ends every open subscription stream (at shutdown; the streams would otherwise keep
    /// their connections open forever).
    pub(crate) fn close_streams(&self) {
        self.closing.cancel();
    }
}
