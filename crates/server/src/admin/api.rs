//! The admin API: JSON under `/admin/v1/…`, for the `snodo tasks` CLI and for operators'
//! own tools. Every route takes a bearer credential (an admin token, or an access token
//! holding the admin scopes); errors are `{"error": {"code", "message"}}` with the status
//! [`AdminError::status`] names.
//!
//! - `GET  /admin/v1/whoami`: the operator and its reach.
//! - `GET  /admin/v1/tasks?tenant&status&tool&created_after&created_before&updated_after&updated_before&limit&cursor`:
//!   a page of tasks, newest first, and the cursor of the next.
//! - `GET  /admin/v1/counts?tenant`: tasks by status and by tool.
//! - `GET  /admin/v1/tasks/{id}`: one task, with its questions and history.
//! - `DELETE /admin/v1/tasks/{id}`: a finished task is removed now, freeing its place
//!   under `limits.stored_tasks_per_tenant` (409 for one that has not finished).
//! - `POST /admin/v1/tasks/{id}/cancel` `{"message"?}`.
//! - `POST /admin/v1/tasks/{id}/answer` `{"responses": {key: response}}`.
//! - `POST /admin/v1/tasks/{id}/retry`: a task waiting out its retry delay runs now.
//! - `POST /admin/v1/cancel` `{"filter", "cap"?, "preview"?, "message"?}`: bulk cancel.
//! - `GET  /admin/v1/events?tenant`: server-sent events, one `task` event (the task's
//!   summary) per change of a task within reach, `lagged` when changes were missed.
//! - `GET  /admin/v1/events?after=N&tenant&limit`: with `after`, a JSON page of the
//!   webhooks' outbox instead: the events numbered after `N` within reach, in commit
//!   order, and `next`, the `after` of the next page (a receiver that was down catches up).
//! - `GET  /admin/v1/webhooks`: every subscription within reach (secrets cut to a hint).
//!   `POST /admin/v1/webhooks` declares one (a `[[webhooks.subscriptions]]` table as JSON;
//!   a new one's answer holds its `secret`); `GET` / `DELETE /admin/v1/webhooks/{name}`;
//!   `POST /admin/v1/webhooks/{name}/pause`, `/resume`, `/rotate` (a new secret, the old
//!   one signing beside it for `webhooks.rotation_grace_ms`), `/redeliver` `{"event"?}`
//!   (dead letters sent once more).
//! - `GET  /admin/v1/deployments?limit&tasks`: the newest deployments and every stored
//!   component with the live tasks pinned to it. `POST /admin/v1/components?name` with the
//!   component's bytes (`Content-Type: application/wasm`, its signature base64 in
//!   `snodo-signature`) stores it once it loads and the trust policy takes it: its digest;
//!   `POST /admin/v1/deployments` `{"components": [digest], "exact"?, "note"?}` deploys,
//!   `POST /admin/v1/rollback` `{"to"?}` deploys an earlier revision's components again.
//!   The node swaps them in at once. Only an operator of every tenant acts on deployments.
//! - `POST /admin/v1/backup` `{"to"}`: an online backup of the store's single file to the
//!   absolute path `to` on the server's machine (a new file), read back and counted before
//!   the answer ([`snodo_core::store::Backup`]). An operator of every tenant only.
//! - `GET  /admin/v1/audit?limit&cursor`: the operators' actions, newest first
//!   (`{"records": [...], "next"}`), each `{id, at, tenant, subject, crossTenant, via,
//!   action, target?, outcome}`; an operator of one tenant sees its own tenant's. Every
//!   POST and DELETE here, the console's actions and the operators' MCP tools leave one.
//! - `GET  /admin/v1/schedules`: every schedule within reach, with its next firings and its
//!   last firing's task. `POST /admin/v1/schedules` declares one (the body is a
//!   `[[schedules]]` table as JSON); `GET` / `DELETE /admin/v1/schedules/{name}`;
//!   `POST /admin/v1/schedules/{name}/pause`, `/resume`, `/run` (fire now: the task).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use snodo_core::store::{Changed, TaskFilter, TaskSummary, tool_of};

