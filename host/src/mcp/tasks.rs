//! `tasks/get`, `tasks/update`, `tasks/cancel`.

use serde_json::{Map, Value, json};

use crate::model::{EventId, EventKind, Principal, TaskEvent};
use crate::protocol::RpcError;
use crate::store::{Access, Action, Authority, Effect, StoreError};

use super::{McpServer, wire};

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

    pub(super) async fn tasks_get(
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

    /// Accepted answers are committed before the acknowledgement, so the next `tasks/get`
    /// already shows them gone from `inputRequests`.
    pub(super) async fn tasks_update(
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
                    self.runner.input_accepted(access.task_id(), complete).await;
                }
                Ok(ack())
            }
            // Nothing is outstanding on a finished task: every key is ignored.
            Err(StoreError::Terminal { .. }) => Ok(ack()),
            Err(e) => Err(lookup_error(e)),
        }
    }

    /// Cancelling a finished task is acknowledged and changes nothing.
    pub(super) async fn tasks_cancel(
        &self,
        params: &Map<String, Value>,
        principal: &Principal,
    ) -> Result<Value, RpcError> {
        let access = self.access(params, principal, Action::Cancel).await?;
        let event = TaskEvent::random(EventKind::Cancelled {
            status_message: Some("Cancelled by the client".into()),
        });
        match self
            .store
            .transition(Authority::Request(&access), event, None)
            .await
        {
            Ok(_) => {
                self.metrics.task_cancelled();
                self.runner.cancel(access.task_id());
                Ok(ack())
            }
            Err(StoreError::Terminal { .. }) => Ok(ack()),
            Err(e) => Err(lookup_error(e)),
        }
    }
}
