//! Streamable HTTP: an axum [`Router`] with `POST /mcp` and the rules that belong to the
//! transport: Host/Origin checks against DNS rebinding (a layer over every route),
//! authentication (a layer over the MCP routes, through the server's [`Authenticator`]
//! from `identity`), the body limit and body timeout, the routing headers, SSE responses, 405 for
//! GET, DELETE of a 2025-11-25 session, health endpoints and metrics.
//!
//! - `endpoint`: `/mcp` itself: the POST read and answered, the DELETE of a session.
//! - `health`: `/readyz` and `/metrics`.
//! - `origin`: the Host/Origin check against DNS rebinding.
//! - `conn`: connections, their limits and timeouts, graceful shutdown.
//!
//! The admin API (`/admin/v1`) and the console (`/console`) are nested here over the MCP
//! server's own task service, so an operator's action and a client's meet the same store,
//! runner, change feed and stream budget.

mod conn;
mod endpoint;
mod health;
mod origin;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use tower::ServiceExt;

use crate::identity::{
    Authenticator, Caller, ResourceServer, StaticTokens, TokenTable, Unauthenticated,
};
use crate::mcp::McpServer;
use crate::protocol::{self, RpcError, codes};
pub use conn::{HttpLimits, MAX_CONNECTIONS_LIMIT, serve};
use endpoint::{answer_post, delete_session, post_mcp};
use health::{metrics, ready};
use origin::{allowed_host, check_host, host_refused};
use snodo_core::model::Principal;

/// How long `/readyz` waits for the store to commit its probe write.
pub const READY_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Transport settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The largest accepted request body.
    pub max_body_bytes: usize,
    /// Bearer tokens and who they authenticate; empty means no authentication (then the
    /// server must only listen on loopback).
    pub tokens: Vec<(String, Principal)>,
    /// Host names (without port) a request's `Host` and `Origin` may name, on every route;
    /// empty accepts any (for servers behind a proxy that checks them).
    pub allowed_hosts: Vec<String>,
    /// How long a request body may take to arrive once its head did; later gets 408.
    pub body_timeout: Duration,
    /// The bearer token `GET /metrics` requires; `None` serves metrics to anyone who
    /// passes the Host check, unless tokens or OAuth guard `/mcp`.
    pub metrics_token: Option<String>,
    /// Whether OAuth access tokens guard `/mcp` (`/metrics` then needs its own token).
    pub oauth: bool,
    /// Who the operators are (the admin API and the console).
    pub admin: crate::admin::AdminConfig,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 << 20,
            tokens: Vec::new(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            body_timeout: HttpLimits::default().body_timeout,
            metrics_token: None,
            oauth: false,
            admin: crate::admin::AdminConfig {
                scopes: vec!["admin".into()],
                session_ms: crate::admin::DEFAULT_SESSION_MS,
                ..Default::default()
            },
        }
    }
}

/// What every route reads, shared behind one reference count: axum clones the state for
/// each request, and one atomic is cheaper than one per field.
type AppState = Arc<Shared>;

struct Shared {
    server: Arc<McpServer>,
    config: HttpConfig,
    authenticator: Arc<dyn Authenticator>,
    /// `metrics.token`, the one token `GET /metrics` takes when set.
    metrics_token: Option<TokenTable<()>>,
}

/// The routes, each behind the Host/Origin check:
/// - `/mcp`: `POST` a message, `DELETE` a 2025-11-25 session (both authenticated: the
///   [`Caller`] is in the request's extensions), `GET` is 405 (no server stream here);
/// - `/healthz`, `/readyz`, `/metrics`: `GET` (and `HEAD`).
///
/// `POST /mcp`, nearly every request, is answered without the router: the same host check
/// and authentication run as plain calls, in the same order, and then the same handler
/// (the router's boxed middleware futures were a fifth of a `tasks/get`:
/// docs/performance.md). Everything else goes through the [`Router`].
///
/// A `tower::Service`, so tests drive it without sockets; [`serve`] runs it on connections.
#[derive(Clone)]
pub struct App {
    routes: Router,
    state: AppState,
}

