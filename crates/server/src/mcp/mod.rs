//! The MCP server: method dispatch for protocol 2026-07-28 with the tasks extension.
//!
//! [`McpServer::handle`] takes one POST (its routing headers, the authenticated principal
//! and the body) and returns a [`Reply`]. It applies the rules in the order the spec
//! implies: envelope, routing headers, `_meta`, method, tasks gate, lookup. The transport
//! (`http/`) owns sockets, limits and authentication; this module owns meaning.
//!
//! Budgets on the request path: every guest execution a request runs (a synchronous call,
//! a `prepare` phase, a mode rule) holds a slot of `limits.sync_calls_per_tenant` /
//! `limits.sync_calls` under the `limits.sync_timeout_ms` wall clock; a task creation
//! passes the tenant's creation rate and the store's exact live, stored and stored-bytes
//! counts; `subscriptions/listen` holds a stream slot and watches a deduplicated, capped id
//! set. A refusal is -32000 with `data.limit` naming the key, at once; nothing accepted is
//! dropped. SSE replies are bounded queues: progress is dropped when the reader stalls,
//! subscription changes are coalesced to one mark per task. A client that disconnects
//! drops the request future, and with it the guest.

mod catalog_calls;
mod dialect;
mod discover;
mod legacy;
mod method;
mod mrtr;
mod request;
pub mod scopes;
mod session;
mod state;
mod subscriptions_listen;
mod sync_io;
mod tasks;
mod tools_call;
mod tools_list;
mod trace;
mod wire;

use dialect::Ctx;
use method::Method;
use request::Call;
pub use scopes::ScopePolicy;
pub use sync_io::SyncIo;

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::identity::Caller;
use crate::protocol::{self, Incoming, NameSource, RequestMeta, RpcError};
use snodo_core::model::{Principal, TaskId, Timestamp};
use snodo_core::store::{ObservedStore, Store, StoreError};
use snodo_runner::budget::{Rate, Refusal, Slots, TenantLimits};
use snodo_runner::{Catalog, Catalogs, Runner};

/// Server identity and tools.
#[derive(Clone)]
pub struct ServerConfig {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// The tools, resources and prompts (the same catalogs the runner resolves work with),
    /// swapped whole when the deployment changes.
    pub catalog: Arc<Catalogs>,
    /// Per-tenant and global budgets.
    pub limits: TenantLimits,
    /// The scopes each operation needs (none, without OAuth).
    pub scopes: ScopePolicy,
    /// Whether a caller's trace context is kept with the tasks it creates
    /// (`[telemetry] trace_context`). Off by default: a node of an earlier build refuses a
    /// stored work that carries it, so it is turned on once every node sharing the store
    /// runs this build.
    pub trace_context: bool,
    /// Where request spans go, and which are sampled (disabled by default).
    pub tracer: snodo_core::spans::Tracer,
}

/// The headers the dispatcher checks, already read from the transport.
#[derive(Debug, Clone, Default)]
pub struct RoutingHeaders {
    /// `Mcp-Method`, decoded; `Err` if present but unreadable.
    pub method: Option<Result<String, ()>>,
    /// `Mcp-Name`, decoded; `Err` if present but unreadable.
    pub name: Option<Result<String, ()>>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<Result<String, ()>>,
    /// `Mcp-Session-Id` (2025-11-25 clients send back the one `initialize` gave them).
    pub session: Option<Result<String, ()>>,
    /// Whether the request's `Accept` allows `text/event-stream` (true when it has no
    /// `Accept`). A reply that could stream progress is a plain JSON body otherwise.
    pub accepts_sse: bool,
    /// The `Mcp-Param-{Name}` headers (SEP-2243): `Name` as sent, and the value decoded;
    /// `Err` if present but unreadable.
    pub params: Vec<(String, Result<String, ()>)>,
    /// The W3C trace context of the `traceparent`, `tracestate` and `baggage` headers;
    /// `None` without a valid `traceparent`. The request's `_meta` keys take precedence.
    pub trace: Option<snodo_core::model::IncomingTrace>,
}

/// A routing header's value if it was sent; a header sent but not readable is refused
/// whether or not the method needs it.
fn readable<'h>(
    header: &'h Option<Result<String, ()>>,
    name: &str,
) -> Result<Option<&'h str>, RpcError> {
    match header {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(())) => Err(RpcError::header_mismatch(format!(
            "the {name} header is not readable"
        ))),
    }
}

