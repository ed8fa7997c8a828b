//! `tasks/update`: answers to a task's input requests, committed before the acknowledgement.

use snodo_core::model::EventId;
use snodo_core::store::{Action, Effect, StoreError};

use super::super::request::TasksUpdate;
use super::super::{Ctx, Handled, Handoff, McpServer};
use super::{ack, lookup_error};

impl McpServer {
    /// Accepted answers are committed before the acknowledgement, so the next `tasks/get`
    /// already shows them gone from `inputRequests`.
    pub(in crate::mcp) async fn tasks_update(&self, update: TasksUpdate, ctx: &Ctx<'_>) -> Handled {
        let TasksUpdate { task_id, responses } = update;
        let access = self.access(&task_id, ctx, Action::Update).await?;
        let store = self.store.clone();
        let task = *access.task_id();
        let commit = async move {
            store
                .accept_input(&access, EventId::random(), responses)
                .await
        };
        let handoff = move |c: &snodo_core::store::Committed| match &c.effect {
            Effect::Accepted { keys, complete } if !keys.is_empty() => {
                Some(Handoff::InputAccepted {
                    task,
                    complete: *complete,
                })
            }
            _ => None,
        };
        match self.commit_then_tell(commit, handoff).await {
            Ok(c) => {
                ctx.note_task(&task, c.task.span.as_ref());
                Ok(ack(ctx))
            }
            // Nothing is outstanding on a finished task: every key is ignored.
            Err(StoreError::Terminal { .. }) => Ok(ack(ctx)),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
