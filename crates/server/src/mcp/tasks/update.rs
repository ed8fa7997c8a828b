//! `tasks/update`: answers to a task's input requests, committed before the acknowledgement.

use snodo_core::store::StoreError;

use super::super::request::TasksUpdate;
use super::super::{Ctx, Handled, McpServer};
use super::{ack, lookup_error};

impl McpServer {
    /// Accepted answers are committed before the acknowledgement, so the next `tasks/get`
    /// already shows them gone from `inputRequests`.
    pub(in crate::mcp) async fn tasks_update(&self, update: TasksUpdate, ctx: &Ctx<'_>) -> Handled {
        let TasksUpdate { task_id, responses } = update;
        match self
            .tasks()
            .accept_input(ctx.principal, &task_id, responses)
            .await
        {
            Ok(c) => {
                ctx.note_task(&c.task.id, c.task.span.as_ref());
                Ok(ack(ctx))
            }
            // Nothing is outstanding on a finished task: every key is ignored.
            Err(StoreError::Terminal { .. }) => Ok(ack(ctx)),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