/// What to send back.
pub enum Reply {
    /// One JSON body with an HTTP status.
    Json {
        /// The HTTP status.
        status: u16,
        /// The JSON-RPC message, serialized.
        body: Vec<u8>,
        /// How it ended, for `mcp_server_operation_duration_seconds`.
        outcome: Outcome,
    },
    /// A notification or response was received: 202, no body.
    Accepted,
    /// The answer to a 2025-11-25 `initialize`: the body, with the session id to send as
    /// `Mcp-Session-Id`.
    Initialized {
        /// `Mcp-Session-Id`.
        session: String,
        /// The JSON-RPC response, serialized.
        body: Vec<u8>,
    },
    /// 403: the caller lacks a scope the operation needs; the transport adds the
    /// `insufficient_scope` challenge naming every scope in `needed`.
    InsufficientScope {
        /// Every scope the operation needs.
        needed: Vec<String>,
        /// The JSON-RPC error, serialized.
        body: Vec<u8>,
    },
    /// An SSE stream: notifications, then the response (or, for subscriptions, until the
    /// client goes away). Bounded: a client that stops reading holds up its producer (which
    /// coalesces or drops what it cannot queue), never the server's memory.
    Stream(mpsc::Receiver<Value>),
}

/// How an operation ended, as the OpenTelemetry MCP conventions' `error.type` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// A result (a created task included).
    #[default]
    Ok,
    /// A JSON-RPC error with this code.
    Error(i64),
    /// A tool result with `isError: true`: an error in the tool's own domain.
    ToolError,
}

impl Outcome {
    /// How the JSON-RPC response `message` ended.
    pub(crate) fn of(message: &Value) -> Self {
        if let Some(code) = message["error"]["code"].as_i64() {
            Outcome::Error(code)
        } else if message["result"]["isError"] == Value::Bool(true) {
            Outcome::ToolError
        } else {
            Outcome::Ok
        }
    }

    /// Its `error.type` label: none for a result, the JSON-RPC error code, or `tool_error`.
    pub fn error_type(self) -> Option<String> {
        match self {
            Outcome::Ok => None,
            Outcome::Error(code) => Some(code.to_string()),
            Outcome::ToolError => Some("tool_error".to_owned()),
        }
    }
}

impl Reply {
    fn result(id: &Value, result: impl serde::Serialize) -> Self {
        Reply::Json {
            status: 200,
            body: protocol::result_bytes(id, &result),
            outcome: Outcome::Ok,
        }
    }

    fn error(id: &Value, e: &RpcError) -> Self {
        Self::error_with_status(protocol::http_status(e), id, e)
    }

    fn error_with_status(status: u16, id: &Value, e: &RpcError) -> Self {
        Reply::Json {
            status,
            body: protocol::error_bytes(id, e),
            outcome: Outcome::Error(e.code),
        }
    }

    /// A message already built as a JSON tree.
    fn message(status: u16, message: &Value) -> Self {
        Reply::Json {
            status,
            body: protocol::message_bytes(message),
            outcome: Outcome::of(message),
        }
    }

    /// How the operation this reply answers ended.
    fn outcome(&self) -> Outcome {
        match self {
            Reply::Json { outcome, .. } => *outcome,
            Reply::InsufficientScope { .. } => Outcome::Error(protocol::codes::INVALID_REQUEST),
            Reply::Accepted | Reply::Initialized { .. } | Reply::Stream(_) => Outcome::Ok,
        }
    }
}

/// The MCP server over a store and a runner.
pub struct McpServer {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) runner: Runner,
    pub(crate) config: ServerConfig,
    changes: Option<Arc<ObservedStore>>,
    pub(crate) metrics: Arc<crate::telemetry::Metrics>,
    /// Flipped at shutdown: open subscription streams end so connections can drain.
    closing: tokio_util::sync::CancellationToken,
    /// Told of every catalog swap: streams that asked for list-changed notifications.
    catalog_changes: tokio::sync::broadcast::Sender<()>,
    /// Guest executions on the request path, per tenant.
    pub(crate) sync_slots: Arc<Slots>,
    /// Open subscription streams, per tenant.
    stream_slots: Arc<Slots>,
    /// Task creations, per tenant.
    pub(crate) creates: Rate,
    /// What this node remembers of 2025-11-25 sessions (log levels, ends).
    sessions: session::SessionMemory,
    /// Server requests 2025-11-25 calls wait on, answered by the client's posted responses.
    outstanding: Arc<session::Outstanding>,
    /// The store's server key once read: it is made once per store and never changes, and
    /// every call that may seal a request state needs it.
    key: std::sync::OnceLock<[u8; 32]>,
    /// The engine guests run on: a large body is parsed in its caller's CPU turn and held
    /// in its caller's memory share. Without one, bodies are parsed where they arrive.
    engine: Option<snodo_wasm::WasmEngine>,
}

