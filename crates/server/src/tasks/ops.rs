//! The task operations: each authorizes the task for the principal it acts as (its
//! requester, or the owner an operator acts for), commits, and hands the change to the
//! runner after the commit. Unknown, malformed, expired and foreign task ids all fail
//! with [`StoreError::NotFound`], indistinguishably.

use std::sync::Arc;

use serde_json::{Map, Value};

use snodo_core::model::{
    EventId, Grant, Principal, Task, TaskId, TaskView, Work, truncate_status_message,
};
use snodo_core::store::{
    Access, Action, Committed, Effect, NewTask, Store, StoreError, TaskCounts, TaskPage, TaskQuery,
};
use snodo_runner::budget::TenantLimits;
use snodo_runner::{CatalogTool, tool_call_work};

use super::TaskService;
use super::handoff::Handoff;

/// The task a call of `tool` with `arguments` for `principal` makes, whoever calls it (a
/// client's `tools/call`, a schedule's firing): the work pinned to the tool's component
/// (`runner.component_policy` decides what recovery does if that version is gone) with the
/// tool's retry policy and limits and the caller's `grant`; the tool's TTL and poll
/// interval; the tenant's caps from `limits`.
pub(crate) fn tool_task(
    id: TaskId,
    tool: &CatalogTool,
    principal: &Principal,
    arguments: Value,
    grant: Grant,
    limits: &TenantLimits,
) -> NewTask {
    let work = tool_call_work(&id, &tool.info.name, arguments)
        .with_component_digest(tool.component.info().digest.clone())
        .with_retry_policy(tool.retry_policy.clone())
        .with_limits(tool.limits)
        .with_principal(principal.clone());
    // Every scope and no claims, the common case, is what a work without a grant means.
    let work = if grant == Grant::default() {
        work
    } else {
        work.with_grant(grant)
    };
    let mut new = NewTask::new(id, principal.scope(), work);
    new.ttl_ms = tool.ttl_ms;
    new.poll_interval_ms = Some(tool.poll_interval_ms);
    new.max_live_in_scope = Some(limits.live_tasks_per_tenant);
    new.max_stored_in_scope = Some(limits.stored_tasks_per_tenant);
    new.max_stored_bytes_in_scope = Some(limits.stored_bytes_per_tenant);
    new
}

impl TaskService {
    /// Creates a task (and, with a free execution slot, claims and starts it in the same
    /// commit), and counts it.
    pub(crate) async fn create(&self, new: NewTask) -> Result<Task, StoreError> {
        let task = self.runner.create(new).await?;
        self.metrics.task_created();
        Ok(task)
    }

    /// What `principal` may see of the task `task_id` (its wire form), in one read.
    pub(crate) async fn view(
        &self,
        principal: &Principal,
        task_id: &str,
    ) -> Result<TaskView, StoreError> {
        let (_, view) = self.store.authorize_read(principal, task_id).await?;
        Ok(view)
    }

    /// Cancels the task `task_id` as `requester`, with `message` (truncated) as its last
    /// status message; its attempt on this node stops after the commit (other nodes' at
    /// their next renewal). A finished task is [`StoreError::Terminal`].
    pub(crate) async fn cancel(
        &self,
        requester: &Principal,
        task_id: &str,
        message: String,
    ) -> Result<Committed, StoreError> {
        let message = Some(truncate_status_message(message));
        self.commit_then_tell(
            requester,
            Action::Cancel,
            task_id,
            |store, access| async move { store.cancel(&access, message).await },
            |task, _| Some(Handoff::Cancelled(task)),
        )
        .await
    }

    /// Accepts answers to the task's input requests as `requester`, committed before this
    /// returns; a task whose last question is answered resumes. The keys taken are the
    /// effect's ([`Effect::Accepted`]); a finished task is [`StoreError::Terminal`].
    pub(crate) async fn accept_input(
        &self,
        requester: &Principal,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<Committed, StoreError> {
        let commit = |store: Arc<dyn Store>, access: Access| async move {
            store
                .accept_input(&access, EventId::random(), responses)
                .await
        };
        let handoff = |task, c: &Committed| match &c.effect {
            Effect::Accepted { keys, complete } if !keys.is_empty() => {
                Some(Handoff::InputAccepted {
                    task,
                    complete: *complete,
                })
            }
            _ => None,
        };
        self.commit_then_tell(requester, Action::Update, task_id, commit, handoff)
            .await
    }

    /// Makes a task waiting out its retry delay due now, and wakes the runner for it. A
    /// task that is not waiting for a retry is [`StoreError::Invalid`].
    pub(crate) async fn retry_now(
        &self,
        requester: &Principal,
        task_id: &str,
    ) -> Result<Task, StoreError> {
        self.commit_then_tell(
            requester,
            Action::Update,
            task_id,
            |store, access| async move { store.retry_now(&access).await },
            |task, _| {
                Some(Handoff::InputAccepted {
                    task,
                    complete: true,
                })
            },
        )
        .await
    }

    /// Deletes a finished task now rather than at its TTL, freeing its place under
    /// `limits.stored_tasks_per_tenant`. An unfinished task is [`StoreError::Invalid`]:
    /// it is cancelled first, so its worker hears of the end.
    pub(crate) async fn delete_finished(
        &self,
        requester: &Principal,
        task_id: &str,
    ) -> Result<(), StoreError> {
        let access = self
            .store
            .authorize(requester, Action::Cancel, task_id)
            .await?;
        self.store.delete_finished(&access).await
    }

    /// A page of the tasks `query` selects (every tenant unless its filter names one).
    pub(crate) async fn list(&self, query: &TaskQuery) -> Result<TaskPage, StoreError> {
        self.store.list_tasks(query).await
    }

    /// Stored tasks by status and by tool, of `tenant` or of every tenant.
    pub(crate) async fn count(&self, tenant: Option<&str>) -> Result<TaskCounts, StoreError> {
        self.store.count_tasks(tenant).await
    }

    /// The task `id` and its work as stored, if it exists and has not expired.
    pub(crate) async fn load(&self, id: &TaskId) -> Result<Option<(Task, Work)>, StoreError> {
        let now = self.store.now().await?;
        Ok(self
            .inspect(id)
            .await?
            .filter(|(task, _)| !task.is_expired(now)))
    }

    /// The task `id` and its work as stored, expired or not (until the reaper removes it).
    pub(crate) async fn inspect(&self, id: &TaskId) -> Result<Option<(Task, Work)>, StoreError> {
        self.store.inspect(id).await
    }
}
