//! Following one task from an open request until it finishes, or until a deadline: the wait
//! behind 2025-11-25's `tasks/result` and behind the handle a client without tasks is given
//! (`handle`). While it waits on an event stream, the task's status changes may go out as
//! `notifications/tasks/status`, and its questions as server requests (`elicitation/create`,
//! `sampling/createMessage`, …) with the related-task `_meta`; the client's posted answers,
//! correlated by their JSON-RPC ids, go to the task's inbox through the task service, as
//! `tasks/update` answers do. Such a request's id names its task and question, sealed, so an
//! answer posted to another node commits there ([`McpServer::answer_elsewhere`]).
//!
//! Nothing of this is kept but the stored task: a question is asked on every follow open
//! while it is outstanding, so a client that reconnects and follows again is asked again, and
//! the first answer committed is the one taken.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::protocol::{self, ResultObject, RpcError};
use crate::tasks::TaskService;
use snodo_core::model::{Principal, TaskId, TaskStatus, TaskView, Timestamp, ViewOutcome};
use snodo_core::store::Changed;

use super::dialect::Dialect;
use super::session::{Outstanding, Party};
use super::tasks::lookup_error;
use super::{Ctx, Handled, McpServer, Reply, STREAM_QUEUE, state};

/// The `_meta` key that relates a message to its task.
pub(super) const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How often a follow reads its task when no change reaches this node's feed (another
/// node's commits do not): the task's poll interval, within these bounds.
const REREAD_MS: std::ops::RangeInclusive<u64> = 100..=5_000;

/// How a follow ended.
pub(super) enum Followed {
    /// The task is finished.
    Finished(TaskView),
    /// The deadline passed, or the task waits for input no open stream can ask: the task
    /// as last read.
    Pending(TaskView),
    /// The server is shutting down, or the client went away.
    Closed,
    /// The task could not be read (gone, or the store failed).
    Lost(RpcError),
    /// No follow was started: the tenant holds every stream slot it may.
    Refused(RpcError),
}

/// The questions one stream asked, and the server-request ids they wait on (forgotten
/// however the stream ends).
pub(super) struct Asking {
    outstanding: Arc<Outstanding>,
    party: Party,
    open: Vec<String>,
    /// The key request ids are sealed with: each names its task and question, so the answer
    /// commits on whichever node it is posted to.
    key: [u8; 32],
}

impl Asking {
    /// Where a request of `ctx` can ask: its event stream, on a 2025-11-25 session; request
    /// ids are sealed with `key`.
    pub(super) fn of(ctx: &Ctx<'_>, key: [u8; 32]) -> Option<Self> {
        match &ctx.asks {
            Some((outstanding, session)) if ctx.accepts_sse => Some(Asking {
                outstanding: outstanding.clone(),
                party: Party {
                    principal: ctx.principal.clone(),
                    session: session.clone(),
                },
                open: Vec::new(),
                key,
            }),
            _ => None,
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        for id in &self.open {
            self.outstanding.forget(id);
        }
    }
}

/// One request following one task.
pub(super) struct Follow {
    pub(super) tasks: TaskService,
    pub(super) principal: Principal,
    pub(super) task_id: TaskId,
    /// The event stream, when the client reads one: notifications and questions go there.
    pub(super) out: Option<mpsc::Sender<Value>>,
    /// Whether status changes go out as `notifications/tasks/status` (to a client that
    /// knows tasks).
    pub(super) notify: bool,
    /// Where questions are asked, when they can be (an event stream of a 2025-11-25 call).
    pub(super) asks: Option<Asking>,
    /// When the follow gives up and reports the task as pending; `None` waits to the end.
    pub(super) until: Option<Instant>,
    /// Ends the follow as soon as the task waits for input, when `asks` cannot ask it: the
    /// caller asks otherwise (an MRTR round), or says that it waits.
    pub(super) stop_on_input: bool,
    /// The status and update time last shown in a status notification.
    pub(super) shown: Option<(&'static str, Timestamp)>,
}

/// A client's answer to the question under a key: its result, or why there is none.
type Answered = (
    String,
    Result<Result<Value, Value>, tokio::sync::oneshot::error::RecvError>,
);

impl Follow {
    /// A follow of `task_id` by `ctx`'s caller with nothing to show or ask yet: set the
    /// public fields for more.
    pub(super) fn new(tasks: TaskService, ctx: &Ctx<'_>, task_id: TaskId) -> Self {
        Self {
            tasks,
            principal: ctx.principal.clone(),
            task_id,
            out: None,
            notify: false,
            asks: None,
            until: None,
            stop_on_input: false,
            shown: None,
        }
    }

