//! Streamable HTTP: an axum [`Router`] with `POST /mcp` and the rules that belong to the
//! transport: Host/Origin checks against DNS rebinding (a layer over every route),
//! authentication (a layer over the MCP routes, through the server's [`Authenticator`]
//! from `identity`), the body limit and body timeout, the routing headers, SSE responses, 405 for
//! GET, DELETE of a 2025-11-25 session, health endpoints and metrics. Connections, their
//! limits and timeouts are in `conn`.

mod conn;
mod origin;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream;
use serde_json::Value;
use tower::ServiceExt;

use crate::identity::{
    Authenticator, Caller, ResourceServer, StaticTokens, TokenDigest, Unauthenticated,
    bearer_token, digest, digests_equal,
};
use crate::mcp::{McpServer, Reply, RoutingHeaders};
use crate::protocol::{self, RpcError, codes, decode_header_value};
pub use conn::{HttpLimits, MAX_CONNECTIONS_LIMIT, serve};
use origin::{allowed_host, check_host, host_refused};
use snodo_core::model::{IncomingTrace, Principal};

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
    metrics_token: Option<TokenDigest>,
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
        server: server.clone(),
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
        metrics_token: config.metrics_token.as_deref().map(digest),
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

/// A 2025-11-25 client ending its session. Sessions live in their ids, so this only drops
/// what this node remembers of one (its log level) and answers 404 for it from then on.
///
/// 2026-07-28 has no sessions: a DELETE that speaks it is 405. An id this server did not
/// issue to the caller (forged, another principal's, or already ended) is 404, as the
/// transport says for a session the server does not know; without an id it is 400.
async fn delete_session(State(state): State<AppState>, mut request: Request) -> Response {
    let Some(Caller { principal, .. }) = caller(&mut request) else {
        return missing_caller();
    };
    let headers = request.headers();
    let version = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if version == Some(protocol::PROTOCOL_VERSION) {
        return not_allowed("2026-07-28 has no sessions to end: DELETE ends a 2025-11-25 session");
    }
    let id = match routing_header(headers, "mcp-session-id") {
        Some(Ok(id)) => id,
        _ => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                codes::INVALID_REQUEST,
                "DELETE ends a 2025-11-25 session: send its Mcp-Session-Id",
            );
        }
    };
    match state.server.end_session(&principal, &id).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => rpc_error(
            StatusCode::NOT_FOUND,
            codes::INVALID_REQUEST,
            "no such session: it was not issued to this caller, or it has ended",
        ),
        Err(e) => json_response(
            StatusCode::from_u16(protocol::http_status(&e))
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            protocol::error_bytes(&Value::Null, &e),
        ),
    }
}

/// The metrics, behind `metrics.token` when one is set. While bearer tokens guard `/mcp`
/// and no metrics token is set, `/metrics` is closed: its counters span every tenant, so
/// serving them to anyone would let one tenant watch the others.
async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match &state.metrics_token {
        Some(expected) => {
            let presented = bearer_token(&headers).map(digest);
            if !presented.is_some_and(|p| digests_equal(&p, expected)) {
                return unauthorized(&Unauthenticated::bearer(
                    "a valid bearer token is required (metrics.token)",
                ));
            }
        }
        None if !state.config.tokens.is_empty() || state.config.oauth => {
            return unauthorized(&Unauthenticated::bearer(
                "/metrics is closed while bearer tokens or OAuth guard /mcp and metrics.token is \
                 not: set metrics.token (or metrics.token_env)",
            ));
        }
        None => {}
    }
    let mut text = state.server.metrics_text();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&state.server.task_gauges().await);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Ready when the store commits a probe write within [`READY_PROBE_TIMEOUT`]: a read alone
/// stays green while the writer is stuck or the disk refuses writes.
async fn ready(State(state): State<AppState>) -> Response {
    let down = state.server.runner_loops_down();
    if !down.is_empty() {
        // A loop that panicked runs again after its backoff; until then this node does
        // not claim (or reap) what it should.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the runner's {} loop is not running",
                down.join(" and ")
            ),
        )
            .into_response();
    }
    match state.server.store_ready(READY_PROBE_TIMEOUT).await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => {
            // The detail (which may name files) is for the operator's log only.
            tracing::warn!(error = %e, "readiness probe failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the task store cannot commit",
            )
                .into_response()
        }
    }
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

