//! The wire through the router, without sockets: every error code and shape of the digest's
//! error table, hostile input, authentication, and the task flow end to end with real
//! guests on a real store.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use snodo::http::{HttpConfig, router};
use snodo::model::Principal;
use snodo::wasm::Component;
use tokio::sync::OnceCell;
use tower::ServiceExt;

static FIXTURES: OnceCell<Arc<Component>> = OnceCell::const_new();

mod common;

const TASKS: &str = "io.modelcontextprotocol/tasks";

async fn app(tokens: Vec<(String, Principal)>) -> axum::Router {
    let fixtures = FIXTURES
        .get_or_init(|| async { common::load_guests(32, 32 << 20).await.fixtures })
        .await
        .clone();
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

fn caps(tasks: bool) -> Value {
    if tasks {
        json!({"elicitation": {}, "extensions": {TASKS: {}}})
    } else {
        json!({"elicitation": {}})
    }
}

fn meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A POST with the routing headers derived from the body.
fn post(body: &Value) -> axum::http::request::Builder {
    let method = body["method"].as_str().unwrap_or_default();
    let mut b = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("host", "localhost:3001")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    let name = body["params"]["name"]
        .as_str()
        .or_else(|| body["params"]["taskId"].as_str());
    if let Some(n) = name {
        b = b.header("mcp-name", n);
    }
    b
}

fn rpc(id: i64, method: &str, mut params: Value, caps: Value) -> Value {
    params["_meta"] = meta(caps);
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

async fn send(app: &axum::Router, req: Request<Body>) -> (StatusCode, Value, String) {
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

async fn call(app: &axum::Router, body: Value) -> (StatusCode, Value) {
    let req = post(&body)
        .body(Body::from(body.to_string()))
        .expect("request");
    let (s, b, _) = send(app, req).await;
    (s, b)
}

fn code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn malformed_envelopes() {
    let app = app(vec![]).await;
    for (body, status, expect) in [
        ("{", 400, -32700),
        ("[]", 400, -32600),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            400,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
            400,
            -32700,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}"#,
            400,
            -32602,
        ),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
            400,
            -32600,
        ),
    ] {
        let req = Request::post("/mcp")
            .header("content-type", "application/json")
            .header("mcp-method", "tools/list")
            .body(Body::from(body))
            .expect("request");
        let (s, v, _) = send(&app, req).await;
        assert_eq!((s.as_u16(), code(&v)), (status, expect), "{body}: {v}");
        assert_eq!(v["jsonrpc"], "2.0");
    }
    // Non-UTF-8 body.
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .body(Body::from(vec![0xff, 0xfe, 0x00]))
        .expect("request");
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32700));
    // Too large: 413, before anything is parsed.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"x":"{}"}}}}"#,
        "a".repeat(70_000)
    );
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("mcp-method", "tools/list")
        .body(Body::from(big))
        .expect("request");
    let (s, v, _) = send(&app, req).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&v), -32600);
    // Wrong content type.
    let req = Request::post("/mcp")
        .header("content-type", "text/plain")
        .body(Body::from("{}"))
        .expect("request");
    assert_eq!(send(&app, req).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // No content type: refused the same way (every real client sends it).
    let req = Request::post("/mcp")
        .header("mcp-method", "tools/list")
        .body(Body::from(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        ))
        .expect("request");
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s, code(&v)), (StatusCode::UNSUPPORTED_MEDIA_TYPE, -32600));
    // Notifications are accepted without a body.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}});
    let req = post(&note)
        .body(Body::from(note.to_string()))
        .expect("request");
    assert_eq!(send(&app, req).await.0, StatusCode::ACCEPTED);
    // GET and DELETE are not part of the stateless transport.
    for m in ["GET", "DELETE"] {
        let req = Request::builder()
            .method(m)
            .uri("/mcp")
            .body(Body::empty())
            .expect("request");
        let resp = app.clone().oneshot(req).await.expect("response");
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(
            resp.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some("POST")
        );
    }
}

