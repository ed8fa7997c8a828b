//! `tasks/get`: what a client may see of the task, for its own tenant only.

use serde_json::{Map, Value};

use crate::protocol::RpcError;
use snodo_core::model::Principal;

use super::super::{McpServer, Reply, wire};
use super::{lookup_error, task_id};

impl McpServer {
    pub(in crate::mcp) async fn tasks_get(
        &self,
        id: &Value,
        params: &Map<String, Value>,
        principal: &Principal,
    ) -> Result<Reply, RpcError> {
        let task_id = task_id(params)?;
        let (_, task) = self
            .store
            .authorize_read(principal, task_id)
            .await
            .map_err(lookup_error)?;
        Ok(Reply::result(id, wire::get_task_result(&task)))
    }
}
