//! `tasks/update`: answers to a task's input requests, committed before the acknowledgement.

use serde_json::{Map, Value};

use crate::protocol::RpcError;
use snodo_core::model::{EventId, Principal};
use snodo_core::store::{Action, Effect, StoreError};

use super::super::{Handoff, McpServer};
use super::{ack, lookup_error};

impl McpServer {
    /// Accepted answers are committed before the acknowledgement, so the next `tasks/get`
    /// already shows them gone from `inputRequests`.
    pub(in crate::mcp) async fn tasks_update(
        &self,
        params: &Map<String, Value>,
        principal: &Principal,
    ) -> Result<Value, RpcError> {
        let responses = match params.get("inputResponses") {
            Some(Value::Object(r)) => r.clone(),
            _ => {
                return Err(RpcError::invalid_params(
                    "params.inputResponses must be an object",
                ));
            }
        };
        let access = self.access(params, principal, Action::Update).await?;
        let store = self.store.clone();
        let task = *access.task_id();
        let commit = async move {
            store
                .accept_input(&access, EventId::random(), responses)
                .await
        };
        let handoff = move |c: &snodo_core::store::Committed| match &c.effect {
            Effect::Accepted { keys, complete } if !keys.is_empty() => {
                Some(Handoff::InputAccepted {
                    task,
                    complete: *complete,
                })
            }
            _ => None,
        };
        match self.commit_then_tell(commit, handoff).await {
            Ok(_) => Ok(ack()),
            // Nothing is outstanding on a finished task: every key is ignored.
            Err(StoreError::Terminal { .. }) => Ok(ack()),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
