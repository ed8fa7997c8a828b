//! SSE: progress on synchronous calls and `notifications/tasks` on subscriptions.

use axum::http::StatusCode;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;

/// A synchronous call of the progress fixture that asks for progress (token `p1`).
fn progress_call() -> Value {
    let mut body = rpc(
        1,
        "tools/call",
        json!({"name": "test_tool_with_progress"}),
        caps(false),
    );
    body["params"]["_meta"]["progressToken"] = json!("p1");
    body
}

#[tokio::test]
async fn progress_streams_over_sse() {
    let app = app(vec![]).await;
    let body = progress_call();
    let (s, v, ctype) = send(&app, request_of(&body)).await;
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
async fn progress_never_streams_to_a_client_that_does_not_accept_a_stream() {
    let app = app(vec![]).await;
    let body = progress_call();
    for (accept, streams) in [
        ("application/json", false),
        ("application/json, text/event-stream", true),
        ("application/json, text/event-stream;q=0", false),
        ("*/*", true),
    ] {
        let (s, v, ctype) = send(&app, post_with(&body, "accept", accept)).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            ctype.starts_with("text/event-stream"),
            streams,
            "{accept}: {ctype}"
        );
        if !streams {
            assert_eq!(v["result"]["resultType"], "complete", "{accept}: {v}");
        }
    }
}

#[tokio::test]
async fn subscriptions_deliver_task_notifications() {
    let app = app(vec![]).await;
    let slow = json!({"name": "slow_compute", "arguments": {"seconds": 1}});
    let (_, v) = ask(&app, 1, "tools/call", slow, caps(true)).await;
    let id = task_id(&v);
    // Without the tasks declaration, asking for task notifications is -32021.
    let notifications = json!({"notifications": {"taskIds": [id]}});
    let (_, v) = ask(&app, 2, "subscriptions/listen", notifications, caps(false)).await;
    assert_eq!(code(&v), -32021);
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("notifications.taskIds"), "{message}");

    let listen = rpc(
        3,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": [id, "0123456789abcdef0123456789abcdef", "not-an-id"]}}),
        caps(true),
    );
    let resp = app
        .clone()
        .oneshot(request_of(&listen))
        .await
        .expect("response");
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
    // The result as 2026-07-28's tools/call gives it; the notification itself is no result.
    assert_eq!(last["params"]["result"]["resultType"], "complete");
    assert!(last["params"].get("resultType").is_none());
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

/// A server of the fixtures over `store` whose change feed is `observed`, and its runner,
/// which claims nothing: the tasks change only as the test says.
async fn unclaimed_server(
    store: &Arc<dyn snodo_core::store::Store>,
    observed: &Arc<snodo_core::store::ObservedStore>,
) -> (snodo_server::mcp::McpServer, snodo_runner::Runner) {
    let fixtures = fixtures().await;
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    let options = snodo_runner::RunnerOptions {
        recover: false,
        ..Default::default()
    };
    let (server, runner) = common::server_with(store, catalog, options);
    (server.with_change_feed(observed.clone()), runner)
}

/// Creates a minute of `slow_compute` for `principal` in `store`, unclaimed; its id.
async fn slow_task(
    store: &dyn snodo_core::store::Store,
    principal: &snodo_core::model::Principal,
) -> snodo_core::model::TaskId {
    let id = snodo_core::model::TaskId::generate();
    let work = snodo_runner::tool_call_work(&id, "slow_compute", json!({"seconds": 60}))
        .with_principal(principal.clone());
    let new = snodo_core::store::NewTask::new(id, principal.scope(), work);
    store.create(new).await.expect("create");
    id
}

/// A listener whose stream fell behind the change feed (its reader stalled while more
/// changes were announced than the feed holds) may have missed any change: it re-sends the
/// newest state of every watched task. Here both tasks end without an announcement of their
/// own, so only that path can tell the client. The runtime has one thread: the stream's
/// producer cannot run while the test announces, so the feed is overrun for certain.
#[tokio::test]
async fn a_listener_that_fell_behind_the_feed_gets_each_watched_tasks_newest_state() {
    use snodo_core::store::Store;
    let inner: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let observed = Arc::new(snodo_core::store::ObservedStore::new(inner.clone(), 8));
    let store: Arc<dyn Store> = observed.clone();
    let (server, runner) = unclaimed_server(&store, &observed).await;
    let principal = snodo_server::identity::local_principal();
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(slow_task(&*inner, &principal).await.to_string());
    }
    let mut stream = listen_to(&server, &principal, json!(ids)).await;
    let ack = next_message(&mut stream).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!(ids));

    for id in &ids {
        let access = inner
            .authorize(&principal, snodo_core::store::Action::Cancel, id)
            .await
            .expect("authorize");
        inner
            .cancel(&access, Some("ended unannounced".into()))
            .await
            .expect("cancel");
    }
    for _ in 0..64 {
        observed.announce(snodo_core::model::TaskId::generate());
    }
    let mut sent = std::collections::BTreeMap::new();
    while sent.len() < ids.len() {
        let n = next_message(&mut stream).await;
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        let id = n["params"]["taskId"].as_str().expect("task id").to_owned();
        sent.insert(id, n["params"]["status"].clone());
    }
    for id in &ids {
        assert_eq!(sent[id], "cancelled", "{id}: {sent:?}");
    }
    runner.shutdown().await;
}

