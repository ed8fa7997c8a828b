//! Every example guest, run by the real wasm host: fixtures, examples and hostile guests,
//! plus the load-time checks. Components come from `snodo-test-guests`, which builds them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use snodo_core::model::{ExecutionLimits, JsonRpcError};
use snodo_server::mcp::SyncIo;
use snodo_wasm::{
    AttemptError, CancelToken, Completing, Component, ComponentLoader, EngineConfig, Execution,
    ExecutionIo, GuestOutcome, InputAnswers, InputRequests, Limit, LoadFailure, TaskMode,
    WasmEngine,
};
use tokio::sync::OnceCell;

use crate::common;

use common::{Guests, load_guests};

static GUESTS: OnceCell<Guests> = OnceCell::const_new();

async fn guests() -> &'static Guests {
    GUESTS.get_or_init(|| load_guests(32, 64 << 20)).await
}

fn io_with(responses: Value, capabilities: Value) -> Arc<dyn ExecutionIo> {
    let responses: Map<String, Value> = responses.as_object().cloned().unwrap_or_default();
    Arc::new(SyncIo::new(responses, capabilities))
}

/// IO that answers nothing and keeps what the guest reports.
#[derive(Default)]
struct Reports {
    progress: std::sync::Mutex<Vec<(f64, Option<f64>)>>,
    logs: std::sync::Mutex<Vec<(&'static str, String)>>,
}

#[async_trait::async_trait]
impl ExecutionIo for Reports {
    async fn await_inputs(&self, requests: InputRequests, _cancel: &CancelToken) -> InputAnswers {
        Err(snodo_wasm::InputFailure::Suspend(requests))
    }

    async fn set_status(&self, _message: String) -> Result<(), snodo_wasm::IoError> {
        Ok(())
    }

    async fn progress(&self, p: snodo_wasm::Progress) {
        self.progress
            .lock()
            .expect("lock")
            .push((p.progress, p.total));
    }