use super::query::{filter_of, query_of};
use super::{Admin, AdminError, Operator, Operators};
use crate::identity::Authenticator;
use crate::tasks::TaskService;

/// What the admin routes share.
#[derive(Clone)]
pub(crate) struct AdminState {
    /// What operators do, over the MCP server's own task service.
    pub(crate) operators: Arc<Operators>,
    /// Who the operators are.
    pub(crate) admin: Arc<Admin>,
    pub(crate) authenticator: Arc<dyn Authenticator>,
    /// The resource server, when OAuth is configured (the console's sign-in uses it).
    pub(crate) oauth: Option<Arc<crate::identity::ResourceServer>>,
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::BAD_REQUEST);
        let mut r = (status, Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}

type Answer = Result<Response, AdminError>;

fn ok(v: impl serde::Serialize) -> Answer {
    Ok(Json(v).into_response())
}

/// The routes, each behind operator authentication.
pub(crate) fn routes(state: AdminState) -> Router {
    Router::new()
        .route("/whoami", get(whoami))
        .route("/tasks", get(list))
        .route("/counts", get(counts))
        .route("/tasks/{id}", get(show).delete(delete))
        .route("/tasks/{id}/cancel", post(cancel))
        .route("/tasks/{id}/answer", post(answer))
        .route("/tasks/{id}/retry", post(retry))
        .route("/cancel", post(bulk_cancel))
        .route("/events", get(events))
        .route("/webhooks", get(webhooks).post(declare_webhook))
        .route("/webhooks/{name}", get(webhook).delete(remove_webhook))
        .route("/webhooks/{name}/pause", post(pause_webhook))
        .route("/webhooks/{name}/resume", post(resume_webhook))
        .route("/webhooks/{name}/rotate", post(rotate_webhook))
        .route("/webhooks/{name}/redeliver", post(redeliver_webhook))
        .route("/deployments", get(deployments).post(deploy))
        .route("/rollback", post(rollback))
        .route("/backup", post(backup))
        .route(
            "/components",
            post(upload).layer(axum::extract::DefaultBodyLimit::max(
                snodo_core::model::MAX_COMPONENT_BYTES,
            )),
        )
        .route("/schedules", get(schedules).post(declare_schedule))
        .route("/schedules/{name}", get(schedule).delete(remove_schedule))
        .route("/schedules/{name}/pause", post(pause_schedule))
        .route("/schedules/{name}/resume", post(resume_schedule))
        .route("/schedules/{name}/run", post(run_schedule))
        .fallback(|| async { AdminError::Invalid("no such admin route".into()) })
        .route("/audit", get(audit))
        // Inside the operator's check: the operator is known when the action is recorded.
        .route_layer(middleware::from_fn_with_state(
            super::audit::Door {
                operators: state.operators.clone(),
                via: "api",
            },
            super::audit::audited,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), operator))
        .with_state(state)
}

/// The operators' MCP endpoint (nested at `/admin/mcp`), behind the same authentication
/// as the API: POST only (it is stateless; there is no stream to GET and no session to
/// DELETE).
pub(crate) fn mcp_routes(state: AdminState) -> Router {
    let endpoint = post(super::mcp::post)
        .route_layer(middleware::from_fn_with_state(state.clone(), operator))
        .fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(json!({"error": {"code": "method_not_allowed", "message": "/admin/mcp takes POST"}})),
            )
        });
    Router::new().route("/", endpoint).with_state(state)
}

