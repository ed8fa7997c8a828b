//! MCP 2025-11-25 (and the handshake revisions before it) beside 2026-07-28, on the same
//! endpoint: an adapter that serves the `initialize` handshake, `ping`, `logging/setLevel`
//! and resource subscriptions itself, and translates every other request into the typed
//! requests 2026-07-28 uses, answered by the same handlers through this revision's
//! [`Dialect`].
//!
//! A request belongs to this revision when its `MCP-Protocol-Version` header names one of
//! [`HANDSHAKE_VERSIONS`], or when it is an `initialize` that carries no 2026-07-28 marks
//! (no version header, no `Mcp-Method`, no `_meta` version): that is how a client of these
//! revisions opens. Everything else is 2026-07-28, where `initialize` is a removed method.
//!
//! Tasks here are that revision's experimental tasks (SEP-1686) on the same durable tasks:
//! `initialize` offers them for `tools/call`, a call asks for one with `params.task`, and
//! `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` follow it (`task` holds the
//! shapes, `tasks_result` and `tasks_list` the methods 2026-07-28 does not have). A tool's
//! questions go to the client as server requests on the event stream of the call, or of the
//! task's `tasks/result`, the way this revision asks them.

mod task;
mod tasks_list;
mod tasks_result;

pub(super) use task::{status as flat_status, task as flat_task};

use serde_json::{Map, Value, json};

use crate::identity::Caller;
use crate::protocol::{self, LogLevel, RequestMeta, ResultObject, RpcError, codes};
use snodo_core::model::{Principal, TaskStatus, TaskView};
use snodo_wasm::TaskMode;

use super::dialect::{Dialect, TaskReply};
use super::method::Method;
use super::request::{Call, take_object};
use super::session::{HANDSHAKE_VERSIONS, Session};
use super::{Ctx, Handled, McpServer, Reply, RoutingHeaders};

/// 2025-11-25's replies: results without `resultType` or caching hints, and every JSON-RPC
/// error on a 200 response, where this revision's clients read it.
struct Handshake;

static HANDSHAKE: Handshake = Handshake;

impl Dialect for Handshake {
    fn complete(&self, result: ResultObject) -> Value {
        Value::Object(result)
    }

    fn complete_uncached(&self, result: ResultObject) -> Value {
        Value::Object(result)
    }

    fn error_status(&self, _: &RpcError) -> u16 {
        200
    }

    /// The call asks: `params.task` makes a task of any tool that does not say
    /// `taskSupport: "forbidden"` (a mode rule's choice of `sync` included, since the client
    /// waits for a task), and its absence runs the tool on the request. Both refusals are
    /// -32601, as that revision's text requires for a task-only tool called without a task.
    fn runs_as_task(
        &self,
        tool: &str,
        asked: bool,
        _: &RequestMeta,
        mode: TaskMode,
        declared: TaskMode,
    ) -> Result<bool, RpcError> {
        if asked && declared == TaskMode::Sync {
            return Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!(
                    "tool {tool:?} does not run as a task (its taskSupport is \"forbidden\"): \
                     call it without params.task"
                ),
            ));
        }
        if !asked && mode == TaskMode::Required {
            return Err(RpcError {
                code: codes::METHOD_NOT_FOUND,
                data: None,
                ..protocol::refusal::task_only(
                    tool,
                    "this call did not ask for one",
                    "send it with params.task (its taskSupport is \"required\"; the TypeScript \
                     SDK's client.experimental.tasks.callToolStream does so)",
                )
            });
        }
        Ok(asked)
    }

    /// A task call answers with a plain `CreateTaskResult`: nothing can ask before it.
    fn input_before_task(&self, tool: &str, _: Value) -> Result<Value, RpcError> {
        Err(protocol::refusal::asks_before_its_task(tool))
    }

    /// The call itself says it, with `params.task`: this revision's client `tasks`
    /// capability is about the requests a server sends the client, not about its calls.
    fn follows_tasks(&self, asked: bool, _: &RequestMeta) -> bool {
        asked
    }

    fn tool_execution(&self, declared: TaskMode) -> Option<Value> {
        let support = match declared {
            TaskMode::Sync => "forbidden",
            TaskMode::Optional => "optional",
            TaskMode::Required => "required",
        };
        Some(json!({ "taskSupport": support }))
    }

    fn task(&self, id: &Value, t: &TaskView, reply: TaskReply) -> Reply {
        match reply {
            TaskReply::Created => Reply::result(id, json!({ "task": task::task(t) })),
            TaskReply::Got | TaskReply::Cancelled => Reply::result(id, task::task(t)),
        }
    }

    /// A finished task cannot be cancelled: -32602, as that revision says.
    fn cancel_finished(&self, _: &Value, status: TaskStatus) -> Result<Reply, RpcError> {
        Err(RpcError::invalid_params(format!(
            "Cannot cancel task: it has already finished ({status}), and a finished task \
             never changes"
        )))
    }
}

