//! Input for a synchronous `tools/call`: answers come from the request (MRTR), and a
//! question without one suspends the guest so the call can answer `input_required`.

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::wasm::{CancelToken, ExecutionIo, InputFailure, Progress, check_capabilities};

/// Input for a synchronous call: answers come from the request's `inputResponses`; any
/// question without one suspends the guest so the host can answer `input_required`.
pub struct SyncIo {
    responses: Map<String, Value>,
    capabilities: Value,
    progress: Option<mpsc::Sender<Progress>>,
}

impl SyncIo {
    /// IO for a request that carried `responses` and declared `capabilities`, sending
    /// progress to `progress` when the request asked for it.
    pub fn new(
        responses: Map<String, Value>,
        capabilities: Value,
        progress: Option<mpsc::Sender<Progress>>,
    ) -> Self {
        Self {
            responses,
            capabilities,
            progress,
        }
    }
}

#[async_trait]
impl ExecutionIo for SyncIo {
    async fn await_inputs(
        &self,
        requests: Vec<(String, Value)>,
        _cancel: &CancelToken,
    ) -> Result<Vec<Value>, InputFailure> {
        check_capabilities(&self.capabilities, &requests)?;
        let missing: Vec<(String, Value)> = requests
            .iter()
            .filter(|(k, _)| !self.responses.contains_key(k))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(InputFailure::Suspend(missing));
        }
        Ok(requests
            .iter()
            .map(|(k, _)| self.responses.get(k).cloned().unwrap_or(Value::Null))
            .collect())
    }

    async fn set_status(&self, _message: String) -> Result<(), String> {
        Ok(())
    }

    async fn progress(&self, progress: Progress) {
        if let Some(tx) = &self.progress {
            // Progress is lossy by nature: a report that finds the queue full (a client
            // that does not read) is dropped rather than queued without bound.
            let _ = tx.try_send(progress);
        }
    }
}