/// Bodies larger than this are parsed on the blocking pool in the caller's CPU turn, and
/// [`BODY_MEMORY_FACTOR`] times their size is held in the caller's memory share while
/// their request is handled.
pub const LARGE_BODY_BYTES: usize = 64 << 10;

/// A body parsed: the message, or the error to answer with the id it carried.
type ParsedBody = Result<protocol::Incoming, (Value, RpcError)>;

/// The `id` of the JSON-RPC message in `body`, read without building the rest (`null` when
/// it has none or is not JSON): what a refusal before parsing answers to.
fn request_id(body: &[u8]) -> Value {
    #[derive(serde::Deserialize)]
    struct IdOnly {
        #[serde(default)]
        id: Value,
    }
    serde_json::from_slice::<IdOnly>(body).map_or(Value::Null, |m| m.id)
}

/// The cap a memory limit names, in bytes.
fn limit_bytes(limit: &snodo_wasm::Limit) -> u64 {
    match limit {
        snodo_wasm::Limit::TenantMemory { bytes } | snodo_wasm::Limit::MemoryBudget { bytes } => {
            *bytes
        }
        _ => 0,
    }
}

/// The host memory counted per byte of a large body: its parsed values (a JSON number of
/// two bytes becomes a 32-byte value) and the copies a call makes of its arguments.
pub const BODY_MEMORY_FACTOR: usize = 16;

/// What the request path hands to the runner once the store has committed a change.
/// Every hand-off goes through [`McpServer::commit_then_tell`], after the commit, never before.
pub(crate) enum Handoff {
    /// Answers were accepted; `complete` when none is outstanding any more.
    InputAccepted {
        /// The task.
        task: TaskId,
        /// No input is outstanding.
        complete: bool,
    },
    /// The task was cancelled: stop its attempt here (other nodes see it at renewal).
    Cancelled(TaskId),
}

/// Tells the runner about a committed change, and counts it.
async fn tell_runner(runner: &Runner, metrics: &crate::telemetry::Metrics, handoff: Handoff) {
    match handoff {
        Handoff::InputAccepted { task, complete } => {
            runner.input_accepted(&task, complete).await;
        }
        Handoff::Cancelled(task) => {
            metrics.task_cancelled();
            runner.cancel(&task);
        }
    }
}

/// The tenant whose shares a request's guests run in.
pub(crate) fn tenant_of(ctx: &Ctx<'_>) -> Arc<str> {
    Arc::from(ctx.principal.tenant.as_str())
}

/// What a handler answers: its result (a JSON result, or a whole [`Reply`]) or the
/// JSON-RPC error.
pub(crate) type Handled<T = Value> = Result<T, RpcError>;

/// How many messages an SSE reply queues before its producer waits.
const STREAM_QUEUE: usize = 16;

impl McpServer {
    /// A server over `store`, running tasks with `runner`.
    pub fn new(store: Arc<dyn Store>, runner: Runner, config: ServerConfig) -> Self {
        let l = &config.limits;
        Self {
            sync_slots: Slots::new(
                "limits.sync_calls_per_tenant",
                l.sync_calls_per_tenant.max(1),
                "limits.sync_calls",
                l.sync_calls.max(1),
            ),
            stream_slots: Slots::new(
                "limits.streams_per_tenant",
                l.streams_per_tenant.max(1),
                "limits.streams",
                l.streams.max(1),
            ),
            creates: Rate::new(
                "limits.task_creates_per_second",
                l.task_creates_per_second.max(1),
                l.task_create_burst,
            ),
            store,
            runner,
            config,
            changes: None,
            sessions: session::SessionMemory::default(),
            outstanding: Arc::default(),
            key: std::sync::OnceLock::new(),
            metrics: Arc::new(crate::telemetry::Metrics::new()),
            closing: tokio_util::sync::CancellationToken::new(),
            catalog_changes: tokio::sync::broadcast::channel(16).0,
            engine: None,
        }
    }

