//! The one way a task operation commits and reaches the runner: the task is authorized for
//! the requester, the commit runs apart from the request that asked for it, and the runner
//! is told there, after the commit, never before.

use std::future::Future;
use std::sync::Arc;

use snodo_core::model::{Principal, TaskId};
use snodo_core::store::{Access, Action, Store, StoreError};
use snodo_runner::Runner;

use super::TaskService;
use crate::telemetry::Metrics;

/// What a task operation hands to the runner once the store has committed a change.
/// Every hand-off goes through [`TaskService::commit_then_tell`].
pub(super) enum Handoff {
    /// Answers were accepted (or a retry made due); `complete` when none is outstanding
    /// any more.
    InputAccepted {
        /// The task.
        task: TaskId,
        /// No input is outstanding.
        complete: bool,
    },
    /// The task was cancelled: stop its attempt here (other nodes see it at renewal).
    Cancelled(TaskId),
}

/// Tells the runner about a committed change, and counts it.
async fn tell_runner(runner: &Runner, metrics: &Metrics, handoff: Handoff) {
    match handoff {
        Handoff::InputAccepted { task, complete } => {
            runner.input_accepted(&task, complete).await;
        }
        Handoff::Cancelled(task) => {
            metrics.task_cancelled();
            runner.cancel(&task);
        }
    }
}

impl TaskService {
    /// Authorizes `action` on the task `task_id` for `requester`; then runs the `commit` made
    /// of that access apart from the request, and there, once it committed, tells the runner
    /// what `handoff` makes of it (given the task's id), then answers the request.
    ///
    /// Invariant: a committed change reaches the runner even when its client goes away
    /// mid-commit. The request only waits for the answer, so dropping it (a disconnect)
    /// drops the wait and never the hand-off; otherwise a cancelled guest would run on
    /// until its next heartbeat. Tracked by the runner, so shutdown waits for it.
    /// (`server::tasks::a_cancel_reaches_the_runner_though_its_client_left_mid_commit`)
    pub(super) async fn commit_then_tell<T, C, F, H>(
        &self,
        requester: &Principal,
        action: Action,
        task_id: &str,
        commit: C,
        handoff: H,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        C: FnOnce(Arc<dyn Store>, Access) -> F,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
        H: FnOnce(TaskId, &T) -> Option<Handoff> + Send + 'static,
    {
        let access = self.store.authorize(requester, action, task_id).await?;
        let task = *access.task_id();
        let commit = commit(self.store.clone(), access);
        let runner = self.runner.clone();
        let metrics = self.metrics.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.runner.spawn_tracked(async move {
            let result = commit.await;
            if let Ok(committed) = &result
                && let Some(h) = handoff(task, committed)
            {
                tell_runner(&runner, &metrics, h).await;
            }
            let _ = tx.send(result);
        });
        rx.await
            .unwrap_or_else(|_| Err(StoreError::unavailable("the commit was abandoned")))
    }
}
