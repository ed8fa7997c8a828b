//! `tasks/result` (2025-11-25): waits until the task is finished and answers with what its
//! `tools/call` would have answered. While it waits on an event stream, the task's status
//! changes go out as `notifications/tasks/status`, and its questions as server requests
//! (`elicitation/create`, `sampling/createMessage`, …) with the related-task `_meta`; the
//! client's posted answers, correlated by their JSON-RPC ids, go to the task's inbox through
//! the task service, as `tasks/update` answers do on 2026-07-28.
//!
//! Nothing of this is kept but the stored task: a question is asked on every `tasks/result`
//! stream open while it is outstanding, so a client that reconnects and calls `tasks/result`
//! again is asked again, and the first answer committed is the one taken.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::protocol::{self, RpcError, codes};
use crate::tasks::TaskService;
use snodo_core::model::{Principal, TaskId, TaskStatus, TaskView, Timestamp};
use snodo_core::store::Changed;

use super::super::request::TaskRef;
use super::super::session::{Outstanding, Party};
use super::super::tasks::lookup_error;
use super::super::{Ctx, Handled, McpServer, Reply, STREAM_QUEUE};
use super::task;

/// How often a waiting `tasks/result` reads its task when no change reaches this node's
/// feed (another node's commits do not): the task's poll interval, within these bounds.
const REREAD_MS: std::ops::RangeInclusive<u64> = 100..=5_000;

impl McpServer {
    pub(in crate::mcp) async fn tasks_result(
        &self,
        task: TaskRef,
        ctx: &Ctx<'_>,
    ) -> Handled<Reply> {
        let view = self
            .tasks()
            .view(ctx.principal, &task.task_id)
            .await
            .map_err(lookup_error)?;
        ctx.note_task(&view.id, view.span.as_ref());
        if view.status.is_terminal() {
            return Ok(Reply::message(200, &task::payload(ctx.id, &view)));
        }
        // A wait holds a stream slot, as a subscription does, for as long as it is open.
        let slot = self
            .tasks()
            .stream_slot(ctx.principal.tenant.as_str())
            .map_err(|r| r.to_rpc_error())?;
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let asks = match &ctx.asks {
            Some((outstanding, session)) if ctx.accepts_sse => Some(Asking {
                outstanding: outstanding.clone(),
                party: Party {
                    principal: ctx.principal.clone(),
                    session: session.clone(),
                },
                open: Vec::new(),
            }),
            _ => None,
        };
        let wait = Wait {
            tasks: self.tasks().clone(),
            principal: ctx.principal.clone(),
            task_id: view.id,
            id: ctx.id.clone(),
            out: ctx.accepts_sse.then(|| tx.clone()),
            asks,
            shown: None,
        };
        let (feed, closing) = (self.tasks().change_feed(), self.tasks().closing());
        if !ctx.accepts_sse {
            // The answer is the response body; the transport drops this future (and the
            // wait) when the client goes away.
            let message = wait.run(feed, closing).await;
            drop(slot);
            return Ok(Reply::message(200, &message));
        }
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                message = wait.run(feed, closing) => { let _ = tx.send(message).await; }
                () = tx.closed() => {}
            }
        });
        Ok(Reply::Stream(rx))
    }
}

/// The questions one stream asked, and the server-request ids they wait on (forgotten
/// however the stream ends).
struct Asking {
    outstanding: Arc<Outstanding>,
    party: Party,
    open: Vec<String>,
}

impl Drop for Asking {
    fn drop(&mut self) {
        for id in &self.open {
            self.outstanding.forget(id);
        }
    }
}

