//! `tasks/get`: the task as the store has it, for its own tenant only.

use serde_json::{Map, Value};

use crate::model::Principal;
use crate::protocol::RpcError;

use super::super::{McpServer, wire};
use super::{lookup_error, task_id};

impl McpServer {
    pub(in crate::mcp) async fn tasks_get(
        &self,
        params: &Map<String, Value>,
        principal: &Principal,
    ) -> Result<Value, RpcError> {
        let id = task_id(params)?;
        let (_, task) = self
            .store
            .authorize_read(principal, id)
            .await
            .map_err(lookup_error)?;
        Ok(wire::get_task_result(&task))
    }
}
