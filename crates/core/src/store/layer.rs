//! Layers: a store wrapped to watch or change a few of its operations, every other one
//! passed through untouched.
//!
//! A decorator over [`Store`] writes only what it changes: it implements [`Layer`],
//! overriding the hooks it needs (each defaults to passing the call on), and
//! [`Layered`] forwards the rest. The change feed ([`ObservedStore`](super::ObservedStore)),
//! the stress recorder and the tests' misbehaving stores are layers.

use std::sync::Arc;

use async_trait::async_trait;

use crate::model::{
    ComponentInfo, Deployment, Principal, StoredComponent, Task, TaskEvent, TaskId, TaskView,
    Timestamp, Work,
};

use super::{
    Access, Action, Authority, ClaimRequest, ClaimStore, Claimed, Committed, DeploymentStore,
    InputStore, JournalStore, Lease, NewTask, NextClaim, OperatorStore, Reaped, RevocationStore,
    ScheduleStore, Store, StoreResult, TaskStore,
};

/// What a layer may watch or change. Each hook receives the wrapped store; the defaults
/// pass the call on, so a layer overrides only what it is about.
#[async_trait]
pub trait Layer: Send + Sync + 'static {
    /// [`Store::now`].
    async fn now(&self, inner: &dyn Store) -> StoreResult<Timestamp> {
        inner.now().await
    }

    /// [`TaskStore::create`].
    async fn create(&self, inner: &dyn Store, new: NewTask) -> StoreResult<Task> {
        inner.create(new).await
    }

    /// [`ClaimStore::create_claimed`].
    async fn create_claimed(
        &self,
        inner: &dyn Store,
        new: NewTask,
        request: &ClaimRequest,
    ) -> StoreResult<Claimed> {
        inner.create_claimed(new, request).await
    }

    /// [`TaskStore::transition`].
    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        t.apply(inner).await
    }

    /// [`ClaimStore::claim`].
    async fn claim(
        &self,
        inner: &dyn Store,
        task_id: &TaskId,
        request: &ClaimRequest,
    ) -> StoreResult<Claimed> {
        inner.claim(task_id, request).await
    }

    /// [`ClaimStore::claim_next`].
    async fn claim_next(
        &self,
        inner: &dyn Store,
        request: &ClaimRequest,
    ) -> StoreResult<NextClaim> {
        inner.claim_next(request).await
    }

    /// [`TaskStore::authorize`].
    async fn authorize(
        &self,
        inner: &dyn Store,
        principal: &Principal,
        action: Action,
        task_id: &str,
    ) -> StoreResult<Access> {
        inner.authorize(principal, action, task_id).await
    }
}

/// A [`TaskStore::transition`] a layer is asked to pass on: who asks, the event, and the
/// revision the asker expects.
#[derive(Debug)]
pub struct Transition<'a> {
    /// Who asks.
    pub by: Authority<'a>,
    /// The event.
    pub event: TaskEvent,
    /// The revision the asker expects the task to be at; `None` applies at any.
    pub expected_revision: Option<u64>,
}

impl Transition<'_> {
    /// Passes it on to `store`.
    pub async fn apply(self, store: &dyn Store) -> StoreResult<Committed> {
        store
            .transition(self.by, self.event, self.expected_revision)
            .await
    }
}

/// A store seen through a [`Layer`]: the layer's hooks for what it watches, the wrapped
/// store for everything else.
pub struct Layered<L> {
    inner: Arc<dyn Store>,
    layer: L,
}

impl<L: Layer> Layered<L> {
    /// `inner` seen through `layer`.
    pub fn over(inner: Arc<dyn Store>, layer: L) -> Self {
        Self { inner, layer }
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }
}

#[async_trait]
impl<L: Layer> TaskStore for Layered<L> {
    async fn create(&self, new: NewTask) -> StoreResult<Task> {
        self.layer.create(&*self.inner, new).await
    }

