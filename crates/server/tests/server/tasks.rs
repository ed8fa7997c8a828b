//! The task flow end to end: input, cancellation, tenants, failures and MRTR.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;

/// The POST of `body`, bearing `token` if there is one.
fn with_token(body: &Value, token: Option<&str>) -> Request<Body> {
    let mut b = post(body);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b.body(Body::from(body.to_string())).expect("request")
}

/// Sends `get` (a `tasks/get`, bearing `token`) until the task's status is `status`; the
/// task as it is then.
async fn await_status(
    app: &snodo_server::http::App,
    get: &Value,
    token: Option<&str>,
    status: &str,
) -> Value {
    common::eventually(&format!("the task to be {status}"), move || async move {
        let (_, v, _) = send(app, with_token(get, token)).await;
        (v["result"]["status"] == status).then(|| v["result"].clone())
    })
    .await
}

/// Task `id` (of a server without tokens) once its status is `status`.
async fn await_task(app: &snodo_server::http::App, id: &str, status: &str) -> Value {
    let get = rpc(100, "tasks/get", json!({"taskId": id}), caps(true));
    await_status(app, &get, None, status).await
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
    let as_alice = |body: &Value| send(&app, with_token(body, Some(&alice.0)));
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

    let (s, v, _) = as_alice(&create).await;
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
    let id = task_id(&v);

    // Another tenant sees nothing.
    let get = rpc(2, "tasks/get", json!({"taskId": id}), caps(true));
    let (_, v, _) = send(&app, with_token(&get, Some(&bob.0))).await;
    assert_eq!(code(&v), -32602);
    let cancel = rpc(3, "tasks/cancel", json!({"taskId": id}), caps(true));
    let (_, v, _) = send(&app, with_token(&cancel, Some(&bob.0))).await;
    assert_eq!(code(&v), -32602);

    // Parks in input_required with the question inlined.
    let parked = await_status(&app, &get, Some(&alice.0), "input_required").await;
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
    let (_, v, _) = as_alice(&update(json!({"unknown-key": {"ignored": true}}))).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let yes = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    let (_, v, _) = as_alice(&update(yes)).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let done = await_status(&app, &get, Some(&alice.0), "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Deleted a.txt");
    assert_eq!(done["result"]["resultType"], "complete");
    assert!(done.get("inputRequests").is_none() && done.get("error").is_none());
    // Cancelling a finished task: the same ack, nothing changes.
    let (_, v, _) = as_alice(&cancel).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let (_, v, _) = as_alice(&get).await;
    assert_eq!(v["result"]["status"], "completed");
}

#[tokio::test]
async fn failures_cancellation_and_mrtr() {
    let app = app(vec![]).await;
    // A protocol error fails the task; a tool error completes it with isError.
    let protocol_error = json!({"name": "protocol_error_job"});
    let (_, v) = ask(&app, 1, "tools/call", protocol_error, caps(true)).await;
    let t = await_task(&app, &task_id(&v), "failed").await;
    assert_eq!(t["error"]["code"], -32603);
    assert!(t.get("result").is_none());
    // Cancellation of a long task settles it.
    let long = json!({"name": "slow_compute", "arguments": {"seconds": 60}});
    let (_, v) = ask(&app, 2, "tools/call", long, caps(true)).await;
    let id = task_id(&v);
    let (_, v) = ask(&app, 3, "tasks/cancel", json!({"taskId": id}), caps(true)).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let t = await_task(&app, &id, "cancelled").await;
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
    let t = await_task(&app, &task_id(&v), "completed").await;
    assert_eq!(t["result"]["content"][0]["text"], "Hello, Alice! (async)");
}

/// A layer that commits every cancellation and then holds its answer at its gate: the
/// commit is in the store, and its request has not heard back.
#[derive(Default, Clone)]
struct HeldAnswers(common::Gate);

