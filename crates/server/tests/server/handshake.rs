//! Clients of 2025-11-25 on the same endpoint: the `initialize` handshake, sessions that
//! live in their ids, the methods that revision has and 2026-07-28 removed, and tools
//! called without tasks (its tasks are in `legacy_tasks`).

use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use snodo_core::model::Principal;

use super::{app, ask, code, post_with, rpc, send};

/// A POST as a 2025-11-25 client sends it: no `_meta` version, no routing headers.
fn post_25(body: &Value, session: Option<&str>) -> Request<Body> {
    let mut b = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("host", "localhost:3001");
    if body["method"] != "initialize" {
        b = b.header("mcp-protocol-version", "2025-11-25");
    }
    if let Some(s) = session {
        b = b.header("mcp-session-id", s);
    }
    b.body(Body::from(body.to_string())).expect("request")
}

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

async fn initialize(app: &snodo_server::http::App, version: &str) -> (Value, String) {
    let body = request(
        1,
        "initialize",
        json!({"protocolVersion": version, "capabilities": {"elicitation": {}},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    let resp = tower::ServiceExt::oneshot(app.clone(), post_25(&body, None))
        .await
        .expect("response");
    assert_eq!(resp.status(), 200);
    let session = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (serde_json::from_slice(&bytes).expect("json"), session)
}

#[tokio::test]
async fn the_handshake_opens_a_session_that_serves_tools() {
    let app = app(vec![]).await;
    let (init, session) = initialize(&app, "2025-11-25").await;
    let r = &init["result"];
    assert_eq!(r["protocolVersion"], "2025-11-25");
    assert_eq!(r["capabilities"]["tools"], json!({"listChanged": false}));
    assert!(r["capabilities"]["logging"].is_object());
    assert!(r.get("resultType").is_none());
    // An older revision is served as asked; an unknown one is answered with the newest.
    assert_eq!(
        initialize(&app, "2025-06-18").await.0["result"]["protocolVersion"],
        "2025-06-18"
    );
    assert_eq!(
        initialize(&app, "2024-01-01").await.0["result"]["protocolVersion"],
        "2025-11-25"
    );

    let s = Some(session.as_str());
    // A client from before the version header (2025-03-26) sends none: still this revision.
    let mut bare = post_25(&request(9, "tools/list", json!({})), s);
    bare.headers_mut().remove("mcp-protocol-version");
    let (st, v, _) = send(&app, bare).await;
    assert_eq!(st, 200);
    assert!(v["result"]["tools"].is_array(), "{v}");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(send(&app, post_25(&note, s)).await.0, 202);
    let (st, v, _) = send(&app, post_25(&request(2, "ping", json!({})), s)).await;
    assert_eq!((st.as_u16(), &v["result"]), (200, &json!({})));
    let (_, v, _) = send(&app, post_25(&request(3, "tools/list", json!({})), s)).await;
    let tools = v["result"]["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["name"] == "greet"));
    assert!(v["result"].get("resultType").is_none() && v["result"].get("ttlMs").is_none());
    let greet = request(
        4,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "Ada"}}),
    );
    let (st, v, ctype) = send(&app, post_25(&greet, s)).await;
    assert_eq!(st, 200);
    // Every call may carry notifications or questions: it answers on an event stream.
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    assert!(v.as_str().is_some_and(|t| t.contains("Hello, Ada!")), "{v}");

    // Errors are JSON-RPC errors in a 200 response on this revision.
    let (st, v, _) = send(
        &app,
        post_25(&request(5, "logging/setLevel", json!({"level": "loud"})), s),
    )
    .await;
    assert_eq!((st.as_u16(), code(&v)), (200, -32602));
    // 2025-11-25 has its own tasks/get (an unknown id is not found), but not 2026-07-28's
    // tasks/update.
    let (st, v, _) = send(
        &app,
        post_25(&request(6, "tasks/get", json!({"taskId": "x"})), s),
    )
    .await;
    assert_eq!((st.as_u16(), code(&v), &v["id"]), (200, -32602, &json!(6)));
    let update = json!({"taskId": "x", "inputResponses": {}});
    let (st, v, _) = send(&app, post_25(&request(6, "tasks/update", update), s)).await;
    assert_eq!((st.as_u16(), code(&v), &v["id"]), (200, -32601, &json!(6)));
    let task = request(
        7,
        "tools/call",
        json!({"name": "test_tool_with_task", "arguments": {}}),
    );
    let (st, v, _) = send(&app, post_25(&task, s)).await;
    assert_eq!(st, 200);
    let v: Value = v
        .as_str()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("data:")))
        .map(|d| serde_json::from_str(d.trim()).expect("json"))
        .unwrap_or(v);
    // A task-only tool called without params.task: -32601, as 2025-11-25 requires.
    assert_eq!(code(&v), -32601, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    for part in [
        "tool \"test_tool_with_task\" runs only as a durable task",
        "params.task",
        "mode = \"optional\" under [tools.test_tool_with_task]",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
}

/// The JSON-RPC message of a reply that may be an event stream (its first `data:` line).
fn message_of(v: Value) -> Value {
    v.as_str()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("data:")))
        .map(|d| serde_json::from_str(d.trim()).expect("json"))
        .unwrap_or(v)
}