/// Puts the [`Operator`] into the request's extensions, or answers 401/403.
///
/// A POST must say it is JSON and, when a browser sent it (with an `Origin`), come from
/// this very origin: a page on another port of the same host must not be able to post a
/// form-encoded or plain-text body that a server without authentication would take.
async fn operator(State(s): State<AdminState>, mut request: Request, next: Next) -> Response {
    if request.method() == axum::http::Method::POST {
        let h = request.headers();
        // A component's upload is its bytes; every other body is JSON. Neither type is one
        // a cross-site form may send without asking first.
        let wanted = if request.uri().path().ends_with("/components") {
            "application/wasm"
        } else {
            "application/json"
        };
        let typed = h
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().to_ascii_lowercase().starts_with(wanted));
        if !typed {
            return AdminError::Invalid(format!(
                "this admin request's body is {wanted} (Content-Type: {wanted})"
            ))
            .into_response();
        }
        if let Some(origin) = h.get(header::ORIGIN) {
            let host = h
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let same = origin
                .to_str()
                .ok()
                .and_then(|o| o.split_once("://"))
                .is_some_and(|(_, rest)| rest.trim_end_matches('/') == host);
            if !same {
                return AdminError::Forbidden("a cross-origin request to the admin API".into())
                    .into_response();
            }
        }
    }
    match s
        .admin
        .bearer_operator(request.headers(), &s.authenticator)
        .await
    {
        Ok(op) => {
            request.extensions_mut().insert(op);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

type Op = axum::Extension<Operator>;

async fn whoami(axum::Extension(op): Op) -> Answer {
    ok(json!({
        "tenant": op.principal.tenant,
        "subject": op.principal.subject,
        "crossTenant": op.cross_tenant,
    }))
}

async fn list(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Query(params): Query<BTreeMap<String, String>>,
) -> Answer {
    ok(s.operators.list(&op, query_of(&params)?).await?)
}

async fn counts(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Query(params): Query<BTreeMap<String, String>>,
) -> Answer {
    let tenant = params.get("tenant").filter(|t| !t.is_empty()).cloned();
    ok(s.operators.counts(&op, tenant).await?)
}

async fn show(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(id): Path<String>,
) -> Answer {
    ok(s.operators.task(&op, &id).await?)
}

async fn schedules(State(s): State<AdminState>, axum::Extension(op): Op) -> Answer {
    ok(json!({"schedules": s.operators.schedules(&op).await?}))
}

async fn schedule(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.schedule(&op, &name).await?)
}

async fn declare_schedule(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    bytes: axum::body::Bytes,
) -> Answer {
    let declared = body(&bytes)?;
    ok(s.operators.declare_schedule(&op, declared).await?)
}

async fn remove_schedule(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    s.operators.remove_schedule(&op, &name).await?;
    ok(json!({"removed": name}))
}

async fn pause_schedule(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.pause_schedule(&op, &name, true).await?)
}

async fn resume_schedule(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.pause_schedule(&op, &name, false).await?)
}

async fn run_schedule(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.run_schedule(&op, &name).await?)
}

async fn webhooks(State(s): State<AdminState>, axum::Extension(op): Op) -> Answer {
    ok(json!({"webhooks": s.operators.webhooks(&op).await?}))
}

async fn webhook(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.webhook(&op, &name).await?)
}

async fn declare_webhook(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    bytes: axum::body::Bytes,
) -> Answer {
    let declared = body(&bytes)?;
    ok(s.operators.declare_webhook(&op, declared).await?)
}

async fn remove_webhook(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    s.operators.remove_webhook(&op, &name).await?;
    ok(json!({"removed": name}))
}

async fn pause_webhook(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.pause_webhook(&op, &name, true).await?)
}

async fn resume_webhook(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.pause_webhook(&op, &name, false).await?)
}

async fn rotate_webhook(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
) -> Answer {
    ok(s.operators.rotate_webhook(&op, &name).await?)
}

/// The body of `POST /admin/v1/webhooks/{name}/redeliver`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedeliverBody {
    /// The dead letter's event id; default: every dead letter.
    pub(crate) event: Option<String>,
}

