//! `tasks/get`: what a client may see of the task, for its own tenant only.

use std::time::Duration;

use super::super::dialect::TaskReply;
use super::super::request::TaskRef;
use super::super::{Ctx, Handled, McpServer, Reply};
use super::lookup_error;

/// The longest a read waits for the commit of an outcome this node is writing: a commit
/// takes a few milliseconds; a store slower than this is answered as it stands.
const SETTLE_WAIT: Duration = Duration::from_millis(100);

impl McpServer {
    pub(in crate::mcp) async fn tasks_get(&self, task: TaskRef, ctx: &Ctx<'_>) -> Handled<Reply> {
        let tasks = self.tasks();
        let mut view = (tasks.view(ctx.principal, &task.task_id).await).map_err(lookup_error)?;
        // A task whose guest has returned, its outcome being committed here, is answered
        // as the commit leaves it.
        if !view.status.is_terminal() && tasks.runner().settled(&view.id, SETTLE_WAIT).await {
            view = (tasks.view(ctx.principal, &task.task_id).await).map_err(lookup_error)?;
        }
        ctx.note_task(&view.id, view.span.as_ref());
        Ok(ctx.dialect.task(ctx.id, &view, TaskReply::Got))
    }
}