/// Whether a request speaks a handshake revision rather than 2026-07-28.
pub(super) fn speaks_handshake(headers: &RoutingHeaders, req: &protocol::Request) -> bool {
    let stateless = req
        .params
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .is_some();
    // Without a version header, a request that has none of 2026-07-28's marks either (no
    // `Mcp-Method`, no `_meta` version) comes from a client of the handshake revisions:
    // its `initialize`, or a later request of a client that predates the header.
    !stateless
        && match &headers.protocol_version {
            Some(Ok(v)) => HANDSHAKE_VERSIONS.contains(&v.as_str()),
            Some(Err(())) => false,
            None => headers.method.is_none(),
        }
}

/// The progress token a `tools/call` asked for in its `_meta`.
fn progress_token(params: &Map<String, Value>) -> Result<Option<Value>, RpcError> {
    match params.get("_meta").and_then(|m| m.get("progressToken")) {
        None | Some(Value::Null) => Ok(None),
        Some(t @ (Value::String(_) | Value::Number(_))) => Ok(Some(t.clone())),
        Some(_) => Err(RpcError::invalid_params(
            "progressToken must be a string or a number",
        )),
    }
}

/// Parses a request of this revision into the typed request, with the progress token a
/// `tools/call` asked for. A `tools/call` asks to run as a task with `params.task` (its
/// `ttl` is a wish the server may, and does, override with the tool's own).
fn parse_call(
    m: Method,
    mut params: Map<String, Value>,
) -> Result<(Call, Option<Value>), RpcError> {
    if m != Method::ToolsCall {
        return Ok((Call::parse(m, params)?, None));
    }
    let token = progress_token(&params)?;
    let as_task = match params.remove("task") {
        None | Some(Value::Null) => false,
        Some(Value::Object(_)) => true,
        Some(_) => return Err(RpcError::invalid_params("params.task must be an object")),
    };
    let mut call = Call::parse(m, params)?;
    if let Call::ToolsCall(c) = &mut call {
        c.as_task = as_task;
    }
    Ok((call, token))
}

