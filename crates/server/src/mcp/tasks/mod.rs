//! The tasks extension's methods, one file each, and what they share: the errors that read
//! the same for unknown and foreign tasks. Each acts through the server's task service.

mod cancel;
mod get;
mod update;

use serde_json::Value;

use crate::protocol::RpcError;
use snodo_core::store::StoreError;

use super::Ctx;

/// The empty complete result that acknowledges an update or a cancel.
fn ack(ctx: &Ctx<'_>) -> Value {
    ctx.dialect.complete(crate::protocol::ResultObject::new())
}

/// Unknown, malformed, expired and foreign task ids all read the same.
pub(in crate::mcp) fn lookup_error(e: StoreError) -> RpcError {
    match e {
        StoreError::NotFound => RpcError::invalid_params("Failed to retrieve task: Task not found"),
        other => {
            // The detail may name files or backend state: it is for the operator's log.
            tracing::warn!(error = %other, "task store failure");
            RpcError::internal("the task store is unavailable; try again")
        }
    }
}