    /// Follows the task until it is finished, the deadline passes, or the wait is cut.
    pub(super) async fn run(
        mut self,
        mut feed: Option<broadcast::Receiver<Changed>>,
        closing: CancellationToken,
    ) -> Followed {
        let id_text = self.task_id.to_string();
        let mut asked: HashSet<String> = HashSet::new();
        let mut answers = FuturesUnordered::new();
        loop {
            let view = match self.tasks.view(&self.principal, &id_text).await {
                Ok(v) => v,
                Err(e) => return Followed::Lost(lookup_error(e)),
            };
            if view.status.is_terminal() {
                return Followed::Finished(view);
            }
            self.show(&view);
            // A key no longer outstanding was answered (here or elsewhere); the same key
            // asked again later is a new question.
            asked.retain(|k| view.input_requests.iter().any(|(key, _)| key == k));
            if view.status == TaskStatus::InputRequired {
                if self.asks.is_none() && self.stop_on_input {
                    return Followed::Pending(view);
                }
                for (key, request) in &view.input_requests {
                    if asked.contains(key) {
                        continue;
                    }
                    match self.ask(&id_text, key, request.get()).await {
                        Some(Ok(rx)) => {
                            asked.insert(key.clone());
                            let key = key.clone();
                            answers.push(async move { (key, rx.await) });
                        }
                        // Nowhere to ask: the client learns of the question otherwise.
                        None => {}
                        Some(Err(())) => return Followed::Closed,
                    }
                }
            }
            if self.until.is_some_and(|t| Instant::now() >= t) {
                return Followed::Pending(view);
            }
            let reread = Duration::from_millis(
                view.poll_interval_ms
                    .unwrap_or(1_000)
                    .clamp(*REREAD_MS.start(), *REREAD_MS.end()),
            );
            let out = self.out.clone();
            let until = self.until;
            tokio::select! {
                () = closing.cancelled() => return Followed::Closed,
                () = gone(out.as_ref()) => return Followed::Closed,
                Some(answered) = answers.next(), if !answers.is_empty() => {
                    self.take(&id_text, answered).await;
                }
                () = changed(&mut feed, self.task_id) => {}
                () = tokio::time::sleep(reread) => {}
                () = deadline(until) => {}
            }
        }
    }

    /// Sends `notifications/tasks/status` (the flat task of 2025-11-25, the one revision
    /// with that notification) when its status or update time differs from what this stream
    /// last showed. Lossy: a full stream skips it.
    fn show(&mut self, view: &TaskView) {
        let Some(out) = self.out.as_ref().filter(|_| self.notify) else {
            return;
        };
        let now = (super::legacy::flat_status(view), view.last_updated_at);
        if self.shown == Some(now) {
            return;
        }
        self.shown = Some(now);
        let mut params = super::legacy::flat_task(view);
        params["_meta"] = related(&view.id.to_string());
        let _ = out.try_send(protocol::notification("notifications/tasks/status", params));
    }

    /// Asks the stored question `request` as a server request on the stream. `None`: there
    /// is no stream to ask on, or its client cannot answer this kind; `Some(Err)`: the
    /// stream closed.
    async fn ask(
        &mut self,
        task_id: &str,
        input: &str,
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
            m.insert(RELATED_TASK.into(), json!({ "taskId": task_id }));
        }
        let rid = state::issue_question_id(&asking.key, task_id, input, &asking.party);
        let rx = asking.outstanding.open_as(rid.clone(), &asking.party);
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
    /// question outstanding: the next follow asks it again.
    async fn take(&self, task_id: &str, (key, answer): Answered) {
        match answer {
            Ok(Ok(result)) => {
                let responses = Map::from_iter([(key, result)]);
                if let Err(e) = self
                    .tasks
                    .accept_input(&self.principal, task_id, responses)
                    .await
                {
                    tracing::debug!(error = %e, "an answer posted on a task's stream was not taken");
                }
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, key, "the client answered a task's question with an error");
            }
            Err(_) => {}
        }
    }
}

impl McpServer {
    /// Commits a client's answer to a task's question that no follow of this node waits
    /// on: the stream that asked is another node's (or has closed). Anything but the answer
    /// of `party` to a question id this server sealed is dropped, as is an error answer
    /// (the question stays outstanding, to be asked again).
    pub(super) async fn answer_elsewhere(
        &self,
        party: &Party,
        id: &Value,
        outcome: Result<Value, Value>,
    ) {
        let (Some(id), Ok(result)) = (id.as_str(), outcome) else {
            return;
        };
        if !id.starts_with(state::QUESTION_ID_PREFIX) {
            return;
        }
        let Ok(key) = self.server_key().await else {
            return;
        };
        let Some((task, input)) = state::open_question_id(&key, id, party) else {
            return;
        };
        let responses = Map::from_iter([(input, result)]);
        if let Err(e) = self
            .tasks()
            .accept_input(&party.principal, &task, responses)
            .await
        {
            tracing::debug!(error = %e, "an answer posted for a task's question was not taken");
        }
    }

