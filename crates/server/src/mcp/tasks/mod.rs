//! The tasks extension's methods, one file each, and what they share: reading the task id
//! and authorizing it, and the errors that read the same for unknown and foreign tasks.

mod cancel;
mod get;
mod update;

use serde_json::{Map, Value, json};

use crate::protocol::RpcError;
use snodo_core::model::Principal;
use snodo_core::store::{Access, Action, StoreError};

use super::McpServer;

fn ack() -> Value {
    json!({"resultType": "complete"})
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

fn task_id(params: &Map<String, Value>) -> Result<&str, RpcError> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("params.taskId must be a string"))
}

impl McpServer {
    async fn access(
        &self,
        params: &Map<String, Value>,
        principal: &Principal,
        action: Action,
    ) -> Result<Access, RpcError> {
        let id = task_id(params)?;
        self.store
            .authorize(principal, action, id)
            .await
            .map_err(lookup_error)
    }
}
