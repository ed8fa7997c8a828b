//! The admin API: who is an operator, how far each reaches, and every action (list, counts,
//! show with history, answer checked against the question, cancel, bulk cancel with a
//! preview and a cap, retry now) against real guests on a real store.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};

use snodo_core::model::RetryPolicy;
use snodo_runner::{Catalog, CatalogSource, CatalogTool};

use super::*;

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";
const METRICS: &str = "metrics-token-0123456789";

/// The fixtures, `test_whoami` retrying once after an hour.
async fn catalog() -> Catalog {
    let fixtures = fixtures().await;
    let mut catalog = Catalog::new();
    for info in fixtures.tools() {
        let mut tool = CatalogTool::new(fixtures.clone(), info.clone());
        tool.ttl_ms = Some(7_200_000);
        tool.poll_interval_ms = 500;
        if info.name == "test_whoami" {
            tool.retry_policy = RetryPolicy::new([3_600_000u32]).expect("policy");
        }
        catalog.add(tool).expect("unique");
    }
    catalog
        .add_source(CatalogSource {
            component: fixtures.clone(),
            limits: Default::default(),
            grants: Default::default(),
        })
        .expect("source");
    catalog
}

async fn admin_app() -> snodo_server::http::App {
    admin_app_under(Default::default()).await
}

/// [`admin_app`] under the budgets `limits`.
async fn admin_app_under(limits: snodo_runner::budget::TenantLimits) -> snodo_server::http::App {
    let (server, _) = common::mcp_server(catalog().await, limits);
    router(
        server,
        HttpConfig {
            max_body_bytes: 64 << 10,
            tokens: vec![
                (ALICE.into(), Principal::new("acme", "alice")),
                (BOB.into(), Principal::new("globex", "bob")),
            ],
            admin: ops_admin(),
            metrics_token: Some(METRICS.into()),
            ..HttpConfig::default()
        },
    )
}

fn admin(method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Request<Body> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost:3001");
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    match body {
        Some(v) => b
            .header("content-type", "application/json")
            .body(Body::from(v.to_string())),
        None => b.body(Body::empty()),
    }
    .expect("request")
}

async fn get(app: &snodo_server::http::App, path: &str, token: &str) -> (StatusCode, Value) {
    let (s, v, _) = send(app, admin("GET", path, Some(token), None)).await;
    (s, v)
}

/// The status and error code of a GET of `path` that is refused.
async fn refusal(
    app: &snodo_server::http::App,
    path: &str,
    token: &str,
) -> (StatusCode, Option<String>) {
    let (s, v) = get(app, path, token).await;
    (s, v["error"]["code"].as_str().map(str::to_owned))
}

async fn post_to(
    app: &snodo_server::http::App,
    path: &str,
    token: &str,
    body: Value,
) -> (StatusCode, Value) {
    let (s, v, _) = send(app, admin("POST", path, Some(token), Some(body))).await;
    (s, v)
}

/// An MCP request (id `n`) from the caller of `token` to start a task of `tool`.
fn call_request(n: i64, token: &str, tool: &str, args: Value) -> Request<Body> {
    let body = rpc(
        n,
        "tools/call",
        json!({"name": tool, "arguments": args}),
        caps(true),
    );
    let mut req = request_of(&body);
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    req
}

