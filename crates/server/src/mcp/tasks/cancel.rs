//! `tasks/cancel`: a terminal transition; the running attempt is told after the commit.

use serde_json::{Map, Value};

use crate::protocol::RpcError;
use snodo_core::model::Principal;
use snodo_core::store::{Action, StoreError};

use super::super::{Handoff, McpServer};
use super::{ack, lookup_error};

impl McpServer {
    /// Cancelling a finished task is acknowledged and changes nothing.
    pub(in crate::mcp) async fn tasks_cancel(
        &self,
        params: &Map<String, Value>,
        principal: &Principal,
    ) -> Result<Value, RpcError> {
        let access = self.access(params, principal, Action::Cancel).await?;
        let message = Some("Cancelled by the client".to_owned());
        let store = self.store.clone();
        let task = *access.task_id();
        let commit = async move { store.cancel(&access, message).await };
        match self
            .commit_then_tell(commit, move |_| Some(Handoff::Cancelled(task)))
            .await
        {
            Ok(_) => Ok(ack()),
            Err(StoreError::Terminal { .. }) => Ok(ack()),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