    async fn authorize(
        &self,
        principal: &Principal,
        action: Action,
        task_id: &str,
    ) -> StoreResult<Access> {
        self.layer
            .authorize(&*self.inner, principal, action, task_id)
            .await
    }

    async fn get(&self, access: &Access) -> StoreResult<Task> {
        self.inner.get(access).await
    }

    async fn authorize_read(
        &self,
        principal: &Principal,
        task_id: &str,
    ) -> StoreResult<(Access, TaskView)> {
        self.inner.authorize_read(principal, task_id).await
    }

    async fn transition(
        &self,
        by: Authority<'_>,
        event: TaskEvent,
        expected_revision: Option<u64>,
    ) -> StoreResult<Committed> {
        let t = Transition {
            by,
            event,
            expected_revision,
        };
        self.layer.transition(&*self.inner, t).await
    }
}

#[async_trait]
impl<L: Layer> ClaimStore for Layered<L> {
    async fn create_claimed(&self, new: NewTask, request: &ClaimRequest) -> StoreResult<Claimed> {
        self.layer.create_claimed(&*self.inner, new, request).await
    }

    async fn claim(&self, task_id: &TaskId, request: &ClaimRequest) -> StoreResult<Claimed> {
        self.layer.claim(&*self.inner, task_id, request).await
    }

    async fn claim_next(&self, request: &ClaimRequest) -> StoreResult<NextClaim> {
        self.layer.claim_next(&*self.inner, request).await
    }

    async fn renew(&self, lease: &Lease, lease_ms: u64) -> StoreResult<Lease> {
        self.inner.renew(lease, lease_ms).await
    }

    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        self.inner.release(lease).await
    }

    async fn worker_snapshot(&self, lease: &Lease) -> StoreResult<(Task, Work)> {
        self.inner.worker_snapshot(lease).await
    }

    async fn reap(&self, limit: usize) -> StoreResult<Vec<Reaped>> {
        self.inner.reap(limit).await
    }

    async fn expired(&self, limit: usize) -> StoreResult<Vec<(Task, Work)>> {
        self.inner.expired(limit).await
    }

    async fn reap_ids(&self, ids: &[TaskId]) -> StoreResult<Vec<Reaped>> {
        self.inner.reap_ids(ids).await
    }
}

impl<L: Layer> InputStore for Layered<L> {}

#[async_trait]
impl<L: Layer> DeploymentStore for Layered<L> {
    async fn store_component(&self, bytes: &[u8], signature: Option<&[u8]>) -> StoreResult<String> {
        self.inner.store_component(bytes, signature).await
    }

    async fn component(&self, digest: &str) -> StoreResult<Option<StoredComponent>> {
        self.inner.component(digest).await
    }

    async fn components(&self) -> StoreResult<Vec<ComponentInfo>> {
        self.inner.components().await
    }

    async fn deploy(
        &self,
        components: &[String],
        note: &str,
        expected: Option<u64>,
    ) -> StoreResult<Deployment> {
        self.inner.deploy(components, note, expected).await
    }

    async fn deployment(&self, revision: Option<u64>) -> StoreResult<Option<Deployment>> {
        self.inner.deployment(revision).await
    }

    async fn deployments(&self, limit: usize) -> StoreResult<Vec<Deployment>> {
        self.inner.deployments(limit).await
    }

    async fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>> {
        self.inner.pinned_tasks(digest, limit).await
    }

    async fn collect_components(&self, retention_ms: u64) -> StoreResult<Vec<String>> {
        self.inner.collect_components(retention_ms).await
    }
}

#[async_trait]
impl<L: Layer> RevocationStore for Layered<L> {
    async fn revoke(&self, key: &str, until: Timestamp) -> StoreResult<()> {
        self.inner.revoke(key, until).await
    }

    async fn revoked(&self, key: &str) -> StoreResult<bool> {
        self.inner.revoked(key).await
    }
}

