//! The tasks extension's methods, one file each, and what they share: the errors that read
//! the same for unknown and foreign tasks. Each acts through the server's task service.

mod cancel;
mod get;
mod update;

use serde_json::Value;

use crate::protocol::RpcError;
use snodo_core::store::{Committed, StoreError};

use super::{Ctx, Handled};

/// The empty complete result that acknowledges an update or a cancel.
fn ack(ctx: &Ctx<'_>) -> Value {
    ctx.dialect.complete(crate::protocol::ResultObject::new())
}

/// The answer to a change a client asked for: acknowledged once committed, and on a
/// finished task too (where it changes nothing); otherwise the lookup's error.
fn acknowledged(committed: Result<Committed, StoreError>, ctx: &Ctx<'_>) -> Handled {
    match committed {
        Ok(c) => {
            ctx.note_task(&c.task.id, c.task.span.as_ref());
            Ok(ack(ctx))
        }
        Err(StoreError::Terminal { .. }) => Ok(ack(ctx)),
        Err(e) => Err(lookup_error(e)),
    }
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