#[tokio::test]
async fn routing_headers_and_meta() {
    let app = app(vec![]).await;
    let body = rpc(
        1,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "x"}}),
        caps(false),
    );
    // Missing Mcp-Method.
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("mcp-name", "greet")
        .body(Body::from(body.to_string()))
        .expect("r");
    let (s, v, _) = send(&app, req).await;
    assert_eq!(
        (s.as_u16(), code(&v), v["id"].clone()),
        (400, -32020, json!(1))
    );
    // Mismatched method.
    let req = post(&body)
        .header("mcp-method", "tasks/get")
        .body(Body::from(body.to_string()))
        .expect("r");
    let req = {
        let (mut parts, b) = req.into_parts();
        parts
            .headers
            .insert("mcp-method", "tasks/get".parse().expect("value"));
        Request::from_parts(parts, b)
    };
    assert_eq!(code(&send(&app, req).await.1), -32020);
    // Mcp-Name mismatch, missing, base64 form, unreadable bytes.
    let with_name = |name: &[u8]| {
        Request::post("/mcp")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header(
                "mcp-name",
                axum::http::HeaderValue::from_bytes(name).expect("value"),
            )
            .body(Body::from(body.to_string()))
            .expect("r")
    };
    assert_eq!(code(&send(&app, with_name(b"other")).await.1), -32020);
    let (s, v, _) = send(&app, with_name(b"=?base64?Z3JlZXQ=?=")).await;
    assert_eq!(
        (s, v["result"]["content"][0]["text"].clone()),
        (StatusCode::OK, json!("Hello, x!"))
    );
    assert_eq!(code(&send(&app, with_name(b"gr\xffeet")).await.1), -32020);
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .body(Body::from(body.to_string()))
        .expect("r");
    assert_eq!(code(&send(&app, req).await.1), -32020);
    // A missing MCP-Protocol-Version is a header failure too (400, -32020).
    let mut req = post(&body).body(Body::from(body.to_string())).expect("r");
    req.headers_mut().remove("mcp-protocol-version");
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32020), "{v}");
    // _meta rules.
    let mut no_meta = body.clone();
    no_meta["params"]
        .as_object_mut()
        .expect("params")
        .remove("_meta");
    let (s, v) = call(&app, no_meta).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32602));
    let mut old = body.clone();
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let req = post(&old)
        .header("mcp-protocol-version", "2025-11-25")
        .body(Body::from(old.to_string()))
        .expect("r");
    let req = {
        let (mut parts, b) = req.into_parts();
        parts
            .headers
            .insert("mcp-protocol-version", "2025-11-25".parse().expect("value"));
        Request::from_parts(parts, b)
    };
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32022));
    assert_eq!(
        v["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
    );
    // Header and body versions disagree: a header mismatch whatever the versions.
    let (s, v) = call(&app, old).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32020));
}

#[tokio::test]
async fn methods_and_tools_errors() {
    let app = app(vec![]).await;
    for m in [
        "tasks/list",
        "tasks/result",
        "initialize",
        "ping",
        "no/such",
    ] {
        let (s, v) = call(&app, rpc(9, m, json!({"taskId": "x"}), caps(true))).await;
        assert_eq!(
            (s.as_u16(), code(&v), v["id"].clone()),
            (404, -32601, json!(9)),
            "{m}"
        );
    }
    let (s, v) = call(&app, rpc(1, "server/discover", json!({}), caps(false))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["result"]["capabilities"]["extensions"][TASKS], json!({}));
    assert!(
        v["result"]["capabilities"].get("tasks").is_none(),
        "no legacy capability"
    );
    assert_eq!(v["result"]["resultType"], "complete");
    let (_, v) = call(&app, rpc(2, "tools/list", json!({}), caps(false))).await;
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"greet") && names.contains(&"slow_compute"));
    assert!(
        v["result"]["tools"][0].get("execution").is_none(),
        "no task policy on the wire"
    );
    // Unknown tool, bad arguments.
    let (s, v) = call(
        &app,
        rpc(3, "tools/call", json!({"name": "nope"}), caps(false)),
    )
    .await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32602));
    let (_, v) = call(
        &app,
        rpc(
            3,
            "tools/call",
            json!({"name": "greet", "arguments": [1]}),
            caps(false),
        ),
    )
    .await;
    assert_eq!(code(&v), -32602);
    // A required tool without the declaration: -32021 before the guest runs.
    let (s, v) = call(
        &app,
        rpc(
            4,
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
            caps(false),
        ),
    )
    .await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32021));
    assert_eq!(
        v["error"]["data"],
        json!({"requiredCapabilities": {"extensions": {TASKS: {}}}})
    );
    // A tool needing sampling.
    let (s, v) = call(
        &app,
        rpc(
            5,
            "tools/call",
            json!({"name": "test_missing_capability"}),
            caps(true),
        ),
    )
    .await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32021));
    assert_eq!(
        v["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    // Optional tool without the declaration runs synchronously; the legacy hint is ignored.
    let (_, v) = call(
        &app,
        rpc(
            6,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "h"}, "task": {"ttl": 1}}),
            caps(true),
        ),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete");
    // tasks/* need the declaration, before any lookup.
    for m in ["tasks/get", "tasks/cancel"] {
        let (s, v) = call(&app, rpc(7, m, json!({"taskId": "gate-test"}), caps(false))).await;
        assert_eq!((s.as_u16(), code(&v)), (400, -32021), "{m}");
    }
    let (_, v) = call(
        &app,
        rpc(
            8,
            "tasks/get",
            json!({"taskId": "tasks-conformance-nonexistent-12345"}),
            caps(true),
        ),
    )
    .await;
    assert_eq!(code(&v), -32602);
    let (_, v) = call(
        &app,
        rpc(8, "tasks/update", json!({"taskId": "x"}), caps(true)),
    )
    .await;
    assert_eq!(code(&v), -32602, "inputResponses is required");
    // DNS rebinding.
    let body = rpc(10, "tools/list", json!({}), caps(false));
    for (h, v) in [
        ("host", "evil.example:3001"),
        ("origin", "http://evil.example"),
    ] {
        let req = post(&body)
            .header(h, v)
            .body(Body::from(body.to_string()))
            .expect("r");
        let req = {
            let (mut parts, b) = req.into_parts();
            parts.headers.insert(h, v.parse().expect("value"));
            Request::from_parts(parts, b)
        };
        assert_eq!(send(&app, req).await.0, StatusCode::FORBIDDEN, "{h}");
    }
}