impl App {
    /// Answers one request.
    pub async fn handle(&self, request: Request) -> Response {
        if request.method() == Method::POST && request.uri().path() == "/mcp" {
            return post_directly(&self.state, request).await;
        }
        match self.routes.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// `POST /mcp` as the router serves it: the host check, authentication, the handler.
///
/// Invariant: the same answers as through the router, because both paths call the same
/// host check, the same authenticator and the same `answer_post`; only the hand-over of
/// the caller differs (an argument here, the request's extensions there).
/// (`server::methods::the_direct_post_path_and_the_router_refuse_alike`)
async fn post_directly(state: &Shared, request: Request) -> Response {
    if let Err(why) = allowed_host(request.headers(), &state.config.allowed_hosts) {
        return host_refused(why);
    }
    match state.authenticator.authenticate(request.headers()).await {
        Ok(caller) => answer_post(state, caller, request).await,
        Err(refused) => unauthorized(&refused),
    }
}

impl tower::Service<Request> for App {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let app = self.clone();
        Box::pin(async move { Ok(app.handle(request).await) })
    }
}

/// The routes over `server`, authenticated by the configured static tokens. Without any,
/// the server is loopback-only and its local caller is an operator of every tenant.
pub fn router(server: Arc<McpServer>, config: HttpConfig) -> App {
    let tokens = Arc::new(StaticTokens::new(&config.tokens));
    let open = config.tokens.is_empty() && !config.oauth;
    routes(server, config, tokens, None, open)
}

/// The routes over `server`, authenticated by `authenticator`.
pub fn router_with(
    server: Arc<McpServer>,
    config: HttpConfig,
    authenticator: Arc<dyn Authenticator>,
) -> App {
    routes(server, config, authenticator, None, false)
}

/// The routes over `server`, authenticated by the OAuth resource server `oauth` (which the
/// console's sign-in through the identity provider also uses).
pub fn router_oauth(server: Arc<McpServer>, config: HttpConfig, oauth: Arc<ResourceServer>) -> App {
    routes(server, config, oauth.clone(), Some(oauth), false)
}

fn routes(
    server: Arc<McpServer>,
    mut config: HttpConfig,
    authenticator: Arc<dyn Authenticator>,
    oauth: Option<Arc<ResourceServer>>,
    open_locally: bool,
) -> App {
    // Only a server nobody authenticates to (loopback only) makes its local caller an
    // operator: decided by the authenticator the routes were built with, never by a
    // setting (a custom authenticator's callers are no operators unless they hold the
    // admin scopes).
    config.admin.open_locally = open_locally;
    let admin = crate::admin::api::AdminState {
        operators: Arc::new(
            crate::admin::Operators::new(server.tasks().clone())
                .with_schedules(server.schedules())
                .with_webhooks(server.webhooks())
                .with_deploying(server.deploying())
                .with_backup_dir(config.admin.backup_dir.clone()),
        ),
        admin: Arc::new(crate::admin::Admin::new(config.admin.clone())),
        authenticator: authenticator.clone(),
        oauth,
    };
    let console = crate::admin::console::ConsoleState {
        admin: admin.clone(),
        sessions: Arc::default(),
    };
    let state: AppState = Arc::new(Shared {
        server,
        metrics_token: (config.metrics_token.as_deref()).map(|t| TokenTable::new([(t, ())])),
        config,
        authenticator,
    });
    // Only the methods registered before `route_layer` are authenticated: a GET or a PUT
    // on /mcp is 405 to anyone.
    let mcp = post(post_mcp)
        .delete(delete_session)
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .get(|| async {
            not_allowed(
                "no GET stream here: server messages arrive on the stream of the POST they \
                 belong to",
            )
        })
        .fallback(|| async {
            not_allowed("/mcp takes POST, and DELETE to end a 2025-11-25 session")
        });
    let routes = Router::new()
        .route("/mcp", mcp)
        .route(
            "/healthz",
            get(|| async { (StatusCode::OK, "ok") }).fallback(read_only),
        )
        .route("/readyz", get(ready).fallback(read_only))
        .route("/metrics", get(metrics).fallback(read_only))
        // RFC 9728 metadata, at the root and in the path-suffixed form; 404 without OAuth.
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata).fallback(read_only),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*resource}",
            get(resource_metadata).fallback(read_only),
        )
        .nest_service("/admin/mcp", crate::admin::api::mcp_routes(admin.clone()))
        .nest_service("/admin/v1", crate::admin::api::routes(admin))
        .nest_service("/console", crate::admin::console::routes(console))
        .fallback(|| async { StatusCode::NOT_FOUND })
        // The DNS-rebinding defence, before any route: a page on another origin that
        // resolves its own name to this server must not reach it through a victim's
        // browser.
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .with_state(state.clone());
    App { routes, state }
}

async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    match state.authenticator.authenticate(request.headers()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refused) => unauthorized(&refused),
    }
}

/// The caller [`authenticate`] put into `request`.
fn caller(request: &mut Request) -> Option<Caller> {
    request.extensions_mut().remove::<Caller>()
}

/// 405 on the read-only routes, with their `Allow`.
async fn read_only() -> Response {
    let mut r = StatusCode::METHOD_NOT_ALLOWED.into_response();
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    r
}

fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = protocol::error_bytes(&Value::Null, &RpcError::new(code, message));
    json_response(status, body)
}

/// 405 on `/mcp`, with its `Allow`.
fn not_allowed(message: &str) -> Response {
    let mut r = rpc_error(
        StatusCode::METHOD_NOT_ALLOWED,
        codes::INVALID_REQUEST,
        message,
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    r
}

/// The Protected Resource Metadata, where the authenticator publishes one.
async fn resource_metadata(State(state): State<AppState>, request: Request) -> Response {
    match state.authenticator.resource_metadata(request.uri().path()) {
        Some(doc) => (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "max-age=300"),
            ],
            doc.to_string(),
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn unauthorized(refused: &Unauthenticated) -> Response {
    let status = StatusCode::from_u16(refused.status).unwrap_or(StatusCode::UNAUTHORIZED);
    let code = if status == StatusCode::SERVICE_UNAVAILABLE {
        codes::INTERNAL_ERROR
    } else {
        codes::INVALID_REQUEST
    };
    let mut r = rpc_error(status, code, &refused.message);
    let challenge = HeaderValue::from_str(&refused.challenge)
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
    r.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    r
}

/// A handler behind [`authenticate`] that finds no caller: a routing mistake, never a
/// client's, so it is refused rather than served as anyone.
fn missing_caller() -> Response {
    tracing::error!("a request reached an authenticated route without a caller");
    rpc_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        codes::INTERNAL_ERROR,
        "the request was not authenticated",
    )
}

/// A serialized JSON message as the response body.
fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