/// Starts a task of `tool` for the caller of `token`; its id.
async fn start(app: &snodo_server::http::App, token: &str, tool: &str, args: Value) -> String {
    let (s, v, _) = send(app, call_request(1, token, tool, args)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    task_id(&v)
}

/// The acme operator's `action` (`answer`, `cancel`, `retry`) on task `id`.
async fn act(
    app: &snodo_server::http::App,
    id: &str,
    action: &str,
    body: Value,
) -> (StatusCode, Value) {
    post_to(
        app,
        &format!("/admin/v1/tasks/{id}/{action}"),
        ACME_OPS,
        body,
    )
    .await
}

/// The acme operator's bulk cancel of `body`, which succeeds: how many tasks matched, how
/// many were cancelled, and whether the cap cut the run short.
async fn bulk_cancel(
    app: &snodo_server::http::App,
    body: Value,
) -> (Option<u64>, Option<u64>, Option<bool>) {
    let (s, v) = post_to(app, "/admin/v1/cancel", ACME_OPS, body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    (
        v["matched"].as_u64(),
        v["cancelled"].as_u64(),
        v["capped"].as_bool(),
    )
}

/// Task `id` as the operator of `token` sees it, once `ready` holds.
async fn await_admin(
    app: &snodo_server::http::App,
    token: &str,
    id: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    common::eventually(what, || async {
        let (s, v) = get(app, &format!("/admin/v1/tasks/{id}"), token).await;
        (s == StatusCode::OK && ready(&v)).then_some(v)
    })
    .await
}

/// Task `id` as the acme operator sees it once it completed; `what` names the wait.
async fn completed(app: &snodo_server::http::App, id: &str, what: &str) -> Value {
    await_admin(app, ACME_OPS, id, what, |t| t["status"] == "completed").await
}

fn events(task: &Value) -> Vec<&str> {
    fields(&task["history"]["entries"], "event")
}

#[tokio::test]
async fn operators_list_answer_cancel_and_retry_within_their_reach() {
    let app = admin_app().await;
    let confirm = start(&app, ALICE, "confirm_delete", json!({"filename": "a.txt"})).await;
    let second = start(&app, ALICE, "confirm_delete", json!({"filename": "b.txt"})).await;
    let slow: Vec<String> = [
        start(&app, ALICE, "slow_compute", json!({"seconds": 600})).await,
        start(&app, ALICE, "slow_compute", json!({"seconds": 600})).await,
        start(&app, ALICE, "slow_compute", json!({"seconds": 600})).await,
    ]
    .into();
    let globex = start(&app, BOB, "confirm_delete", json!({"filename": "c.txt"})).await;

    // Who may ask: nobody without a credential, no MCP token, only operators.
    let (s, v, _) = send(&app, admin("GET", "/admin/v1/tasks", None, None)).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthenticated"))
    );
    assert_eq!(
        refusal(&app, "/admin/v1/tasks", ALICE).await,
        (StatusCode::FORBIDDEN, Some("forbidden".into()))
    );
    let (s, v) = get(&app, "/admin/v1/tasks", "not-a-token-at-all-0123").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    let (s, v) = get(&app, "/admin/v1/whoami", ACME_OPS).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v,
        json!({"tenant": "acme", "subject": "ops", "crossTenant": false})
    );

    // The acme operator sees acme's tasks only; another tenant's is not found.
    let (s, page) = get(&app, "/admin/v1/tasks?limit=50", ACME_OPS).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    let listed = fields(&page["tasks"], "id");
    assert_eq!(listed.len(), 5);
    assert!(!listed.contains(&globex.as_str()));
    assert!(
        page["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .all(|t| t["tenant"] == "acme")
    );
    let (s, _) = get(&app, "/admin/v1/tasks?tenant=globex", ACME_OPS).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(
        refusal(&app, &format!("/admin/v1/tasks/{globex}"), ACME_OPS).await,
        (StatusCode::NOT_FOUND, Some("not_found".into()))
    );
    let (s, _) = get(&app, "/admin/v1/tasks/not-an-id", ACME_OPS).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(
        refusal(&app, "/admin/v1/tasks?status=sleeping", ACME_OPS).await,
        (StatusCode::BAD_REQUEST, Some("invalid".into()))
    );
    let (s, _) = get(&app, "/admin/v1/tasks?limit=0", ACME_OPS).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = get(&app, "/admin/v1/tasks?cursor=zz", ACME_OPS).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // Paging: two at a time, the same five, newest first.
    let mut paged = Vec::new();
    let mut path = "/admin/v1/tasks?limit=2".to_owned();
    loop {
        let (_, p) = get(&app, &path, ACME_OPS).await;
        paged.extend(fields(&p["tasks"], "id").into_iter().map(str::to_owned));
        match p["next"].as_str() {
            Some(c) => path = format!("/admin/v1/tasks?limit=2&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(paged, listed);

    // What a task waits on: the question, shown with the task.
    let waiting = await_admin(&app, ACME_OPS, &confirm, "the question", |t| {
        t["status"] == "input_required"
    })
    .await;
    assert_eq!(waiting["waitingOn"], json!(["confirm"]));
    assert_eq!(
        waiting["questions"][0]["request"]["method"],
        "elicitation/create"
    );
    assert_eq!(waiting["arguments"], json!({"filename": "a.txt"}));
    let (_, waiting_list) = get(
        &app,
        "/admin/v1/tasks?status=input_required&tool=confirm_delete",
        ACME_OPS,
    )
    .await;
    assert!(fields(&waiting_list["tasks"], "id").contains(&confirm.as_str()));

    // An answer is checked against the question before it is committed.
    let answer = |v: Value| json!({"responses": {"confirm": v}});
    let yes = answer(json!({"action": "accept", "content": {"confirm": true}}));
    for bad in [
        json!({"action": "accept", "content": {"confirm": "yes"}}),
        json!({"action": "accept", "content": {"other": true}}),
        json!({"action": "perhaps"}),
    ] {
        let (s, v) = act(&app, &confirm, "answer", answer(bad.clone())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
    }
    let (s, _) = act(&app, &confirm, "answer", json!({"responses": {"nope": {}}})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = act(&app, &confirm, "answer", json!({"unexpected": 1})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, v) = act(&app, &confirm, "answer", yes.clone()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let done = completed(&app, &confirm, "the answered task to complete").await;
    assert_eq!(
        done["outcome"]["result"]["content"][0]["text"],
        "Deleted a.txt"
    );
    let h = events(&done);
    for e in [
        "created",
        "claimed",
        "started",
        "input_requested",
        "input_answered",
        "completed",
    ] {
        assert!(h.contains(&e), "{e} in {h:?}");
    }
    let (s, v) = act(&app, &confirm, "answer", yes.clone()).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict"))
    );

    // Cancel one, with a reason; cancelling it again is a conflict.
    let (s, v) = act(&app, &second, "cancel", json!({"message": "not needed"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "cancelled");
    assert_eq!(
        v["history"]["entries"]
            .as_array()
            .and_then(|e| e.last())
            .map(|e| e["message"].clone()),
        Some(json!("not needed"))
    );
    let (s, _) = act(&app, &second, "cancel", json!({})).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = act(&app, &globex, "cancel", json!({})).await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "another tenant's task is out of reach"
    );

    // Bulk cancel: a preview counts without cancelling, the cap bounds, the run reports.
    let filter = json!({"tool": "slow_compute"});
    assert_eq!(
        bulk_cancel(&app, json!({"filter": filter, "preview": true})).await,
        (Some(3), Some(0), Some(false))
    );
    assert_eq!(
        bulk_cancel(&app, json!({"filter": filter, "cap": 2})).await,
        (Some(2), Some(2), Some(true))
    );
    assert_eq!(
        bulk_cancel(&app, json!({"filter": filter})).await,
        (Some(1), Some(1), Some(false))
    );
    for id in &slow {
        let t = await_admin(&app, ACME_OPS, id, "cancelled", |t| {
            t["status"] == "cancelled"
        })
        .await;
        assert_eq!(t["claimedBy"], Value::Null, "its attempt stopped");
    }
    let (s, _) = post_to(
        &app,
        "/admin/v1/cancel",
        ACME_OPS,
        json!({"filter": {"tenant": "globex"}}),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = post_to(
        &app,
        "/admin/v1/cancel",
        ACME_OPS,
        json!({"filter": filter, "cap": 0}),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    // Retry now: a task waiting out an hour's delay runs at once.
    let whoami = start(&app, ALICE, "test_whoami", json!({"retry": true})).await;
    let waiting = await_admin(&app, ACME_OPS, &whoami, "a scheduled retry", |t| {
        t["retryAt"].is_number()
    })
    .await;
    assert_eq!(waiting["status"], "working");
    assert!(events(&waiting).contains(&"retry_scheduled"));
    let (s, v) = act(&app, &whoami, "retry", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let done = completed(&app, &whoami, "the retried task to complete").await;
    assert_eq!(done["outcome"]["result"]["structuredContent"]["attempt"], 2);
    assert!(events(&done).contains(&"retry_now"));
    let (s, _) = act(&app, &whoami, "retry", json!({})).await;
    assert_eq!(
        s,
        StatusCode::CONFLICT,
        "a finished task has no retry to bring forward"
    );

    // Counts: acme's own, and every tenant's for a cross-tenant operator.
    let (_, c) = get(&app, "/admin/v1/counts", ACME_OPS).await;
    assert_eq!(c["byStatus"]["cancelled"], 4, "{c}");
    assert_eq!(c["byStatus"]["completed"], 2);
    assert_eq!(c["byTool"]["slow_compute"]["cancelled"], 3);
    assert_eq!(c["byStatus"]["input_required"], 0);
    let (_, all) = get(&app, "/admin/v1/counts", ROOT_OPS).await;
    assert_eq!(
        all["byStatus"]["input_required"], 1,
        "globex's question: {all}"
    );
    let (_, g) = get(&app, "/admin/v1/counts?tenant=globex", ROOT_OPS).await;
    assert_eq!(g["byTool"]["confirm_delete"]["input_required"], 1, "{g}");
    let (s, v) = get(&app, &format!("/admin/v1/tasks/{globex}"), ROOT_OPS).await;
    assert_eq!((s, v["tenant"].as_str()), (StatusCode::OK, Some("globex")));

    // The same counts as gauges on /metrics, every tenant's.
    let (s, text, _) = send(&app, admin("GET", "/metrics", Some(METRICS), None)).await;
    assert_eq!(s, StatusCode::OK);
    let text = text.as_str().expect("text").to_owned();
    for (status, n) in [
        ("working", 0),
        ("input_required", 1),
        ("completed", 2),
        ("failed", 0),
        ("cancelled", 4),
    ] {
        let line = format!("snodo_tasks{{status=\"{status}\"}} {n}");
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}

/// A task holds its place under `limits.stored_tasks_per_tenant` until it is reaped, past
/// its TTL, or deleted by an operator once finished. The refusal at the cap says so, so a
/// tenant at its cap learns what frees a place.
#[tokio::test]
async fn an_operator_deletes_a_finished_task_and_frees_its_stored_place() {
    let app = admin_app_under(snodo_runner::budget::TenantLimits {
        stored_tasks_per_tenant: 2,
        ..Default::default()
    })
    .await;
    let done = start(&app, ALICE, "test_whoami", json!({})).await;
    completed(&app, &done, "the task to complete").await;
    let slow = start(&app, ALICE, "slow_compute", json!({"seconds": 600})).await;
    let third = |n| call_request(n, ALICE, "slow_compute", json!({"seconds": 600}));
    let (_, v, _) = send(&app, third(3)).await;
    assert_eq!(
        v["error"]["data"]["limit"], "limits.stored_tasks_per_tenant",
        "{v}"
    );
    let message = v["error"]["message"].as_str().expect("message");
    assert!(message.contains("runner.reap_interval_ms"), "{message}");
    assert!(message.contains("DELETE /admin/v1/tasks/"), "{message}");

    let delete = |id: &str| {
        admin(
            "DELETE",
            &format!("/admin/v1/tasks/{id}"),
            Some(ACME_OPS),
            None,
        )
    };
    let (s, v, _) = send(&app, delete(&slow)).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("conflict")),
        "an unfinished task is cancelled first: {v}"
    );
    let (s, _, _) = send(
        &app,
        admin(
            "DELETE",
            &format!("/admin/v1/tasks/{done}"),
            Some(BOB),
            None,
        ),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "not an operator");
    let (s, v, _) = send(&app, delete(&done)).await;
    assert_eq!((s, &v), (StatusCode::OK, &json!({"deleted": done})));
    let (s, _) = get(&app, &format!("/admin/v1/tasks/{done}"), ACME_OPS).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, _) = send(&app, delete(&done)).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "deleted once");
    let (s, v, _) = send(&app, third(4)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v["result"]["taskId"].is_string(),
        "the freed place is taken: {v}"
    );
}

#[tokio::test]
async fn only_a_server_without_authentication_makes_its_local_caller_an_operator() {
    let fixtures = fixtures().await;
    let open = |custom: bool| {
        let (server, _) = common::mcp_server(
            common::catalog_of(&[&fixtures], Default::default()),
            Default::default(),
        );
        if custom {
            // An embedder's authenticator whose callers hold every MCP scope.
            snodo_server::http::router_with(
                server,
                HttpConfig::default(),
                std::sync::Arc::new(snodo_server::identity::StaticTokens::new(&[])),
            )
        } else {
            router(server, HttpConfig::default())
        }
    };
    let (s, v) = get(&open(false), "/admin/v1/whoami", "ignored-token-0123456789").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["crossTenant"], true);
    let (s, _) = get(&open(true), "/admin/v1/whoami", "ignored-token-0123456789").await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "a custom authenticator's caller is no operator"
    );
}

#[tokio::test]
async fn admin_writes_are_json_from_this_origin() {
    let app = admin_app().await;
    let id = start(&app, ALICE, "slow_compute", json!({"seconds": 600})).await;
    let path = format!("/admin/v1/tasks/{id}/cancel");
    let with = |ctype: &str, origin: Option<&str>| {
        let mut b = Request::post(path.as_str())
            .header("host", "localhost:3001")
            .header("authorization", format!("Bearer {ACME_OPS}"))
            .header("content-type", ctype);
        if let Some(o) = origin {
            b = b.header("origin", o);
        }
        b.body(Body::from("{}")).expect("request")
    };
    let (s, _, _) = send(&app, with("text/plain", None)).await;
    assert_eq!(
        s,
        StatusCode::BAD_REQUEST,
        "a body that is not declared JSON"
    );
    let (s, _, _) = send(
        &app,
        with("application/json", Some("http://localhost:8080")),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "another port of the same host");
    let (s, v, _) = send(
        &app,
        with("application/json", Some("http://localhost:3001")),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "cancelled");
}

#[tokio::test]
async fn an_operator_sees_when_a_sleeping_task_wakes_and_cancels_it() {
    let app = admin_app().await;
    let id = start(&app, ALICE, "test_sleep", json!({"ms": 300_000})).await;
    let asleep = await_admin(&app, ACME_OPS, &id, "the task to sleep", |t| {
        t["wakeAt"].is_number()
    })
    .await;
    assert_eq!(asleep["status"], "working");
    assert!(
        asleep["claimedBy"].is_null(),
        "no attempt holds it: {asleep}"
    );
    assert!(events(&asleep).contains(&"sleeping"), "{asleep}");
    let (s, v) = act(&app, &id, "cancel", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ended = await_admin(&app, ACME_OPS, &id, "the cancel", |t| {
        t["status"] == "cancelled"
    })
    .await;
    assert!(
        ended["wakeAt"].is_null(),
        "a cancelled task never wakes: {ended}"
    );
}

/// A JSON-RPC request to the operators' MCP endpoint as `token`.
fn admin_mcp(token: &str, id: i64, method: &str, params: Value) -> Request<Body> {
    admin(
        "POST",
        "/admin/mcp",
        Some(token),
        Some(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})),
    )
}

/// A tool of the operators' MCP endpoint, called as `token`: its result.
async fn admin_tool(app: &snodo_server::http::App, token: &str, tool: &str, args: Value) -> Value {
    let (s, v, _) = send(
        app,
        admin_mcp(
            token,
            7,
            "tools/call",
            json!({"name": tool, "arguments": args}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["result"].clone()
}

/// Every action an operator takes leaves an audit record, whichever door it came through,
/// and the record never holds what was sent: an answer's content stays out of it. An
/// operator of one tenant reads its own tenant's records; one of every tenant reads all.
#[tokio::test]
async fn every_operator_action_is_audited_without_its_arguments() {
    let app = admin_app().await;
    let asked = start(&app, ALICE, "confirm_delete", json!({"filename": "a.txt"})).await;
    await_admin(&app, ACME_OPS, &asked, "the question", |t| {
        t["status"] == "input_required"
    })
    .await;
    let secret = "the-answer-holds-this-secret";
    let (s, v) = act(
        &app,
        &asked,
        "answer",
        json!({"responses": {"confirm": {"action": "accept", "content": {"confirm": true, "note": secret}}}}),
    )
    .await;
    // The answer is refused (a field the question did not ask for) and still audited.
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, _) = act(&app, &asked, "cancel", json!({})).await;
    assert_eq!(s, StatusCode::OK);
    let globex = start(&app, BOB, "slow_compute", json!({"seconds": 600})).await;
    let (s, _) = post_to(
        &app,
        &format!("/admin/v1/tasks/{globex}/cancel"),
        ROOT_OPS,
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    // A read is not an action.
    let (s, _) = get(&app, &format!("/admin/v1/tasks/{asked}"), ACME_OPS).await;
    assert_eq!(s, StatusCode::OK);

    let (s, all) = get(&app, "/admin/v1/audit", ROOT_OPS).await;
    assert_eq!(s, StatusCode::OK, "{all}");
    let records = all["records"].as_array().expect("records");
    let seen: Vec<(&str, &str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["subject"].as_str().unwrap_or(""),
                r["action"].as_str().unwrap_or(""),
                r["target"].as_str().unwrap_or(""),
                r["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    let mut seen = seen;
    seen.sort();
    let mut want = [
        ("root", "task.cancel", globex.as_str(), "ok"),
        ("ops", "task.cancel", asked.as_str(), "ok"),
        ("ops", "task.answer", asked.as_str(), "invalid"),
    ];
    want.sort();
    assert_eq!(seen, want, "{all}");
    newest_first(&all["records"]);
    assert!(
        records
            .iter()
            .all(|r| r["via"] == "api" && r["at"].is_u64()),
        "{all}"
    );
    assert!(
        !all.to_string().contains(secret),
        "no argument is kept: {all}"
    );
    // The acme operator reads acme's records only.
    let (_, own) = get(&app, "/admin/v1/audit", ACME_OPS).await;
    assert_eq!(own["records"].as_array().map(Vec::len), Some(2), "{own}");
    // Pages of one record: the same records, in the same order, none twice.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/admin/v1/audit?limit=1&cursor={c}"),
            None => "/admin/v1/audit?limit=1".to_owned(),
        };
        let (_, page) = get(&app, &path, ROOT_OPS).await;
        paged.extend(page["records"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(n) => cursor = Some(n.to_owned()),
            None => break,
        }
    }
    assert_eq!(&paged, records, "paged one at a time");
    let (s, v) = get(&app, "/admin/v1/audit?limit=0", ROOT_OPS).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}

/// The operators' MCP endpoint: the admin operations as tools, for operators only, within
/// their reach, audited as `mcp`; a bulk cancel previews unless told otherwise.
#[tokio::test]
async fn operators_act_through_their_own_mcp_endpoint() {
    let app = admin_app().await;
    let slow = start(&app, ALICE, "slow_compute", json!({"seconds": 600})).await;
    let other = start(&app, ALICE, "slow_compute", json!({"seconds": 600})).await;
    let globex = start(&app, BOB, "slow_compute", json!({"seconds": 600})).await;

    // An MCP caller's token is no operator's; no token is nobody.
    let (s, _, _) = send(&app, admin_mcp(ALICE, 1, "tools/list", json!({}))).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _, _) = send(
        &app,
        admin(
            "POST",
            "/admin/mcp",
            None,
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _, _) = send(&app, admin("GET", "/admin/mcp", Some(ACME_OPS), None)).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);

    // Both handshakes.
    let (_, v, _) = send(&app, admin_mcp(ACME_OPS, 1, "server/discover", json!({}))).await;
    assert_eq!(v["result"]["resultType"], "complete", "{v}");
    assert!(v["result"]["capabilities"]["tools"].is_object(), "{v}");
    let (_, v, _) = send(
        &app,
        admin_mcp(ACME_OPS, 2, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})),
    )
    .await;
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25", "{v}");
    let (_, v, _) = send(&app, admin_mcp(ACME_OPS, 3, "tools/list", json!({}))).await;
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in [
        "list_tasks",
        "show_task",
        "cancel_task",
        "answer_task",
        "retry_task",
        "bulk_cancel",
        "rollback",
        "list_audit",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }

    // Reads within reach: acme's tasks, not globex's.
    let listed = admin_tool(&app, ACME_OPS, "list_tasks", json!({"status": "working"})).await;
    let ids: Vec<&str> = listed["structuredContent"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert!(
        ids.contains(&slow.as_str()) && !ids.contains(&globex.as_str()),
        "{listed}"
    );
    let unknown = admin_tool(&app, ACME_OPS, "show_task", json!({"id": globex})).await;
    assert_eq!(
        unknown["isError"], true,
        "another tenant's task is unknown: {unknown}"
    );
    assert_eq!(unknown["structuredContent"]["error"]["code"], "not_found");

    // A bulk cancel previews by default, then acts when told.
    let preview = admin_tool(
        &app,
        ACME_OPS,
        "bulk_cancel",
        json!({"filter": {"tool": "slow_compute"}}),
    )
    .await;
    assert_eq!(preview["structuredContent"]["preview"], true, "{preview}");
    assert_eq!(preview["structuredContent"]["matched"], 2, "{preview}");
    let cancelled = admin_tool(
        &app,
        ACME_OPS,
        "cancel_task",
        json!({"id": slow, "message": "from my client"}),
    )
    .await;
    assert_eq!(cancelled["isError"], false, "{cancelled}");
    assert_eq!(cancelled["structuredContent"]["status"], "cancelled");
    let bulk = admin_tool(
        &app,
        ACME_OPS,
        "bulk_cancel",
        json!({"filter": {"tool": "slow_compute"}, "preview": false}),
    )
    .await;
    assert_eq!(bulk["structuredContent"]["cancelled"], 1, "{bulk}");
    let (_, v) = get(&app, &format!("/admin/v1/tasks/{other}"), ACME_OPS).await;
    assert_eq!(v["status"], "cancelled");
    // Deployments are every tenant's: refused to an operator of one.
    let refused = admin_tool(&app, ACME_OPS, "rollback", json!({})).await;
    assert_eq!(
        refused["structuredContent"]["error"]["code"], "forbidden",
        "{refused}"
    );

    let audit = admin_tool(&app, ROOT_OPS, "list_audit", json!({})).await;
    let seen: Vec<(String, String)> = audit["structuredContent"]["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap_or("").to_owned(),
                format!(
                    "{}/{}",
                    r["via"].as_str().unwrap_or(""),
                    r["outcome"].as_str().unwrap_or("")
                ),
            )
        })
        .collect();
    // Newest first by time; records of one millisecond come in no set order.
    let mut seen = seen;
    seen.sort();
    assert_eq!(
        seen,
        [
            ("deployment.rollback".to_owned(), "mcp/forbidden".to_owned()),
            ("task.cancel".to_owned(), "mcp/ok".to_owned()),
            ("tasks.bulk_cancel".to_owned(), "mcp/ok".to_owned()),
        ],
        "the preview and the reads are not actions: {audit}"
    );
    newest_first(&audit["structuredContent"]["records"]);
}

/// The audit `records` are newest first by their time.
fn newest_first(records: &Value) {
    let at: Vec<u64> = records
        .as_array()
        .expect("records")
        .iter()
        .filter_map(|r| r["at"].as_u64())
        .collect();
    assert!(at.windows(2).all(|w| w[0] >= w[1]), "newest first: {at:?}");
}
