//! `tasks/update`: answers to a task's input requests, committed before the acknowledgement.

use serde_json::{Map, Value};

use crate::model::{EventId, Principal};
use crate::protocol::RpcError;
use crate::store::{Action, Effect, StoreError};

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
        match self
            .store
            .accept_input(&access, EventId::random(), responses)
            .await
        {
            Ok(c) => {
                if let Effect::Accepted { keys, complete } = c.effect
                    && !keys.is_empty()
                {
                    self.tell_runner(Handoff::InputAccepted {
                        task: *access.task_id(),
                        complete,
                    })
                    .await;
                }
                Ok(ack())
            }
            // Nothing is outstanding on a finished task: every key is ignored.
            Err(StoreError::Terminal { .. }) => Ok(ack()),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
