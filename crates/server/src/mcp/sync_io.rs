//! Input for a synchronous call. On 2026-07-28 answers come from the request (MRTR) and a
//! question without one suspends the guest so the call can answer `input_required`; on
//! 2025-11-25 a question goes to the client as a request on the call's event stream and
//! the guest waits for the answer the client posts back.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::protocol::{self, LogLevel};
use snodo_wasm::{
    CancelToken, ExecutionIo, InputAnswers, InputFailure, InputRequests, Progress,
    check_capabilities,
};

use super::Ctx;
use super::session::{Outstanding, Party};

/// Where a synchronous call's questions are answered.
enum Answers {
    /// The request's `inputResponses` (and its `requestState`'s): MRTR.
    Given(Map<String, Value>),
    /// Asked on the event stream as server requests (2025-11-25), answered by the client's
    /// posted responses.
    Ask {
        outstanding: Arc<Outstanding>,
        party: Party,
    },
}

/// The event stream of a synchronous call: what the guest reports, as JSON-RPC messages,
/// ahead of the response.
pub(crate) struct Outbox {
    /// The stream (bounded: reports that find it full are dropped, never queued).
    pub(crate) tx: mpsc::Sender<Value>,
    /// The request's progress token: progress goes out only when there is one.
    pub(crate) progress_token: Option<Value>,
    /// The least severe guest log level sent as `notifications/message`; none when `None`.
    pub(crate) log_level: Option<LogLevel>,
}

/// Input for a synchronous call.
pub struct SyncIo {
    answers: Answers,
    capabilities: Value,
    outbox: Option<Outbox>,
}

impl SyncIo {
    /// IO for a request that carried `responses` (MRTR) and declared `capabilities`.
    pub fn new(responses: Map<String, Value>, capabilities: Value) -> Self {
        Self {
            answers: Answers::Given(responses),
            capabilities,
            outbox: None,
        }
    }

    /// The I/O of a guest call on the path of request `ctx`: the `answers` it carried, the
    /// capabilities it declared, and (2025-11-25) server requests for what the guest asks
    /// beyond them, answerable by the caller's session only.
    pub(crate) fn for_request(ctx: &Ctx<'_>, answers: Map<String, Value>) -> Self {
        let io = Self::new(answers, ctx.meta.client_capabilities.clone());
        match &ctx.asks {
            Some((outstanding, session)) => {
                let party = Party {
                    principal: ctx.principal.clone(),
                    session: session.clone(),
                };
                io.asking(outstanding.clone(), party)
            }
            None => io,
        }
    }

    /// Questions go to the client on the event stream and wait for its posted answers.
    pub(crate) fn asking(mut self, outstanding: Arc<Outstanding>, party: Party) -> Self {
        self.answers = Answers::Ask { outstanding, party };
        self
    }

    /// Progress, logs and questions go out on `outbox`.
    pub(crate) fn streaming(mut self, outbox: Outbox) -> Self {
        self.outbox = Some(outbox);
        self
    }

    async fn ask(
        &self,
        outstanding: &Outstanding,
        party: &Party,
        requests: InputRequests,
        cancel: &CancelToken,
    ) -> Result<Vec<Value>, InputFailure> {
        let Some(outbox) = &self.outbox else {
            return Err(InputFailure::Unsupported(
                "this tool asks the client for input, which on MCP 2025-11-25 needs an event \
                 stream: send Accept: application/json, text/event-stream"
                    .into(),
            ));
        };
        let mut answers = Vec::with_capacity(requests.len());
        for (key, request) in requests {
            let (id, answer) = outstanding.open(party);
            // However this wait ends (answered, cancelled, or dropped with the call when
            // the client goes away), the entry goes with it.
            let _waiting = Waiting {
                outstanding,
                id: &id,
            };
            let message = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": request["method"],
                "params": request.get("params").cloned().unwrap_or_else(|| json!({})),
            });
            if outbox.tx.send(message).await.is_err() {
                return Err(InputFailure::Cancelled);
            }
            let outcome = tokio::select! {
                a = answer => a,
                () = cancel.cancelled() => return Err(InputFailure::Cancelled),
            };
            match outcome {
                Ok(Ok(result)) => answers.push(result),
                Ok(Err(error)) => {
                    return Err(InputFailure::Invalid(format!(
                        "the client answered input {key:?} with an error: {error}"
                    )));
                }
                // The call ended (the stream closed) before the answer came.
                Err(_) => return Err(InputFailure::Cancelled),
            }
        }
        Ok(answers)
    }
}

