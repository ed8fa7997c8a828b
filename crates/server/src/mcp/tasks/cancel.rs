//! `tasks/cancel`: a terminal transition; the running attempt is told after the commit.

use snodo_core::store::{Action, StoreError};

use super::super::request::TaskRef;
use super::super::{Ctx, Handled, Handoff, McpServer};
use super::{ack, lookup_error};

impl McpServer {
    /// Cancelling a finished task is acknowledged and changes nothing.
    pub(in crate::mcp) async fn tasks_cancel(&self, task: TaskRef, ctx: &Ctx<'_>) -> Handled {
        let access = self.access(&task.task_id, ctx, Action::Cancel).await?;
        let message = Some("Cancelled by the client".to_owned());
        let store = self.store.clone();
        let task = *access.task_id();
        let commit = async move { store.cancel(&access, message).await };
        match self
            .commit_then_tell(commit, move |_| Some(Handoff::Cancelled(task)))
            .await
        {
            Ok(c) => {
                ctx.note_task(&task, c.task.span.as_ref());
                Ok(ack(ctx))
            }
            Err(StoreError::Terminal { .. }) => Ok(ack(ctx)),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
