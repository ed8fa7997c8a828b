//! ObservedStore: a store decorator that announces which tasks changed, for subscription
//! streams (`notifications/tasks`). Announcements are hints sent after the commit; readers
//! fetch the authoritative state themselves.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::model::{Principal, Task, TaskEvent, TaskId, Timestamp, Work};

use super::{
    Access, Action, Authority, ClaimRequest, Claimed, Committed, Lease, NewTask, Store, StoreResult,
};

/// What changed, as announced to subscribers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    /// This task changed.
    Task(TaskId),
    /// Changes may have been missed (e.g. a shared store's announcements were interrupted):
    /// any task may have changed.
    Unknown,
}

/// Wraps a store and broadcasts the id of every task a committed change touched.
pub struct ObservedStore {
    inner: Arc<dyn Store>,
    changes: broadcast::Sender<Changed>,
}

impl ObservedStore {
    /// Wraps `inner`; subscribers that fall more than `capacity` changes behind are told
    /// they lagged (and should re-read what they watch).
    pub fn new(inner: Arc<dyn Store>, capacity: usize) -> Self {
        let (changes, _) = broadcast::channel(capacity.max(16));
        Self { inner, changes }
    }

    /// A receiver of changed task ids.
    pub fn subscribe(&self) -> broadcast::Receiver<Changed> {
        self.changes.subscribe()
    }

    /// Tells subscribers that changes may have been missed: they re-read what they watch.
    pub fn announce_unknown(&self) {
        let _ = self.changes.send(Changed::Unknown);
    }

    /// Announces a change to `id`: called after this store's own commits, and by whoever
    /// hears of a change another node committed to a shared store.
    pub fn announce(&self, id: TaskId) {
        // Nobody listening is fine.
        let _ = self.changes.send(Changed::Task(id));
    }
}

#[async_trait]
impl Store for ObservedStore {
    async fn now(&self) -> StoreResult<Timestamp> {
        self.inner.now().await
    }

    async fn check_writable(&self, within: std::time::Duration) -> StoreResult<()> {
        // Commits nothing any task could observe, so nothing is announced.
        self.inner.check_writable(within).await
    }

    async fn create(&self, new: NewTask) -> StoreResult<Task> {
        let t = self.inner.create(new).await?;
        self.announce(t.id);
        Ok(t)
    }

    async fn authorize(
        &self,
        principal: &Principal,
        action: Action,
        task_id: &str,
    ) -> StoreResult<Access> {
        self.inner.authorize(principal, action, task_id).await
    }

    async fn authorize_read(
        &self,
        principal: &Principal,
        task_id: &str,
    ) -> StoreResult<(Access, Task)> {
        self.inner.authorize_read(principal, task_id).await
    }

    async fn get(&self, access: &Access) -> StoreResult<Task> {
        self.inner.get(access).await
    }

    async fn transition(
        &self,
        by: Authority<'_>,
        event: TaskEvent,
        expected_revision: Option<u64>,
    ) -> StoreResult<Committed> {
        let before = match by {
            Authority::Worker(l) => *l.task_id(),
            Authority::Request(a) => *a.task_id(),
        };
        let c = self.inner.transition(by, event, expected_revision).await?;
        // A replay changed nothing. Other successes are announced even when they were
        // no-ops (a reattach): a duplicate notification carries the same state.
        if !c.replayed {
            self.announce(before);
        }
        Ok(c)
    }

    async fn claim(&self, task_id: &TaskId, request: &ClaimRequest) -> StoreResult<Claimed> {
        self.inner.claim(task_id, request).await
    }

    async fn claim_next(&self, request: &ClaimRequest) -> StoreResult<Option<Claimed>> {
        self.inner.claim_next(request).await
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

    async fn reap(&self, limit: usize) -> StoreResult<Vec<super::Reaped>> {
        self.inner.reap(limit).await
    }

    async fn inspect(&self, task_id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
        self.inner.inspect(task_id).await
    }

    async fn server_key(&self) -> StoreResult<[u8; 32]> {
        self.inner.server_key().await
    }
}