/// The W3C trace context of the request's headers. `traceparent` must appear once (twice is
/// invalid, as W3C Trace Context says); `tracestate` and `baggage` may be split over
/// several lines, which join with commas.
fn trace_headers(headers: &HeaderMap) -> Option<IncomingTrace> {
    let mut parents = headers.get_all("traceparent").iter();
    let parent = parents.next()?.to_str().ok()?;
    if parents.next().is_some() {
        return None;
    }
    let joined = |name: &str| {
        let parts: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        (!parts.is_empty()).then(|| parts.join(","))
    };
    let (state, baggage) = (joined("tracestate"), joined("baggage"));
    IncomingTrace::from_values(Some(parent), state.as_deref(), baggage.as_deref())
}

fn routing_header(headers: &HeaderMap, name: &str) -> Option<Result<String, ()>> {
    headers
        .get(name)
        // Optional whitespace around a field value is not part of it (RFC 9110 §5.5).
        .map(|v| {
            v.to_str()
                .ok()
                .map(str::trim)
                .and_then(decode_header_value)
                .ok_or(())
        })
}

/// The `Mcp-Param-*` headers, decoded as the routing headers are.
fn param_headers(headers: &HeaderMap) -> Vec<(String, Result<String, ()>)> {
    const PREFIX: &str = "mcp-param-";
    headers
        .keys()
        .filter(|name| name.as_str().starts_with(PREFIX))
        .filter_map(|name| {
            // A header sent twice is refused: an intermediary may have acted on the other.
            let value = match headers.get_all(name).iter().count() {
                1 => routing_header(headers, name.as_str())?,
                _ => Err(()),
            };
            Some((name.as_str()[PREFIX.len()..].to_owned(), value))
        })
        .collect()
}

/// `POST /mcp` through the router: the caller is in the request's extensions.
async fn post_mcp(State(state): State<AppState>, mut request: Request) -> Response {
    let Some(caller) = caller(&mut request) else {
        return missing_caller();
    };
    answer_post(&state, caller, request).await
}

/// `POST /mcp` from `caller`.
async fn answer_post(state: &Shared, caller: Caller, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    // A POST body is JSON and says so: a missing Content-Type is refused like a wrong one
    // (every real client sends it; see the interop tests).
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|ct| ct.to_str().ok())
        .and_then(|c| c.split(';').next())
        .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::INVALID_REQUEST,
            "the body must be application/json (Content-Type: application/json)",
        );
    }
    let limit = state.config.max_body_bytes;
    let read = tokio::time::timeout(state.config.body_timeout, axum::body::to_bytes(body, limit));
    let bytes = match read.await {
        Ok(Ok(b)) => b,
        Err(_) => {
            let mut r = rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                codes::INVALID_REQUEST,
                &format!(
                    "the body did not arrive within {} ms (http.body_timeout_ms)",
                    state.config.body_timeout.as_millis()
                ),
            );
            // The rest of the body may still come; the connection cannot be reused.
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return r;
        }
        Ok(Err(_)) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::INVALID_REQUEST,
                &format!(
                    "the body is larger than {} bytes",
                    state.config.max_body_bytes
                ),
            );
        }
    };
    let routing = RoutingHeaders {
        method: routing_header(&headers, "mcp-method"),
        name: routing_header(&headers, "mcp-name"),
        protocol_version: routing_header(&headers, "mcp-protocol-version"),
        session: routing_header(&headers, "mcp-session-id"),
        accepts_sse: accepts_event_stream(&headers),
        params: param_headers(&headers),
        trace: trace_headers(&headers),
    };
    match state.server.handle(&routing, &caller, &bytes).await {
        Reply::Json { status, body, .. } => {
            json_response(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
        }
        Reply::InsufficientScope { needed, body } => {
            let mut r = json_response(StatusCode::FORBIDDEN, body);
            let challenge = state.authenticator.insufficient_scope(&needed);
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            r
        }
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Initialized { session, body } => {
            let mut r = json_response(StatusCode::OK, body);
            // Sealed base64url: always a valid header value.
            if let Ok(v) = HeaderValue::from_str(&session) {
                r.headers_mut().insert("mcp-session-id", v);
            }
            r
        }
        Reply::Stream(rx) => {
            let events = stream::unfold(rx, |mut rx| async move {
                let msg = rx.recv().await?;
                Some((
                    Ok::<_, std::convert::Infallible>(Event::default().data(msg.to_string())),
                    rx,
                ))
            });
            Sse::new(events).into_response()
        }
    }
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

/// Whether `Accept` allows an event stream: absent, `text/event-stream`, `text/*` or `*/*`
/// (a `q=0` entry refuses it).
fn accepts_event_stream(headers: &axum::http::HeaderMap) -> bool {
    let mut values = headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .peekable();
    if values.peek().is_none() {
        return true;
    }
    values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let kind = parts.next().unwrap_or_default().to_ascii_lowercase();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            !refused && matches!(kind.as_str(), "text/event-stream" | "text/*" | "*/*")
        })
}
