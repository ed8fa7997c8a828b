//! The operators' MCP endpoint, `/admin/mcp`: the admin operations as MCP tools for an
//! operator's own MCP client (list and count tasks, show one with its history and result,
//! answer, cancel, retry now, bulk cancel with a preview, deployments and rollback,
//! schedules, webhooks, the audit). Behind the admin API's authentication (an admin token or
//! the admin scopes), each tool acts through the same [`Operators`] within the operator's
//! reach, and every tool that changes something leaves an audit record (`via: mcp`).
//!
//! Stateless Streamable HTTP with JSON answers: a 2026-07-28 client (`server/discover`,
//! per-request `_meta`) and a 2025-11-25 one (`initialize`, no session) are both answered.
//! A tool's refusal is its result (`isError`, the operator's error code and message), as a
//! tool error is in MCP; a malformed request is a JSON-RPC error.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::api::{AdminState, BulkBody};
use super::{AdminError, Operator, RollbackBody};

/// The versions `initialize` agrees to, newest first; `server/discover` speaks 2026-07-28.
const HANDSHAKE_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// A tool: its name, what it does, its input schema, and whether it only reads.
struct Tool {
    name: &'static str,
    description: &'static str,
    schema: fn() -> Value,
    read_only: bool,
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
}

fn filter_properties() -> Value {
    json!({
        "tenant": {"type": "string", "description": "one tenant (default: every tenant within reach)"},
        "status": {"type": "string", "enum": ["working", "input_required", "completed", "failed", "cancelled"]},
        "tool": {"type": "string"},
        "created_after": {"type": "integer", "description": "ms since the epoch"},
        "created_before": {"type": "integer", "description": "ms since the epoch"},
        "updated_after": {"type": "integer", "description": "ms since the epoch"},
        "updated_before": {"type": "integer", "description": "ms since the epoch"},
    })
}

fn id_schema() -> Value {
    object(
        json!({"id": {"type": "string", "description": "the task id"}}),
        &["id"],
    )
}

fn name_schema() -> Value {
    object(json!({"name": {"type": "string"}}), &["name"])
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "list_tasks",
        description: "A page of tasks, newest first, with the filters given; `next` continues it (pass it as `cursor`).",
        schema: || {
            let mut p = filter_properties();
            p["limit"] = json!({"type": "integer", "minimum": 1, "maximum": 200, "default": 50});
            p["cursor"] = json!({"type": "string"});
            object(p, &[])
        },
        read_only: true,
    },
    Tool {
        name: "count_tasks",
        description: "Stored tasks by status and by tool.",
        schema: || object(json!({"tenant": {"type": "string"}}), &[]),
        read_only: true,
    },
    Tool {
        name: "show_task",
        description: "One task: its arguments, questions, history and result or error.",
        schema: id_schema,
        read_only: true,
    },
    Tool {
        name: "cancel_task",
        description: "Cancel a live task (its running attempt is stopped).",
        schema: || {
            object(
                json!({"id": {"type": "string"}, "message": {"type": "string", "description": "why (the task's last status message)"}}),
                &["id"],
            )
        },
        read_only: false,
    },
    Tool {
        name: "answer_task",
        description: "Answer a waiting task's open questions: `responses` by question key, each checked against what it asked (a form takes {\"action\": \"accept\", \"content\": {...}}).",
        schema: || {
            object(
                json!({"id": {"type": "string"}, "responses": {"type": "object"}}),
                &["id", "responses"],
            )
        },
        read_only: false,
    },
    Tool {
        name: "retry_task",
        description: "Run a task waiting out its retry delay now.",
        schema: id_schema,
        read_only: false,
    },
    Tool {
        name: "bulk_cancel",
        description: "Cancel the live tasks a filter selects. With `preview` (the default) it only counts them: call again with preview false to cancel.",
        schema: || {
            object(
                json!({
                    "filter": {"type": "object", "properties": filter_properties()},
                    "preview": {"type": "boolean", "default": true},
                    "cap": {"type": "integer", "minimum": 1, "maximum": 10000},
                    "message": {"type": "string"},
                }),
                &[],
            )
        },
        read_only: false,
    },
    Tool {
        name: "list_deployments",
        description: "The deployments, newest first, and the stored components with the live tasks pinned to each (an operator of every tenant).",
        schema: || {
            object(
                json!({"limit": {"type": "integer", "minimum": 1, "maximum": 1000}}),
                &[],
            )
        },
        read_only: true,
    },
    Tool {
        name: "rollback",
        description: "Deploy again what an earlier revision named (default: the one before the current), as a new deployment (an operator of every tenant).",
        schema: || object(json!({"to": {"type": "integer", "minimum": 1}}), &[]),
        read_only: false,
    },
    Tool {
        name: "list_schedules",
        description: "Every schedule within reach, with its next firings and its last task.",
        schema: || object(json!({}), &[]),
        read_only: true,
    },
    Tool {
        name: "run_schedule",
        description: "Fire a schedule once now, outside its cadence.",
        schema: name_schema,
        read_only: false,
    },
    Tool {
        name: "pause_schedule",
        description: "Stop a schedule firing.",
        schema: name_schema,
        read_only: false,
    },
    Tool {
        name: "resume_schedule",
        description: "Let a paused schedule fire again, from its next firing.",
        schema: name_schema,
        read_only: false,
    },
    Tool {
        name: "list_webhooks",
        description: "Every webhook subscription within reach, with its retries and dead letters (secrets cut to a hint).",
        schema: || object(json!({}), &[]),
        read_only: true,
    },
    Tool {
        name: "redeliver_webhook",
        description: "Send a subscription's dead letters once more: the one with `event` as its id, or every one.",
        schema: || {
            object(
                json!({"name": {"type": "string"}, "event": {"type": "string"}}),
                &["name"],
            )
        },
        read_only: false,
    },
    Tool {
        name: "list_audit",
        description: "The operators' actions, newest first: who, what, on what, when, through which door, how it ended.",
        schema: || {
            object(
                json!({"limit": {"type": "integer", "minimum": 1, "maximum": 500}, "cursor": {"type": "string"}}),
                &[],
            )
        },
        read_only: true,
    },
];

