//! A hostile tenant against the edge: every budget holds with real guests on a real
//! store, the other tenant keeps being served, and each refusal names its limit.
//!
//! Outcomes are asserted (who was served, what was refused and why, what the server still
//! holds); nothing here measures time.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use snodo::budget::TenantLimits;
use snodo::http::{HttpConfig, router};
use snodo::mcp::McpServer;
use snodo::model::{ExecutionLimits, ManualClock, Principal, Scope, TaskId, TaskStatus, Timestamp};
use snodo::runner::{Catalog, NoInstrumentation, Runner, RunnerOptions, tool_call_work};
use snodo::store::{ClaimRequest, MemoryStore, NewTask, Store};
use snodo::wasm::EngineConfig;
use tower::ServiceExt;

use crate::common;

const TASKS: &str = "io.modelcontextprotocol/tasks";
const TOKEN_A: &str = "tenant-a-token-0123456789";
const TOKEN_B: &str = "tenant-b-token-0123456789";
const TOKEN_C: &str = "tenant-c-token-0123456789";
const TOKEN_D: &str = "tenant-d-token-0123456789";
const TOKEN_E: &str = "tenant-e-token-0123456789";

struct Host {
    app: snodo::http::App,
    server: Arc<McpServer>,
    store: Arc<dyn Store>,
    engine: snodo::wasm::WasmEngine,
}

fn tokens() -> Vec<(String, Principal)> {
    vec![
        (TOKEN_A.into(), Principal::new("a", "mallory")),
        (TOKEN_B.into(), Principal::new("b", "alice")),
        (TOKEN_C.into(), Principal::new("c", "carol")),
        (TOKEN_D.into(), Principal::new("d", "dave")),
        (TOKEN_E.into(), Principal::new("e", "eve")),
    ]
}

/// A server with the fixtures and the hostile guests, two tenants, and `limits`.
async fn host(limits: TenantLimits, engine: EngineConfig, exec: ExecutionLimits) -> Host {
    let guests = common::load_guests_with(engine).await;
    let engine = guests.loader.engine().clone();
    let (fixtures, hostile) = (guests.fixtures, guests.hostile);
    let (server, store) =
        common::mcp_server(common::catalog_of(&[&fixtures, &hostile], exec), limits);
    let app = router(
        server.clone(),
        HttpConfig {
            tokens: tokens(),
            ..HttpConfig::default()
        },
    );
    Host {
        app,
        server,
        store,
        engine,
    }
}

/// [`host`] with 64 MiB of guest memory in all, 24 MiB of it per tenant.
async fn with_memory_shares() -> Host {
    host(
        TenantLimits::default(),
        EngineConfig {
            max_memory_bytes: 64 << 20,
            max_total_memory_bytes: 64 << 20,
            max_tenant_memory_bytes: Some(24 << 20),
            ..EngineConfig::default()
        },
        ExecutionLimits::default(),
    )
    .await
}

/// [`host`] with the default engine and execution limits.
async fn with_limits(limits: TenantLimits) -> Host {
    host(limits, EngineConfig::default(), ExecutionLimits::default()).await
}

