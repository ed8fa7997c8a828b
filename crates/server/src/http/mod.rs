//! Streamable HTTP on hyper (with axum's body, response and SSE types): `POST /mcp` and the
//! rules that belong to the transport: Host/Origin checks against DNS rebinding (on every
//! route), bearer authentication, the body limit and body timeout, the routing headers, SSE
//! responses, 405 for GET, DELETE of a 2025-11-25 session, health endpoints and metrics.
//! Connection limits and timeouts are in `conn`.

mod conn;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use conn::{HttpLimits, MAX_CONNECTIONS_LIMIT, serve};

use crate::mcp::{McpServer, Reply, RoutingHeaders};
use crate::protocol::{self, RpcError, codes, decode_header_value};
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
    /// passes the Host check.
    pub metrics_token: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 << 20,
            tokens: Vec::new(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
            body_timeout: HttpLimits::default().body_timeout,
            metrics_token: None,
        }
    }
}

/// The shortest accepted bearer token.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why a configured bearer token cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Shorter than [`MIN_TOKEN_LEN`].
    #[error("a bearer token must be at least {MIN_TOKEN_LEN} characters")]
    TooShort,
    /// The tenant (the store scope) is empty.
    #[error("the tenant must not be empty")]
    EmptyTenant,
    /// The subject is empty.
    #[error("the subject must not be empty")]
    EmptySubject,
    /// The same token is configured twice: it could only ever authenticate one of them.
    #[error("the same token is already configured (entry {first}); tokens must be unique")]
    Duplicate {
        /// The index of the earlier entry.
        first: usize,
    },
}

/// Checks one token against the rules and against the tokens configured before it.
pub fn check_token(
    token: &str,
    principal: &Principal,
    earlier: &[(String, Principal)],
) -> Result<(), TokenError> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenError::TooShort);
    }
    if principal.tenant.is_empty() {
        return Err(TokenError::EmptyTenant);
    }
    if principal.subject.is_empty() {
        return Err(TokenError::EmptySubject);
    }
    if let Some(first) = earlier.iter().position(|(t, _)| t == token) {
        return Err(TokenError::Duplicate { first });
    }
    Ok(())
}

/// The principal of unauthenticated requests to a loopback-only server.
pub fn local_principal() -> Principal {
    Principal::new("local", "anonymous")
}

/// A SHA-256 digest of a bearer token: tokens are compared by digest, so the comparison
/// takes the same time whatever the presented token's length.
type TokenDigest = [u8; 32];

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// What every route reads, shared behind one reference count: axum clones the state for
/// each request, and one atomic is cheaper than one per field.
type AppState = Arc<Shared>;

struct Shared {
    server: Arc<McpServer>,
    config: HttpConfig,
    tokens: Arc<[(TokenDigest, Principal)]>,
    metrics_token: Option<TokenDigest>,
}

/// The routes: `POST /mcp` (a `GET` is 405, a `DELETE` ends a 2025-11-25 session),
/// `GET /healthz`, `GET /readyz`, `GET /metrics`, every one behind the Host/Origin check.
///
/// Matched by hand rather than by a routing framework: an MCP request is small enough that a
/// router's layers of boxed futures and response mapping were a measurable share of it. It
/// is a `tower::Service` for tests that drive it without sockets; the server calls
/// [`App::handle`] directly.
#[derive(Clone)]
pub struct App(AppState);