/// Polls tasks/get until `pred` holds (each poll is a request, not a sleep).
async fn await_task(app: &axum::Router, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (_, v) = call(
                app,
                rpc(100, "tasks/get", json!({"taskId": id}), caps(true)),
            )
            .await;
            if pred(&v["result"]) {
                return v["result"].clone();
            }
            common::tick().await;
        }
    })
    .await
    .expect("the task reached the state")
}

#[tokio::test]
async fn task_flow_with_input_cancel_and_tenants() {
    let alice = (
        "alice-token-0123456789".to_owned(),
        Principal::new("acme", "alice"),
    );
    let bob = (
        "bob-token-0123456789ab".to_owned(),
        Principal::new("globex", "bob"),
    );
    let app = app(vec![alice.clone(), bob.clone()]).await;
    let with_token = |body: &Value, token: Option<&str>| {
        let mut b = post(body);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        b.body(Body::from(body.to_string())).expect("request")
    };
    let create = rpc(
        1,
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}}),
        caps(true),
    );
    // Authentication comes first.
    let resp = app
        .clone()
        .oneshot(with_token(&create, None))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().contains_key("www-authenticate"));
    assert_eq!(
        send(&app, with_token(&create, Some("wrong-token-0123456789")))
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );

    let (s, v, _) = send(&app, with_token(&create, Some(&alice.0))).await;
    assert_eq!(s, StatusCode::OK);
    let r = &v["result"];
    assert_eq!(r["resultType"], "task");
    assert_eq!(r["status"], "working");
    assert!(
        r.get("task").is_none() && r.get("result").is_none() && r.get("requestState").is_none()
    );
    assert!(
        r["createdAt"]
            .as_str()
            .is_some_and(|t| t.len() >= 20 && t.ends_with('Z'))
    );
    assert_eq!(r["ttlMs"], 600_000);
    let id = r["taskId"].as_str().expect("id").to_owned();

    // Another tenant sees nothing.
    let get = rpc(2, "tasks/get", json!({"taskId": id}), caps(true));
    let (_, v, _) = send(&app, with_token(&get, Some(&bob.0))).await;
    assert_eq!(code(&v), -32602);
    let cancel = rpc(3, "tasks/cancel", json!({"taskId": id}), caps(true));
    let (_, v, _) = send(&app, with_token(&cancel, Some(&bob.0))).await;
    assert_eq!(code(&v), -32602);

    // Parks in input_required with the question inlined.
    let parked = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (_, v, _) = send(&app, with_token(&get, Some(&alice.0))).await;
            if v["result"]["status"] == "input_required" {
                return v["result"].clone();
            }
            common::tick().await;
        }
    })
    .await
    .expect("parked");
    assert_eq!(parked["resultType"], "complete");
    assert_eq!(
        parked["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    assert!(parked.get("requestState").is_none());

    // Unknown keys are ignored and acknowledged; the right key resumes it.
    let update = |responses: Value| {
        rpc(
            4,
            "tasks/update",
            json!({"taskId": id, "inputResponses": responses}),
            caps(true),
        )
    };
    let (_, v, _) = send(
        &app,
        with_token(
            &update(json!({"unknown-key": {"ignored": true}})),
            Some(&alice.0),
        ),
    )
    .await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let (_, v, _) = send(
        &app,
        with_token(
            &update(json!({"confirm": {"action": "accept", "content": {"confirm": true}}})),
            Some(&alice.0),
        ),
    )
    .await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (_, v, _) = send(&app, with_token(&get, Some(&alice.0))).await;
            if v["result"]["status"] == "completed" {
                return v["result"].clone();
            }
            common::tick().await;
        }
    })
    .await
    .expect("completed");
    assert_eq!(done["result"]["content"][0]["text"], "Deleted a.txt");
    assert!(done.get("inputRequests").is_none() && done.get("error").is_none());
    // Cancelling a finished task: the same ack, nothing changes.
    let (_, v, _) = send(&app, with_token(&cancel, Some(&alice.0))).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let (_, v, _) = send(&app, with_token(&get, Some(&alice.0))).await;
    assert_eq!(v["result"]["status"], "completed");
}

