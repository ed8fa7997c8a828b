//! `resources/read`: no resources are served yet, so every URI is unknown.

use serde_json::{Map, Value, json};

use crate::protocol::RpcError;

use super::McpServer;

impl McpServer {
    /// Every URI is unknown (SEP-2164: -32602 with the URI, never an empty `contents`).
    pub(super) fn resources_read(&self, params: &Map<String, Value>) -> Result<Value, RpcError> {
        let uri = params.get("uri").cloned().unwrap_or(Value::Null);
        Err(RpcError::invalid_params("Resource not found").with_data(json!({"uri": uri})))
    }
}