fn tools_list() -> Value {
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "inputSchema": (t.schema)(),
                "annotations": {
                    "readOnlyHint": t.read_only,
                    "destructiveHint": !t.read_only,
                    "idempotentHint": t.read_only,
                    "openWorldHint": false,
                },
            })
        })
        .collect();
    json!({"tools": tools})
}

fn server_info() -> Value {
    json!({"name": "snodo-operators", "version": env!("CARGO_PKG_VERSION")})
}

/// A result as both revisions read it: 2026-07-28's `resultType` (and cache fields on
/// lists), which a 2025-11-25 client ignores.
fn complete(mut result: Value, listing: bool) -> Value {
    result["resultType"] = json!("complete");
    if listing {
        result["ttlMs"] = json!(0);
        result["cacheScope"] = json!("private");
    }
    result["_meta"] = json!({"io.modelcontextprotocol/serverInfo": server_info()});
    result
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Response {
    let status = if code == -32601 {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::BAD_REQUEST
    };
    (
        status,
        Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})),
    )
        .into_response()
}

/// `POST /admin/mcp`: one JSON-RPC message from an operator.
pub(crate) async fn post(
    State(s): State<AdminState>,
    axum::Extension(op): axum::Extension<Operator>,
    bytes: axum::body::Bytes,
) -> Response {
    let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
        return rpc_error(&Value::Null, -32700, "the body is not JSON");
    };
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return rpc_error(&Value::Null, -32600, "not a JSON-RPC request");
    };
    let Some(id) = message.get("id").cloned() else {
        // A notification (`notifications/initialized`, a cancellation): nothing to answer.
        return StatusCode::ACCEPTED.into_response();
    };
    let params = message.get("params").cloned().unwrap_or_else(|| json!({}));
    let result = match method {
        "initialize" => {
            let asked = params["protocolVersion"].as_str().unwrap_or_default();
            let version = HANDSHAKE_VERSIONS
                .iter()
                .find(|v| **v == asked)
                .unwrap_or(&HANDSHAKE_VERSIONS[0]);
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": server_info(),
                "instructions": "Snodo's operator tools: read and act on durable tasks, deployments, schedules and webhooks. bulk_cancel previews unless told otherwise; every action is audited.",
            })
        }
        "server/discover" => complete(
            json!({
                "supportedVersions": [crate::PROTOCOL_VERSION],
                "capabilities": {"tools": {}},
                "serverInfo": server_info(),
            }),
            true,
        ),
        "ping" => json!({}),
        "tools/list" => complete(tools_list(), true),
        "tools/call" => {
            let Some(name) = params["name"].as_str() else {
                return rpc_error(&id, -32602, "tools/call names no tool");
            };
            let Some(tool) = TOOLS.iter().find(|t| t.name == name) else {
                return rpc_error(&id, -32602, &format!("no operator tool is named {name:?}"));
            };
            let args = match &params["arguments"] {
                Value::Null => Map::new(),
                Value::Object(m) => m.clone(),
                _ => return rpc_error(&id, -32602, "a tool's arguments are an object"),
            };
            complete(call(&s, &op, tool, args).await, false)
        }
        other => {
            return rpc_error(
                &id,
                -32601,
                &format!("{other}: not a method of this endpoint"),
            );
        }
    };
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

