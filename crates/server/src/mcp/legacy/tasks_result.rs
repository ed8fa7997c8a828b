//! `tasks/result` (2025-11-25): follows the task until it is finished (`follow`: its status
//! changes as `notifications/tasks/status` and its questions as server requests on the
//! event stream) and answers with what its `tools/call` would have answered. A client that
//! reconnects and calls `tasks/result` again is asked again.

use serde_json::Value;

use crate::protocol::{self, RpcError, codes};

use super::super::follow::{Asking, Follow, Followed};
use super::super::request::TaskRef;
use super::super::tasks::lookup_error;
use super::super::{Ctx, Handled, McpServer, Reply};
use super::task;

impl McpServer {
    pub(in crate::mcp) async fn tasks_result(
        &self,
        task: TaskRef,
        ctx: &Ctx<'_>,
    ) -> Handled<Reply> {
        let view = self
            .tasks()
            .view(ctx.principal, &task.task_id)
            .await
            .map_err(lookup_error)?;
        ctx.note_task(&view.id, view.span.as_ref());
        if view.status.is_terminal() {
            return Ok(Reply::message(200, &task::payload(ctx.id, &view)));
        }
        let key = self.server_key().await?;
        let follow = Follow {
            notify: true,
            asks: Asking::of(ctx, key),
            ..Follow::new(self.tasks().clone(), ctx, view.id)
        };
        self.follow_reply(ctx, follow, |id, followed| match followed {
            Followed::Finished(view) => (200, task::payload(id, &view)),
            // Without a deadline a follow ends pending only when cut short.
            Followed::Pending(_) | Followed::Closed => (200, closed(id)),
            Followed::Lost(e) | Followed::Refused(e) => (200, protocol::error_response(id, &e)),
        })
        .await
    }
}

/// The end of a wait that did not see its task finish.
fn closed(id: &Value) -> Value {
    protocol::error_response(
        id,
        &RpcError::new(
            codes::INTERNAL_ERROR,
            "the wait for the task's result ended before the task did (the server is shutting \
             down): call tasks/result again",
        ),
    )
}