#[async_trait::async_trait]
impl snodo_core::store::Layer for HeldAnswers {
    async fn transition(
        &self,
        inner: &dyn snodo_core::store::Store,
        t: snodo_core::store::Transition<'_>,
    ) -> snodo_core::store::StoreResult<snodo_core::store::Committed> {
        let cancel = matches!(t.event.kind, snodo_core::model::EventKind::Cancelled { .. });
        let committed = t.apply(inner).await?;
        if cancel {
            self.0.hold().await;
        }
        Ok(committed)
    }
}

/// A `tasks/cancel` whose client disconnected after the cancellation committed, before the
/// reply: the runner must still hear of it and stop the guest at once. The heartbeat is fifty
/// minutes, so only the hand-off can stop it within the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_runner_though_its_client_left_mid_commit() {
    let fixtures = fixtures().await;
    let gate = HeldAnswers::default();
    let store: Arc<dyn snodo_core::store::Store> = Arc::new(snodo_core::store::Layered::over(
        Arc::new(snodo_core::store::MemoryStore::new()),
        gate.clone(),
    ));
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    let options = snodo_runner::RunnerOptions {
        heartbeat: Duration::from_secs(3_000),
        lease: Duration::from_secs(3_600),
        ..snodo_runner::RunnerOptions::default()
    };
    let (server, runner) = common::server_with(&store, catalog, options);
    let app = router(Arc::new(server), HttpConfig::default());

    let long = json!({"name": "slow_compute", "arguments": {"seconds": 3600}});
    let (_, v) = ask(&app, 1, "tools/call", long, caps(true)).await;
    assert!(v["result"]["taskId"].is_string(), "{v}");
    let id = task_id(&v);
    common::eventually("the attempt to run", || async {
        (runner.active() == 1).then_some(())
    })
    .await;

    let cancel = rpc(2, "tasks/cancel", json!({"taskId": id}), caps(true));
    let request = tokio::spawn({
        let app = app.clone();
        async move { send(&app, request_of(&cancel)).await }
    });
    // Committed, unanswered: the client goes away now.
    gate.0.until_held(1).await;
    request.abort();
    assert!(request.await.is_err(), "the request was dropped mid-commit");
    gate.0.open();

    common::eventually("the cancelled guest to stop", || async {
        (runner.active() == 0).then_some(())
    })
    .await;
    let t = await_task(&app, &id, "cancelled").await;
    assert_eq!(t["statusMessage"], "Cancelled by the client");
    runner.shutdown().await;
}

/// Writes down what the runner hands an executor (the work it resolves, the execution it
/// runs), then resolves and runs as the catalog does.
struct Recording {
    catalog: Arc<snodo_runner::Catalog>,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl snodo_runner::Executors for Recording {
    fn resolve(
        &self,
        work: &snodo_core::model::Work,
    ) -> Result<snodo_runner::Resolved, snodo_runner::Unresolved> {
        let written = serde_json::to_string(work).expect("work serializes");
        self.seen.lock().expect("lock").push(written);
        let mut resolved = self.catalog.resolve(work)?;
        resolved.component = Arc::new(RecordingExecutable {
            inner: resolved.component,
            seen: self.seen.clone(),
        });
        Ok(resolved)
    }
}

struct RecordingExecutable {
    inner: Arc<dyn snodo_wasm::Executable>,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl snodo_wasm::Executable for RecordingExecutable {
    async fn execute(&self, exec: snodo_wasm::Execution) -> snodo_wasm::ExecutionReport {
        let given = format!(
            "{:?} {} {} {} {} {:?} {:?}",
            exec.task_id,
            exec.tool,
            exec.arguments,
            exec.idempotency_key,
            exec.attempt,
            exec.limits,
            exec.grants,
        );
        self.seen.lock().expect("lock").push(given);
        self.inner.execute(exec).await
    }
}

/// What reaches an executor, and what is stored with a task, is the work: the tool's
/// arguments and the caller's identity. Never the request's id, its `_meta` (progress token
/// and any other key), or the bearer token it was authorized by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_and_the_stored_work_get_the_principal_and_no_request_fields() {
    const TOKEN: &str = "bearer-marker-0123456789";
    let fixtures = fixtures().await;
    let store: Arc<dyn snodo_core::store::Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    let seen = Arc::<std::sync::Mutex<Vec<String>>>::default();
    let recording = Arc::new(Recording {
        catalog: catalog.clone(),
        seen: seen.clone(),
    });
    let (server, runner) = common::server_over(
        &store,
        recording,
        catalog,
        Default::default(),
        Default::default(),
    );
    let ada = Principal::new("acme", "ada");
    let config = HttpConfig {
        tokens: vec![(TOKEN.to_owned(), ada.clone())],
        ..HttpConfig::default()
    };
    let app = router(Arc::new(server), config);