/// A completed task's inlined result is the `tools/call` result of its revision: on
/// 2026-07-28 `tasks/get` marks it `"resultType": "complete"` (the official Tasks client
/// parses it with that revision's `CallToolResult` schema, which requires the field); the
/// same tool's result on 2025-11-25 has no such field, and the stored result has neither.
#[tokio::test]
async fn a_tasks_result_is_marked_complete_on_2026_07_28_and_not_on_2025_11_25() {
    let app = app(vec![]).await;
    let slow = json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "r"}});
    let (_, v) = ask(&app, 1, "tools/call", slow.clone(), super::caps(true)).await;
    let id = super::task_id(&v);
    let get = rpc(2, "tasks/get", json!({"taskId": id}), super::caps(true));
    let done = crate::common::eventually("the task to complete", || async {
        let (_, v, _) = send(&app, super::request_of(&get)).await;
        (v["result"]["status"] == "completed").then(|| v["result"].clone())
    })
    .await;
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "{done}");
    assert_eq!(result["isError"], false);
    assert_eq!(
        done["resultType"], "complete",
        "the tasks/get result's own mark"
    );

    let (_, session) = initialize(&app, "2025-11-25").await;
    let call = request(3, "tools/call", slow);
    let (st, v, _) = send(&app, post_25(&call, Some(&session))).await;
    assert_eq!(st, 200);
    let legacy = message_of(v)["result"].clone();
    assert!(legacy.get("resultType").is_none(), "{legacy}");
    let mut marked = legacy;
    marked["resultType"] = json!("complete");
    assert_eq!(&marked, result, "the same result but for the mark");
}

/// Two servers over one store, as two nodes (or one node before and after a restart).
async fn two_nodes(
    tokens: Vec<(String, Principal)>,
) -> (snodo_server::http::App, snodo_server::http::App) {
    use crate::common;
    let fixtures = super::fixtures().await;
    let catalog = || common::catalog_of(&[&fixtures], Default::default());
    let (one, store) = common::mcp_server(catalog(), Default::default());
    let (two, _) = common::server_with(&store, std::sync::Arc::new(catalog()), Default::default());
    let config = || snodo_server::http::HttpConfig {
        max_body_bytes: 64 << 10,
        tokens: tokens.clone(),
        ..Default::default()
    };
    (
        snodo_server::http::router(one, config()),
        snodo_server::http::router(std::sync::Arc::new(two), config()),
    )
}