impl App {
    /// Answers one request.
    pub async fn handle(&self, request: Request) -> Response {
        let state = &self.0;
        // The DNS-rebinding defence, before any route: a page on another origin that
        // resolves its own name to this server must not reach it through a victim's browser.
        if let Err(why) = check_host(request.headers(), &state.config.allowed_hosts) {
            return rpc_error(StatusCode::FORBIDDEN, codes::INVALID_REQUEST, why);
        }
        let read_only = matches!(*request.method(), Method::GET | Method::HEAD);
        match request.uri().path() {
            "/mcp" => match *request.method() {
                Method::POST => post_mcp(state, request).await,
                Method::DELETE => delete_session(state, request.headers()).await,
                Method::GET => not_allowed(
                    "no GET stream here: server messages arrive on the stream of the POST they \
                     belong to",
                ),
                _ => not_allowed("/mcp takes POST, and DELETE to end a 2025-11-25 session"),
            },
            "/healthz" if read_only => (StatusCode::OK, "ok").into_response(),
            "/readyz" if read_only => ready(state).await,
            "/metrics" if read_only => metrics(state, request.headers()),
            "/healthz" | "/readyz" | "/metrics" => {
                let mut r = StatusCode::METHOD_NOT_ALLOWED.into_response();
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                r
            }
            _ => StatusCode::NOT_FOUND.into_response(),
        }
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

/// The routes over `server`.
pub fn router(server: Arc<McpServer>, config: HttpConfig) -> App {
    App(Arc::new(Shared {
        server,
        tokens: config
            .tokens
            .iter()
            .map(|(t, p)| (digest(t), p.clone()))
            .collect(),
        metrics_token: config.metrics_token.as_deref().map(digest),
        config,
    }))
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
async fn delete_session(state: &Shared, headers: &HeaderMap) -> Response {
    let Some(principal) = authenticate(headers, &state.tokens) else {
        return unauthorized("a valid bearer token is required");
    };
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

fn metrics(state: &Shared, headers: &HeaderMap) -> Response {
    if let Some(expected) = &state.metrics_token {
        let presented = bearer_token(headers).map(digest);
        if !presented.is_some_and(|p| digests_equal(&p, expected)) {
            return unauthorized("a valid bearer token is required (metrics.token)");
        }
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.server.metrics_text(),
    )
        .into_response()
}

/// Ready when the store commits a probe write within [`READY_PROBE_TIMEOUT`]: a read alone
/// stays green while the writer is stuck or the disk refuses writes.
async fn ready(state: &Shared) -> Response {
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

fn host_of(value: &str) -> &str {
    // "[::1]:3001" -> "[::1]", "localhost:3001" -> "localhost"
    if value.starts_with('[') {
        return value.split_inclusive(']').next().unwrap_or(value);
    }
    value.split(':').next().unwrap_or(value)
}

fn check_host(headers: &HeaderMap, allowed: &[String]) -> Result<(), &'static str> {
    if allowed.is_empty() {
        return Ok(());
    }
    let ok = |h: &str| allowed.iter().any(|a| a.eq_ignore_ascii_case(h));
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().map_err(|_| "unreadable Host header")?;
        if !ok(host_of(host)) {
            return Err("the Host header names a host this server does not serve");
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| "unreadable Origin header")?;
        let after_scheme = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if !ok(host_of(after_scheme)) {
            return Err("the Origin is not allowed");
        }
    }
    Ok(())
}

/// The credentials of an `Authorization: Bearer …` header. The scheme is
/// case-insensitive and may be followed by several spaces (RFC 9110 §11.1, §11.4).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim_start_matches(' ');
    (!token.is_empty()).then_some(token)
}

/// Compares two digests without an early exit.
fn digests_equal(a: &TokenDigest, b: &TokenDigest) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}

/// The principal of the presented bearer token. Every configured token is compared (by
/// digest, in constant time), whether or not an earlier one matched, so the timing tells
/// neither which entry matched nor how long the tokens are. Configured tokens are unique
/// (checked where they are configured), so at most one matches.
fn authenticate(headers: &HeaderMap, tokens: &[(TokenDigest, Principal)]) -> Option<Principal> {
    if tokens.is_empty() {
        return Some(local_principal());
    }
    let presented = digest(bearer_token(headers)?);
    let mut found = None;
    for (configured, principal) in tokens {
        let matched = digests_equal(configured, &presented);
        found = if matched { Some(principal) } else { found };
    }
    found.cloned()
}

fn unauthorized(message: &str) -> Response {
    let mut r = rpc_error(StatusCode::UNAUTHORIZED, codes::INVALID_REQUEST, message);
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
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

async fn post_mcp(state: &Shared, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    let Some(principal) = authenticate(&headers, &state.tokens) else {
        return unauthorized("a valid bearer token is required");
    };
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
    };
    match state.server.handle(&routing, &principal, &bytes).await {
        Reply::Json { status, body } => {
            json_response(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
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

/// A JSON body for tests and tools: `{"jsonrpc":"2.0", ...}` with `_meta` filled in.
pub fn request_body(id: i64, method: &str, mut params: Value, capabilities: Value) -> Body {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": protocol::PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "snodo", "version": env!("CARGO_PKG_VERSION")},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    Body::from(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string())
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