    let mut call = rpc(
        1,
        "tools/call",
        json!({"name": "protocol_error_job"}),
        caps(true),
    );
    call["id"] = json!("request-id-marker");
    call["params"]["_meta"]["progressToken"] = json!("progress-marker");
    call["params"]["_meta"]["com.example/trace"] = json!("meta-marker");
    let (_, v, _) = send(&app, with_token(&call, Some(TOKEN))).await;
    let id = task_id(&v);
    let get = rpc(2, "tasks/get", json!({"taskId": id}), caps(true));
    await_status(&app, &get, Some(TOKEN), "failed").await;

    let task_id = snodo_core::model::TaskId::parse(&id).expect("task id");
    let (task, work) = store
        .inspect(&task_id)
        .await
        .expect("inspect")
        .expect("stored");
    assert_eq!(work.principal, Some(ada));
    let stored = format!(
        "{} {}",
        serde_json::to_string(&task).expect("task"),
        serde_json::to_string(&work).expect("work")
    );
    let mut given = seen.lock().expect("lock").clone();
    assert_eq!(
        given.len(),
        2,
        "one resolution and one execution: {given:?}"
    );
    given.push(stored);
    for text in &given {
        for marker in [TOKEN, "request-id-marker", "progress-marker", "meta-marker"] {
            assert!(!text.contains(marker), "{marker} reached {text}");
        }
    }
    assert!(
        given[1].contains(&id),
        "the execution names its task: {}",
        given[1]
    );
    runner.shutdown().await;
}

/// A task keeps its caller's W3C trace context (SEP-414's `_meta` keys, else the HTTP
/// headers) with its work, with a span of its own, so every attempt continues the trace; an
/// invalid `traceparent` is ignored, never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_keeps_its_callers_trace_context() {
    const META_PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const HEADER_PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let fixtures = fixtures().await;
    let store: Arc<dyn snodo_core::store::Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    let (server, _runner) = common::server_with(&store, catalog, Default::default());
    let app = router(Arc::new(server), HttpConfig::default());

    // Creates a task with `_meta` trace keys `meta` and HTTP headers `headers`; its stored
    // trace context.
    let traced = |meta: Value, headers: Vec<(&'static str, &'static str)>| {
        let app = app.clone();
        let store = store.clone();
        async move {
            let mut call = rpc(
                1,
                "tools/call",
                json!({"name": "protocol_error_job"}),
                caps(true),
            );
            for (k, v) in meta.as_object().expect("object") {
                call["params"]["_meta"][k] = v.clone();
            }
            let mut req = request_of(&call);
            for (name, value) in headers {
                req.headers_mut()
                    .append(name, value.parse().expect("header"));
            }
            let (status, v, _) = send(&app, req).await;
            assert_eq!(status, StatusCode::OK, "{v}");
            let id = snodo_core::model::TaskId::parse(&task_id(&v)).expect("task id");
            let (_, work) = store.inspect(&id).await.expect("inspect").expect("stored");
            work.trace
        }
    };

