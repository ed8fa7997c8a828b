//! `tasks/get`: what a client may see of the task, for its own tenant only.

use super::super::dialect::TaskReply;
use super::super::request::TaskRef;
use super::super::{Ctx, Handled, McpServer, Reply};
use super::lookup_error;

impl McpServer {
    pub(in crate::mcp) async fn tasks_get(&self, task: TaskRef, ctx: &Ctx<'_>) -> Handled<Reply> {
        let task = self
            .tasks()
            .view(ctx.principal, &task.task_id)
            .await
            .map_err(lookup_error)?;
        ctx.note_task(&task.id, task.span.as_ref());
        Ok(ctx.dialect.task(ctx.id, &task, TaskReply::Got))
    }
}