/// One `tasks/result` waiting for its task.
struct Wait {
    tasks: TaskService,
    principal: Principal,
    task_id: TaskId,
    /// The request's id: the final message answers it.
    id: Value,
    /// The event stream, when the client reads one: notifications and questions go there.
    out: Option<mpsc::Sender<Value>>,
    /// Where questions are asked, when they can be (an event stream of a 2025-11-25 call).
    asks: Option<Asking>,
    /// The status and update time last shown in a status notification.
    shown: Option<(&'static str, Timestamp)>,
}

/// A client's answer to the question under a key: its result, or why there is none.
type Answered = (
    String,
    Result<Result<Value, Value>, tokio::sync::oneshot::error::RecvError>,
);

impl Wait {
    /// Waits until the task is finished, and gives the response to send: its payload, or
    /// the error that ended the wait (the task is gone, or the server is shutting down).
    async fn run(
        mut self,
        mut feed: Option<broadcast::Receiver<Changed>>,
        closing: CancellationToken,
    ) -> Value {
        let id_text = self.task_id.to_string();
        let mut asked: HashSet<String> = HashSet::new();
        let mut answers = FuturesUnordered::new();
        loop {
            let view = match self.tasks.view(&self.principal, &id_text).await {
                Ok(v) => v,
                Err(e) => return protocol::error_response(&self.id, &lookup_error(e)),
            };
            if view.status.is_terminal() {
                return task::payload(&self.id, &view);
            }
            self.show(&view);
            // A key no longer outstanding was answered (here or elsewhere); the same key
            // asked again later is a new question.
            asked.retain(|k| view.input_requests.iter().any(|(key, _)| key == k));
            if view.status == TaskStatus::InputRequired {
                for (key, request) in &view.input_requests {
                    if asked.contains(key) {
                        continue;
                    }
                    match self.ask(&id_text, request.get()).await {
                        Some(Ok(rx)) => {
                            asked.insert(key.clone());
                            let key = key.clone();
                            answers.push(async move { (key, rx.await) });
                        }
                        // Nowhere to ask: the client learns of the question from tasks/get.
                        None => {}
                        Some(Err(())) => return closed(&self.id),
                    }
                }
            }
            let reread = Duration::from_millis(
                view.poll_interval_ms
                    .unwrap_or(1_000)
                    .clamp(*REREAD_MS.start(), *REREAD_MS.end()),
            );
            let out = self.out.clone();
            tokio::select! {
                () = closing.cancelled() => return closed(&self.id),
                () = gone(out.as_ref()) => return closed(&self.id),
                Some(answered) = answers.next(), if !answers.is_empty() => {
                    self.take(&id_text, answered).await;
                }
                () = changed(&mut feed, self.task_id) => {}
                () = tokio::time::sleep(reread) => {}
            }
        }
    }

    /// Sends `notifications/tasks/status` when the task's status or update time differs
    /// from what this stream last showed. Lossy: a full stream skips it.
    fn show(&mut self, view: &TaskView) {
        let Some(out) = &self.out else { return };
        let now = (task::status(view), view.last_updated_at);
        if self.shown == Some(now) {
            return;
        }
        self.shown = Some(now);
        let mut params = task::task(view);
        params["_meta"] = task::related(&view.id.to_string());
        let _ = out.try_send(protocol::notification("notifications/tasks/status", params));
    }

    /// Asks the stored question `request` as a server request on the stream. `None`: there
    /// is no stream to ask on; `Some(Err)`: the stream closed.
    async fn ask(
        &mut self,
        task_id: &str,
        request: &str,
    ) -> Option<Result<tokio::sync::oneshot::Receiver<Result<Value, Value>>, ()>> {
        let (asking, out) = (self.asks.as_mut()?, self.out.as_ref()?);
        let request: Value = serde_json::from_str(request).ok()?;
        let mut params = match request.get("params") {
            Some(Value::Object(p)) => p.clone(),
            _ => Map::new(),
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = meta.as_object_mut() {
            m.insert(task::RELATED_TASK.into(), json!({ "taskId": task_id }));
        }
        let (rid, rx) = asking.outstanding.open(&asking.party);
        asking.open.push(rid.clone());
        let message = json!({
            "jsonrpc": "2.0",
            "id": rid,
            "method": request["method"],
            "params": params,
        });
        Some(out.send(message).await.map(|()| rx).map_err(|_| ()))
    }

    /// Commits a client's answer to the task's inbox. An error answer, or none, leaves the
    /// question outstanding: the next `tasks/result` asks it again.
    async fn take(&self, task_id: &str, (key, answer): Answered) {
        match answer {
            Ok(Ok(result)) => {
                let responses = Map::from_iter([(key, result)]);
                if let Err(e) = self
                    .tasks
                    .accept_input(&self.principal, task_id, responses)
                    .await
                {
                    tracing::debug!(error = %e, "an answer posted to tasks/result was not taken");
                }
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, key, "the client answered a task's question with an error");
            }
            Err(_) => {}
        }
    }
}

/// The end of a wait that did not see its task finish.
fn closed(id: &Value) -> Value {
    protocol::error_response(
        id,
        &RpcError::new(
            codes::INTERNAL_ERROR,
            "the wait for the task's result ended before the task did (the server is shutting \
             down): call tasks/result again",
        ),
    )
}

/// Resolves when the stream's reader has gone away; never without a stream.
async fn gone(out: Option<&mpsc::Sender<Value>>) {
    match out {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}

/// Resolves when the feed says task `id` may have changed; never without a feed.
async fn changed(feed: &mut Option<broadcast::Receiver<Changed>>, id: TaskId) {
    let Some(f) = feed else {
        return std::future::pending().await;
    };
    loop {
        match f.recv().await {
            Ok(Changed::Task(t)) if t == id => return,
            Ok(Changed::Task(_)) => {}
            Ok(Changed::Unknown) | Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => {
                return std::future::pending().await;
            }
        }
    }
}
