//! A handle for clients with no tasks. Where an operator sets `handle_after_ms` on a tool,
//! a call from a client that declared no tasks support still becomes a durable task: the
//! call follows it for up to that long and answers with exactly what the tool returned when
//! it finishes in time, and otherwise with a plain result that names the task and the
//! built-in [`TASK_RESULT_TOOL`] that follows it further. A model on any client can so pick
//! the outcome up later instead of losing it to the client's own timeout.
//!
//! Questions are asked only while a call is open, the way that client takes them: on the
//! call's event stream (2025-11-25), or as an MRTR `input_required` round whose
//! `requestState` names the task (2026-07-28), so that the retry answers the task instead
//! of calling the tool again. A question of a kind the client did not declare is never put
//! to the model: the handle says that it waits, and for what.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::protocol::{self, ResultObject, RpcError, rfc3339};
use snodo_core::model::{ClientCapabilities, TaskStatus, TaskView};
use snodo_core::store::StoreError;
use snodo_runner::{Catalog, CatalogTool, TASK_RESULT_TOOL};
use snodo_wasm::TaskMode;

use super::dialect::Dialect;
use super::follow::{Asking, Follow, Followed, RELATED_TASK, finished_call};
use super::request::ToolsCall;
use super::tasks::lookup_error;
use super::{Ctx, Handled, McpServer, Reply, state};

/// How long a follow-up waits when the task's tool no longer sets `handle_after_ms` (it was
/// deployed away or reconfigured): none, so the call answers at once.
const GONE_TOOL_WAIT: Duration = Duration::ZERO;

/// `task_result`'s arguments.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskResultArgs {
    #[serde(rename = "taskId")]
    task_id: String,
}

/// The tool entry of [`TASK_RESULT_TOOL`] in `tools/list`.
pub(super) fn task_result_tool() -> Value {
    json!({
        "name": TASK_RESULT_TOOL,
        "title": "Result of a running tool call",
        "description": "Waits for a tool call that is still running as a task (its earlier \
            result named the task) and returns its outcome: exactly what the tool returned, \
            or, if it is still running, how to ask again.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "taskId": {
                    "type": "string",
                    "description": "The task id the earlier result named."
                }
            },
            "required": ["taskId"],
            "additionalProperties": false
        }
    })
}

impl McpServer {
    /// How long a call of `tool`, running in `mode`, follows its task before it answers with
    /// a handle: `Some` when the tool sets `handle_after_ms`, the mode makes a task of it,
    /// and the call comes from a client that does not follow tasks (`asked`: whether it
    /// asked for one by its own parameters).
    pub(super) fn handle_wait(
        &self,
        tool: &CatalogTool,
        mode: TaskMode,
        asked: bool,
        ctx: &Ctx<'_>,
    ) -> Option<Duration> {
        let ms = tool.handle_after_ms?;
        (mode != TaskMode::Sync && !ctx.dialect.follows_tasks(asked, &ctx.meta))
            .then(|| Duration::from_millis(ms))
    }

    /// A follow-up of a handle: a `task_result` call, or the retry of an MRTR round that
    /// asked a handle's task's questions (its answers go to that task first). `None`: the
    /// call is neither, and runs as any other.
    pub(super) async fn follow_up(
        &self,
        call: &mut ToolsCall,
        catalog: &Catalog,
        ctx: &Ctx<'_>,
    ) -> Handled<Option<Reply>> {
        if let Some(sent) = &call.answers.state {
            let key = self.server_key().await?;
            match state::open_handle(&key, ctx.principal, sent) {
                Some(Ok(task_id)) => {
                    let responses = std::mem::take(&mut call.answers.responses);
                    return self
                        .answer_and_follow(task_id, responses, catalog, ctx)
                        .await
                        .map(Some);
                }
                Some(Err(why)) => return Err(RpcError::invalid_params(why)),
                None => {}
            }
        }
        if call.name != TASK_RESULT_TOOL {
            return Ok(None);
        }
        if call.answers.state.is_some() {
            return Err(RpcError::invalid_params(
                "requestState is not valid for this request",
            ));
        }
        let args: TaskResultArgs = serde_json::from_value(Value::Object(std::mem::take(
            &mut call.arguments,
        )))
        .map_err(|e| {
            RpcError::invalid_params(format!(
                "{TASK_RESULT_TOOL} takes {{\"taskId\": \"<the id an earlier result \
                         named>\"}}: {e}"
            ))
        })?;
        self.answer_and_follow(args.task_id, Map::new(), catalog, ctx)
            .await
            .map(Some)
    }