#[async_trait]
impl<L: Layer> JournalStore for Layered<L> {
    async fn journal_append_bounded(
        &self,
        lease: &Lease,
        entry: &crate::model::JournalEntry,
        bounds: super::JournalBounds,
    ) -> StoreResult<()> {
        self.inner
            .journal_append_bounded(lease, entry, bounds)
            .await
    }

    async fn journal(&self, lease: &Lease) -> StoreResult<Vec<crate::model::JournalEntry>> {
        self.inner.journal(lease).await
    }
}

#[async_trait]
impl<L: Layer> OperatorStore for Layered<L> {
    async fn inspect(&self, task_id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
        self.inner.inspect(task_id).await
    }

    async fn list_tasks(&self, query: &super::TaskQuery) -> StoreResult<super::TaskPage> {
        self.inner.list_tasks(query).await
    }

    async fn count_tasks(&self, tenant: Option<&str>) -> StoreResult<super::TaskCounts> {
        self.inner.count_tasks(tenant).await
    }

    async fn retry_now(&self, access: &Access) -> StoreResult<Task> {
        self.inner.retry_now(access).await
    }

    async fn delete_finished(&self, access: &Access) -> StoreResult<()> {
        self.inner.delete_finished(access).await
    }

    async fn task_journal(&self, task_id: &TaskId) -> StoreResult<Vec<crate::model::JournalEntry>> {
        self.inner.task_journal(task_id).await
    }

    async fn record_audit(
        &self,
        record: crate::model::AuditRecord,
    ) -> StoreResult<crate::model::AuditRecord> {
        self.inner.record_audit(record).await
    }

    async fn audit(
        &self,
        from: Option<&str>,
        limit: usize,
    ) -> StoreResult<crate::model::AuditPage> {
        self.inner.audit(from, limit).await
    }
}

#[async_trait]
impl<L: Layer> ScheduleStore for Layered<L> {
    async fn schedules(&self) -> StoreResult<Vec<crate::model::Schedule>> {
        self.inner.schedules().await
    }

    async fn schedule(&self, name: &str) -> StoreResult<Option<crate::model::Schedule>> {
        self.inner.schedule(name).await
    }

    async fn swap_schedule(
        &self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Schedule>,
    ) -> StoreResult<()> {
        self.inner.swap_schedule(name, expected, after).await
    }
}

#[async_trait]
impl<L: Layer> crate::store::OutboxStore for Layered<L> {
    async fn webhooks(&self) -> StoreResult<Vec<crate::model::Webhook>> {
        self.inner.webhooks().await
    }

    async fn webhook(&self, name: &str) -> StoreResult<Option<crate::model::Webhook>> {
        self.inner.webhook(name).await
    }

    async fn swap_webhook(
        &self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Webhook>,
    ) -> StoreResult<()> {
        self.inner.swap_webhook(name, expected, after).await
    }

    async fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<crate::model::OutboxEvent>> {
        self.inner.events_after(after, limit).await
    }

    async fn last_event(&self) -> StoreResult<u64> {
        self.inner.last_event().await
    }

    async fn sweep_events(
        &self,
        below: u64,
        before: Timestamp,
        limit: usize,
    ) -> StoreResult<usize> {
        self.inner.sweep_events(below, before, limit).await
    }
}

#[async_trait]
impl<L: Layer> Store for Layered<L> {
    async fn now(&self) -> StoreResult<Timestamp> {
        self.layer.now(&*self.inner).await
    }

    async fn check_writable(&self, within: std::time::Duration) -> StoreResult<()> {
        self.inner.check_writable(within).await
    }

    async fn backup(&self, to: &std::path::Path) -> StoreResult<super::Backup> {
        self.inner.backup(to).await
    }

    async fn server_key(&self) -> StoreResult<[u8; 32]> {
        self.inner.server_key().await
    }
}