    /// Runs `follow` for the request `ctx`, in one of its tenant's stream slots (a follow
    /// holds one, as a subscription does, for as long as it is open), and answers with what
    /// `finish` makes of how it ended: on an event stream, after what the follow sent there,
    /// when the client reads one and the follow sends anything (the HTTP status is then 200
    /// whatever `finish` says), else as the response body.
    pub(super) async fn follow_reply(
        &self,
        ctx: &Ctx<'_>,
        mut follow: Follow,
        finish: impl FnOnce(&Value, Followed) -> (u16, Value) + Send + 'static,
    ) -> Handled<Reply> {
        let slot = match self.tasks().stream_slot(ctx.principal.tenant.as_str()) {
            Ok(s) => s,
            Err(r) => {
                let (status, message) = finish(ctx.id, Followed::Refused(r.to_rpc_error()));
                return Ok(Reply::message(status, &message));
            }
        };
        let (feed, closing) = (self.tasks().change_feed(), self.tasks().closing());
        let id = ctx.id.clone();
        // A stream only carries what the follow sends ahead of its answer: questions and
        // status notifications.
        if !ctx.accepts_sse || (follow.asks.is_none() && !follow.notify) {
            // The answer is the response body; the transport drops this future (and the
            // follow) when the client goes away.
            let followed = follow.run(feed, closing).await;
            drop(slot);
            let (status, message) = finish(&id, followed);
            return Ok(Reply::message(status, &message));
        }
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        follow.out = Some(tx.clone());
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                followed = follow.run(feed, closing) => {
                    let (_, message) = finish(&id, followed);
                    let _ = tx.send(message).await;
                }
                () = tx.closed() => {}
            }
        });
        Ok(Reply::Stream(rx))
    }
}

/// The response to request `id` that the finished task `t`'s `tools/call` would have
/// given, written in `dialect`: its result with the related-task `_meta` beside its own, or
/// its JSON-RPC error, each with its HTTP status. `None` for a cancelled task, which has
/// neither: each caller says so in its own way.
pub(super) fn finished_call(
    dialect: &dyn Dialect,
    id: &Value,
    t: &TaskView,
) -> Option<(u16, Value)> {
    match t.outcome.as_ref()? {
        ViewOutcome::Result(r) => {
            let mut result: ResultObject = serde_json::from_str(r.get()).unwrap_or_default();
            let meta = result.entry("_meta").or_insert_with(|| json!({}));
            if let Some(m) = meta.as_object_mut() {
                m.insert(RELATED_TASK.into(), json!({ "taskId": t.id.to_string() }));
            }
            Some((200, protocol::result_response(id, dialect.complete(result))))
        }
        ViewOutcome::Error(e) => {
            let error: RpcError = serde_json::from_str(e.get())
                .unwrap_or_else(|_| RpcError::internal("the task failed"));
            Some((
                dialect.error_status(&error),
                protocol::error_response(id, &error),
            ))
        }
    }
}

/// The `_meta` that relates a message to task `task_id`.
pub(super) fn related(task_id: &str) -> Value {
    json!({ RELATED_TASK: { "taskId": task_id } })
}

/// Resolves when the stream's reader has gone away; never without a stream.
async fn gone(out: Option<&mpsc::Sender<Value>>) {
    match out {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}

/// Resolves at `until`; never without one.
async fn deadline(until: Option<Instant>) {
    match until {
        Some(t) => tokio::time::sleep_until(t).await,
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
