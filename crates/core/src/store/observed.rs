//! ObservedStore: a store decorator that announces which tasks changed, for subscription
//! streams (`notifications/tasks`). Announcements are hints sent after the commit; readers
//! fetch the authoritative state themselves.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::model::{Task, TaskId};

use super::{
    ClaimRequest, Claimed, Committed, Layer, Layered, NewTask, Store, StoreResult, Transition,
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

/// A store that broadcasts the id of every task a committed change touched.
pub type ObservedStore = Layered<Announcer>;

/// The layer behind [`ObservedStore`]: announces, after the commit, the task each create
/// and each transition touched.
pub struct Announcer {
    changes: broadcast::Sender<Changed>,
}

impl ObservedStore {
    /// Wraps `inner`; subscribers that fall more than `capacity` changes behind are told
    /// they lagged (and should re-read what they watch).
    pub fn new(inner: Arc<dyn Store>, capacity: usize) -> Self {
        let (changes, _) = broadcast::channel(capacity.max(16));
        Layered::over(inner, Announcer { changes })
    }

    /// A receiver of changed task ids.
    pub fn subscribe(&self) -> broadcast::Receiver<Changed> {
        self.layer().changes.subscribe()
    }

    /// Tells subscribers that changes may have been missed: they re-read what they watch.
    pub fn announce_unknown(&self) {
        let _ = self.layer().changes.send(Changed::Unknown);
    }

    /// Announces a change to `id`: called after this store's own commits, and by whoever
    /// hears of a change another node committed to a shared store.
    pub fn announce(&self, id: TaskId) {
        self.layer().announce(id);
    }
}

impl Announcer {
    fn announce(&self, id: TaskId) {
        // Nobody listening is fine.
        let _ = self.changes.send(Changed::Task(id));
    }
}

#[async_trait]
impl Layer for Announcer {
    async fn create(&self, inner: &dyn Store, new: NewTask) -> StoreResult<Task> {
        let t = inner.create(new).await?;
        self.announce(t.id);
        Ok(t)
    }

    async fn create_claimed(
        &self,
        inner: &dyn Store,
        new: NewTask,
        request: &ClaimRequest,
    ) -> StoreResult<Claimed> {
        let c = inner.create_claimed(new, request).await?;
        self.announce(c.task.id);
        Ok(c)
    }

    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        let before = *t.by.task_id();
        let c = t.apply(inner).await?;
        // A replay changed nothing. Other successes are announced even when they were
        // no-ops (a reattach): a duplicate notification carries the same state.
        if !c.replayed {
            self.announce(before);
        }
        Ok(c)
    }
}