    /// Parses large bodies in their caller's CPU turn and memory share on `engine` (the
    /// one the catalog's guests run on).
    pub fn with_engine(mut self, engine: snodo_wasm::WasmEngine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Tells the subscription streams that asked for them that the tool, resource and
    /// prompt lists changed (a deployment was swapped in).
    pub fn catalog_changed(&self) {
        let _ = self.catalog_changes.send(());
    }

    /// Ends every open subscription stream (at shutdown; the streams would otherwise keep
    /// their connections open forever).
    pub fn close_streams(&self) {
        self.closing.cancel();
    }

    /// Requires the scopes `scopes` names of each operation.
    pub fn with_scopes(mut self, scopes: ScopePolicy) -> Self {
        self.config.scopes = scopes;
        self
    }

    /// Counts into `metrics` (shared with the runner's instrumentation).
    pub fn with_metrics(mut self, metrics: Arc<crate::telemetry::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The Prometheus text exposition of this server's metrics.
    pub fn metrics_text(&self) -> String {
        self.metrics.render(
            self.runner.active(),
            self.sync_slots.held(),
            self.stream_slots.held(),
        )
    }

    /// The stored tasks by status, from the store's counts (every tenant), as Prometheus
    /// gauges; a store that cannot answer now leaves them out and says so in a comment.
    pub async fn task_gauges(&self) -> String {
        let mut out = String::from(
            "# HELP snodo_tasks Stored tasks by status (from the store's counts; every node of a shared store reports the same).
# TYPE snodo_tasks gauge
",
        );
        match self.store.count_tasks(None).await {
            Ok(counts) => {
                for (status, n) in &counts.by_status {
                    out.push_str(&format!("snodo_tasks{{status=\"{status}\"}} {n}\n"));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the task counts could not be read for /metrics");
                out.push_str("# the task store could not be counted now\n");
            }
        }
        out
    }

    /// Runs a request's `commit` apart from the request, and there, once it committed, tells
    /// the runner what `handoff` makes of it, then answers the request.
    ///
    /// Invariant: a committed change reaches the runner even when its client goes away
    /// mid-commit. The request only waits for the answer, so dropping it (a disconnect)
    /// drops the wait and never the hand-off; otherwise a cancelled guest would run on
    /// until its next heartbeat. Tracked by the runner, so shutdown waits for it.
    /// (`server::tasks::a_cancel_reaches_the_runner_though_its_client_left_mid_commit`)
    pub(crate) async fn commit_then_tell<T, C, H>(
        &self,
        commit: C,
        handoff: H,
    ) -> Result<T, StoreError>
    where
        T: Send + 'static,
        C: Future<Output = Result<T, StoreError>> + Send + 'static,
        H: FnOnce(&T) -> Option<Handoff> + Send + 'static,
    {
        let runner = self.runner.clone();
        let metrics = self.metrics.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.runner.spawn_tracked(async move {
            let result = commit.await;
            if let Ok(committed) = &result
                && let Some(h) = handoff(committed)
            {
                tell_runner(&runner, &metrics, h).await;
            }
            let _ = tx.send(result);
        });
        rx.await
            .unwrap_or_else(|_| Err(StoreError::unavailable("the commit was abandoned")))
    }

    /// The store's server key (it seals request states and session ids).
    pub(crate) async fn server_key(&self) -> Result<[u8; 32], RpcError> {
        if let Some(key) = self.key.get() {
            return Ok(*key);
        }
        let key = self.store.server_key().await.map_err(|e| {
            tracing::warn!(error = %e, "the server key could not be read");
            RpcError::internal("the task store is unavailable; try again")
        })?;
        Ok(*self.key.get_or_init(|| key))
    }

    /// Ends a 2025-11-25 session (its DELETE): it is revoked in the store until its id
    /// would have expired, for every node. False when `id` names no live session this
    /// server issued to `principal`.
    pub async fn end_session(&self, principal: &Principal, id: &str) -> Result<bool, RpcError> {
        let key = self.server_key().await?;
        let Some((_, until)) = session::Session::open_until(&key, principal, id) else {
            return Ok(false);
        };
        if self.session_ended(id).await? {
            return Ok(false);
        }
        self.store
            .revoke(&session::revocation_key(id), Timestamp(until))
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "a session's end could not be stored");
                RpcError::internal("the task store is unavailable; try again")
            })?;
        self.sessions.end(id);
        Ok(true)
    }

