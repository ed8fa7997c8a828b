//! The wire through the router, without sockets: every error code and shape of the digest's
//! error table, hostile input, authentication, and the task flow end to end with real
//! guests on a real store.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use snodo_core::model::Principal;
use snodo_server::http::{HttpConfig, router};
use snodo_wasm::Component;
use tokio::sync::OnceCell;
use tower::ServiceExt;

static FIXTURES: OnceCell<Arc<Component>> = OnceCell::const_new();

mod common;

mod admin;
mod archive;
mod catalog;
mod envelope;
mod handle;
mod handshake;
mod health;
mod legacy_tasks;
mod methods;
mod oauth;
mod schedules;
mod streams;
mod tasks;
mod wasm_guests;
mod webhooks;

pub(crate) const TASKS: &str = "io.modelcontextprotocol/tasks";
/// An operator of tenant `acme`.
pub(crate) const ACME_OPS: &str = "acme-ops-token-0123456789";
/// An operator of every tenant.
pub(crate) const ROOT_OPS: &str = "root-ops-token-0123456789";

/// The operators of the tests: [`ACME_OPS`] and [`ROOT_OPS`], holding scope `admin`.
pub(crate) fn ops_admin() -> snodo_server::admin::AdminConfig {
    snodo_server::admin::AdminConfig {
        tokens: vec![
            (ACME_OPS.into(), Principal::new("acme", "ops"), false),
            (ROOT_OPS.into(), Principal::new("ops", "root"), true),
        ],
        scopes: vec!["admin".into()],
        open_locally: false,
        session_ms: 3_600_000,
        ..Default::default()
    }
}

/// `method path` of the admin API as `token`, with `body` as JSON (a POST without one
/// sends an empty JSON request): the status and the answer.
pub(crate) async fn as_operator(
    app: &snodo_server::http::App,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost:3001")
        .header("authorization", format!("Bearer {token}"));
    let req = match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None if method == "POST" => b
            .header("content-type", "application/json")
            .body(Body::empty()),
        None => b.body(Body::empty()),
    }
    .expect("request");
    let (s, v, _) = send(app, req).await;
    (s, v)
}

/// The fixtures component, loaded once for the whole binary.
pub(crate) async fn fixtures() -> Arc<Component> {
    FIXTURES
        .get_or_init(|| async { common::load_guests(32, 32 << 20).await.fixtures })
        .await
        .clone()
}

pub(crate) async fn app(tokens: Vec<(String, Principal)>) -> snodo_server::http::App {
    let fixtures = fixtures().await;
    let (server, _) = common::mcp_server(
        common::catalog_of(&[&fixtures], Default::default()),
        Default::default(),
    );
    router(
        server,
        HttpConfig {
            max_body_bytes: 64 << 10,
            tokens,
            ..HttpConfig::default()
        },
    )
}

pub(crate) fn caps(tasks: bool) -> Value {
    if tasks {
        json!({"elicitation": {}, "extensions": {TASKS: {}}})
    } else {
        json!({"elicitation": {}})
    }
}

pub(crate) fn meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A POST with the routing headers derived from the body.
pub(crate) fn post(body: &Value) -> axum::http::request::Builder {
    let method = body["method"].as_str().unwrap_or_default();
    let mut b = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("host", "localhost:3001")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    let name = body["params"]["name"]
        .as_str()
        .or_else(|| body["params"]["taskId"].as_str())
        .or_else(|| body["params"]["uri"].as_str());
    if let Some(n) = name {
        b = b.header("mcp-name", n);
    }
    b
}

pub(crate) fn rpc(id: i64, method: &str, mut params: Value, caps: Value) -> Value {
    params["_meta"] = meta(caps);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

pub(crate) async fn send(
    app: &snodo_server::http::App,
    req: Request<Body>,
) -> (StatusCode, Value, String) {
    let resp = app.clone().oneshot(req).await.expect("response");
    let status = resp.status();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, body, ctype)
}

/// The POST of `body` with the routing headers derived from it.
pub(crate) fn request_of(body: &Value) -> Request<Body> {
    post(body)
        .body(Body::from(body.to_string()))
        .expect("request")
}

/// The POST of `body`, but with the one header `name` set to `value` in place of whatever
/// the routing headers derived.
pub(crate) fn post_with(body: &Value, name: &'static str, value: &str) -> Request<Body> {
    let mut req = request_of(body);
    req.headers_mut()
        .insert(name, value.parse().expect("header value"));
    req
}

pub(crate) async fn call(app: &snodo_server::http::App, body: Value) -> (StatusCode, Value) {
    let (s, b, _) = send(app, request_of(&body)).await;
    (s, b)
}

/// Request `id` of `method` with `params`, from a client declaring `caps`.
pub(crate) async fn ask(
    app: &snodo_server::http::App,
    id: i64,
    method: &str,
    params: Value,
    caps: Value,
) -> (StatusCode, Value) {
    call(app, rpc(id, method, params, caps)).await
}

/// The id of the task that a `tools/call` answer `v` made.
pub(crate) fn task_id(v: &Value) -> String {
    v["result"]["taskId"].as_str().expect("task id").to_owned()
}

/// The string `key` of every element of the array `list`.
pub(crate) fn fields<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .expect("an array")
        .iter()
        .filter_map(|x| x[key].as_str())
        .collect()
}

pub(crate) fn code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or(0)
}
