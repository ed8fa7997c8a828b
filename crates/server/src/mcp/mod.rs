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
//!
//! What it does to tasks goes through the `TaskService` it shares with the admin API
//! (`crate::tasks`): the store, the runner hand-off after each commit, the change feed and
//! the stream slots. What is MCP's alone stays here: `routing` (the routing headers and
//! their checks), `body` (large bodies parsed in their caller's share), dispatch, the
//! request-path budgets, `reply` (what is sent back), and the 2025-11-25 sessions.

mod body;
mod catalog_calls;
mod dialect;
mod discover;
mod follow;
mod handle;
mod legacy;
mod method;
mod mrtr;
mod reply;
mod request;
mod routing;
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

pub use body::{BODY_MEMORY_FACTOR, LARGE_BODY_BYTES};
use dialect::Ctx;
use method::Method;
pub use reply::{Outcome, Reply};
use request::Call;
pub use routing::RoutingHeaders;
use routing::{check_routing_headers, check_version_header};
pub use scopes::ScopePolicy;
pub use sync_io::SyncIo;

use std::sync::Arc;

use serde_json::Value;

use crate::identity::Caller;
use crate::protocol::{self, Incoming, RequestMeta, RpcError};
use crate::tasks::TaskService;
use snodo_core::store::{ObservedStore, Store};
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

/// The MCP server: its methods over the task service it shares with the admin API.
pub struct McpServer {
    /// The store, the runner and the task operations, shared with the operators' routes.
    tasks: TaskService,
    pub(crate) config: ServerConfig,
    /// Told of every catalog swap: streams that asked for list-changed notifications.
    catalog_changes: tokio::sync::broadcast::Sender<()>,
    /// Guest executions on the request path, per tenant.
    sync_slots: Arc<Slots>,
    /// Task creations, per tenant.
    creates: Rate,
    /// What this node remembers of 2025-11-25 sessions (log levels, ends).
    sessions: session::SessionMemory,
    /// Server requests 2025-11-25 calls wait on, answered by the client's posted responses.
    outstanding: Arc<session::Outstanding>,
    /// The engine guests run on: a large body is parsed in its caller's CPU turn and held
    /// in its caller's memory share. Without one, bodies are parsed where they arrive.
    engine: Option<snodo_wasm::WasmEngine>,
    /// Woken when a schedule changes on this node, so the loop looks again at once.
    schedule_wake: Arc<tokio::sync::Notify>,
    /// The webhooks this server delivers, once started ([`McpServer::start_webhooks`]).
    webhooks: Arc<std::sync::OnceLock<crate::webhooks::Webhooks>>,
    /// What deploys to this server's store, once serving ([`McpServer::set_deploying`]).
    deploying: Arc<std::sync::OnceLock<crate::deploy::operate::Deploying>>,
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

/// The error a request gets when the store cannot answer (the detail is for the log).
fn store_unavailable() -> RpcError {
    RpcError::internal("the task store is unavailable; try again")
}

impl McpServer {
    /// A server over `store`, running tasks with `runner`.
    pub fn new(store: Arc<dyn Store>, runner: Runner, config: ServerConfig) -> Self {
        let l = &config.limits;
        Self {
            tasks: TaskService::new(store, runner, l),
            sync_slots: Slots::new(
                "limits.sync_calls_per_tenant",
                l.sync_calls_per_tenant.max(1),
                "limits.sync_calls",
                l.sync_calls.max(1),
            ),
            creates: Rate::new(
                "limits.task_creates_per_second",
                l.task_creates_per_second.max(1),
                l.task_create_burst,
            ),
            config,
            sessions: session::SessionMemory::default(),
            outstanding: Arc::default(),
            catalog_changes: tokio::sync::broadcast::channel(16).0,
            engine: None,
            schedule_wake: Arc::default(),
            webhooks: Arc::default(),
            deploying: Arc::default(),
        }
    }

    /// The schedules this server fires, over its task service, catalogs and limits.
    pub(crate) fn schedules(&self) -> crate::schedules::Schedules {
        crate::schedules::Schedules {
            tasks: self.tasks.clone(),
            catalog: self.config.catalog.clone(),
            limits: self.config.limits.clone(),
            wake: self.schedule_wake.clone(),
        }
    }