    fn log(&self, level: &'static str, message: &str) {
        self.logs
            .lock()
            .expect("lock")
            .push((level, message.to_owned()));
    }
}

fn io() -> Arc<dyn ExecutionIo> {
    io_with(json!({}), json!({"elicitation": {}, "sampling": {}}))
}

async fn run(c: &Component, tool: &str, args: Value) -> Result<GuestOutcome, AttemptError> {
    run_with(c, tool, args, io()).await
}

/// [`run`] with `io` answering the guest.
async fn run_with(
    c: &Component,
    tool: &str,
    args: Value,
    io: Arc<dyn ExecutionIo>,
) -> Result<GuestOutcome, AttemptError> {
    c.execute(Execution::new(tool, args, io)).await.outcome
}

/// Runs `exec` on `c` and cancels it at once, allowing `grace` to return; the report, or a
/// failure saying `what` if the guest is still running twenty seconds on.
async fn run_cancelled(
    c: &Arc<Component>,
    mut exec: Execution,
    grace: Duration,
    what: &str,
) -> snodo_wasm::ExecutionReport {
    let cancel = CancelToken::new();
    exec.cancel = cancel.clone();
    exec.cancel_grace = grace;
    let c = c.clone();
    let running = tokio::spawn(async move { c.execute(exec).await });
    cancel.cancel();
    common::join_soon(running, what).await
}

/// Asserts the mode `c` chooses for each call of `tool`, given as `(arguments, mode)`.
async fn assert_modes(c: &Component, tool: &str, cases: &[(Value, TaskMode)]) {
    for (args, mode) in cases {
        let caller = std::sync::Arc::new(snodo_wasm::GuestCaller::default());
        assert_eq!(
            c.choose_mode(std::sync::Arc::from("t"), caller, tool, args)
                .await
                .map(|c| c.mode),
            Ok(*mode),
            "{tool} {args}"
        );
    }
}

fn text(outcome: &GuestOutcome) -> String {
    match outcome {
        GuestOutcome::Completed(r) => r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        other => panic!("expected a result, got {other:?}"),
    }
}

fn is_error(outcome: &GuestOutcome) -> bool {
    match outcome {
        GuestOutcome::Completed(r) => r["isError"] == json!(true),
        other => panic!("expected a result, got {other:?}"),
    }
}

// ---- fixtures ----

#[tokio::test]
async fn fixtures_describe_the_conformance_tools() {
    let g = guests().await;
    let modes: Vec<(&str, TaskMode)> = g
        .fixtures
        .tools()
        .iter()
        .map(|t| (t.name.as_str(), t.mode))
        .collect();
    for (name, mode) in [
        ("greet", TaskMode::Sync),
        ("slow_compute", TaskMode::Optional),
        ("failing_job", TaskMode::Required),
        ("protocol_error_job", TaskMode::Required),
        ("confirm_delete", TaskMode::Required),
        ("multi_input", TaskMode::Required),
        ("test_tool_with_task", TaskMode::Required),
        ("test_simple_text", TaskMode::Sync),
    ] {
        assert!(
            modes.contains(&(name, mode)),
            "{name} as {mode:?} in {modes:?}"
        );
    }
    let with_task = g.fixtures.tool("test_tool_with_task").expect("tool");
    assert!(with_task.has_prepare);
    assert_eq!(with_task.input_schema["type"], "object");
    let missing = g.fixtures.tool("test_missing_capability").expect("tool");
    assert_eq!(missing.required_capabilities, Some(json!({"sampling": {}})));
    assert!(!g.fixtures.info().digest.is_empty());
}

#[tokio::test]
async fn a_0_2_0_component_serves_resources_prompts_and_completions() {
    let g = guests().await;
    let c = g.fixtures.catalog();
    let uris: Vec<&str> = c.resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "test://static-text",
            "test://static-binary",
            "test://watched-resource"
        ]
    );
    assert_eq!(c.resources[0].listing["mimeType"], "text/plain");
    assert_eq!(c.templates.len(), 1);
    assert_eq!(
        c.templates[0].listing["uriTemplate"],
        "test://template/{id}/data"
    );
    let args = &c
        .prompt("test_prompt_with_arguments")
        .expect("prompt")
        .arguments;
    assert_eq!(
        args,
        &[("arg1".to_owned(), true), ("arg2".to_owned(), true)]
    );
    assert!(c.completions);

    let read = |uri: &'static str| {
        let exec = Execution::new("read", Value::Null, io());
        g.fixtures.read_resource(exec, uri)
    };
    assert_eq!(
        read("test://static-text")
            .await
            .expect("runs")
            .expect("served")
            .expect("ok"),
        json!([{"uri": "test://static-text", "mimeType": "text/plain",
                "text": "This is the content of the static text resource."}])
    );
    let t = read("test://template/123/data")
        .await
        .expect("runs")
        .expect("served")
        .expect("ok");
    let body: Value = serde_json::from_str(t[0]["text"].as_str().expect("text")).expect("json");
    assert_eq!(
        body,
        json!({"id": "123", "templateTest": true, "data": "Data for ID: 123"})
    );
    assert_eq!(
        read("test://nowhere").await.expect("runs"),
        None,
        "not served: no guest runs"
    );

    let prompt = |name: &'static str, args: Value, responses: Value| {
        let exec = Execution::new(
            name,
            Value::Null,
            io_with(responses, json!({"elicitation": {}})),
        );
        async move { g.fixtures.get_prompt(exec, name, &args).await }
    };
    let p = prompt(
        "test_prompt_with_arguments",
        json!({"arg1": "hello", "arg2": "world"}),
        json!({}),
    )
    .await
    .expect("runs")
    .expect("ok");
    assert_eq!(
        p["messages"],
        json!([{"role": "user", "content": {"type": "text",
                "text": "Prompt with arguments: arg1='hello', arg2='world'"}}])
    );
    // Bad arguments are the guest's -32602, not a trap.
    let bad = prompt(
        "test_prompt_with_arguments",
        json!({"arg1": "x"}),
        json!({}),
    )
    .await
    .expect("runs")
    .expect_err("missing arg2");
    assert_eq!(bad.code, -32602);
    // A prompt that asks suspends like a tool (MRTR), then renders with the answer.
    match prompt("test_input_required_result_prompt", json!({}), json!({})).await {
        Err(AttemptError::NeedInput(q)) => assert_eq!(q[0].0, "user_context"),
        other => panic!("expected a question, got {other:?}"),
    }
    let answered = prompt(
        "test_input_required_result_prompt",
        json!({}),
        json!({"user_context": {"action": "accept", "content": {"context": "tests"}}}),
    )
    .await
    .expect("runs")
    .expect("ok");
    assert_eq!(
        answered["messages"][0]["content"]["text"],
        "Prompt with context: tests"
    );

    let done = g
        .fixtures
        .complete(
            std::sync::Arc::from("t"),
            Completing::Prompt("test_prompt_with_arguments"),
            "arg1",
            "par",
            &json!({}),
        )
        .await
        .expect("runs")
        .expect("ok");
    assert_eq!(done["values"], json!(["paris", "park", "party"]));
    let ids = g
        .fixtures
        .complete(
            std::sync::Arc::from("t"),
            Completing::Template("test://template/{id}/data"),
            "id",
            "4",
            &json!({}),
        )
        .await
        .expect("runs")
        .expect("ok");
    assert_eq!(ids["values"], json!(["456"]));
}