#[tokio::test]
async fn failures_cancellation_and_mrtr() {
    let app = app(vec![]).await;
    // A protocol error fails the task; a tool error completes it with isError.
    let (_, v) = call(
        &app,
        rpc(
            1,
            "tools/call",
            json!({"name": "protocol_error_job"}),
            caps(true),
        ),
    )
    .await;
    let id = v["result"]["taskId"].as_str().expect("id").to_owned();
    let t = await_task(&app, &id, |t| t["status"] == "failed").await;
    assert_eq!(t["error"]["code"], -32603);
    assert!(t.get("result").is_none());
    // Cancellation of a long task settles it.
    let (_, v) = call(
        &app,
        rpc(
            2,
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
            caps(true),
        ),
    )
    .await;
    let id = v["result"]["taskId"].as_str().expect("id").to_owned();
    let (_, v) = call(
        &app,
        rpc(3, "tasks/cancel", json!({"taskId": id}), caps(true)),
    )
    .await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let t = await_task(&app, &id, |t| t["status"] == "cancelled").await;
    assert_eq!(t["statusMessage"], "Cancelled by the client");

    // MRTR before the task: input_required, then a task; a tampered state is refused.
    let first = rpc(
        4,
        "tools/call",
        json!({"name": "test_tool_with_task"}),
        caps(true),
    );
    let (_, v) = call(&app, first).await;
    assert_eq!(v["result"]["resultType"], "input_required");
    assert!(v["result"].get("taskId").is_none());
    let state = v["result"]["requestState"]
        .as_str()
        .expect("state")
        .to_owned();
    let answer = json!({"user_name": {"action": "accept", "content": {"name": "Alice"}}});
    let mut tampered = state.clone().into_bytes();
    tampered[2] ^= 1;
    let bad = rpc(
        5,
        "tools/call",
        json!({"name": "test_tool_with_task", "inputResponses": answer, "requestState": String::from_utf8_lossy(&tampered)}),
        caps(true),
    );
    assert_eq!(code(&call(&app, bad).await.1), -32602);
    let not_object = rpc(
        5,
        "tools/call",
        json!({"name": "test_tool_with_task", "inputResponses": {"user_name": 3}}),
        caps(true),
    );
    assert_eq!(code(&call(&app, not_object).await.1), -32602);
    let second = rpc(
        6,
        "tools/call",
        json!({"name": "test_tool_with_task", "inputResponses": answer, "requestState": state}),
        caps(true),
    );
    let (_, v) = call(&app, second).await;
    assert_eq!(v["result"]["resultType"], "task");
    assert!(
        v["result"].get("requestState").is_none() && v["result"].get("inputRequests").is_none()
    );
    let id = v["result"]["taskId"].as_str().expect("id").to_owned();
    let t = await_task(&app, &id, |t| t["status"] == "completed").await;
    assert_eq!(t["result"]["content"][0]["text"], "Hello, Alice! (async)");
}