fn rpc(id: i64, method: &str, mut params: Value, tasks: bool) -> Value {
    let caps = if tasks {
        json!({"elicitation": {}, "extensions": {TASKS: {}}})
    } else {
        json!({"elicitation": {}})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn post(token: &str, body: &Value, name_header: bool) -> Request<Body> {
    let mut b = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("host", "localhost")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", body["method"].as_str().unwrap_or_default());
    let name = body["params"]["name"]
        .as_str()
        .or_else(|| body["params"]["taskId"].as_str());
    if let (Some(n), true) = (name, name_header) {
        b = b.header("mcp-name", n);
    }
    b.body(Body::from(body.to_string())).expect("request")
}

async fn send(app: &snodo::http::App, req: Request<Body>) -> (StatusCode, Value) {
    let resp = app.clone().oneshot(req).await.expect("response");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // An SSE reply: the last `data:` line is the response.
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .map_or(text.as_str(), |d| d);
    (
        status,
        serde_json::from_str(json).unwrap_or(Value::String(text.clone())),
    )
}

async fn call(h: &Host, token: &str, tool: &str, args: Value, tasks: bool) -> Value {
    let body = rpc(
        1,
        "tools/call",
        json!({"name": tool, "arguments": args}),
        tasks,
    );
    send(&h.app, post(token, &body, true)).await.1
}

/// A synchronous `greet` of `name` by the tenant of `token`.
async fn greet(h: &Host, token: &str, name: &str) -> Value {
    call(h, token, "greet", json!({"name": name}), false).await
}

/// A `completion/complete` of a prompt argument by the tenant of `token`.
async fn complete(h: &Host, token: &str) -> Value {
    let params = json!({
        "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
        "argument": {"name": "arg1", "value": "pa"},
    });
    let body = rpc(1, "completion/complete", params, false);
    send(&h.app, post(token, &body, true)).await.1
}

/// The defaults with `per_tenant` synchronous calls per tenant and `total` in all.
fn sync_limits(per_tenant: usize, total: usize) -> TenantLimits {
    TenantLimits {
        sync_calls_per_tenant: per_tenant,
        sync_calls: total,
        ..TenantLimits::default()
    }
}

/// Asserts `v` is the JSON-RPC error `code` naming the limit `limit` in its data.
#[track_caller]
fn assert_refused(v: &Value, code: i64, limit: &str) {
    let said = (
        v["error"]["code"].as_i64().unwrap_or(0),
        v["error"]["data"]["limit"].as_str().unwrap_or_default(),
    );
    assert_eq!(said, (code, limit), "{v}");
}

fn greeted(v: &Value) -> bool {
    v["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("Hello"))
}

/// Awaits `probe` becoming true, yielding in between; fails after a minute naming `what`.
async fn until(what: &str, mut probe: impl FnMut() -> bool) {
    common::eventually(what, || {
        let ok = probe();
        async move { ok.then_some(()) }
    })
    .await
}

/// Starts `n` synchronous calls of tenant a whose guests wait a minute, and awaits them all
/// running.
async fn hold_calls(h: &Host, n: usize) -> Vec<tokio::task::JoinHandle<(StatusCode, Value)>> {
    hold_calls_as(h, TOKEN_A, n).await
}

/// [`hold_calls`] for the tenant of `token`.
async fn hold_calls_as(
    h: &Host,
    token: &'static str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<(StatusCode, Value)>> {
    let before = h.server.sync_calls_active();
    let held = (0..n)
        .map(|_| {
            let app = h.app.clone();
            let args = json!({"name": "hold", "arguments": {"ms": 60_000}});
            let body = rpc(1, "tools/call", args, false);
            tokio::spawn(async move { send(&app, post(token, &body, true)).await })
        })
        .collect();
    until("the held calls running", || {
        h.server.sync_calls_active() == before + n
    })
    .await;
    held
}

/// Ends the held calls: dropping a request future drops its guest.
async fn let_go(held: Vec<tokio::task::JoinHandle<(StatusCode, Value)>>) {
    for t in held {
        t.abort();
        let _ = t.await;
    }
}

#[tokio::test]
async fn a_tenant_holding_its_sync_slots_cannot_starve_another() {
    let h = with_limits(sync_limits(3, 5)).await;
    // Tenant a holds all of its share with guests that wait a minute.
    let held = hold_calls(&h, 3).await;

    let over = greet(&h, TOKEN_A, "x").await;
    assert_refused(&over, -32000, "limits.sync_calls_per_tenant");
    let b = greet(&h, TOKEN_B, "Bea").await;
    assert!(greeted(&b), "the other tenant is served: {b}");
    // Large arguments are checked inside the same budget (off the async workers), so
    // even a task call with them is refused while the tenant's slots are full; small ones
    // are checked in place, and the task is created.
    let pad = "x".repeat(100 << 10);
    let v = call(&h, TOKEN_A, "counter", json!({"pad": pad}), true).await;
    assert_refused(&v, -32000, "limits.sync_calls_per_tenant");
    let v = call(&h, TOKEN_A, "counter", json!({"pad": "x"}), true).await;
    assert_eq!(v["result"]["resultType"], "task", "{v}");
    // Checked off the workers is still checked: a large call that breaks the schema.
    let v = call(&h, TOKEN_B, "greet", json!({"name": 5, "pad": &pad}), false).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    // A completion runs a guest too: inside the same budget.
    let over = complete(&h, TOKEN_A).await;
    assert_refused(&over, -32000, "limits.sync_calls_per_tenant");
    let b = complete(&h, TOKEN_B).await;
    assert_eq!(
        b["result"]["completion"]["values"],
        json!(["paris", "park", "party"]),
        "{b}"
    );

    // A client that goes away takes its guest with it: dropping the request future frees
    // the slot (the transport drops it when the connection closes).
    let_go(held).await;
    until("the held guests dropped", || {
        h.server.sync_calls_active() == 0
    })
    .await;
    let again = greet(&h, TOKEN_A, "x").await;
    assert!(greeted(&again), "{again}");

    let metrics = h.server.metrics_text();
    assert!(
        metrics.contains("snodo_limit_refusals_total{limit=\"limits.sync_calls_per_tenant\"} 3"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_global_cap_refuses_at_once_and_names_itself() {
    let h = with_limits(sync_limits(2, 2)).await;
    let mut held = hold_calls(&h, 1).await;
    // The top slot is kept for a tenant holding none.
    let a = greet(&h, TOKEN_A, "x").await;
    assert_refused(&a, -32000, "limits.sync_calls");
    assert_eq!(a["error"]["data"]["max"], 1, "{a}");
    held.extend(hold_calls_as(&h, TOKEN_C, 1).await);
    let b = greet(&h, TOKEN_B, "Bea").await;
    assert_refused(&b, -32000, "limits.sync_calls");
    assert_eq!(b["error"]["data"]["scope"], "global");
    assert_eq!(b["error"]["data"]["max"], 2, "{b}");
    let_go(held).await;
}

#[tokio::test]
async fn three_tenants_at_their_share_cannot_starve_a_fourth() {
    // 16 in all, 4 per tenant; the top 2 are kept for tenants holding none.
    let h = with_limits(sync_limits(4, 16)).await;
    let mut held = Vec::new();
    for token in [TOKEN_A, TOKEN_C, TOKEN_D] {
        held.extend(hold_calls_as(&h, token, 4).await);
    }
    // A fourth tenant fills what is left outside the reserve.
    held.extend(hold_calls_as(&h, TOKEN_E, 2).await);
    let e = greet(&h, TOKEN_E, "x").await;
    assert_refused(&e, -32000, "limits.sync_calls");
    // The fifth, holding none, is served from the reserve.
    let b = greet(&h, TOKEN_B, "Bea").await;
    assert!(greeted(&b), "{b}");
    let_go(held).await;
}

/// Sends `body` over a real connection (reading the head of an SSE reply), waits for
/// `hang_up`, then closes the connection.
async fn call_and_hang_up(
    addr: std::net::SocketAddr,
    body: &Value,
    hang_up: tokio::sync::oneshot::Receiver<()>,
) {
    let mut connection = snodo::client::Connection::open(addr)
        .await
        .expect("connect");
    let reply = connection.send(snodo::client::mcp_request(body, Some(TOKEN_A), true));
    // With a progress token the reply is an SSE stream whose head comes at once; without
    // one nothing comes until the guest ends, so the test says when the call is running.
    if body["params"]["_meta"]["progressToken"].is_string() {
        let response = reply.await.expect("a response");
        assert_eq!(response.status(), 200);
        let _ = hang_up.await;
        drop(response);
    } else {
        let waiting = async {
            let _ = reply.await;
            std::future::pending::<()>().await
        };
        tokio::select! {
            () = waiting => {}
            _ = hang_up => {}
        }
    }
    drop(connection);
}

#[tokio::test]
async fn a_call_whose_client_went_away_stops_its_guest() {
    let h = with_limits(TenantLimits::default()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = h.app.clone();
    let serving = tokio::spawn(async move {
        let _ =
            snodo::http::serve(listener, app, &Default::default(), std::future::pending()).await;
    });
    for progress in [true, false] {
        let mut body = rpc(
            1,
            "tools/call",
            json!({"name": "hold", "arguments": {"ms": 600_000}}),
            false,
        );
        if progress {
            body["params"]["_meta"]["progressToken"] = json!("p1");
        }
        let (go, hang_up) = tokio::sync::oneshot::channel();
        let client = tokio::spawn(async move { call_and_hang_up(addr, &body, hang_up).await });
        until("the call is running", || h.server.sync_calls_active() == 1).await;
        let _ = go.send(());
        client.await.expect("client");
        until("the guest of a gone client is dropped", || {
            h.server.sync_calls_active() == 0
        })
        .await;
    }
    serving.abort();
}

#[tokio::test]
async fn live_tasks_stored_tasks_and_creation_rate_are_capped_per_tenant() {
    let h = with_limits(TenantLimits {
        live_tasks_per_tenant: 2,
        ..TenantLimits::default()
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let v = call(&h, TOKEN_A, "hold", json!({"ms": 60_000}), true).await;
        ids.push(v["result"]["taskId"].as_str().expect("a task").to_owned());
    }
    let over = call(&h, TOKEN_A, "hold", json!({"ms": 60_000}), true).await;
    assert_refused(&over, -32000, "limits.live_tasks_per_tenant");
    let b = call(&h, TOKEN_B, "hold", json!({"ms": 10}), true).await;
    assert!(
        b["result"]["taskId"].is_string(),
        "the other tenant creates: {b}"
    );
    // A finished task no longer counts.
    let cancel = rpc(2, "tasks/cancel", json!({"taskId": ids[0]}), true);
    let (_, v) = send(&h.app, post(TOKEN_A, &cancel, true)).await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    let again = call(&h, TOKEN_A, "hold", json!({"ms": 10}), true).await;
    assert!(again["result"]["taskId"].is_string(), "{again}");

    // Stored tasks count until reaped, finished ones included.
    let h = with_limits(TenantLimits {
        stored_tasks_per_tenant: 2,
        ..TenantLimits::default()
    })
    .await;
    let first = call(&h, TOKEN_A, "hold", json!({"ms": 60_000}), true).await;
    let first = first["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let cancel = rpc(2, "tasks/cancel", json!({"taskId": first}), true);
    let (_, v) = send(&h.app, post(TOKEN_A, &cancel, true)).await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    let second = call(&h, TOKEN_A, "hold", json!({"ms": 10}), true).await;
    assert!(second["result"]["taskId"].is_string(), "{second}");
    let over = call(&h, TOKEN_A, "hold", json!({"ms": 10}), true).await;
    assert_refused(&over, -32000, "limits.stored_tasks_per_tenant");
    let b = call(&h, TOKEN_B, "hold", json!({"ms": 10}), true).await;
    assert!(b["result"]["taskId"].is_string(), "the other tenant: {b}");

    // Stored bytes count beside the number of tasks: large arguments fill the share
    // first, and the other tenant keeps its own.
    let h = with_limits(TenantLimits {
        stored_bytes_per_tenant: 64 << 10,
        ..TenantLimits::default()
    })
    .await;
    let pad = "x".repeat(20 << 10);
    let mut refused = None;
    for _ in 0..8 {
        let v = call(&h, TOKEN_A, "hold", json!({"ms": 60_000, "pad": pad}), true).await;
        if v["error"].is_object() {
            refused = Some(v);
            break;
        }
        assert!(v["result"]["taskId"].is_string(), "{v}");
    }
    let refused = refused.expect("64 KiB hold fewer than eight tasks of 20 KiB");
    assert_refused(&refused, -32000, "limits.stored_bytes_per_tenant");
    let b = call(&h, TOKEN_B, "hold", json!({"ms": 10, "pad": pad}), true).await;
    assert!(b["result"]["taskId"].is_string(), "the other tenant: {b}");

    let h = with_limits(TenantLimits {
        task_creates_per_second: 1,
        task_create_burst: 2,
        ..TenantLimits::default()
    })
    .await;
    for _ in 0..2 {
        let v = call(&h, TOKEN_A, "hold", json!({"ms": 10}), true).await;
        assert!(v["result"]["taskId"].is_string(), "{v}");
    }
    let over = call(&h, TOKEN_A, "hold", json!({"ms": 10}), true).await;
    assert_refused(&over, -32000, "limits.task_creates_per_second");
    let b = call(&h, TOKEN_B, "hold", json!({"ms": 10}), true).await;
    assert!(b["result"]["taskId"].is_string(), "{b}");
}

#[tokio::test]
async fn guests_share_one_memory_budget() {
    let h = host(
        TenantLimits::default(),
        EngineConfig {
            max_memory_bytes: 64 << 20,
            max_total_memory_bytes: 40 << 20,
            ..EngineConfig::default()
        },
        ExecutionLimits::default(),
    )
    .await;
    let v = call(&h, TOKEN_A, "memory_bomb", json!({}), false).await;
    assert_eq!(v["error"]["data"]["limit"], "guest_memory_total", "{v}");
    assert_eq!(
        h.engine.guest_memory_in_use(),
        0,
        "memory returns with the guest"
    );
    let b = greet(&h, TOKEN_B, "Bea").await;
    assert!(greeted(&b), "{b}");

    // With a share per tenant, a tenant's guests stop at its share.
    let h = with_memory_shares().await;
    let v = call(&h, TOKEN_A, "memory_bomb", json!({}), false).await;
    assert_eq!(
        v["error"]["data"]["limit"], "guest_memory_per_tenant",
        "{v}"
    );
    assert_eq!(h.engine.guest_memory_in_use(), 0);
    let b = greet(&h, TOKEN_B, "Bea").await;
    assert!(greeted(&b), "{b}");
}

#[tokio::test]
async fn results_status_updates_and_wall_clock_are_bounded() {
    // The synchronous wall clock must refuse the held call below, and must not be what stops
    // the oversized results first even on a loaded machine: a few seconds serve both.
    let h = host(
        TenantLimits {
            sync_timeout_ms: 5_000,
            ..TenantLimits::default()
        },
        EngineConfig {
            max_result_bytes: 1 << 20,
            ..EngineConfig::default()
        },
        ExecutionLimits::default(),
    )
    .await;
    let v = call(&h, TOKEN_A, "big_result", json!({"mb": 4}), false).await;
    assert_eq!(v["error"]["data"]["limit"], "result_bytes", "{v}");
    // Every guest output is capped alike: here a resource read that echoes its URI twice.
    let uri = format!("test://template/{}/data", "7".repeat(600_000));
    let mut read = post(
        TOKEN_A,
        &rpc(2, "resources/read", json!({"uri": uri}), false),
        false,
    );
    read.headers_mut()
        .insert("mcp-name", uri.parse().expect("header value"));
    let v = send(&h.app, read).await.1;
    assert_eq!(v["error"]["data"]["limit"], "result_bytes", "{v}");
    // Time asleep in an import counts against a synchronous call.
    let v = call(&h, TOKEN_A, "hold", json!({"ms": 600_000}), false).await;
    assert_eq!(v["error"]["data"]["limit"], "wall_clock", "{v}");
    assert_eq!(h.server.sync_calls_active(), 0);

    // A guest setting its status in a loop does not grow its task record without bound.
    let v = call(&h, TOKEN_A, "status_flood", json!({"times": 500}), true).await;
    let id = v["result"]["taskId"].as_str().expect("task").to_owned();
    let task_id = TaskId::parse(&id).expect("id");
    let done = common::await_stored(&*h.store, &task_id, "the flood task finished", |t| {
        t.status.is_terminal()
    })
    .await;
    assert_eq!(done.status, TaskStatus::Completed);
    assert!(
        done.events.len() <= snodo::store::REMEMBERED_STATUS_EVENTS + 4,
        "{} events remembered",
        done.events.len()
    );
    // Nor turn every call into a commit: its messages are coalesced.
    assert!(
        done.revision < 100,
        "500 status calls made {} commits",
        done.revision
    );
}

#[tokio::test]
async fn subscriptions_are_deduplicated_capped_and_counted() {
    let h = with_limits(TenantLimits {
        streams_per_tenant: 1,
        stream_task_ids: 4,
        ..TenantLimits::default()
    })
    .await;
    let v = call(&h, TOKEN_A, "hold", json!({"ms": 60_000}), true).await;
    let id = v["result"]["taskId"].as_str().expect("task").to_owned();
    let listen = |ids: Value| {
        rpc(
            7,
            "subscriptions/listen",
            json!({"notifications": {"taskIds": ids}}),
            true,
        )
    };
    // 1,000 copies of one id are one watched id.
    let many: Vec<&str> = std::iter::repeat_n(id.as_str(), 1_000).collect();
    let resp = h
        .app
        .clone()
        .oneshot(post(TOKEN_A, &listen(json!(many)), true))
        .await
        .expect("stream");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("frame").expect("frame");
    let text = String::from_utf8_lossy(first.data_ref().expect("data")).into_owned();
    assert!(text.contains(&format!("\"taskIds\":[\"{id}\"]")), "{text}");
    // The tenant's one stream is open: a second is refused; the other tenant's is not.
    let (_, v) = send(&h.app, post(TOKEN_A, &listen(json!([id])), true)).await;
    assert_refused(&v, -32000, "limits.streams_per_tenant");
    let other = h
        .app
        .clone()
        .oneshot(post(TOKEN_B, &listen(json!(["x"])), true))
        .await
        .expect("stream");
    assert_eq!(other.status(), StatusCode::OK);
    drop(other);
    // Too many distinct ids: refused, naming the limit.
    let (_, v) = send(
        &h.app,
        post(TOKEN_B, &listen(json!(["1", "2", "3", "4", "5"])), true),
    )
    .await;
    assert_refused(&v, -32000, "limits.stream_task_ids");
    drop(body);
    until("the stream closed", || {
        h.server.metrics_text().contains("snodo_streams_open 0")
    })
    .await;
}

#[tokio::test]
async fn task_methods_accept_a_missing_name_header_and_refuse_a_wrong_one() {
    let h = with_limits(TenantLimits::default()).await;
    let v = call(&h, TOKEN_A, "hold", json!({"ms": 10}), true).await;
    let id = v["result"]["taskId"].as_str().expect("task").to_owned();
    // The task is pinned to the component it was created with.
    let (_, work) = h
        .store
        .inspect(&TaskId::parse(&id).expect("id"))
        .await
        .expect("inspect")
        .expect("task");
    assert_eq!(work.component_digest.as_ref().map(String::len), Some(64));
    let get = rpc(2, "tasks/get", json!({"taskId": id}), true);
    let (s, v) = send(&h.app, post(TOKEN_A, &get, false)).await;
    assert_eq!(
        (s, v["result"]["taskId"].as_str()),
        (StatusCode::OK, Some(id.as_str()))
    );
    let mut wrong = post(TOKEN_A, &get, false);
    wrong
        .headers_mut()
        .insert("mcp-name", "another-task".parse().expect("value"));
    let (_, v) = send(&h.app, wrong).await;
    assert_eq!(v["error"]["code"], -32020, "{v}");
    // tools/call still requires it.
    let body = rpc(
        3,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "x"}}),
        false,
    );
    let (_, v) = send(&h.app, post(TOKEN_A, &body, false)).await;
    assert_eq!(v["error"]["code"], -32020, "{v}");
}

/// A runner over `store` with `options`, running the hostile guests in an engine of its own
/// with `max_instances` slots.
/// Awaits `id` ending, asserts it failed, and returns it with its error's code and data.
async fn failed_task(store: &Arc<dyn Store>, id: &TaskId) -> (snodo::model::Task, i64, Value) {
    let failed =
        common::await_stored(&**store, id, "the task failed", |t| t.status.is_terminal()).await;
    assert_eq!(failed.status, TaskStatus::Failed);
    let Some(snodo::model::Outcome::Error(e)) = failed.outcome.clone() else {
        panic!("an error outcome");
    };
    (failed, e.code, e.data.expect("data"))
}

async fn hostile_runner(
    store: &Arc<dyn Store>,
    max_instances: u32,
    options: RunnerOptions,
) -> Runner {
    let guests = common::load_guests(max_instances, 32 << 20).await;
    let registry = Catalog::new()
        .with_component(&guests.hostile)
        .expect("catalog");
    Runner::start(
        store.clone(),
        Arc::new(registry),
        options,
        Arc::new(NoInstrumentation),
    )
}

#[tokio::test]
async fn one_tenants_backlog_does_not_hold_another_tenants_task() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let runner = hostile_runner(
        &store,
        64,
        RunnerOptions {
            max_concurrent: 4,
            max_running_per_tenant: 2,
            poll_interval: Duration::from_millis(10),
            ..RunnerOptions::default()
        },
    )
    .await;
    let create = |tenant: &'static str, args: Value| {
        let store = store.clone();
        async move {
            let id = TaskId::generate();
            let work = tool_call_work(&id, "hold", args);
            store
                .create(NewTask::new(id, Scope::new(tenant), work))
                .await
                .expect("create");
            id
        }
    };
    // Tenant a: ten tasks that each hold their slot for a minute.
    let mut backlog = Vec::new();
    for _ in 0..10 {
        let id = create("a", json!({"ms": 60_000})).await;
        runner.submit(&id).await.expect("submit");
        backlog.push(id);
    }
    until("a runs its share", || runner.active() == 2).await;
    let b = create("b", json!({"ms": 1})).await;
    runner.submit(&b).await.expect("submit");
    let done = common::await_stored(&*store, &b, "b's task completed", |t| {
        t.status == TaskStatus::Completed
    })
    .await;
    assert_eq!(done.status, TaskStatus::Completed);
    // None of a's attempts can end within the test, so the ones that ever started are the
    // ones running now (the runner's count of attempts could still include b's, which
    // leaves it only after its commit returned).
    let mut started = 0;
    for id in &backlog {
        let (task, _) = store.inspect(id).await.expect("inspect").expect("present");
        started += usize::from(task.attempt > 0);
    }
    assert_eq!(started, 2, "a never holds more than its share");
    runner.shutdown().await;
}

#[tokio::test]
async fn a_task_that_keeps_taking_its_attempt_down_fails_past_the_cap() {
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.clone()));
    let id = TaskId::generate();
    store
        .create(NewTask::new(
            id,
            Scope::new("a"),
            tool_call_work(&id, "counter", json!({})),
        ))
        .await
        .expect("create");
    // Three claims whose leases ran out (a crash or a stall each time).
    for _ in 0..3 {
        store
            .claim(&id, &ClaimRequest::new(1_000, "doomed"))
            .await
            .expect("claim");
        clock.advance(2_000);
    }
    let runner = hostile_runner(
        &store,
        8,
        RunnerOptions {
            recover: false,
            reap_interval: None,
            max_recoveries: 2,
            ..RunnerOptions::default()
        },
    )
    .await;
    runner.submit(&id).await.expect("submit");
    let (failed, code, data) = failed_task(&store, &id).await;
    assert_eq!(failed.recoveries, 3);
    assert_eq!(code, -32603);
    assert_eq!(
        (data["kind"].as_str(), data["limit"].as_str()),
        (Some("limit"), Some("runner.max_recoveries"))
    );
    runner.shutdown().await;
}

#[tokio::test]
async fn configured_fuel_is_metered() {
    let mut opts = snodo::serve::ServeOptions::new(
        tempfile::tempdir().expect("dir").keep(),
        vec![snodo_test_guests::HOSTILE.into()],
    );
    opts.cache_dir = Some(snodo_test_guests::COMPONENT_CACHE.into());
    opts.defaults.limits = Some(ExecutionLimits {
        fuel: Some(1_000_000),
        ..ExecutionLimits::default()
    });
    let catalog = snodo::serve::load_tools(&opts).await.expect("load");
    let spin = catalog.tool("spin").expect("spin");
    let mut exec = snodo::wasm::Execution::new(
        "spin",
        json!({}),
        Arc::new(snodo::mcp::SyncIo::new(Default::default(), json!({}))),
    );
    exec.limits = spin.limits;
    let out = spin.component.execute(exec).await.outcome;
    assert_eq!(
        out.expect_err("stopped").to_rpc_error().data.expect("data")["limit"],
        "fuel"
    );
}

#[tokio::test]
async fn an_attempt_that_only_sleeps_is_stopped_at_its_wall_clock() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let id = TaskId::generate();
    // Ten minutes asleep in the clock import: no running time, so no deadline stops it.
    store
        .create(NewTask::new(
            id,
            Scope::new("a"),
            tool_call_work(&id, "hold", json!({"ms": 600_000})),
        ))
        .await
        .expect("create");
    let runner = hostile_runner(
        &store,
        8,
        RunnerOptions {
            recover: false,
            reap_interval: None,
            attempt_wall_clock: Duration::from_millis(300),
            ..RunnerOptions::default()
        },
    )
    .await;
    runner.submit(&id).await.expect("submit");
    let (failed, _, data) = failed_task(&store, &id).await;
    assert_eq!(
        (data["kind"].as_str(), data["limit"].as_str()),
        (Some("limit"), Some("wall_clock")),
        "{data}"
    );
    assert_eq!(failed.attempt, 1, "a limit is not retried");
    until("the slot given back", || runner.active() == 0).await;
    runner.shutdown().await;
}

#[tokio::test]
async fn arguments_built_to_make_a_regex_backtrack_are_checked_like_any_others() {
    let h = with_limits(TenantLimits::default()).await;
    // `^(a+)+$` against distinct runs of `a` ending in `b`: exponential for a backtracking
    // engine, one pass each for the linear one. 400 of them, 1.6 MB in all.
    let items: Vec<String> = (0..400)
        .map(|i| format!("{}b", "a".repeat(4_000 + i)))
        .collect();
    let v = call(&h, TOKEN_A, "backtrack", json!({"items": items}), false).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/items/0"),
        "the path of the first bad item: {v}"
    );
    let v = call(
        &h,
        TOKEN_A,
        "backtrack",
        json!({"items": ["aaaa", "a"]}),
        false,
    )
    .await;
    assert_eq!(v["result"]["content"][0]["text"], "checked", "{v}");
    assert_eq!(h.server.sync_calls_active(), 0);
}