impl McpServer {
    /// Serves one request of a handshake revision.
    pub(super) async fn dispatch_handshake(
        &self,
        headers: &RoutingHeaders,
        caller: &Caller,
        req: protocol::Request,
        notes: Option<&super::trace::TraceNotes>,
    ) -> Handled<Reply> {
        let principal = &caller.principal;
        if req.method == "initialize" {
            return self.initialize(principal, req).await;
        }
        let key = self.server_key().await?;
        let session_id = match &headers.session {
            None => None,
            Some(Ok(s)) => Some(s.as_str()),
            Some(Err(())) => {
                return Err(RpcError::invalid_params(
                    "the Mcp-Session-Id header is not readable",
                ));
            }
        };
        let session = match session_id {
            // A client that keeps no session declared nothing it can rely on.
            None => Session {
                version: HANDSHAKE_VERSIONS[0].to_owned(),
                capabilities: json!({}),
            },
            Some(s) => {
                let opened = match Session::open(&key, principal, s) {
                    Some(session) if !self.session_ended(s).await? => Some(session),
                    _ => None,
                };
                match opened {
                    Some(session) => session,
                    // Not issued here, issued to someone else, or ended: the client starts a
                    // new session.
                    None => {
                        return Ok(Reply::error_with_status(
                            404,
                            &req.id,
                            &RpcError::new(
                                protocol::codes::INVALID_REQUEST,
                                "unknown session: send initialize to start a new one",
                            ),
                        ));
                    }
                }
            }
        };
        let protocol::Request {
            id,
            method,
            params,
            bytes,
        } = req;
        let trace = protocol::trace_of(params.get("_meta"));
        let webhook = protocol::webhook_of(params.get("_meta"))?;
        let call = match method.as_str() {
            "ping" => return Ok(Reply::result(&id, json!({}))),
            "logging/setLevel" => {
                self.set_level(session_id, &params)?;
                return Ok(Reply::result(&id, json!({})));
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                self.subscribe(&params)?;
                return Ok(Reply::result(&id, json!({})));
            }
            other => match Method::parse_handshake(other) {
                Some(m) => parse_call(m, params)?,
                None => return Err(RpcError::method_not_found(other)),
            },
        };
        let (call, progress_token) = call;
        let meta = RequestMeta {
            protocol_version: session.version,
            client_capabilities: session.capabilities,
            // `_meta`'s keys (SEP-414, in every revision) before the HTTP headers.
            trace: trace.or_else(|| headers.trace.clone()),
            progress_token,
            webhook,
            // Until the session sets a level, the client gets notices and worse.
            log_level: Some(
                session_id
                    .and_then(|id| self.sessions.level(id))
                    .unwrap_or(LogLevel::Notice),
            ),
        };
        let ctx = Ctx {
            dialect: &HANDSHAKE,
            asks: Some((self.outstanding.clone(), session_id.map(str::to_owned))),
            param_headers: None,
            notes,
            ..Ctx::stateless(&id, caller, meta, headers, bytes)
        };
        self.serve(call, &ctx).await
    }

    async fn initialize(&self, principal: &Principal, req: protocol::Request) -> Handled<Reply> {
        let mut params = req.params;
        let requested = params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| RpcError::invalid_params("params.protocolVersion must be a string"))?;
        let capabilities = Value::Object(take_object(&mut params, "capabilities")?);
        // The client's version when served, else the newest: the client decides whether
        // it can speak that.
        let version = HANDSHAKE_VERSIONS
            .iter()
            .find(|v| requested == **v)
            .unwrap_or(&HANDSHAKE_VERSIONS[0]);
        let session = Session {
            version: (*version).to_owned(),
            capabilities,
        };
        let key = self.server_key().await?;
        let session_id = session.issue(&key, principal);
        let result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"subscribe": false, "listChanged": false},
                "prompts": {"listChanged": false},
                "completions": {},
                "logging": {},
                "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            },
            "serverInfo": {"name": self.config.name, "version": self.config.version},
            "instructions": "Tools whose execution.taskSupport is \"required\" or \"optional\" \
                run as durable tasks when called with params.task: follow them with tasks/get and \
                collect the result with tasks/result, which also asks the task's questions.",
        });
        Ok(Reply::Initialized {
            session: session_id,
            body: protocol::result_bytes(&req.id, &result),
        })
    }

    fn set_level(
        &self,
        session_id: Option<&str>,
        params: &Map<String, Value>,
    ) -> Result<(), RpcError> {
        let level = params
            .get("level")
            .and_then(Value::as_str)
            .and_then(LogLevel::parse)
            .ok_or_else(|| {
                RpcError::invalid_params(
                    "params.level must be one of debug, info, notice, warning, error, \
                     critical, alert, emergency",
                )
            })?;
        if let Some(id) = session_id {
            self.sessions.set_level(id, level);
        }
        Ok(())
    }

    /// Served resources are read on demand and carry no change signal, so the capability
    /// says `subscribe: false`; a client that subscribes anyway is answered (for a resource
    /// that exists) and never sent an update.
    fn subscribe(&self, params: &Map<String, Value>) -> Result<(), RpcError> {
        let uri = params
            .get("uri")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if self.config.catalog.current().resource_source(uri).is_none() {
            return Err(
                RpcError::invalid_params("Resource not found").with_data(json!({"uri": uri}))
            );
        }
        Ok(())
    }
}