#[tokio::test]
async fn progress_streams_over_sse() {
    let app = app(vec![]).await;
    let mut body = rpc(
        1,
        "tools/call",
        json!({"name": "test_tool_with_progress"}),
        caps(false),
    );
    body["params"]["_meta"]["progressToken"] = json!("p1");
    let req = post(&body)
        .body(Body::from(body.to_string()))
        .expect("request");
    let (s, v, ctype) = send(&app, req).await;
    assert_eq!(s, StatusCode::OK);
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let text = v.as_str().expect("sse text").to_owned();
    let frames: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let progress: Vec<f64> = frames
        .iter()
        .filter(|f| f["method"] == "notifications/progress")
        .filter_map(|f| f["params"]["progress"].as_f64())
        .collect();
    assert_eq!(progress, vec![0.0, 50.0, 100.0]);
    assert!(
        frames
            .iter()
            .all(|f| f["params"]["progressToken"] == "p1" || f.get("id").is_some())
    );
    let last = frames.last().expect("frames");
    assert_eq!(last["id"], 1);
    assert_eq!(last["result"]["resultType"], "complete");
}

#[tokio::test]
async fn subscriptions_deliver_task_notifications() {
    let app = app(vec![]).await;
    let (_, v) = call(
        &app,
        rpc(
            1,
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1}}),
            caps(true),
        ),
    )
    .await;
    let id = v["result"]["taskId"].as_str().expect("id").to_owned();
    // Without the tasks declaration, asking for task notifications is -32021.
    let (_, v) = call(
        &app,
        rpc(
            2,
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [id]}}),
            caps(false),
        ),
    )
    .await;
    assert_eq!(code(&v), -32021);

    let listen = rpc(
        3,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [id, "0123456789abcdef0123456789abcdef", "not-an-id"]}}),
        caps(true),
    );
    let req = post(&listen)
        .body(Body::from(listen.to_string()))
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("response");
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .starts_with("text/event-stream")
    );
    let mut body = resp.into_body();
    let mut frames: Vec<Value> = Vec::new();
    let mut pending = String::new();
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("frame");
            if let Some(data) = frame.data_ref() {
                pending.push_str(&String::from_utf8_lossy(data));
                while let Some(end) = pending.find("\n\n") {
                    let event: String = pending.drain(..end + 2).collect();
                    for line in event.lines() {
                        if let Some(d) = line.strip_prefix("data:")
                            && let Ok(v) = serde_json::from_str::<Value>(d.trim())
                        {
                            frames.push(v);
                        }
                    }
                }
            }
            if frames.iter().any(|f| f["params"]["status"] == "completed") {
                return;
            }
        }
    })
    .await;
    assert!(done.is_ok(), "a completed notification arrived: {frames:?}");
    assert_eq!(
        frames[0]["method"],
        "notifications/subscriptions/acknowledged"
    );
    assert_eq!(
        frames[0]["params"]["notifications"]["taskIds"],
        json!([id]),
        "unknown ids are dropped"
    );
    let last = frames.last().expect("frames");
    assert_eq!(last["method"], "notifications/tasks");
    assert_eq!(last["params"]["taskId"], json!(id));
    assert_eq!(last["params"]["result"]["content"][0]["type"], "text");
    assert_eq!(
        last["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        3
    );
    assert!(
        frames
            .iter()
            .skip(1)
            .all(|f| f["method"] == "notifications/tasks")
    );
}

#[tokio::test]
async fn metrics_and_health() {
    let app = app(vec![]).await;
    let (_, v) = call(
        &app,
        rpc(1, "tools/call", json!({"name": "failing_job"}), caps(true)),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "task");
    let (_, _) = call(
        &app,
        rpc(2, "tools/call", json!({"name": "greet"}), caps(false)),
    )
    .await;
    let req = Request::get("/metrics")
        .body(Body::empty())
        .expect("request");
    let (s, body, ctype) = send(&app, req).await;
    assert_eq!(s, StatusCode::OK);
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let text = body.as_str().expect("text").to_owned();
    assert!(text.contains("snodo_tasks_created_total 1"), "{text}");
    assert!(text.contains("snodo_sync_calls_total 1"), "{text}");
    assert!(text.contains("# TYPE snodo_store_operation_seconds histogram"));
    for path in ["/healthz", "/readyz"] {
        let req = Request::get(path).body(Body::empty()).expect("request");
        assert_eq!(send(&app, req).await.0, StatusCode::OK, "{path}");
    }
}