#[async_trait]
impl ExecutionIo for SyncIo {
    async fn await_inputs(&self, requests: InputRequests, cancel: &CancelToken) -> InputAnswers {
        check_capabilities(&self.capabilities, &requests)?;
        let responses = match &self.answers {
            Answers::Given(r) => r,
            Answers::Ask { outstanding, party } => {
                return self.ask(outstanding, party, requests, cancel).await;
            }
        };
        let missing: InputRequests = requests
            .iter()
            .filter(|(k, _)| !responses.contains_key(k))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(InputFailure::Suspend(missing));
        }
        Ok(requests
            .iter()
            .map(|(k, _)| responses.get(k).cloned().unwrap_or(Value::Null))
            .collect())
    }

    async fn set_status(&self, _message: String) -> Result<(), snodo_wasm::IoError> {
        Ok(())
    }

    async fn progress(&self, progress: Progress) {
        if let Some(Outbox {
            tx,
            progress_token: Some(token),
            ..
        }) = &self.outbox
        {
            // Progress is lossy by nature: a report that finds the stream full (a client
            // that does not read) is dropped rather than queued without bound.
            let _ = tx.try_send(progress_notification(token, progress));
        }
    }

    fn log(&self, level: &'static str, message: &str) {
        let Some(Outbox {
            tx,
            log_level: Some(least),
            ..
        }) = &self.outbox
        else {
            return;
        };
        let Some(level) = LogLevel::parse(level) else {
            return;
        };
        if level >= *least {
            let _ = tx.try_send(protocol::notification(
                "notifications/message",
                json!({"level": level.as_str(), "logger": "guest", "data": message}),
            ));
        }
    }
}

/// Removes a server request from [`Outstanding`] when its wait ends, however it ends.
struct Waiting<'a> {
    outstanding: &'a Outstanding,
    id: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.outstanding.forget(self.id);
    }
}

/// `notifications/progress` for `token`.
fn progress_notification(token: &Value, p: Progress) -> Value {
    let mut params = json!({"progressToken": token, "progress": p.progress});
    if let Some(t) = p.total {
        params["total"] = json!(t);
    }
    if let Some(m) = p.message {
        params["message"] = json!(m);
    }
    protocol::notification("notifications/progress", params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use snodo_core::model::Principal;

    /// An IO that asks its questions on a stream, the stream's far end, the table of
    /// questions waiting for the client's answer, and the call's cancellation token.
    /// The party the test's questions are asked of.
    fn ada() -> Party {
        Party {
            principal: Principal::new("acme", "ada"),
            session: Some("s".into()),
        }
    }

    fn asking() -> (SyncIo, mpsc::Receiver<Value>, Arc<Outstanding>, CancelToken) {
        let outstanding = Arc::new(Outstanding::default());
        let (tx, rx) = mpsc::channel(4);
        let io = SyncIo::new(Map::new(), json!({"elicitation": {}}))
            .asking(outstanding.clone(), ada())
            .streaming(Outbox {
                tx,
                progress_token: None,
                log_level: None,
            });
        (io, rx, outstanding, CancelToken::new())
    }

    fn question() -> InputRequests {
        vec![(
            "name".to_owned(),
            json!({"method": "elicitation/create", "params": {"message": "Who?", "requestedSchema": {"type": "object"}}}),
        )]
    }

    /// The server request `ask` sends on the stream (it must not finish first).
    async fn sent<F: std::future::Future>(
        rx: &mut mpsc::Receiver<Value>,
        ask: std::pin::Pin<&mut F>,
    ) -> Value {
        tokio::select! {
            m = rx.recv() => m.expect("a request"),
            _ = ask => panic!("answered before it was asked"),
        }
    }

    #[tokio::test]
    async fn a_question_is_a_server_request_answered_by_the_clients_response() {
        let (io, mut rx, outstanding, cancel) = asking();
        let ask = io.await_inputs(question(), &cancel);
        tokio::pin!(ask);
        let sent = sent(&mut rx, ask.as_mut()).await;
        assert_eq!(sent["method"], "elicitation/create");
        assert!(outstanding.answer(
            &ada(),
            &sent["id"],
            Ok(json!({"action": "accept", "content": {"name": "Ada"}}))
        ));
        let answers = ask.await.expect("answered");
        assert_eq!(answers[0]["content"]["name"], "Ada");
        assert_eq!(outstanding.len(), 0);
    }

    #[tokio::test]
    async fn a_wait_dropped_with_its_call_leaves_nothing_behind() {
        let (io, mut rx, outstanding, cancel) = asking();
        {
            let ask = io.await_inputs(question(), &cancel);
            tokio::pin!(ask);
            sent(&mut rx, ask.as_mut()).await;
            assert_eq!(outstanding.len(), 1);
        }
        assert_eq!(outstanding.len(), 0, "the dropped wait took its entry");
        // A question without a stream to ask on is refused, not left waiting.
        let streamless =
            SyncIo::new(Map::new(), json!({"elicitation": {}})).asking(outstanding.clone(), ada());
        let refused = streamless.await_inputs(question(), &cancel).await;
        assert!(
            matches!(refused, Err(InputFailure::Unsupported(_))),
            "{refused:?}"
        );
    }
}
