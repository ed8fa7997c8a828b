//! Schedules: declared through the admin API, fired by two nodes sharing one store on the
//! store's clock (exactly one task per firing, with the id derived from the firing), missed
//! firings caught up to their bound, paused, resumed, run now, and refused clearly.

use axum::http::StatusCode;
use serde_json::{Value, json};

use snodo_core::model::{Clock, ManualClock, Schedule, TaskId, TaskStatus, Timestamp, firing_id};
use snodo_core::store::{MemoryStore, Store};
use snodo_runner::RunnerOptions;
use snodo_server::mcp::McpServer;

use super::*;

/// 2026-12-07T00:00:00Z.
const T0: u64 = 1_796_601_600_000;
const MIN: u64 = 60_000;

struct Nodes {
    clock: ManualClock,
    store: Arc<dyn Store>,
    a: Arc<McpServer>,
    b: Arc<McpServer>,
    app: snodo_server::http::App,
}

/// Two servers (nodes) over one store on a manual clock; the admin API of the first.
async fn nodes() -> Nodes {
    let clock = ManualClock::new(Timestamp(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let fixtures = fixtures().await;
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    let options = RunnerOptions {
        poll_interval: Duration::from_millis(10),
        ..RunnerOptions::default()
    };
    let (a, _) = common::server_with(&store, catalog.clone(), options.clone());
    let (b, _) = common::server_with(&store, catalog, options);
    let a = Arc::new(a);
    let app = router(
        a.clone(),
        HttpConfig {
            max_body_bytes: 64 << 10,
            admin: ops_admin(),
            ..HttpConfig::default()
        },
    );
    Nodes {
        clock,
        store,
        a,
        b: Arc::new(b),
        app,
    }
}

async fn admin(
    app: &snodo_server::http::App,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    as_operator(app, method, path, token, body).await
}

/// Advances the clock to `at` and fires what is due on both nodes at once; the tasks fired.
async fn both_fire_at(n: &Nodes, at: u64) -> u64 {
    let now = n.clock.now().as_millis();
    n.clock.advance(at - now);
    let (a, b) = tokio::join!(n.a.fire_due_schedules(), n.b.fire_due_schedules());
    a.expect("pass on a").fired + b.expect("pass on b").fired
}

async fn row(n: &Nodes, name: &str) -> Schedule {
    n.store
        .schedule(name)
        .await
        .expect("read")
        .expect("a schedule")
}

/// Waits until the task `id` finished; its status and result.
async fn finished(n: &Nodes, id: TaskId) -> (TaskStatus, Value) {
    common::eventually("the firing's task finishes", || async {
        let (task, _) = n.store.inspect(&id).await.ok()??;
        task.status.is_terminal().then(|| {
            let out = match &task.outcome {
                Some(snodo_core::model::Outcome::Result(r)) => r.clone(),
                _ => Value::Null,
            };
            (task.status, out)
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_fire_each_firing_once_as_the_schedules_subject() {
    let n = nodes().await;
    let (s, v) = admin(
        &n.app,
        "POST",
        "/admin/v1/schedules",
        ROOT_OPS,
        Some(
            json!({"name": "whoami", "tool": "test_whoami", "tenant": "acme",
            "subject": "nightly-bot", "every_ms": MIN}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["nextAt"], json!(T0 + MIN));
    assert_eq!(v["cadenceText"], "every 60 s");
    assert_eq!(v["upcoming"].as_array().map(Vec::len), Some(5));
    let key = row(&n, "whoami").await.key;

    assert_eq!(both_fire_at(&n, T0 + MIN - 1).await, 0, "not yet due");
    for k in 1..=3 {
        let at = T0 + k * MIN;
        assert_eq!(both_fire_at(&n, at + 7).await, 1, "firing {k}: one task");
        let id = firing_id(key, Timestamp(at));
        let (status, out) = finished(&n, id).await;
        assert_eq!(status, TaskStatus::Completed);
        assert_eq!(out["structuredContent"]["tenant"], "acme");
        assert_eq!(out["structuredContent"]["subject"], "nightly-bot");
        let r = row(&n, "whoami").await;
        assert_eq!((r.fired, r.skipped), (k, 0));
        assert_eq!(r.last.as_ref().map(|l| l.task_id), Some(id));
        assert_eq!(r.next_at, Some(Timestamp(at + MIN)));
        assert_eq!(both_fire_at(&n, at + 9).await, 0, "firing {k} again: none");
    }
    let (s, v) = admin(&n.app, "GET", "/admin/v1/schedules/whoami", ROOT_OPS, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["lastTask"]["status"], "completed");
    assert_eq!(v["fired"], 3);
    let counted = |server: &McpServer, outcome: &str| -> u64 {
        let prefix = format!("snodo_schedule_firings_total{{outcome=\"{outcome}\"}} ");
        server
            .metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
            .and_then(|v| v.parse().ok())
            .expect("the counter is exposed")
    };
    assert_eq!(
        counted(&n.a, "fired") + counted(&n.b, "fired"),
        3,
        "each firing counted by the node that fired it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_firings_are_caught_up_to_their_bound_and_a_pause_misses_none() {
    let n = nodes().await;
    let (s, v) = admin(
        &n.app,
        "POST",
        "/admin/v1/schedules",
        ROOT_OPS,
        Some(
            json!({"name": "catch-up", "tool": "greet", "arguments": {"name": "Ada"},
            "tenant": "acme", "cron": "* * * * *", "zone": "Europe/Paris",
            "missed": "all", "catch_up": 3}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let key = row(&n, "catch-up").await.key;
    // Ten minutes pass with no node up: the latest three are fired, oldest first.
    assert_eq!(both_fire_at(&n, T0 + 10 * MIN + 5).await, 3);
    let r = row(&n, "catch-up").await;
    assert_eq!((r.fired, r.skipped), (3, 7));
    assert_eq!(r.next_at, Some(Timestamp(T0 + 11 * MIN)));
    for k in 8..=10 {
        let (status, out) = finished(&n, firing_id(key, Timestamp(T0 + k * MIN))).await;
        assert_eq!(status, TaskStatus::Completed);
        assert_eq!(out["content"][0]["text"], "Hello, Ada!");
    }

    // Paused: nothing fires; resumed: on from the next firing, nothing counted missed.
    let (s, v) = admin(
        &n.app,
        "POST",
        "/admin/v1/schedules/catch-up/pause",
        ROOT_OPS,
        None,
    )
    .await;
    assert_eq!((s, &v["paused"]), (StatusCode::OK, &json!(true)), "{v}");
    assert_eq!(both_fire_at(&n, T0 + 30 * MIN).await, 0);
    let (s, v) = admin(
        &n.app,
        "POST",
        "/admin/v1/schedules/catch-up/resume",
        ROOT_OPS,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["nextAt"], json!(T0 + 31 * MIN));
    assert_eq!(both_fire_at(&n, T0 + 31 * MIN).await, 1);
    let r = row(&n, "catch-up").await;
    assert_eq!((r.fired, r.skipped), (4, 7));

    // Run now: one task outside the cadence, which the cadence does not count.
    let (s, v) = admin(
        &n.app,
        "POST",
        "/admin/v1/schedules/catch-up/run",
        ROOT_OPS,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["schedule"]["last"]["taskId"], v["task"]["id"],
        "the row names the task the run made: {v}"
    );
    assert_eq!(v["schedule"]["last"]["manual"], true);
    assert_eq!(v["schedule"]["nextAt"], json!(T0 + 32 * MIN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_declarations_and_foreign_schedules_are_refused_clearly() {
    let n = nodes().await;
    let declare = |body: Value, token: &'static str| {
        let app = n.app.clone();
        async move { admin(&app, "POST", "/admin/v1/schedules", token, Some(body)).await }
    };
    let base = json!({"name": "x", "tool": "test_whoami", "tenant": "acme", "every_ms": MIN});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    for (body, says) in [
        (with("tool", json!("nope")), "tool: no tool named \"nope\""),
        (with("every_ms", json!(10)), "shorter than the least"),
        (with("cron", json!("* * * * *")), "not both"),
        (with("name", json!("no spaces")), "name \"no spaces\""),
        (with("arguments", json!({"retry": "yes"})), "arguments:"),
        (
            with("tool", json!("test_tool_with_task")),
            "nobody to answer them",
        ),
        (
            json!({"name": "x", "tool": "greet", "tenant": "acme", "cron": "* * * * *",
                "zone": "Mars/Olympus"}),
            "time zone \"Mars/Olympus\"",
        ),
    ] {
        let (s, v) = declare(body, ROOT_OPS).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message:?} says {says:?}");
    }
    // A tenant's operator declares for its own tenant only, and sees only its own.
    let (s, _) = declare(with("tenant", json!("globex")), ACME_OPS).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = declare(with("tenant", json!("globex")), ROOT_OPS).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = admin(&n.app, "GET", "/admin/v1/schedules", ACME_OPS, None).await;
    assert_eq!(
        (s, v["schedules"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0))
    );
    for (method, path) in [
        ("GET", "/admin/v1/schedules/x"),
        ("POST", "/admin/v1/schedules/x/run"),
        ("DELETE", "/admin/v1/schedules/x"),
        ("GET", "/admin/v1/schedules/unknown"),
    ] {
        let (s, v) = admin(&n.app, method, path, ACME_OPS, None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{method} {path}: {v}");
    }
    // The configuration's schedules are changed there, not through the API.
    n.a.start_schedules(
        &[snodo_core::model::ScheduleDeclaration {
            name: "configured".into(),
            tool: "test_whoami".into(),
            arguments: Default::default(),
            tenant: "acme".into(),
            subject: None,
            cron: None,
            zone: None,
            every_ms: Some(MIN),
            missed: Default::default(),
            missed_after_ms: None,
            catch_up: None,
        }
        .spec()
        .expect("a spec")],
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("declared")
    .abort();
    let (s, v) = admin(
        &n.app,
        "DELETE",
        "/admin/v1/schedules/configured",
        ROOT_OPS,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, v) = declare(with("name", json!("configured")), ROOT_OPS).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, _) = admin(
        &n.app,
        "POST",
        "/admin/v1/schedules/configured/pause",
        ROOT_OPS,
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "pausing one is an operator's call");
    let (s, v) = admin(&n.app, "DELETE", "/admin/v1/schedules/x", ROOT_OPS, None).await;
    assert_eq!((s, &v["removed"]), (StatusCode::OK, &json!("x")));
    assert!(n.store.schedule("x").await.expect("read").is_none());
}