    /// Makes the store's schedules agree with `specs` (the configuration's
    /// `[[schedules]]`), then fires them until `stop`, on this runtime.
    pub async fn start_schedules(
        &self,
        specs: &[snodo_core::model::ScheduleSpec],
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, crate::ScheduleError> {
        let schedules = self.schedules();
        schedules.declare_configured(specs).await?;
        Ok(tokio::spawn(crate::schedules::run(schedules, stop)))
    }

    /// Delivers webhooks from the store's outbox through `outbound` under `settings`, as
    /// the node `node`: makes the store's configured subscriptions agree with
    /// `settings.subscriptions`, then delivers until `stop`, on this runtime. The admin
    /// routes made after this act on them.
    pub async fn start_webhooks(
        &self,
        outbound: Arc<snodo_wasm::outbound::Outbound>,
        settings: crate::WebhookSettings,
        node: &str,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, crate::WebhookError> {
        let allowed = settings
            .allow_list()
            .map_err(|e| crate::WebhookError::Invalid(e.under("webhooks").to_string()))?;
        let webhooks = crate::webhooks::Webhooks {
            tasks: self.tasks.clone(),
            outbound,
            settings: Arc::new(settings),
            allowed: Arc::new(allowed),
            node: node.into(),
            wake: Arc::default(),
            looks: Arc::default(),
        };
        webhooks
            .declare_configured(&webhooks.settings.subscriptions.clone())
            .await?;
        webhooks.release_own_leases().await?;
        let _ = self.webhooks.set(webhooks.clone());
        let changes = self.tasks.change_feed();
        Ok(tokio::spawn(crate::webhooks::run(webhooks, changes, stop)))
    }

    /// Lets operators deploy through this server (the admin API's `/deployments`): what a
    /// single-file store's server must do for them, since the file is its alone.
    pub fn set_deploying(&self, deploying: crate::deploy::operate::Deploying) {
        let _ = self.deploying.set(deploying);
    }

    /// What deploys through this server, once set.
    pub(crate) fn deploying(&self) -> Option<crate::deploy::operate::Deploying> {
        self.deploying.get().cloned()
    }

    /// The webhooks this server delivers, once started.
    pub(crate) fn webhooks(&self) -> Option<crate::webhooks::Webhooks> {
        self.webhooks.get().cloned()
    }

    /// One look at the webhooks' outbox at the store's time (what the loop does each time
    /// it wakes): for tests and tools that drive time themselves. `None` before
    /// [`McpServer::start_webhooks`].
    pub async fn deliver_webhooks(&self) -> Option<Result<crate::Round, crate::WebhookError>> {
        Some(self.webhooks()?.look().await)
    }

    /// One pass over the schedules at the store's time (what the loop does each time it
    /// wakes): for tests and tools that drive time themselves.
    pub async fn fire_due_schedules(&self) -> Result<crate::Pass, crate::ScheduleError> {
        self.schedules().pass().await
    }

    /// Parses large bodies in their caller's CPU turn and memory share on `engine` (the
    /// one the catalog's guests run on).
    pub fn with_engine(mut self, engine: snodo_wasm::WasmEngine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Pushes `notifications/tasks` to subscription streams (the MCP ones and the
    /// operators'), from the changes `feed` announces (the same store the server and
    /// runner use, wrapped).
    pub fn with_change_feed(mut self, feed: Arc<ObservedStore>) -> Self {
        self.tasks = self.tasks.with_change_feed(feed);
        self
    }

    /// Requires the scopes `scopes` names of each operation.
    pub fn with_scopes(mut self, scopes: ScopePolicy) -> Self {
        self.config.scopes = scopes;
        self
    }

    /// Counts into `metrics` (shared with the runner's instrumentation).
    pub fn with_metrics(mut self, metrics: Arc<crate::telemetry::Metrics>) -> Self {
        self.tasks = self.tasks.with_metrics(metrics);
        self
    }

    /// The task service this server acts through: the admin routes are given the same.
    pub(crate) fn tasks(&self) -> &TaskService {
        &self.tasks
    }

    fn metrics(&self) -> &crate::telemetry::Metrics {
        self.tasks.metrics()
    }

    /// Tells the subscription streams that asked for them that the tool, resource and
    /// prompt lists changed (a deployment was swapped in).
    pub fn catalog_changed(&self) {
        let _ = self.catalog_changes.send(());
    }

    /// Ends every open subscription stream, the operators' included (at shutdown; the
    /// streams would otherwise keep their connections open forever).
    pub fn close_streams(&self) {
        self.tasks.close_streams();
    }

    /// The Prometheus text exposition of this server's metrics.
    pub fn metrics_text(&self) -> String {
        self.metrics().render(
            self.tasks.runner().active(),
            self.sync_slots.held(),
            self.tasks.streams_open(),
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
        match self.tasks.count(None).await {
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

    /// The store's server key (it seals request states and session ids).
    pub(crate) async fn server_key(&self) -> Result<[u8; 32], RpcError> {
        self.tasks
            .server_key()
            .await
            .map_err(|_| store_unavailable())
    }

    /// A budget's refusal as the request's error, counted by the limit that refused.
    pub(crate) fn refuse(&self, refusal: &Refusal) -> RpcError {
        self.metrics().limit_hit(refusal.limit);
        refusal.to_rpc_error()
    }

    /// Synchronous guest executions running now (all tenants).
    pub fn sync_calls_active(&self) -> usize {
        self.sync_slots.held()
    }

    /// The catalog serving now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.config.catalog.current()
    }

    /// The runner's loops that are not running now (see [`Runner::loops_down`]).
    pub fn runner_loops_down(&self) -> Vec<&'static str> {
        self.tasks.runner().loops_down()
    }

    /// Whether the store commits a probe write within `within` (for readiness checks).
    pub async fn store_ready(
        &self,
        within: std::time::Duration,
    ) -> Result<(), snodo_core::store::StoreError> {
        self.tasks.store().check_writable(within).await
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
                // An answer nothing here waits on: a task's question asked on another
                // node's stream commits to the task all the same; any other (a synchronous
                // call's, which lives elsewhere or has ended) is dropped.
                let party = session::Party {
                    principal: caller.principal.clone(),
                    session: headers.session.clone().and_then(Result::ok),
                };
                if !self.outstanding.answer(&party, &id, outcome.clone()) {
                    self.answer_elsewhere(&party, &id, outcome).await;
                }
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
            self.metrics().operation(
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
        const HANDSHAKE: [&str; 5] = [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ];
        let method = match Method::parse_handshake(&req.method).or(Method::parse(&req.method)) {
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
            Call::TasksCancel(task) => return self.tasks_cancel(task, ctx).await,
            Call::TasksResult(task) => return self.tasks_result(task, ctx).await,
            Call::TasksList(list) => self.tasks_list(list, ctx).await?,
            Call::SubscriptionsListen(listen) => {
                return self.subscriptions_listen(listen, ctx).await;
            }
        };
        Ok(Reply::result(ctx.id, result))
    }
}
