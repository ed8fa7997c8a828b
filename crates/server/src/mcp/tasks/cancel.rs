//! `tasks/cancel`: a terminal transition; the running attempt is told after the commit.

use super::super::request::TaskRef;
use super::super::{Ctx, Handled, McpServer};
use super::acknowledged;

impl McpServer {
    /// Cancelling a finished task is acknowledged and changes nothing.
    pub(in crate::mcp) async fn tasks_cancel(&self, task: TaskRef, ctx: &Ctx<'_>) -> Handled {
        let message = "Cancelled by the client".to_owned();
        let committed = self
            .tasks()
            .cancel(ctx.principal, &task.task_id, message)
            .await;
        acknowledged(committed, ctx)
    }
}