    /// Whether the session `id` has ended: remembered here, or revoked in the store.
    pub(crate) async fn session_ended(&self, id: &str) -> Result<bool, RpcError> {
        if self.sessions.ended(id) {
            return Ok(true);
        }
        let ended = self
            .store
            .revoked(&session::revocation_key(id))
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "a session's end could not be read");
                RpcError::internal("the task store is unavailable; try again")
            })?;
        if ended {
            self.sessions.end(id);
        }
        Ok(ended)
    }

    /// A budget's refusal as the request's error, counted by the limit that refused.
    pub(crate) fn refuse(&self, refusal: &Refusal) -> RpcError {
        self.metrics.limit_hit(refusal.limit);
        refusal.to_rpc_error()
    }

    /// Synchronous guest executions running now (all tenants).
    pub fn sync_calls_active(&self) -> usize {
        self.sync_slots.held()
    }

    /// A body past [`LARGE_BODY_BYTES`], parsed on the blocking pool in one of the caller's
    /// CPU turns, with [`BODY_MEMORY_FACTOR`] times its size held in the caller's memory
    /// share (the hold is kept until the request is answered). `None` for a small body or a
    /// server without an engine; `Err` is the refusal when the share is full: nothing was
    /// accepted, the client may try again.
    async fn parse_large(
        &self,
        caller: &Caller,
        body: &[u8],
    ) -> Result<Option<(ParsedBody, snodo_wasm::MemoryHold)>, Reply> {
        let Some(engine) = &self.engine else {
            return Ok(None);
        };
        if body.len() <= LARGE_BODY_BYTES {
            return Ok(None);
        }
        let tenant: Arc<str> = Arc::from(caller.principal.tenant.as_str());
        let wanted = body.len().saturating_mul(BODY_MEMORY_FACTOR);
        let held = match engine.hold_host_memory(&tenant, wanted) {
            Ok(held) => held,
            Err(limit) => {
                // The id is read in the tenant's turn too: a scan of a large body is work
                // its sender pays for.
                let owned = body.to_vec();
                let id = engine
                    .cpu()
                    .run_blocking(&tenant, move || request_id(&owned))
                    .await
                    .unwrap_or(Value::Null);
                return Err(self.memory_refusal(&id, &limit));
            }
        };
        let owned = body.to_vec();
        match engine
            .cpu()
            .run_blocking(&tenant, move || protocol::parse(&owned))
            .await
        {
            Ok(parsed) => Ok(Some((parsed, held))),
            Err(e) => {
                tracing::error!(error = %e, "parsing a body failed to run");
                Err(Reply::error(
                    &Value::Null,
                    &RpcError::internal("the request could not be read"),
                ))
            }
        }
    }

    /// The refusal of a large body whose memory the tenant's share (or the total) cannot
    /// hold: -32000 naming the limit's key, answered to the request's `id`.
    fn memory_refusal(&self, id: &Value, limit: &snodo_wasm::Limit) -> Reply {
        let (key, over) = match limit {
            snodo_wasm::Limit::TenantMemory { .. } => (
                "limits.guest_memory_per_tenant_bytes",
                snodo_runner::budget::Over::Tenant,
            ),
            _ => (
                "limits.guest_memory_total_bytes",
                snodo_runner::budget::Over::Global,
            ),
        };
        let refusal = Refusal {
            limit: key,
            max: limit_bytes(limit),
            over,
        };
        Reply::error(id, &self.refuse(&refusal))
    }

    /// Pushes `notifications/tasks` to subscription streams, from the changes `feed`
    /// announces (the same store the server and runner use, wrapped).
    pub fn with_change_feed(mut self, feed: Arc<ObservedStore>) -> Self {
        self.changes = Some(feed);
        self
    }

    /// A receiver of the change feed, when the server keeps one.
    pub(crate) fn change_feed(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<snodo_core::store::Changed>> {
        self.changes.as_ref().map(|f| f.subscribe())
    }

    /// A subscription-stream slot of `tenant` (held while an operator's change stream is
    /// open), or the refusal naming the budget.
    pub(crate) fn stream_slot(&self, tenant: &str) -> Result<snodo_runner::budget::Slot, String> {
        self.stream_slots
            .try_acquire(tenant)
            .map_err(|r| self.refuse(&r).message)
    }

    /// Cancelled at shutdown: long-lived streams end with it.
    pub(crate) fn closing(&self) -> tokio_util::sync::CancellationToken {
        self.closing.clone()
    }

    /// The catalog serving now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.config.catalog.current()
    }

    /// The runner's loops that are not running now (see [`Runner::loops_down`]).
    pub fn runner_loops_down(&self) -> Vec<&'static str> {
        self.runner.loops_down()
    }

    /// Whether the store commits a probe write within `within` (for readiness checks).
    pub async fn store_ready(
        &self,
        within: std::time::Duration,
    ) -> Result<(), snodo_core::store::StoreError> {
        self.store.check_writable(within).await
    }

    /// Handles one POST body.
    pub async fn handle(&self, headers: &RoutingHeaders, caller: &Caller, body: &[u8]) -> Reply {
        let (parsed, _held) = match self.parse_large(caller, body).await {
            Ok(Some((parsed, held))) => (parsed, Some(held)),
            Ok(None) => (protocol::parse(body), None),
            Err(reply) => return reply,
        };
        let req = match parsed {
            Ok(Incoming::Request(r)) => r,
            Ok(Incoming::Notification { .. }) => return Reply::Accepted,
            Ok(Incoming::Response { id, outcome }) => {
                // An answer nothing waits on (late, or another node's) is dropped: the
                // call that asked has ended or lives elsewhere.
                let party = session::Party {
                    principal: caller.principal.clone(),
                    session: headers.session.clone().and_then(Result::ok),
                };
                self.outstanding.answer(&party, &id, outcome);
                return Reply::Accepted;
            }
            Err((id, e)) => return Reply::error(&id, &e),
        };
        let id = req.id.clone();
        let started = std::time::Instant::now();
        let (method, tool) = self.operation_labels(&req);
        let span =
            trace::RequestSpan::start(&self.config.tracer, &req, headers, method, tool.as_deref());
        let notes = span.as_ref().map(|s| &s.notes);
        let reply = match self.dispatch(headers, caller, req, notes).await {
            Ok(reply) => reply,
            Err(e) => Reply::error(&id, &e),
        };
        if let Some(span) = span {
            span.finish(&self.config.tracer, reply.outcome());
        }
        // A streamed `tools/call` is recorded when its response is sent (`run_sync`); any
        // other streamed reply counts until its stream starts.
        if !(matches!(reply, Reply::Stream(_)) && method == "tools/call") {
            self.metrics.operation(
                method,
                tool,
                reply.outcome().error_type(),
                started.elapsed(),
            );
        }
        reply
    }

    /// The labels of a request's operation: its method when this server knows it (else
    /// `_other`), and for `tools/call` the tool when the catalog serves one of that name.
    /// Both sets are bounded, whatever clients send.
    fn operation_labels(&self, req: &protocol::Request) -> (&'static str, Option<String>) {
        const HANDSHAKE: [&str; 6] = [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
            "tasks/list",
        ];
        let method = match Method::parse(&req.method) {
            Some(m) => m.as_str(),
            None => HANDSHAKE
                .iter()
                .find(|m| **m == req.method)
                .copied()
                .unwrap_or("_other"),
        };
        let tool = (method == "tools/call")
            .then(|| req.params.get("name").and_then(Value::as_str))
            .flatten()
            .filter(|name| self.catalog().tool(name).is_some())
            .map(str::to_owned);
        (method, tool)
    }

    async fn dispatch(
        &self,
        headers: &RoutingHeaders,
        caller: &Caller,
        req: protocol::Request,
        notes: Option<&trace::TraceNotes>,
    ) -> Handled<Reply> {
        if legacy::speaks_handshake(headers, &req) {
            let id = req.id.clone();
            return Ok(self
                .dispatch_handshake(headers, caller, req, notes)
                .await
                .unwrap_or_else(|e| Reply::error_with_status(200, &id, &e)));
        }
        // 1. Routing headers against the body.
        check_routing_headers(headers, &req)?;
        // 2. Removed and unknown methods, before anything else is asked of the body.
        let Some(method) = Method::parse(&req.method) else {
            return Err(RpcError::method_not_found(&req.method));
        };
        // 3. Per-request _meta, then the version header against it.
        let mut meta = RequestMeta::parse(&req.params)?;
        // `_meta`'s trace keys before the HTTP headers: they are the request's own.
        if meta.trace.is_none() {
            meta.trace = headers.trace.clone();
        }
        check_version_header(headers, &meta)?;
        meta.check_version()?;
        if method.needs_tasks() && !meta.declares_tasks() {
            return Err(protocol::refusal::tasks_method(method.as_str()));
        }
        // 4. The method's parameters.
        let protocol::Request {
            id, params, bytes, ..
        } = req;
        let call = Call::parse(method, params)?;
        let mut ctx = Ctx::stateless(&id, caller, meta, headers, bytes);
        ctx.notes = notes;
        self.serve(call, &ctx).await
    }

    /// Answers one typed request, whichever revision it came in.
    async fn serve(&self, call: Call, ctx: &Ctx<'_>) -> Handled<Reply> {
        let needed = self.config.scopes.needed(&call);
        if !ctx.caller.missing(&needed).is_empty() {
            let e = RpcError::new(
                protocol::codes::INVALID_REQUEST,
                format!(
                    "insufficient scope: this request needs {}",
                    needed.join(" ")
                ),
            );
            return Ok(Reply::InsufficientScope {
                needed,
                body: protocol::error_bytes(ctx.id, &e),
            });
        }
        let result = match call {
            Call::Discover => self.discover(ctx),
            Call::ToolsList => self.tools_list(ctx),
            Call::ToolsCall(call) => return self.tools_call(call, ctx).await,
            Call::ResourcesList => self.resources_list(ctx),
            Call::ResourceTemplatesList => self.resource_templates_list(ctx),
            Call::ResourcesRead(read) => self.resources_read(read, ctx).await?,
            Call::PromptsList => self.prompts_list(ctx),
            Call::PromptsGet(get) => self.prompts_get(get, ctx).await?,
            Call::Complete(complete) => self.complete(complete, ctx).await?,
            Call::TasksGet(task) => return self.tasks_get(task, ctx).await,
            Call::TasksUpdate(update) => self.tasks_update(update, ctx).await?,
            Call::TasksCancel(task) => self.tasks_cancel(task, ctx).await?,
            Call::SubscriptionsListen(listen) => {
                return self.subscriptions_listen(listen, ctx).await;
            }
        };
        Ok(Reply::result(ctx.id, result))
    }
}