    /// Commits `responses` (if any) to task `task_id`'s inbox, then follows the task for as
    /// long as its tool's `handle_after_ms`.
    async fn answer_and_follow(
        &self,
        task_id: String,
        responses: Map<String, Value>,
        catalog: &Catalog,
        ctx: &Ctx<'_>,
    ) -> Handled<Reply> {
        if !responses.is_empty() {
            match self
                .tasks()
                .accept_input(ctx.principal, &task_id, responses)
                .await
            {
                // A finished task, or answers to questions no longer asked (answered from
                // another client meanwhile), change nothing: the follow shows what is.
                Ok(_) | Err(StoreError::Terminal { .. } | StoreError::Invalid(_)) => {}
                Err(StoreError::NotFound) => return Ok(not_found(ctx, &task_id)),
                Err(e) => return Err(lookup_error(e)),
            }
        }
        let view = match self.tasks().view(ctx.principal, &task_id).await {
            Ok(v) => v,
            Err(StoreError::NotFound) => return Ok(not_found(ctx, &task_id)),
            Err(e) => return Err(lookup_error(e)),
        };
        ctx.note_task(&view.id, view.span.as_ref());
        let tool = match self.tasks().load(&view.id).await {
            Ok(Some((_, work))) => work.input["tool"].as_str().map(str::to_owned),
            _ => None,
        }
        .unwrap_or_default();
        let wait = catalog
            .tool(&tool)
            .and_then(|t| t.handle_after_ms)
            .map_or(GONE_TOOL_WAIT, Duration::from_millis);
        self.follow_handle(view, tool, wait, ctx).await
    }

    /// Follows task `view` of `tool` for up to `wait` from `ctx`'s call, and answers with
    /// its outcome, its questions, or its handle.
    pub(super) async fn follow_handle(
        &self,
        view: TaskView,
        tool: String,
        wait: Duration,
        ctx: &Ctx<'_>,
    ) -> Handled<Reply> {
        let server_key = self.server_key().await?;
        let asks = Asking::of(ctx, server_key);
        // Where no stream can ask, a question ends the follow and is asked as an MRTR
        // round, on the revision that has them.
        let key = ctx.asks.is_none().then_some(server_key);
        let follow = Follow {
            stop_on_input: asks.is_none(),
            asks,
            until: Some(Instant::now() + wait),
            ..Follow::new(self.tasks().clone(), ctx, view.id)
        };
        let handle = Handle {
            dialect: ctx.dialect,
            tool,
            task_id: view.id.to_string(),
            principal: ctx.principal.clone(),
            capabilities: ctx.meta.client_capabilities.clone(),
            mrtr_key: key,
        };
        self.follow_reply(ctx, follow, move |id, followed| handle.answer(id, followed))
            .await
    }
}

/// What a handle's answer is written from.
struct Handle {
    dialect: &'static dyn Dialect,
    tool: String,
    task_id: String,
    principal: snodo_core::model::Principal,
    capabilities: Value,
    /// The key MRTR states are sealed with, where questions are asked as MRTR rounds.
    mrtr_key: Option<[u8; 32]>,
}

impl Handle {
    /// The response to request `id` once the follow ended as `followed`.
    fn answer(&self, id: &Value, followed: Followed) -> (u16, Value) {
        match followed {
            Followed::Finished(view) => self.finished(id, &view),
            Followed::Pending(view) if view.status == TaskStatus::InputRequired => {
                self.asking(id, &view)
            }
            Followed::Pending(view) => self.handle(id, Some(&view), None),
            // The task goes on: the client learns where to find it.
            Followed::Closed => self.handle(id, None, None),
            Followed::Refused(e) => {
                let why = format!("no wait for it could be started now ({})", e.message);
                self.handle(id, None, Some(why))
            }
            Followed::Lost(e) => (
                self.dialect.error_status(&e),
                protocol::error_response(id, &e),
            ),
        }
    }

