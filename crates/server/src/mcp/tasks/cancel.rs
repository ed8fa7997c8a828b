//! `tasks/cancel`: a terminal transition; the running attempt is told after the commit.

use snodo_core::store::StoreError;

use snodo_core::model::TaskView;

use super::super::dialect::TaskReply;
use super::super::request::TaskRef;
use super::super::{Ctx, Handled, McpServer, Reply};
use super::lookup_error;

impl McpServer {
    /// The cancellation is committed before the reply; what a finished task's cancel
    /// answers is the dialect's.
    pub(in crate::mcp) async fn tasks_cancel(
        &self,
        task: TaskRef,
        ctx: &Ctx<'_>,
    ) -> Handled<Reply> {
        let message = "Cancelled by the client".to_owned();
        match self
            .tasks()
            .cancel(ctx.principal, &task.task_id, message)
            .await
        {
            Ok(c) => {
                ctx.note_task(&c.task.id, c.task.span.as_ref());
                Ok(ctx
                    .dialect
                    .task(ctx.id, &TaskView::of(&c.task), TaskReply::Cancelled))
            }
            Err(StoreError::Terminal { status }) => ctx.dialect.cancel_finished(ctx.id, status),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