/// Runs `tool` for `op`: its answer as a tool result, a refusal as a tool error; records
/// the action when the tool changes something.
async fn call(s: &AdminState, op: &Operator, tool: &Tool, args: Map<String, Value>) -> Value {
    let (action, target) = audited_as(tool.name, &args);
    let done = run(s, op, tool.name, args).await;
    if let Some(action) = action {
        let outcome = match &done {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        s.operators.record(op, "mcp", action, target, outcome).await;
    }
    match done {
        Ok(v) => json!({
            "content": [{"type": "text", "text": serde_json::to_string_pretty(&v).unwrap_or_default()}],
            "structuredContent": v,
            "isError": false,
        }),
        Err(e) => json!({
            "content": [{"type": "text", "text": format!("{} ({})", e, e.code())}],
            "structuredContent": e.body(),
            "isError": true,
        }),
    }
}

/// The audit's name for a tool that changes something, and what it acts on.
fn audited_as(tool: &str, args: &Map<String, Value>) -> (Option<&'static str>, Option<String>) {
    let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    match tool {
        "cancel_task" => (Some("task.cancel"), text("id")),
        "answer_task" => (Some("task.answer"), text("id")),
        "retry_task" => (Some("task.retry"), text("id")),
        // A preview changes nothing.
        "bulk_cancel" if args.get("preview") == Some(&Value::Bool(false)) => {
            (Some("tasks.bulk_cancel"), None)
        }
        "rollback" => (
            Some("deployment.rollback"),
            args.get("to").map(Value::to_string),
        ),
        "run_schedule" => (Some("schedule.run"), text("name")),
        "pause_schedule" => (Some("schedule.pause"), text("name")),
        "resume_schedule" => (Some("schedule.resume"), text("name")),
        "redeliver_webhook" => (Some("webhook.redeliver"), text("name")),
        _ => (None, None),
    }
}

fn args_as<T: DeserializeOwned>(args: Map<String, Value>) -> Result<T, AdminError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| AdminError::Invalid(format!("the arguments: {e}")))
}

fn string(args: &Map<String, Value>, key: &str) -> Result<String, AdminError> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| AdminError::Invalid(format!("{key}: a string is required")))
}

fn json_of(v: impl serde::Serialize) -> Result<Value, AdminError> {
    serde_json::to_value(v).map_err(|e| AdminError::Unavailable(e.to_string()))
}

/// The listing's query from a tool's arguments: every value as the query string gives it.
fn query_params(args: &Map<String, Value>) -> std::collections::BTreeMap<String, String> {
    args.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            (k.clone(), text)
        })
        .collect()
}

async fn run(
    s: &AdminState,
    op: &Operator,
    tool: &str,
    mut args: Map<String, Value>,
) -> Result<Value, AdminError> {
    let ops = &s.operators;
    match tool {
        "list_tasks" => json_of(
            ops.list(op, super::query::query_of(&query_params(&args))?)
                .await?,
        ),
        "count_tasks" => {
            let tenant = args
                .get("tenant")
                .and_then(Value::as_str)
                .map(str::to_owned);
            json_of(ops.counts(op, tenant).await?)
        }
        "show_task" => json_of(ops.task(op, &string(&args, "id")?).await?),
        "cancel_task" => {
            let message = args
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned);
            json_of(ops.cancel(op, &string(&args, "id")?, message).await?)
        }
        "answer_task" => {
            let id = string(&args, "id")?;
            let Some(Value::Object(responses)) = args.remove("responses") else {
                return Err(AdminError::Invalid(
                    "responses: an object is required".into(),
                ));
            };
            json_of(ops.answer(op, &id, responses).await?)
        }
        "retry_task" => json_of(ops.retry(op, &string(&args, "id")?).await?),
        "bulk_cancel" => {
            // Unless told otherwise, a bulk cancel only counts.
            args.entry("preview").or_insert(Value::Bool(true));
            let b: BulkBody = args_as(args)?;
            json_of(
                ops.bulk_cancel(op, b.filter, b.cap, b.preview, b.message)
                    .await?,
            )
        }
        "list_deployments" => {
            let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(20) as usize;
            json_of(ops.deployments(op, limit.min(1_000), 10).await?)
        }
        "rollback" => json_of(ops.rollback(op, args_as::<RollbackBody>(args)?).await?),
        "list_schedules" => Ok(json!({"schedules": ops.schedules(op).await?})),
        "run_schedule" => json_of(ops.run_schedule(op, &string(&args, "name")?).await?),
        "pause_schedule" => json_of(
            ops.pause_schedule(op, &string(&args, "name")?, true)
                .await?,
        ),
        "resume_schedule" => json_of(
            ops.pause_schedule(op, &string(&args, "name")?, false)
                .await?,
        ),
        "list_webhooks" => Ok(json!({"webhooks": ops.webhooks(op).await?})),
        "redeliver_webhook" => {
            let name = string(&args, "name")?;
            let event = args.get("event").and_then(Value::as_str);
            let (webhook, n) = ops.redeliver_webhook(op, &name, event).await?;
            Ok(json!({"webhook": webhook, "redelivering": n}))
        }
        "list_audit" => {
            let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(100) as usize;
            let cursor = args.get("cursor").and_then(Value::as_str);
            json_of(ops.audit(op, cursor, limit).await?)
        }
        // Deploys are not offered here: a component's bytes are a file, not an argument.
        _ => Err(AdminError::Invalid(format!(
            "no operator tool is named {tool:?}"
        ))),
    }
}