#[tokio::test]
async fn a_0_1_0_component_still_serves_its_tools_and_no_catalog() {
    let g = guests().await;
    // The hostile guest is bound to snodo:tasks@0.1.0 directly.
    assert!(g.hostile.tool("counter").is_some());
    assert_eq!(
        g.hostile.catalog(),
        &snodo_wasm::ComponentCatalog::default()
    );
    let out = run(&g.hostile, "counter", json!({})).await.expect("runs");
    assert!(!is_error(&out), "{out:?}");
}

#[tokio::test]
async fn a_0_2_0_component_still_serves_its_tools_and_its_catalog() {
    let g = guests().await;
    let v2 = g
        .loader
        .load(snodo_test_guests::CATALOG_V2)
        .await
        .expect("a 0.2.0 component loads");
    let out = run(&v2, "v2_echo", json!({"x": 1})).await.expect("runs");
    assert_eq!(text(&out), r#"v2: {"x":1}"#);
    assert_eq!(v2.catalog().resources.len(), 1);
    let exec = Execution::new("read", Value::Null, io());
    let read = v2
        .read_resource(exec, "v2://readme")
        .await
        .expect("runs")
        .expect("served")
        .expect("ok");
    assert_eq!(read[0]["text"], "served by a 0.2.0 component");
}

#[tokio::test]
async fn greet_says_hello_exactly() {
    let g = guests().await;
    let out = run(&g.fixtures, "greet", json!({"name": "sep-2243"}))
        .await
        .expect("greet");
    assert_eq!(text(&out), "Hello, sep-2243!");
    assert!(!is_error(&out));
    // Arguments of the wrong type are the tool's invalid params, not a trap.
    let out = run(&g.fixtures, "greet", json!({"name": 42}))
        .await
        .expect("greet");
    assert!(
        matches!(
            out,
            GuestOutcome::Failed {
                error: JsonRpcError { code: -32602, .. },
                ..
            }
        ),
        "{out:?}"
    );
    let out = run(&g.fixtures, "greet", json!({})).await.expect("greet");
    assert_eq!(text(&out), "Hello, World!");
}

#[tokio::test]
async fn slow_compute_chooses_its_mode_per_call_and_honours_cancellation() {
    let g = guests().await;
    assert_modes(
        &g.fixtures,
        "slow_compute",
        &[
            (json!({"seconds": 0}), TaskMode::Sync),
            (json!({"seconds": 2}), TaskMode::Optional),
        ],
    )
    .await;
    let out = run(
        &g.fixtures,
        "slow_compute",
        json!({"seconds": 0, "label": "x"}),
    )
    .await
    .expect("run");
    assert!(text(&out).contains("x"));

    // Cancelled mid-sleep: the guest notices through its token and returns.
    let exec = Execution::new("slow_compute", json!({"seconds": 60}), io());
    let grace = Duration::from_secs(30);
    let report = run_cancelled(&g.fixtures, exec, grace, "a cancelled guest stops").await;
    let out = report.outcome.expect("cooperative stop returns an outcome");
    assert!(is_error(&out));
    assert!(text(&out).contains("cancelled"));
}

#[tokio::test]
async fn failing_and_protocol_error_jobs() {
    let g = guests().await;
    let out = run(&g.fixtures, "failing_job", json!({}))
        .await
        .expect("run");
    assert!(is_error(&out), "a tool error completes with isError");
    let out = run(&g.fixtures, "protocol_error_job", json!({}))
        .await
        .expect("run");
    match out {
        GuestOutcome::Failed { error: e, .. } => {
            assert_eq!(e.code, -32603);
            assert!(!e.message.is_empty());
        }
        other => panic!("expected a protocol failure, got {other:?}"),
    }
}

#[tokio::test]
async fn confirm_delete_asks_then_deletes() {
    let g = guests().await;
    let err = run(&g.fixtures, "confirm_delete", json!({"filename": "a.txt"}))
        .await
        .expect_err("needs input");
    let AttemptError::NeedInput(questions) = err else {
        panic!("{err:?}")
    };
    assert_eq!(questions.len(), 1);
    assert_eq!(questions[0].0, "confirm");
    assert_eq!(questions[0].1["method"], "elicitation/create");
    assert_eq!(
        questions[0].1["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );

    let answered = io_with(
        json!({"confirm": {"action": "accept", "content": {"confirm": true}}}),
        json!({"elicitation": {}}),
    );
    let out = run_with(
        &g.fixtures,
        "confirm_delete",
        json!({"filename": "a.txt"}),
        answered,
    )
    .await
    .expect("answered");
    assert_eq!(text(&out), "Deleted a.txt");

    // Without the elicitation capability the tool is told, and reports it as a tool error.
    let no_caps = io_with(json!({}), json!({}));
    let out = run_with(
        &g.fixtures,
        "confirm_delete",
        json!({"filename": "a.txt"}),
        no_caps,
    )
    .await
    .expect("outcome");
    assert!(is_error(&out));
    assert!(text(&out).contains("elicitation"), "{}", text(&out));
}

#[tokio::test]
async fn multi_input_asks_two_questions_at_once() {
    let g = guests().await;
    let err = run(&g.fixtures, "multi_input", json!({}))
        .await
        .expect_err("needs input");
    let AttemptError::NeedInput(questions) = err else {
        panic!("{err:?}")
    };
    let keys: Vec<&str> = questions.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, vec!["input-a", "input-b"]);
    // The harness answers with content that does not match the schema; that is fine.
    let both = io_with(
        json!({"input-a": {"action": "accept", "content": {"name": "p", "confirm": true}},
               "input-b": {"action": "accept", "content": {"name": "p", "confirm": true}}}),
        json!({"elicitation": {}}),
    );
    let out = run_with(&g.fixtures, "multi_input", json!({}), both)
        .await
        .expect("ok");
    assert!(text(&out).starts_with("Received both answers"));
}

#[tokio::test]
async fn test_tool_with_task_prepares_then_greets() {
    let g = guests().await;
    let err = g
        .fixtures
        .prepare(Execution::new("test_tool_with_task", json!({}), io()))
        .await
        .expect_err("asks first");
    let AttemptError::NeedInput(questions) = err else {
        panic!("{err:?}")
    };
    assert_eq!(questions[0].0, "user_name");
    let answered = io_with(
        json!({"user_name": {"action": "accept", "content": {"name": "Alice"}}}),
        json!({"elicitation": {}}),
    );
    let args = g
        .fixtures
        .prepare(Execution::new("test_tool_with_task", json!({}), answered))
        .await
        .expect("prepared")
        .expect("no error");
    assert_eq!(args["name"], "Alice");
    let out = run(&g.fixtures, "test_tool_with_task", args)
        .await
        .expect("run");
    assert_eq!(text(&out), "Hello, Alice! (async)");
}

#[tokio::test]
async fn core_fixtures_return_their_content() {
    let g = guests().await;
    let out = run(&g.fixtures, "test_simple_text", json!({}))
        .await
        .expect("run");
    assert_eq!(text(&out), "This is a simple text response for testing.");
    let GuestOutcome::Completed(r) = run(&g.fixtures, "test_image_content", json!({}))
        .await
        .expect("run")
    else {
        panic!()
    };
    assert_eq!(r["content"][0]["type"], "image");
    assert_eq!(r["content"][0]["mimeType"], "image/png");
    let GuestOutcome::Completed(r) = run(&g.fixtures, "test_embedded_resource", json!({}))
        .await
        .expect("run")
    else {
        panic!()
    };
    assert_eq!(
        r["content"][0]["resource"],
        json!({"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."})
    );
    let GuestOutcome::Completed(r) = run(&g.fixtures, "test_multiple_content_types", json!({}))
        .await
        .expect("run")
    else {
        panic!()
    };
    let kinds: Vec<&str> = r["content"]
        .as_array()
        .expect("content")
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(kinds, vec!["text", "image", "resource"]);
    let out = run(&g.fixtures, "test_error_handling", json!({}))
        .await
        .expect("run");
    assert!(is_error(&out));

    // Progress and log lines reach the execution's IO as the guest reports them.
    let reports = Arc::new(Reports::default());
    for tool in ["test_tool_with_progress", "test_logging_tool"] {
        run_with(&g.fixtures, tool, json!({}), reports.clone())
            .await
            .expect("run");
    }
    assert_eq!(
        *reports.logs.lock().expect("lock"),
        vec![("info", "test_logging_tool ran".to_owned())]
    );
    let seen = reports.progress.lock().expect("lock").clone();
    assert_eq!(
        seen,
        vec![
            (0.0, Some(100.0)),
            (50.0, Some(100.0)),
            (100.0, Some(100.0))
        ]
    );
}

// ---- examples ----

#[tokio::test]
async fn examples_quick_report_durable_export_and_flaky() {
    let g = guests().await;
    assert_modes(
        &g.examples,
        "quick_report",
        &[
            (json!({"rows": 10}), TaskMode::Sync),
            (json!({"rows": 5_000_000}), TaskMode::Optional),
        ],
    )
    .await;
    let GuestOutcome::Completed(r) = run(&g.examples, "quick_report", json!({"rows": 10}))
        .await
        .expect("run")
    else {
        panic!()
    };
    assert_eq!(r["structuredContent"], json!({"rows": 10, "sum": 45}));

    let answered = io_with(
        json!({"export-confirmation": {"action": "accept", "content": {"confirm": true}}}),
        json!({"elicitation": {}}),
    );
    let mut exec = Execution::new("durable_export", json!({"dataset": "sales"}), answered);
    exec.idempotency_key = "task-123".into();
    exec.attempt = 2;
    let GuestOutcome::Completed(r) = g.examples.execute(exec).await.outcome.expect("run") else {
        panic!()
    };
    assert_eq!(
        r["structuredContent"],
        json!({"dataset": "sales", "exportId": "export-task-123", "attempt": 2})
    );

    let declined = io_with(
        json!({"export-confirmation": {"action": "decline"}}),
        json!({"elicitation": {}}),
    );
    let out = run_with(
        &g.examples,
        "durable_export",
        json!({"dataset": "sales"}),
        declined,
    )
    .await
    .expect("run");
    assert!(text(&out).contains("not confirmed"));

    let mut exec = Execution::new("flaky", json!({"succeed_on_attempt": 3}), io());
    exec.attempt = 1;
    let out = g.examples.execute(exec).await.outcome.expect("run");
    match out {
        GuestOutcome::Retry {
            error,
            status_message,
        } => {
            assert_eq!(error.code, -32000);
            assert!(status_message.contains("attempt 1"));
        }
        other => panic!("expected a retry, got {other:?}"),
    }
    let mut exec = Execution::new("flaky", json!({"succeed_on_attempt": 3}), io());
    exec.attempt = 3;
    let out = g.examples.execute(exec).await.outcome.expect("run");
    assert_eq!(text(&out), "succeeded on attempt 3");
}

// ---- hostile guests ----

#[tokio::test]
async fn every_execution_gets_a_fresh_instance() {
    let g = guests().await;
    for _ in 0..3 {
        let out = run(&g.hostile, "counter", json!({})).await.expect("run");
        assert_eq!(text(&out), "1");
    }
}

#[tokio::test]
async fn guests_have_no_ambient_authority() {
    let g = guests().await;
    // A port that would accept: a refusal is the host's, not the network's.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let out = run(&g.hostile, "probe", json!({"port": port}))
        .await
        .expect("run");
    let report = text(&out);
    assert!(report.contains("env=\n"), "no environment: {report}");
    assert!(report.contains("root=Err"), "no filesystem: {report}");
    assert!(report.contains("granted=Err"), "{report}");
    // No sockets and no name lookups, even for a tool granted outbound HTTP to everything.
    let mut exec = Execution::new("probe", json!({"port": port}), io());
    exec.grants.http = Some(std::sync::Arc::new(snodo_wasm::outbound::HttpGrant::new(
        snodo_wasm::outbound::AllowList::parse(&["*://*:*"]).expect("list"),
    )));
    for out in [
        out.clone(),
        g.hostile.execute(exec).await.outcome.expect("run"),
    ] {
        let report = text(&out);
        for refused in ["connect=Err", "bind=Err", "lookup=Err"] {
            assert!(report.contains(refused), "{refused}: {report}");
        }
    }

    // Grants open exactly what they name.
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("hello.txt"), "hi there").expect("write");
    let mut exec = Execution::new("probe", json!({}), io());
    exec.grants.env.push(("REGION".into(), "eu".into()));
    exec.grants.dirs.push(snodo_wasm::DirGrant {
        host: dir.path().to_path_buf(),
        guest: "/granted".into(),
        writable: false,
    });
    let out = g.hostile.execute(exec).await.outcome.expect("run");
    let report = text(&out);
    assert!(report.contains("env=REGION"), "{report}");
    assert!(report.contains("hi there"), "{report}");
}

#[tokio::test]
async fn a_runaway_loop_hits_its_deadline_and_the_host_keeps_serving() {
    let g = guests().await;
    let mut exec = Execution::new("spin", json!({}), io());
    exec.limits = ExecutionLimits {
        deadline_ms: Some(200),
        ..ExecutionLimits::default()
    };
    let report = g.hostile.execute(exec).await;
    assert_eq!(
        report.outcome,
        Err(AttemptError::Limit(Limit::Deadline { ms: 200 }))
    );
    let e = report.outcome.expect_err("limit").to_rpc_error();
    assert_eq!(e.code, -32603);
    assert_eq!(
        e.data.as_ref().map(|d| d["kind"].clone()),
        Some(json!("limit"))
    );
    assert_eq!(
        e.data.as_ref().map(|d| d["limit"].clone()),
        Some(json!("deadline"))
    );
    let out = run(&g.fixtures, "greet", json!({"name": "still here"}))
        .await
        .expect("run");
    assert_eq!(text(&out), "Hello, still here!");
}

#[tokio::test]
async fn a_memory_bomb_hits_its_cap_and_memory_returns() {
    let g = guests().await;
    for _ in 0..3 {
        let mut exec = Execution::new("memory_bomb", json!({}), io());
        exec.limits = ExecutionLimits {
            memory_bytes: Some(16 << 20),
            ..ExecutionLimits::default()
        };
        let report = g.hostile.execute(exec).await;
        assert_eq!(
            report.outcome,
            Err(AttemptError::Limit(Limit::Memory { bytes: 16 << 20 }))
        );
    }
    // The engine's own cap applies when the work names none.
    let report = g
        .hostile
        .execute(Execution::new("memory_bomb", json!({}), io()))
        .await;
    assert_eq!(
        report.outcome,
        Err(AttemptError::Limit(Limit::Memory { bytes: 64 << 20 }))
    );
    let out = run(&g.fixtures, "greet", json!({"name": "after"}))
        .await
        .expect("run");
    assert_eq!(text(&out), "Hello, after!");
}

#[tokio::test]
async fn a_trap_is_reported_with_the_guests_message() {
    let g = guests().await;
    let report = g
        .hostile
        .execute(Execution::new("trap", json!({}), io()))
        .await;
    let Err(AttemptError::Trap(detail)) = &report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert!(detail.contains("unreachable"), "{detail}");
    assert!(
        report
            .logs
            .iter()
            .any(|l| l.level == "stderr" && l.message.contains("traps on purpose")),
        "the panic message is captured: {:?}",
        report.logs
    );
    assert_eq!(report.outcome.expect_err("trap").kind(), "trap");
}

#[tokio::test]
async fn invalid_outcomes_and_reserved_codes_are_caught() {
    let g = guests().await;
    let out = run(&g.hostile, "invalid_outcome", json!({})).await;
    assert!(
        matches!(out, Err(AttemptError::InvalidOutcome(_))),
        "{out:?}"
    );
    // A structured result that breaks the tool's own outputSchema is not passed on.
    match run(&g.hostile, "broken_promise", json!({})).await {
        Err(AttemptError::InvalidOutcome(why)) => assert!(why.contains("outputSchema"), "{why}"),
        other => panic!("{other:?}"),
    }
    let out = run(&g.hostile, "reserved_code", json!({}))
        .await
        .expect("run");
    match out {
        GuestOutcome::Failed { error: e, .. } => {
            assert_eq!(e.code, -32603);
            assert_eq!(e.data.expect("data")["guestCode"], -32042);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn guests_that_ignore_cancellation_are_stopped_after_the_grace_period() {
    let g = guests().await;
    for tool in ["ignore_cancel", "spin"] {
        let exec = Execution::new(tool, json!({}), io());
        let grace = Duration::from_millis(100);
        let stopped = format!("{tool} was not stopped");
        let report = run_cancelled(&g.hostile, exec, grace, &stopped).await;
        assert_eq!(report.outcome, Err(AttemptError::Cancelled), "{tool}");
    }
}

#[tokio::test]
async fn floods_of_output_are_bounded() {
    let g = guests().await;
    let report = g
        .hostile
        .execute(Execution::new("chatty", json!({}), io()))
        .await;
    assert_eq!(text(&report.outcome.expect("run")), "done talking");
    assert!(
        report.logs.len() <= 1_000 + 64 + 64,
        "{} lines kept",
        report.logs.len()
    );
    assert!(report.dropped_logs > 0);
}

// ---- loading ----

#[tokio::test]
async fn bad_components_are_refused_at_load_with_the_file_and_reason() {
    let g = guests().await;
    let err = g
        .loader
        .load(snodo_test_guests::BAD_DESCRIBE)
        .await
        .expect_err("bad describe");
    assert!(err.path.ends_with("bad_describe.wasm"));
    let LoadFailure::Description(why) = &err.reason else {
        panic!("a refused description: {err}");
    };
    assert!(
        why.contains("described twice") || why.contains("not valid JSON"),
        "{err}"
    );

    // 2,000 patterns would keep most of a gigabyte resident: refused before any compiles.
    let err = g
        .loader
        .load(snodo_test_guests::SCHEMA_BOMB)
        .await
        .expect_err("schema bomb");
    let LoadFailure::Description(why) = &err.reason else {
        panic!("a refused description: {err}");
    };
    assert!(
        why.contains("2000 regular expressions") && why.contains("MAX_SCHEMA_PATTERNS"),
        "{err}"
    );

    let err = g
        .loader
        .load(snodo_test_guests::NOT_AN_EXECUTOR)
        .await
        .expect_err("wrong world");
    assert!(matches!(err.reason, LoadFailure::NotAnExecutor(_)), "{err}");
    assert!(
        err.to_string()
            .contains("not a snodo:tasks executor of 0.1.0, 0.2.0, 0.3.0 or 0.4.0"),
        "{err}"
    );

    let dir = tempfile::tempdir().expect("tmp");
    let module = dir.path().join("module.wasm");
    std::fs::write(&module, b"\0asm\x01\0\0\0").expect("write");
    let err = g.loader.load(&module).await.expect_err("core module");
    assert!(matches!(err.reason, LoadFailure::CoreModule(_)), "{err}");
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");

    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"definitely not wasm").expect("write");
    let err = g.loader.load(&garbage).await.expect_err("garbage");
    assert!(matches!(err.reason, LoadFailure::Invalid(_)), "{err}");
    assert!(
        err.to_string()
            .contains("not a valid WebAssembly component"),
        "{err}"
    );
    assert!(err.to_string().contains("garbage.wasm"), "{err}");

    let err = g
        .loader
        .load(dir.path().join("missing.wasm"))
        .await
        .expect_err("missing");
    assert!(matches!(err.reason, LoadFailure::Unreadable(_)), "{err}");
    assert!(err.to_string().contains("cannot read"), "{err}");
}

#[tokio::test]
async fn a_restart_finds_compiled_components_in_the_disk_cache() {
    let cache = tempfile::tempdir().expect("tmp");
    let engine = WasmEngine::new(EngineConfig {
        allocation: snodo_wasm::Allocation::OnDemand,
        ..EngineConfig::default()
    })
    .expect("engine");
    let first =
        ComponentLoader::new(engine.clone(), Some(cache.path().to_path_buf())).expect("loader");
    let c = first.load(snodo_test_guests::EXAMPLES).await.expect("load");
    assert!(!c.info().cache_hit, "the first load compiles");
    let entries = std::fs::read_dir(cache.path()).expect("cache dir").count();
    assert_eq!(entries, 1, "one precompiled entry");

    // A new loader (as after a restart) deserializes instead of compiling.
    let second = ComponentLoader::new(engine, Some(cache.path().to_path_buf())).expect("loader");
    let c = second
        .load(snodo_test_guests::EXAMPLES)
        .await
        .expect("load");
    assert!(c.info().cache_hit, "the restart found the cached code");
    let out = run(&c, "quick_report", json!({"rows": 3}))
        .await
        .expect("run");
    assert!(matches!(out, GuestOutcome::Completed(_)));

    // A damaged cache entry is recompiled, not trusted.
    for e in std::fs::read_dir(cache.path()).expect("dir") {
        std::fs::write(e.expect("entry").path(), b"damaged").expect("damage");
    }
    let engine = WasmEngine::new(EngineConfig {
        allocation: snodo_wasm::Allocation::OnDemand,
        ..EngineConfig::default()
    })
    .expect("engine");
    let third = ComponentLoader::new(engine, Some(cache.path().to_path_buf())).expect("loader");
    let c = third.load(snodo_test_guests::EXAMPLES).await.expect("load");
    assert!(!c.info().cache_hit);
}

/// Regression: an entry copied over another component's cache name made that component
/// serve the copied code; an altered entry was deserialized as it was.
#[tokio::test]
async fn a_copied_or_altered_cache_entry_is_recompiled() {
    let cache = tempfile::tempdir().expect("tmp");
    let engine = || {
        WasmEngine::new(EngineConfig {
            allocation: snodo_wasm::Allocation::OnDemand,
            ..EngineConfig::default()
        })
        .expect("engine")
    };
    let dir = Some(cache.path().to_path_buf());
    let first = ComponentLoader::new(engine(), dir.clone()).expect("loader");
    first
        .load(snodo_test_guests::FIXTURES)
        .await
        .expect("fixtures");
    let fixtures_entry = only_entry(cache.path());
    first
        .load(snodo_test_guests::HOSTILE)
        .await
        .expect("hostile");
    let hostile_entry = std::fs::read_dir(cache.path())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .find(|p| *p != fixtures_entry)
        .expect("hostile entry");
    // The fixtures' code under the hostile component's name.
    std::fs::copy(&fixtures_entry, &hostile_entry).expect("copy");
    let second = ComponentLoader::new(engine(), dir.clone()).expect("loader");
    let c = second.load(snodo_test_guests::HOSTILE).await.expect("load");
    assert!(!c.info().cache_hit, "the copied entry was not used");
    assert!(
        c.tools().iter().any(|t| t.name == "spin"),
        "the hostile component's own tools"
    );
    assert!(!c.tools().iter().any(|t| t.name == "greet"));

    // One altered byte in the compiled code.
    let mut bytes = std::fs::read(&fixtures_entry).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&fixtures_entry, bytes).expect("alter");
    let third = ComponentLoader::new(engine(), dir).expect("loader");
    let c = third.load(snodo_test_guests::FIXTURES).await.expect("load");
    assert!(!c.info().cache_hit, "the altered entry was not used");
    assert!(c.tools().iter().any(|t| t.name == "greet"));
}

fn only_entry(dir: &std::path::Path) -> std::path::PathBuf {
    let entries: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

#[tokio::test]
async fn fuel_limits_end_a_computing_guest() {
    let engine = WasmEngine::new(EngineConfig {
        allocation: snodo_wasm::Allocation::OnDemand,
        fuel: true,
        ..EngineConfig::default()
    })
    .expect("engine");
    let loader = ComponentLoader::new(engine, None).expect("loader");
    let hostile = loader
        .load(snodo_test_guests::HOSTILE)
        .await
        .expect("hostile");
    let mut exec = Execution::new("spin", json!({}), io());
    exec.limits = ExecutionLimits {
        fuel: Some(5_000_000),
        ..ExecutionLimits::default()
    };
    let report = hostile.execute(exec).await;
    assert_eq!(
        report.outcome,
        Err(AttemptError::Limit(Limit::Fuel { units: 5_000_000 }))
    );
    // Work without a fuel limit still runs on a fuel-metered engine.
    let out = run(&hostile, "counter", json!({})).await.expect("run");
    assert_eq!(text(&out), "1");
}

/// A `describe` that sleeps (in an import, where the execution deadline does not count)
/// is stopped by the load-time wall clock and the component refused, naming the limit;
/// a description is asked for once per digest.
#[tokio::test]
async fn a_describe_that_sleeps_is_stopped_by_the_load_wall_clock() {
    let engine = WasmEngine::new(EngineConfig {
        allocation: snodo_wasm::Allocation::OnDemand,
        ..EngineConfig::default()
    })
    .expect("engine");
    let loader = ComponentLoader::new(engine, None)
        .expect("loader")
        .with_describe_wall_clock(std::time::Duration::from_millis(300));
    let err = loader
        .load(snodo_test_guests::SLOW_DESCRIBE)
        .await
        .expect_err("a minute of describe");
    assert!(
        matches!(
            err.reason,
            LoadFailure::DescribeFailed {
                call: "describe",
                error: snodo_wasm::AttemptError::Limit(snodo_wasm::Limit::WallClock { .. }),
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("describe() failed"), "{err}");
    assert!(
        err.to_string().contains("wall"),
        "names the wall clock: {err}"
    );
    assert_eq!(
        loader.descriptions_kept(),
        0,
        "a failed description is not kept"
    );

    let first = loader
        .load(snodo_test_guests::EXAMPLES)
        .await
        .expect("load");
    let again = loader
        .load(snodo_test_guests::EXAMPLES)
        .await
        .expect("load");
    assert_eq!(loader.descriptions_kept(), 1, "one description per digest");
    assert_eq!(first.tools(), again.tools());
}