async fn redeliver_webhook(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(name): Path<String>,
    bytes: axum::body::Bytes,
) -> Answer {
    let asked: RedeliverBody = body(&bytes)?;
    let (row, n) = s
        .operators
        .redeliver_webhook(&op, &name, asked.event.as_deref())
        .await?;
    ok(json!({"webhook": row, "redelivering": n}))
}

/// A JSON body, refusing what does not parse with a clear 400.
/// A listing's count parameter `key`, `default` when absent.
fn count(
    params: &BTreeMap<String, String>,
    key: &str,
    default: usize,
) -> Result<usize, AdminError> {
    params.get(key).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| AdminError::Invalid(format!("{key}: not a count: {v:?}")))
    })
}

async fn deployments(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Query(params): Query<BTreeMap<String, String>>,
) -> Answer {
    let limit = count(&params, "limit", 20)?.min(1_000);
    let tasks = count(&params, "tasks", 10)?.min(1_000);
    ok(s.operators.deployments(&op, limit, tasks).await?)
}

/// The header carrying an uploaded component's signature (base64, as `snodo sign` writes).
pub const SIGNATURE_HEADER: &str = "snodo-signature";

async fn upload(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Query(params): Query<BTreeMap<String, String>>,
    headers: axum::http::HeaderMap,
    bytes: axum::body::Bytes,
) -> Answer {
    use base64::Engine as _;
    let signature = match headers.get(SIGNATURE_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|t| {
                    base64::engine::general_purpose::STANDARD
                        .decode(t.trim())
                        .ok()
                })
                .ok_or_else(|| AdminError::Invalid(format!("{SIGNATURE_HEADER}: not base64")))?,
        ),
    };
    let name = params
        .get("name")
        .cloned()
        .unwrap_or_else(|| "upload".into());
    let uploaded = s
        .operators
        .upload(&op, &name, bytes.to_vec(), signature)
        .await?;
    Ok((StatusCode::CREATED, Json(uploaded)).into_response())
}

async fn deploy(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    bytes: axum::body::Bytes,
) -> Answer {
    let asked: super::DeployBody = body(&bytes)?;
    ok(s.operators.deploy(&op, asked).await?)
}

async fn audit(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Query(params): Query<BTreeMap<String, String>>,
) -> Answer {
    let limit = count(&params, "limit", 100)?;
    let from = params.get("cursor").map(String::as_str);
    ok(s.operators.audit(&op, from, limit).await?)
}

async fn backup(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    bytes: axum::body::Bytes,
) -> Answer {
    let asked: super::BackupBody = body(&bytes)?;
    ok(s.operators.backup(&op, asked).await?)
}

async fn rollback(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    bytes: axum::body::Bytes,
) -> Answer {
    let asked: super::RollbackBody = body(&bytes)?;
    ok(s.operators.rollback(&op, asked).await?)
}

fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, AdminError> {
    let bytes = if bytes.is_empty() {
        b"{}" as &[u8]
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| AdminError::Invalid(format!("the body: {e}")))
}

/// The body of `POST /admin/v1/tasks/{id}/cancel`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why (the task's last status message); default: who cancelled it.
    pub message: Option<String>,
}

async fn cancel(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Answer {
    let b: CancelBody = body(&bytes)?;
    ok(s.operators.cancel(&op, &id, b.message).await?)
}

/// The body of `POST /admin/v1/tasks/{id}/answer`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerBody {
    /// The responses, by question key (each an MCP input response).
    pub responses: Map<String, Value>,
}

async fn answer(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(id): Path<String>,
    bytes: axum::body::Bytes,
) -> Answer {
    let b: AnswerBody = body(&bytes)?;
    ok(s.operators.answer(&op, &id, b.responses).await?)
}

async fn delete(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(id): Path<String>,
) -> Answer {
    s.operators.delete(&op, &id).await?;
    ok(json!({ "deleted": id }))
}

