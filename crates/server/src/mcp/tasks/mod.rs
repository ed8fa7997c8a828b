//! The tasks extension's methods, one file each, and what they share: authorizing the task
//! id, and the errors that read the same for unknown and foreign tasks.

mod cancel;
mod get;
mod update;

use serde_json::Value;

use crate::protocol::RpcError;
use snodo_core::store::{Access, Action, StoreError};

use super::{Ctx, McpServer};

/// The empty complete result that acknowledges an update or a cancel.
fn ack(ctx: &Ctx<'_>) -> Value {
    ctx.dialect.complete(crate::protocol::ResultObject::new())
}

/// Unknown, malformed, expired and foreign task ids all read the same.
fn lookup_error(e: StoreError) -> RpcError {
    match e {
        StoreError::NotFound => RpcError::invalid_params("Failed to retrieve task: Task not found"),
        other => {
            // The detail may name files or backend state: it is for the operator's log.
            tracing::warn!(error = %other, "task store failure");
            RpcError::internal("the task store is unavailable; try again")
        }
    }
}

impl McpServer {
    async fn access(
        &self,
        task_id: &str,
        ctx: &Ctx<'_>,
        action: Action,
    ) -> Result<Access, RpcError> {
        self.store
            .authorize(ctx.principal, action, task_id)
            .await
            .map_err(lookup_error)
    }
}
