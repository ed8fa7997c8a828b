//! A host process for the runner crash test: a runner over a redb store with the fixture
//! tools, driven by line commands on stdin, answering on stdout.
//!
//! Commands: `create <tool> <json-args>` → `created <id>`; `answer <id> <key> <json>` →
//! `answered <id> <complete>`; `get <id>` → `task <json>`. Prints `ready` once serving.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use snodo::model::{EventId, Principal, Scope, TaskId};
use snodo::runner::{Catalog, NoInstrumentation, Runner, RunnerOptions, tool_call_work};
use snodo::store::{Action, Effect, NewTask, RedbStore, Store};
use snodo::wasm::{ComponentLoader, EngineConfig, WasmEngine};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: runner-host <store.redb>");
        std::process::exit(2);
    };
    let rt = snodo_tests::runtime();
    if let Err(e) = rt.block_on(serve(path)) {
        eprintln!("runner-host: {e}");
        std::process::exit(1);
    }
}

async fn serve(path: String) -> Result<(), String> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).map_err(|e| e.to_string())?);
    let engine = WasmEngine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
    // Every restart of the crash test finds the fixtures compiled by an earlier one.
    let loader = ComponentLoader::new(engine, Some(snodo_test_guests::COMPONENT_CACHE.into()))
        .map_err(|e| e.to_string())?;
    let fixtures = loader
        .load(snodo_test_guests::FIXTURES)
        .await
        .map_err(|e| e.to_string())?;
    let registry = Catalog::new()
        .with_component(&fixtures)
        .map_err(|e| e.to_string())?;
    let opts = RunnerOptions {
        poll_interval: Duration::from_millis(20),
        heartbeat: Duration::from_millis(500),
        lease: Duration::from_secs(5),
        ..RunnerOptions::default()
    };
    let runner = Runner::start(
        store.clone(),
        Arc::new(registry),
        opts,
        Arc::new(NoInstrumentation),
    );
    say("ready");
    let principal = Principal::new("crash", "tester");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    while let Some(line) = rx.recv().await {
        let mut parts = line.splitn(4, ' ');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("create"), Some(tool), Some(args), None) => {
                let args: Value = serde_json::from_str(args).map_err(|e| e.to_string())?;
                let id = TaskId::generate();
                let mut new =
                    NewTask::new(id, Scope::new("crash"), tool_call_work(&id, tool, args));
                new.client_capabilities = json!({"elicitation": {}});
                store.create(new).await.map_err(|e| e.to_string())?;
                runner.submit(&id).await.map_err(|e| e.to_string())?;
                say(&format!("created {id}"));
            }
            (Some("answer"), Some(id), Some(key), Some(answer)) => {
                let answer: Value = serde_json::from_str(answer).map_err(|e| e.to_string())?;
                let access = store
                    .authorize(&principal, Action::Update, id)
                    .await
                    .map_err(|e| e.to_string())?;
                let responses: Map<String, Value> =
                    [(key.to_owned(), answer)].into_iter().collect();
                let c = store
                    .accept_input(&access, EventId::random(), responses)
                    .await
                    .map_err(|e| e.to_string())?;
                let complete = matches!(c.effect, Effect::Accepted { complete: true, .. });
                runner.input_accepted(access.task_id(), complete).await;
                say(&format!("answered {id} {complete}"));
            }
            (Some("get"), Some(id), None, None) => {
                let id = TaskId::parse(id).ok_or("bad id")?;
                let (t, _) = store
                    .inspect(&id)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("no such task")?;
                let outcomes = t
                    .events
                    .iter()
                    .filter(|e| e.id.ends_with("-outcome"))
                    .count();
                let text = match &t.outcome {
                    Some(snodo::model::Outcome::Result(r)) => r["content"][0]["text"].clone(),
                    _ => Value::Null,
                };
                let view = json!({
                    "status": t.status, "attempt": t.attempt, "revision": t.revision,
                    "generation": t.generation, "claimed": t.claim.is_some(),
                    "inputs": t.inputs.keys().collect::<Vec<_>>(),
                    "outstanding": t.outstanding_inputs().map(|(k, _)| k).collect::<Vec<_>>(),
                    "outcomes": outcomes, "text": text,
                });
                say(&format!("task {view}"));
            }
            _ => say(&format!("error unknown command {line:?}")),
        }
    }
    runner.shutdown().await;
    Ok(())
}