    /// What `tools/call` would have answered for the finished task `view`, or, cancelled,
    /// a tool error saying so.
    fn finished(&self, id: &Value, view: &TaskView) -> (u16, Value) {
        finished_call(self.dialect, id, view).unwrap_or_else(|| {
            let why = view.status_message.as_deref().unwrap_or("cancelled");
            let text = format!(
                "{} (task {}) was cancelled ({why}): it has no result",
                self.tool, self.task_id
            );
            (200, self.text_result(id, text, true))
        })
    }

    /// The task waits for input: its questions as an MRTR round, where the client takes
    /// them that way and declared every kind asked; else a handle that says it waits.
    fn asking(&self, id: &Value, view: &TaskView) -> (u16, Value) {
        let caps = ClientCapabilities::of(&self.capabilities);
        let mut requests = Map::new();
        for (k, request) in &view.input_requests {
            let request: Value = serde_json::from_str(request.get()).unwrap_or(Value::Null);
            if let Err(lacking) = caps.can_answer(&request) {
                let why = format!(
                    "it waits for an answer to a question this client cannot show (it did not \
                     declare the {lacking} capability): answer it from a client that can, or \
                     ask the server's operator, who can answer it for you"
                );
                return self.handle(id, Some(view), Some(why));
            }
            requests.insert(k.clone(), request);
        }
        let Some(key) = &self.mrtr_key else {
            let why = "it waits for an answer to a question: call task_result again to be \
                       asked it"
                .to_owned();
            return self.handle(id, Some(view), Some(why));
        };
        let asked = json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": state::issue_handle(key, &self.task_id, &self.principal),
            "_meta": { RELATED_TASK: { "taskId": self.task_id } },
        });
        (200, protocol::result_response(id, asked))
    }

    /// The handle: a plain result naming the task and how to follow it (`why`, if given,
    /// says what it waits for).
    fn handle(&self, id: &Value, view: Option<&TaskView>, why: Option<String>) -> (u16, Value) {
        let mut text = format!(
            "{} is still running as task {}",
            if self.tool.is_empty() {
                "The tool call"
            } else {
                &self.tool
            },
            self.task_id
        );
        if let Some(why) = why {
            text.push_str("; ");
            text.push_str(&why);
        }
        text.push_str(&format!(
            ". Call the tool {TASK_RESULT_TOOL} with {{\"taskId\": \"{}\"}} to wait for its \
             outcome",
            self.task_id
        ));
        if let Some(expires) = view.and_then(|v| v.ttl_ms.map(|t| v.created_at.plus_ms(t))) {
            text.push_str(&format!(" (kept until {})", rfc3339(expires)));
        }
        text.push('.');
        (200, self.text_result(id, text, false))
    }

    /// A tool result of one text block, related to the task.
    fn text_result(&self, id: &Value, text: String, is_error: bool) -> Value {
        text_result(
            self.dialect,
            id,
            text,
            is_error,
            Some(self.task_id.as_str()),
        )
    }
}

/// The tool error of a follow-up naming a task the caller cannot reach: unknown, expired
/// and another's read the same.
fn not_found(ctx: &Ctx<'_>, task_id: &str) -> Reply {
    let text = format!(
        "No task {task_id} is known to this caller: it never existed, its result has expired, \
         or it is another's."
    );
    Reply::message(200, &text_result(ctx.dialect, ctx.id, text, true, None))
}

/// The response to request `id`: a tool result of one text block in `dialect`, related to
/// `task` when there is one.
fn text_result(
    dialect: &dyn Dialect,
    id: &Value,
    text: String,
    is_error: bool,
    task: Option<&str>,
) -> Value {
    let mut result = ResultObject::new();
    result.insert("content".into(), json!([{ "type": "text", "text": text }]));
    if is_error {
        result.insert("isError".into(), Value::Bool(true));
    }
    if let Some(task) = task {
        result.insert("_meta".into(), json!({ RELATED_TASK: { "taskId": task } }));
    }
    protocol::result_response(id, dialect.complete(result))
}