/// A layer whose first `read` authorization of a task cancels that task (through the
/// store beneath, which announces it) before answering: a change committed while a
/// subscription is being set up.
#[derive(Default)]
struct CancelledWhileAuthorized(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl snodo_core::store::Layer for CancelledWhileAuthorized {
    async fn authorize(
        &self,
        inner: &dyn snodo_core::store::Store,
        principal: &snodo_core::model::Principal,
        action: snodo_core::store::Action,
        task_id: &str,
    ) -> snodo_core::store::StoreResult<snodo_core::store::Access> {
        let granted = inner.authorize(principal, action, task_id).await?;
        if action == snodo_core::store::Action::Read
            && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let cancel = inner
                .authorize(principal, snodo_core::store::Action::Cancel, task_id)
                .await?;
            inner
                .cancel(&cancel, Some("ended meanwhile".into()))
                .await?;
        }
        Ok(granted)
    }
}

/// A watched task that changes while its subscription is being set up (after the request
/// arrived, before the stream is answered) is not lost: the stream sends that change.
#[tokio::test]
async fn a_change_while_a_subscription_is_set_up_reaches_it() {
    use snodo_core::store::Store;
    let inner: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let observed = Arc::new(snodo_core::store::ObservedStore::new(inner.clone(), 64));
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::Layered::over(
        observed.clone(),
        CancelledWhileAuthorized::default(),
    ));
    let (server, runner) = unclaimed_server(&store, &observed).await;
    let principal = snodo_server::identity::local_principal();
    let id = slow_task(&*inner, &principal).await;
    let mut stream = listen_to(&server, &principal, json!([id.to_string()])).await;
    let ack = next_message(&mut stream).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id.to_string()])
    );
    let n = next_message(&mut stream).await;
    assert_eq!(n["method"], "notifications/tasks", "{n}");
    assert_eq!(n["params"]["taskId"], id.to_string());
    assert_eq!(n["params"]["status"], "cancelled");
    runner.shutdown().await;
}

/// `subscriptions/listen` for `task_ids` by `principal`, straight through the server: its
/// stream.
async fn listen_to(
    server: &snodo_server::mcp::McpServer,
    principal: &snodo_core::model::Principal,
    task_ids: Value,
) -> tokio::sync::mpsc::Receiver<Value> {
    let listen = rpc(
        1,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": task_ids}}),
        caps(true),
    );
    let headers = snodo_server::mcp::RoutingHeaders {
        method: Some(Ok("subscriptions/listen".into())),
        protocol_version: Some(Ok("2026-07-28".into())),
        accepts_sse: true,
        ..Default::default()
    };
    let reply = server
        .handle(
            &headers,
            &snodo_server::identity::Caller::trusted(principal.clone()),
            listen.to_string().as_bytes(),
        )
        .await;
    let snodo_server::mcp::Reply::Stream(stream) = reply else {
        panic!("subscriptions/listen answers with a stream");
    };
    stream
}

/// The next message of an SSE reply's queue.
async fn next_message(stream: &mut tokio::sync::mpsc::Receiver<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(30), stream.recv())
        .await
        .expect("a message in time")
        .expect("the stream is open")
}

/// A stream that asked for list changes hears of every catalog swap, one notification of
/// each kind asked for; one that did not ask hears nothing.
#[tokio::test]
async fn list_changes_reach_the_streams_that_asked_for_them() {
    let fixtures = fixtures().await;
    let store: Arc<dyn snodo_core::store::Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    let (server, runner) = common::server_with(&store, catalog.clone(), Default::default());
    let principal = snodo_server::identity::local_principal();
    let headers = snodo_server::mcp::RoutingHeaders {
        method: Some(Ok("subscriptions/listen".into())),
        protocol_version: Some(Ok("2026-07-28".into())),
        accepts_sse: true,
        ..Default::default()
    };
    let open = |id: i64, filter: Value| {
        let listen = rpc(
            id,
            "subscriptions/listen",
            json!({"notifications": filter}),
            caps(true),
        );
        let server = &server;
        let headers = &headers;
        let caller = snodo_server::identity::Caller::trusted(principal.clone());
        async move {
            match server
                .handle(headers, &caller, listen.to_string().as_bytes())
                .await
            {
                snodo_server::mcp::Reply::Stream(s) => s,
                _ => panic!("subscriptions/listen answers with a stream"),
            }
        }
    };
    let mut asked = open(
        1,
        json!({"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": false}),
    )
    .await;
    let ack = next_message(&mut asked).await;
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "promptsListChanged": true})
    );
    let mut other = open(2, json!({"taskIds": []})).await;
    next_message(&mut other).await;

    // A swap: one of each kind asked for, tagged with the subscription.
    server.catalog_changed();
    let first = next_message(&mut asked).await;
    let second = next_message(&mut asked).await;
    assert_eq!(
        first["method"], "notifications/tools/list_changed",
        "{first}"
    );
    assert_eq!(
        second["method"], "notifications/prompts/list_changed",
        "{second}"
    );
    assert_eq!(
        first["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        1
    );
    // And a swap after that is told again.
    server.catalog_changed();
    assert_eq!(
        next_message(&mut asked).await["method"],
        "notifications/tools/list_changed"
    );
    assert!(
        other.try_recv().is_err(),
        "a stream that did not ask hears nothing"
    );
    runner.shutdown().await;
}
