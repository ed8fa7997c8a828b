//! `tasks/cancel`: a terminal transition; the running attempt is told after the commit.

use snodo_core::store::StoreError;

use super::super::request::TaskRef;
use super::super::{Ctx, Handled, McpServer};
use super::{ack, lookup_error};

impl McpServer {
    /// Cancelling a finished task is acknowledged and changes nothing.
    pub(in crate::mcp) async fn tasks_cancel(&self, task: TaskRef, ctx: &Ctx<'_>) -> Handled {
        let message = "Cancelled by the client".to_owned();
        match self
            .tasks()
            .cancel(ctx.principal, &task.task_id, message)
            .await
        {
            Ok(c) => {
                ctx.note_task(&c.task.id, c.task.span.as_ref());
                Ok(ack(ctx))
            }
            Err(StoreError::Terminal { .. }) => Ok(ack(ctx)),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
