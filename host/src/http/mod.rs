//! Streamable HTTP with axum: `POST /mcp` and the rules that belong to the transport:
//! Host/Origin checks against DNS rebinding, bearer authentication, the body limit, the
//! routing headers, SSE responses, 405 for GET/DELETE, and health endpoints.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures_util::stream;
use serde_json::{Value, json};

use crate::mcp::{McpServer, Reply, RoutingHeaders};
use crate::model::Principal;
use crate::protocol::{self, RpcError, codes, decode_header_value};

/// Transport settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The largest accepted request body.
    pub max_body_bytes: usize,
    /// Bearer tokens and who they authenticate; empty means no authentication (then the
    /// server must only listen on loopback).
    pub tokens: Vec<(String, Principal)>,
    /// Host names (without port) a request's `Host` and `Origin` may name; empty accepts
    /// any (for servers behind a proxy that checks them).
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 << 20,
            tokens: Vec::new(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()],
        }
    }
}

/// The principal of unauthenticated requests to a loopback-only server.
pub fn local_principal() -> Principal {
    Principal::new("local", "anonymous")
}

#[derive(Clone)]
struct AppState {
    server: Arc<McpServer>,
    config: Arc<HttpConfig>,
}

/// The router: `POST /mcp`, `GET /healthz`, `GET /readyz`.
pub fn router(server: Arc<McpServer>, config: HttpConfig) -> Router {
    let state = AppState {
        server,
        config: Arc::new(config),
    };
    Router::new()
        .route("/mcp", post(post_mcp).get(not_allowed).delete(not_allowed))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves, with TCP_NODELAY on every
/// connection (SSE replies otherwise stall on Nagle + delayed ACK).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}

fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = protocol::error_response(&Value::Null, &RpcError::new(code, message));
    (status, axum::Json(body)).into_response()
}

async fn not_allowed() -> Response {
    let mut r = rpc_error(
        StatusCode::METHOD_NOT_ALLOWED,
        codes::INVALID_REQUEST,
        "this endpoint accepts POST only (no sessions, no GET stream)",
    );
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    r
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.server.metrics_text(),
    )
        .into_response()
}

async fn ready(State(state): State<AppState>) -> Response {
    match state.server.store_ready().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unavailable: {e}"),
        )
            .into_response(),
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

fn authenticate(headers: &HeaderMap, tokens: &[(String, Principal)]) -> Option<Principal> {
    if tokens.is_empty() {
        return Some(local_principal());
    }
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value.strip_prefix("Bearer ")?;
    // Compare every configured token in constant time for its length.
    tokens
        .iter()
        .find(|(t, _)| {
            t.len() == token.len()
                && t.bytes()
                    .zip(token.bytes())
                    .fold(0u8, |a, (x, y)| a | (x ^ y))
                    == 0
        })
        .map(|(_, p)| p.clone())
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

async fn post_mcp(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    if let Err(why) = check_host(&headers, &state.config.allowed_hosts) {
        return rpc_error(StatusCode::FORBIDDEN, codes::INVALID_REQUEST, why);
    }
    let Some(principal) = authenticate(&headers, &state.config.tokens) else {
        let mut r = rpc_error(
            StatusCode::UNAUTHORIZED,
            codes::INVALID_REQUEST,
            "a valid bearer token is required",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    };
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let json_type = ct
            .to_str()
            .ok()
            .and_then(|c| c.split(';').next())
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
        if !json_type {
            return rpc_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                codes::INVALID_REQUEST,
                "the body must be application/json",
            );
        }
    }
    let bytes = match axum::body::to_bytes(body, state.config.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
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
    };
    match state.server.handle(&routing, &principal, &bytes).await {
        Reply::Json { status, body } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            (status, axum::Json(body)).into_response()
        }
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
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

/// A JSON body for tests and tools: `{"jsonrpc":"2.0", ...}` with `_meta` filled in.
pub fn request_body(id: i64, method: &str, mut params: Value, capabilities: Value) -> Body {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": protocol::PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "snodo", "version": env!("CARGO_PKG_VERSION")},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    Body::from(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string())
}