/// `Mcp-Method` must match the body's method, and `Mcp-Name` its name where the method has
/// one (required where the transport requires it).
fn check_routing_headers(
    headers: &RoutingHeaders,
    req: &protocol::Request,
) -> Result<(), RpcError> {
    match readable(&headers.method, "Mcp-Method")? {
        None => {
            return Err(RpcError::header_mismatch(
                "the Mcp-Method header is required",
            ));
        }
        Some(m) if m != req.method => {
            return Err(RpcError::header_mismatch(format!(
                "Mcp-Method {m:?} does not match the body's method {:?}",
                req.method
            )));
        }
        Some(_) => {}
    }
    match protocol::name_source(&req.method, &req.params) {
        NameSource::Body {
            value: body_name,
            required,
        } => match readable(&headers.name, "Mcp-Name")? {
            None if required => Err(RpcError::header_mismatch(
                "the Mcp-Name header is required for this method",
            )),
            Some(n) if n != body_name => Err(RpcError::header_mismatch(
                "Mcp-Name does not match the body",
            )),
            _ => Ok(()),
        },
        NameSource::None => Ok(()),
        NameSource::Missing(field) => Err(RpcError::invalid_params(format!(
            "params.{field} must be a string"
        ))),
    }
}

/// `MCP-Protocol-Version` must be sent, and match the version `_meta` declares.
fn check_version_header(headers: &RoutingHeaders, meta: &RequestMeta) -> Result<(), RpcError> {
    match &headers.protocol_version {
        Some(Ok(v)) if *v != meta.protocol_version => Err(RpcError::header_mismatch(format!(
            "MCP-Protocol-Version {v:?} does not match _meta protocolVersion {:?}",
            meta.protocol_version
        ))),
        Some(Err(())) => Err(RpcError::header_mismatch(
            "the MCP-Protocol-Version header is not readable",
        )),
        // Streamable HTTP lists a missing standard header among the validation failures;
        // every real client sends it (interop tests), so strictness costs none.
        None => Err(RpcError::header_mismatch(
            "the MCP-Protocol-Version header is required",
        )),
        Some(Ok(_)) => Ok(()),
    }
}