/// Two alternatives that recurse into the same definition make collecting a bad value's
/// errors exponential in its depth (46 bytes nested 19 deep once took seconds and
/// gigabytes). The check stops at its budget and the call is refused naming it, a deep value
/// that is valid is served, and the slot the costly check took is given back.
#[tokio::test]
async fn arguments_whose_check_multiplies_are_refused_at_the_check_budget() {
    let h = with_limits(TenantLimits::default()).await;
    let nested =
        |depth: usize, leaf: Value| json!({"v": (0..depth).fold(leaf, |inner, _| json!([inner]))});
    let v = call(&h, TOKEN_A, "branches", nested(19, json!("x")), false).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    let limit = v["error"]["data"]["limit"].as_str().unwrap_or_default();
    assert!(
        ["MAX_VALIDATION_STEPS", "MAX_VALIDATION_MS"].contains(&limit),
        "the refusal names the budget: {v}"
    );
    let v = call(&h, TOKEN_A, "branches", nested(3, json!("x")), false).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["data"]["errors"].is_array(),
        "a plain violation: {v}"
    );
    let v = call(&h, TOKEN_B, "branches", nested(19, json!(1)), false).await;
    assert_eq!(v["result"]["content"][0]["text"], "checked", "{v}");
    assert_eq!(h.server.sync_calls_active(), 0);
    assert_eq!(
        h.engine.cpu().executing(),
        0,
        "the check's CPU turn is given back"
    );
}

