//! A task's life as one trace: `snodo serve` exports spans over OTLP to a receiver in this
//! test, which decodes them; the task asks for confirmation and parks, the server is killed
//! with SIGKILL, the answer reaches the restarted server, the task resumes (its first
//! outbound request answered from the journal) and completes. The span tree is checked:
//! one trace under the caller's `traceparent`, the attempts under the task's span and
//! linked to each other, their steps under them, the task's events, the requests about
//! the task linked to its span, and no argument, answer, result or secret in any
//! attribute. Then the same over gRPC, and at a sampling ratio of 0.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::{get, post};
use serde_json::{Value, json};
use snodo_otel::receiver::{ReceivedSpan, Receiver};

use common::process::{ServeProcess, post_mcp, request, spawn_serve};

const PATIENCE: Duration = Duration::from_secs(60);
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const ARGUMENT: &str = "argument-marker-title-5178";
const ANSWER: &str = "answer-marker-2240";
const RESULT: &str = "result-marker-ticket-9031";
const SECRET: &str = "tk_secret_marker_6612";

/// A ticket service: `GET /template`, `POST /tickets` (answering with a ticket id that
/// the tool puts in its result). Counts the requests it received.
async fn ticket_service() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (g, p) = (seen.clone(), seen.clone());
    let app = axum::Router::new()
        .route(
            "/template",
            get(move || async move {
                g.lock().expect("lock").push("GET".into());
                "template-1"
            }),
        )
        .route(
            "/tickets",
            post(move || async move {
                p.lock().expect("lock").push("POST".into());
                (
                    axum::http::StatusCode::CREATED,
                    format!("{{\"id\":\"{RESULT}\"}}"),
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

fn config(dir: &std::path::Path, service: SocketAddr, otlp: &str) -> std::path::PathBuf {
    let base = format!("http://{service}");
    let path = dir.join("node.toml");
    std::fs::write(
        &path,
        format!(
            r#"listen = "127.0.0.1:0"
cache_dir = "{data}/cache"

[node]
id = "node-traced"

[store]
kind = "redb"
path = "{data}/tasks.redb"

[runner]
park_after_ms = 200

[[components]]
path = "{component}"

[secrets]
ticket_key = {{ env = "SNODO_TRACES_TICKET_KEY" }}

[tools.open_ticket]
allowed_outbound_hosts = ["{base}"]
inject = [{{ host = "{base}", header = "X-Api-Key", value = "{{secret.ticket_key}}" }}]

{otlp}
"#,
            data = dir.display(),
            component = snodo_test_guests::OUTBOUND,
        ),
    )
    .expect("config");
    path
}

fn serve(conf: &std::path::Path) -> ServeProcess {
    spawn_serve(
        &["--config", conf.to_str().expect("utf-8")],
        &[("SNODO_TRACES_TICKET_KEY", SECRET)],
    )
}

/// A 2026-07-28 request declaring the tasks extension, carrying `traceparent` when given.
fn traced(method: &str, params: Value, traceparent: Option<&str>) -> Value {
    let mut r = request(method, params, true);
    r["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"] = json!({});
    if let Some(tp) = traceparent {
        r["params"]["_meta"]["traceparent"] = json!(tp);
    }
    r
}

async fn task_status(addr: SocketAddr, task: &str) -> Value {
    let (status, reply) = post_mcp(addr, &traced("tasks/get", json!({"taskId": task}), None)).await;
    assert_eq!(status, 200, "{reply}");
    reply["result"].clone()
}

async fn await_status(addr: SocketAddr, task: &str, want: &str) -> Value {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let t = task_status(addr, task).await;
        if t["status"] == want {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never reached {want}: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn event_names(s: &ReceivedSpan) -> Vec<&str> {
    s.events.iter().map(|(n, _)| n.as_str()).collect()
}

fn children<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id && s.trace_id == parent.trace_id)
        .collect()
}

/// Runs the task that parks, survives a kill -9 and completes, exporting with `otlp`
/// (the `[telemetry.otlp]` table); returns every span received and the task id.
async fn a_parked_task_across_a_crash(
    receiver: &Receiver,
    otlp: &str,
    done: impl Fn(&[ReceivedSpan]) -> bool,
) -> (Vec<ReceivedSpan>, String) {
    let dir = tempfile::tempdir().expect("tmp");
    let (service, seen) = ticket_service().await;
    let conf = config(dir.path(), service, otlp);
    let server = serve(&conf);
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let (status, created) = post_mcp(
        server.addr,
        &traced(
            "tools/call",
            json!({"name": "open_ticket", "arguments": {"base": format!("http://{service}"), "title": ARGUMENT}}),
            Some(&traceparent),
        ),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let task = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    await_status(server.addr, &task, "input_required").await;
    // The first attempt parks after `park_after_ms`; its span is exported before the kill.
    receiver
        .wait_for(PATIENCE, |spans| {
            spans.iter().any(|s| {
                s.name == "attempt open_ticket"
                    && s.attributes.get("snodo.outcome").map(String::as_str) == Some("parked")
            })
        })
        .await;
    // Dropping the process kills it with SIGKILL and reaps it.
    drop(server);

    let server = serve(&conf);
    let (status, ack) = post_mcp(
        server.addr,
        &traced(
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"confirm-ticket": {"action": "accept", "content": {"confirm": true, "note": ANSWER}}}}),
            None,
        ),
    )
    .await;
    assert_eq!(status, 200, "{ack}");
    let finished = await_status(server.addr, &task, "completed").await;
    assert!(finished.to_string().contains(RESULT), "{finished}");
    assert_eq!(
        *seen.lock().expect("lock"),
        ["GET", "POST"],
        "one GET (answered from the journal after the restart) and one POST"
    );
    let spans = receiver.wait_for(PATIENCE, done).await;
    drop(server);
    (spans, task)
}

fn whole_task(spans: &[ReceivedSpan]) -> bool {
    let task_ended = spans.iter().any(|s| s.name == "task open_ticket");
    let get_linked = spans
        .iter()
        .any(|s| s.name == "tasks/get" && !s.links.is_empty());
    let completed_attempt = spans.iter().any(|s| {
        s.name == "attempt open_ticket"
            && s.attributes.get("snodo.outcome").map(String::as_str) == Some("completed")
    });
    task_ended && get_linked && completed_attempt
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_life_is_one_trace_across_a_park_and_a_kill() {
    let receiver = Receiver::start().await.expect("receiver");
    let otlp = format!(
        "[telemetry.otlp]\nendpoint = \"{}\"\ninterval_ms = 50\n",
        receiver.http_endpoint()
    );
    let (spans, task) = a_parked_task_across_a_crash(&receiver, &otlp, whole_task).await;
    let dump = || {
        spans
            .iter()
            .map(|s| {
                format!(
                    "{} {} <- {} {:?}",
                    s.name, s.span_id, s.parent_span_id, s.attributes
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(whole_task(&spans), "spans:\n{}", dump());
    assert!(spans.iter().all(|s| s.via == "http"));

    // The caller's call: a server span under the caller's span, per the MCP conventions.
    let call = named(&spans, "tools/call open_ticket");
    assert_eq!(call.len(), 1, "{}", dump());
    let call = call[0];
    assert_eq!(
        (call.trace_id.as_str(), call.parent_span_id.as_str()),
        (CALLER_TRACE, CALLER_SPAN)
    );
    assert_eq!(call.kind, 2, "SERVER");
    let attr = |s: &ReceivedSpan, k: &str| s.attributes.get(k).cloned().unwrap_or_default();
    assert_eq!(attr(call, "mcp.method.name"), "tools/call");
    assert_eq!(attr(call, "gen_ai.tool.name"), "open_ticket");
    assert_eq!(attr(call, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(attr(call, "jsonrpc.request.id"), "1");
    assert_eq!(attr(call, "mcp.task.id"), task);

    // The task's span: the caller's child, from creation to completion, with its history.
    let task_span = named(&spans, "task open_ticket");
    assert_eq!(task_span.len(), 1, "written once, by the completing commit");
    let task_span = task_span[0];
    assert_eq!(task_span.trace_id, CALLER_TRACE);
    assert_eq!(task_span.parent_span_id, CALLER_SPAN);
    assert_eq!(attr(task_span, "mcp.task.id"), task);
    assert_eq!(attr(task_span, "mcp.task.status"), "completed");
    assert!(!task_span.error);
    let events = event_names(task_span);
    for e in [
        "claimed",
        "started",
        "input_requested",
        "parked",
        "input_answered",
        "resumed",
        "completed",
    ] {
        assert!(events.contains(&e), "task event {e}: {events:?}");
    }
    assert!(
        call.links
            .iter()
            .any(|(t, s, _)| *t == CALLER_TRACE && *s == task_span.span_id),
        "the creating call links to the task's span"
    );

    // Attempts: children of the task's span, on either side of the kill, the later linked
    // to the one before it.
    let attempts = children(&spans, task_span);
    let attempts: Vec<_> = attempts
        .into_iter()
        .filter(|s| s.name == "attempt open_ticket")
        .collect();
    assert!(attempts.len() >= 2, "{}", dump());
    let outcome = |s: &ReceivedSpan| attr(s, "snodo.outcome");
    let parked = attempts
        .iter()
        .find(|s| outcome(s) == "parked")
        .expect("the parked attempt");
    let completed = attempts
        .iter()
        .find(|s| outcome(s) == "completed")
        .expect("the completing attempt");
    for a in &attempts {
        if a.attributes["snodo.claim.generation"] != "1" {
            let (_, previous, _) = a.links.first().expect("linked to the attempt before");
            assert!(
                spans.iter().any(|s| s.span_id == *previous),
                "the previous attempt {previous} was received"
            );
        }
    }
    assert_ne!(parked.resource["service.instance.id"], "");
    assert_eq!(parked.resource["service.name"], "snodo");
    assert!(event_names(parked).contains(&"input_requested"));
    assert!(event_names(parked).contains(&"parked"));
    assert!(event_names(completed).contains(&"resumed"));
    assert!(event_names(completed).contains(&"input_answered"));

    // Each attempt's steps: the claim, the instantiation, the execution with its outbound
    // requests under it, the store commits.
    for (attempt, outbound) in [(parked, vec!["GET"]), (completed, vec!["GET", "POST"])] {
        let steps = children(&spans, attempt);
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("store claim") || *n == "store create_claimed"),
            "{names:?}"
        );
        assert!(names.contains(&"instantiate"), "{names:?}");
        assert!(names.iter().any(|n| n.starts_with("store ")), "{names:?}");
        let exec = steps
            .iter()
            .find(|s| s.name == "execute_tool open_ticket")
            .unwrap_or_else(|| panic!("{names:?}"));
        let requests: Vec<&str> = children(&spans, exec)
            .iter()
            .filter(|s| s.kind == 3 && s.attributes.contains_key("http.request.method"))
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            requests, outbound,
            "outbound requests of {}",
            attempt.span_id
        );
    }
    let replayed_get = children(&spans, completed)
        .iter()
        .flat_map(|exec| children(&spans, exec))
        .find(|s| s.name == "GET")
        .expect("the replayed GET");
    assert_eq!(attr(replayed_get, "snodo.outbound.replayed"), "true");
    assert_eq!(attr(replayed_get, "http.response.status_code"), "200");

    // Requests about the task link to its span.
    for method in ["tasks/get", "tasks/update"] {
        let linked = named(&spans, method).into_iter().any(|s| {
            s.links.iter().any(|(_, l, _)| *l == task_span.span_id)
                && attr(s, "mcp.task.id") == task
        });
        assert!(linked, "a {method} links to the task's span");
    }

    // Nothing the caller, the user, the tool or the operator's secret said.
    for s in &spans {
        for v in s.all_values() {
            for (what, marker) in [
                ("an argument", ARGUMENT),
                ("an answer", ANSWER),
                ("a result", RESULT),
                ("a secret", SECRET),
            ] {
                assert!(!v.contains(marker), "{what} in span {}: {v}", s.name);
            }
        }
        assert!(!s.name.contains(ARGUMENT));
    }
}

/// The same over gRPC; and at a sampling ratio of 0 nothing of a caller-less task is sent,
/// while a caller that sampled its trace still gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_a_grpc_collector_and_sampling_decides_per_trace() {
    let receiver = Receiver::start().await.expect("receiver");
    let otlp = format!(
        "[telemetry.otlp]\nendpoint = \"{}\"\nprotocol = \"grpc\"\ninterval_ms = 50\n",
        receiver.grpc_endpoint()
    );
    let (spans, _) = a_parked_task_across_a_crash(&receiver, &otlp, whole_task).await;
    assert!(whole_task(&spans));
    assert!(spans.iter().all(|s| s.via == "grpc"));

    let quiet = Receiver::start().await.expect("receiver");
    let dir = tempfile::tempdir().expect("tmp");
    let (service, _) = ticket_service().await;
    let otlp = format!(
        "[telemetry.otlp]\nendpoint = \"{}\"\ninterval_ms = 50\nsampling_ratio = 0.0\n",
        quiet.http_endpoint()
    );
    let server = serve(&config(dir.path(), service, &otlp));
    let (status, _) = post_mcp(server.addr, &traced("tools/list", json!({}), None)).await;
    assert_eq!(status, 200);
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let (status, _) = post_mcp(
        server.addr,
        &traced("tools/list", json!({}), Some(&traceparent)),
    )
    .await;
    assert_eq!(status, 200);
    let got = quiet
        .wait_for(PATIENCE, |s| s.iter().any(|s| s.name == "tools/list"))
        .await;
    let by_trace: BTreeMap<&str, usize> = got.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.trace_id.as_str()).or_default() += 1;
        m
    });
    assert_eq!(
        by_trace.keys().copied().collect::<Vec<_>>(),
        [CALLER_TRACE],
        "only the caller's sampled trace is recorded: {got:?}"
    );
    let (_, metrics) = common::process::get(server.addr, "/metrics").await;
    assert!(
        metrics.contains("snodo_spans_total{outcome=\"exported\"}"),
        "{metrics}"
    );
}