async fn retry(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Path(id): Path<String>,
) -> Answer {
    ok(s.operators.retry(&op, &id).await?)
}

/// The body of `POST /admin/v1/cancel` (a bulk cancel).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    /// The tasks it selects (live ones only are cancelled).
    #[serde(default)]
    pub filter: TaskFilter,
    /// The most tasks to cancel; default [`super::DEFAULT_BULK_CAP`].
    pub cap: Option<usize>,
    /// Only count what would be cancelled.
    #[serde(default)]
    pub preview: bool,
    /// Why (each task's last status message); default: who cancelled them.
    pub message: Option<String>,
}

async fn bulk_cancel(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    bytes: axum::body::Bytes,
) -> Answer {
    let b: BulkBody = body(&bytes)?;
    ok(s.operators
        .bulk_cancel(&op, b.filter, b.cap, b.preview, b.message)
        .await?)
}

async fn events(
    State(s): State<AdminState>,
    axum::Extension(op): Op,
    Query(params): Query<BTreeMap<String, String>>,
) -> Answer {
    if let Some(after) = params.get("after") {
        let number = |key: &str, v: &str| {
            v.parse::<u64>()
                .map_err(|_| AdminError::Invalid(format!("{key} is a whole number, not {v:?}")))
        };
        let after = number("after", after)?;
        let limit = match params.get("limit") {
            Some(l) => number("limit", l)? as usize,
            None => 100,
        };
        let tenant = params.get("tenant").filter(|t| !t.is_empty()).cloned();
        return ok(s.operators.events_after(&op, tenant, after, limit).await?);
    }
    let filter = filter_of(&params)?;
    let tenant = op.tenant(filter.tenant.clone())?;
    let tasks = s.operators.tasks().clone();
    let stream = changes(tasks, op, TaskFilter { tenant, ..filter }, None)?;
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The summaries of the tasks within `op`'s reach that `filter` admits (and, with `only`,
/// that one task), as they change (from the task service's change feed), as SSE events.
pub(crate) fn changes(
    tasks: TaskService,
    op: Operator,
    filter: TaskFilter,
    only: Option<snodo_core::model::TaskId>,
) -> Result<impl Stream<Item = Result<Event, Infallible>> + Send + 'static, AdminError> {
    let mut feed = tasks
        .change_feed()
        .ok_or_else(|| AdminError::Unavailable("this server keeps no change feed".into()))?;
    // An operator's streams draw on its tenant's subscription-stream budget.
    let slot = tasks
        .stream_slot(&op.principal.tenant)
        .map_err(|r| AdminError::Unavailable(r.to_rpc_error().message))?;
    let closing = tasks.closing();
    Ok(async_stream_of(move |tx| async move {
        let _slot = slot;
        loop {
            // A client that left ends its stream at once, whether or not changes come.
            let changed = tokio::select! {
                () = closing.cancelled() => return,
                () = tx.closed() => return,
                c = feed.recv() => c,
            };
            let event = match changed {
                Ok(Changed::Task(id)) => {
                    if only.is_some_and(|o| o != id) {
                        continue;
                    }
                    let Ok(Some((task, work))) = tasks.inspect(&id).await else {
                        continue;
                    };
                    let summary = TaskSummary::of(&task, tool_of(&work));
                    if !op.reaches(&summary.tenant) || !filter.admits(&summary) {
                        continue;
                    }
                    Event::default()
                        .event("task")
                        .json_data(&summary)
                        .unwrap_or_default()
                }
                Ok(Changed::Unknown) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    Event::default().event("lagged").data("{}")
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
        }
    }))
}

/// A stream fed by a producer task over a small channel; the producer ends when the
/// stream is dropped (its sends fail).
fn async_stream_of<F, Fut>(
    producer: F,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Event, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(producer(tx));
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}
