//! `tasks/update`: answers to a task's input requests, committed before the acknowledgement.

use super::super::request::TasksUpdate;
use super::super::{Ctx, Handled, McpServer};
use super::acknowledged;

impl McpServer {
    /// Accepted answers are committed before the acknowledgement, so the next `tasks/get`
    /// already shows them gone from `inputRequests`. Nothing is outstanding on a finished
    /// task: every key is ignored, and the update acknowledged.
    pub(in crate::mcp) async fn tasks_update(&self, update: TasksUpdate, ctx: &Ctx<'_>) -> Handled {
        let TasksUpdate { task_id, responses } = update;
        let committed = self
            .tasks()
            .accept_input(ctx.principal, &task_id, responses)
            .await;
        acknowledged(committed, ctx)
    }
}