/// A large body is counted in its tenant's memory share while it is parsed and handled:
/// past the share it is refused before it is parsed, naming the limit, and the memory is
/// given back with the reply.
#[tokio::test]
async fn large_bodies_are_held_in_the_tenants_memory_share() {
    let h = with_memory_shares().await;
    let body = |mb: usize| {
        let mut v = rpc(
            7,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "x".repeat(mb << 20)}}),
            false,
        );
        v["params"]["name"] = json!("greet");
        v
    };
    // Two megabytes count 32 MiB: past the 24 MiB share.
    let v = send(&h.app, post(TOKEN_A, &body(2), true)).await.1;
    assert_eq!(
        v["id"], 7,
        "the refusal answers the request: {}",
        v["error"]
    );
    assert_eq!(
        v["error"]["data"]["limit"], "limits.guest_memory_per_tenant_bytes",
        "{}",
        v["error"]
    );
    assert_eq!(h.engine.guest_memory_in_use(), 0);
    // One megabyte fits, and is served.
    let v = send(&h.app, post(TOKEN_B, &body(1), true)).await.1;
    assert!(
        v["result"]["content"][0]["text"].is_string(),
        "{}",
        v["error"]
    );
    assert_eq!(
        h.engine.guest_memory_in_use(),
        0,
        "held memory is given back"
    );
}