    let from_meta = traced(
        json!({"traceparent": META_PARENT, "tracestate": "rojo=00f067aa0ba902b7", "baggage": "user=ada"}),
        vec![],
    )
    .await
    .expect("kept from _meta");
    assert_eq!(from_meta.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        from_meta.parent_span_id.as_deref(),
        Some("00f067aa0ba902b7")
    );
    assert!(from_meta.sampled);
    assert_eq!(
        from_meta.tracestate.as_deref(),
        Some("rojo=00f067aa0ba902b7")
    );
    assert_eq!(from_meta.baggage.as_deref(), Some("user=ada"));
    assert_eq!(from_meta.task_span_id.len(), 16);
    assert_ne!(
        from_meta.task_span_id, "00f067aa0ba902b7",
        "the task has its own span"
    );

    let from_header = traced(
        json!({}),
        vec![("traceparent", HEADER_PARENT), ("baggage", "k=v")],
    )
    .await
    .expect("kept from the headers");
    assert_eq!(from_header.trace_id, "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(
        from_header.parent_span_id.as_deref(),
        Some("b7ad6b7169203331")
    );
    assert!(!from_header.sampled);
    assert_eq!(from_header.baggage.as_deref(), Some("k=v"));

    let both = traced(
        json!({"traceparent": META_PARENT}),
        vec![("traceparent", HEADER_PARENT)],
    )
    .await
    .expect("kept");
    assert_eq!(
        both.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736",
        "_meta comes first"
    );

    let invalid_meta = traced(
        json!({"traceparent": "00-zz-not-a-trace"}),
        vec![("traceparent", HEADER_PARENT)],
    )
    .await
    .expect("the header's");
    assert_eq!(invalid_meta.trace_id, "0af7651916cd43dd8448eb211c80319c");

    assert_eq!(
        traced(json!({"traceparent": 7}), vec![]).await,
        None,
        "ignored, not refused"
    );
    assert_eq!(traced(json!({}), vec![]).await, None);
    let split = traced(
        json!({}),
        vec![
            ("traceparent", HEADER_PARENT),
            ("baggage", "a=1"),
            ("baggage", "b=2"),
        ],
    )
    .await
    .expect("kept");
    assert_eq!(
        split.baggage.as_deref(),
        Some("a=1,b=2"),
        "lines of one header join"
    );
    let twice = traced(
        json!({}),
        vec![("traceparent", HEADER_PARENT), ("traceparent", META_PARENT)],
    )
    .await;
    assert_eq!(twice, None, "a repeated traceparent is invalid");
}

#[tokio::test]
async fn a_sleeping_task_is_working_and_says_until_when_and_a_cancel_ends_it() {
    let app = app(vec![]).await;
    // Five minutes: within the ten-minute TTL the test catalog gives every tool.
    let sleep = json!({"name": "test_sleep", "arguments": {"ms": 300_000}});
    let (_, v) = ask(&app, 1, "tools/call", sleep, caps(true)).await;
    let id = task_id(&v);
    let get = rpc(2, "tasks/get", json!({"taskId": id}), caps(true));
    let t = common::eventually("the task to sleep", || async {
        let (_, v, _) = send(&app, with_token(&get, None)).await;
        v["result"]["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("sleeping until "))
            .then(|| v["result"].clone())
    })
    .await;
    assert_eq!(t["status"], "working");
    // The message names the instant, after the task's last update.
    let until =
        t["statusMessage"].as_str().unwrap_or_default()["sleeping until ".len()..].to_owned();
    assert!(until.ends_with('Z') && until.len() == 24, "{until}");
    assert!(
        until.as_str() > t["lastUpdatedAt"].as_str().unwrap_or_default(),
        "{t}"
    );
    let (_, v) = ask(&app, 3, "tasks/cancel", json!({"taskId": id}), caps(true)).await;
    assert_eq!(v["result"], json!({"resultType": "complete"}));
    let t = await_task(&app, &id, "cancelled").await;
    assert_eq!(t["statusMessage"], "Cancelled by the client");
}