#[tokio::test]
async fn sessions_open_only_for_their_principal_and_until_ended() {
    let ada = Principal::new("acme", "ada");
    let eve = Principal::new("evil", "eve");
    let (app, other_node) =
        two_nodes(vec![("ada-token".into(), ada), ("eve-token".into(), eve)]).await;
    let with_token = |body: &Value, session: &str, token: &str| {
        let mut r = post_25(body, Some(session));
        r.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("value"),
        );
        r
    };
    let init = request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let mut req = post_25(&init, None);
    req.headers_mut()
        .insert("authorization", "Bearer ada-token".parse().expect("value"));
    let resp = tower::ServiceExt::oneshot(app.clone(), req)
        .await
        .expect("response");
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let ping = request(2, "ping", json!({}));
    assert_eq!(
        send(&app, with_token(&ping, &session, "ada-token")).await.0,
        200
    );
    // Another tenant presenting it, or a forged or altered id: unknown, start again.
    let (st, v, _) = send(&app, with_token(&ping, &session, "eve-token")).await;
    assert_eq!((st.as_u16(), &v["id"]), (404, &json!(2)));
    let mut altered = session.clone().into_bytes();
    altered[10] = if altered[10] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).expect("ascii");
    assert_eq!(
        send(&app, with_token(&ping, &altered, "ada-token")).await.0,
        404
    );
    let delete = |id: Option<&str>, token: &str, version: Option<&str>| {
        let mut r = Request::delete("/mcp")
            .header("host", "localhost:3001")
            .header("authorization", format!("Bearer {token}"));
        if let Some(id) = id {
            r = r.header("mcp-session-id", id);
        }
        if let Some(v) = version {
            r = r.header("mcp-protocol-version", v);
        }
        r.body(Body::empty()).expect("request")
    };
    let status = |req| async { send(&app, req).await.0 };
    // A DELETE never ends what the caller was not given: another principal's id and a
    // forged one are unknown sessions (404), and the session still serves its owner.
    assert_eq!(status(delete(Some(&session), "eve-token", None)).await, 404);
    assert_eq!(status(delete(Some(&altered), "ada-token", None)).await, 404);
    assert_eq!(status(with_token(&ping, &session, "ada-token")).await, 200);
    assert_eq!(
        send(&other_node, with_token(&ping, &session, "ada-token"))
            .await
            .0,
        200,
        "the other node serves the session too"
    );
    // Without an id there is nothing to end (400); 2026-07-28 has no sessions (405).
    assert_eq!(status(delete(None, "ada-token", None)).await, 400);
    let resp = tower::ServiceExt::oneshot(
        app.clone(),
        delete(Some(&session), "ada-token", Some("2026-07-28")),
    )
    .await
    .expect("response");
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "POST, DELETE");
    // Ended with DELETE by its owner: refused from then on, and ending it again is 404.
    let ended = delete(Some(&session), "ada-token", Some("2025-11-25"));
    assert_eq!(status(ended).await, 204);
    assert_eq!(status(with_token(&ping, &session, "ada-token")).await, 404);
    assert_eq!(status(delete(Some(&session), "ada-token", None)).await, 404);
    // The end is in the store: a node that did not see the DELETE refuses the id too.
    assert_eq!(
        send(&other_node, with_token(&ping, &session, "ada-token"))
            .await
            .0,
        404,
        "ended for every node sharing the store"
    );
    let again = delete(Some(&session), "ada-token", Some("2025-11-25"));
    assert_eq!(send(&other_node, again).await.0, 404);
}

#[tokio::test]
async fn the_stateless_revision_keeps_its_rules() {
    let app = app(vec![]).await;
    // initialize with 2026-07-28's marks is a removed method there.
    let params = json!({"protocolVersion": "2026-07-28"});
    let (st, v) = ask(&app, 1, "initialize", params, json!({})).await;
    assert_eq!((st.as_u16(), code(&v)), (404, -32601));
    // A 2026-07-28-shaped request naming an old version is -32022, not a handshake.
    let mut old = rpc(2, "tools/list", json!({}), json!({}));
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let req = post_with(&old, "mcp-protocol-version", "2025-11-25");
    let (st, v, _) = send(&app, req).await;
    assert_eq!((st.as_u16(), code(&v)), (400, -32022));
}
