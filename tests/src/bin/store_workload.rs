//! A child process for the crash test: drives a redb store with concurrent writers and
//! prints one line per acknowledged operation, until it is killed (or a bound is reached).
//!
//! Usage: `store-workload <path> <writers>`. Lines: `created <id> <plan>`,
//! `claimed <id> <generation>`, `completed <id>`, `input <id>`.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use snodo::model::{EventId, EventKind, Scope, TaskEvent, TaskId, Work};
use snodo::store::{Authority, NewTask, RedbStore, Store};
use snodo_tests::Plan;

/// The workload stops by itself after this many tasks if nobody kills it.
const MAX_TASKS: usize = 20_000;

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    // The parent reads lines only to learn what was acknowledged; a write error means it
    // is gone, and so should we be.
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(writers)) = (args.next(), args.next()) else {
        eprintln!("usage: store-workload <path> <writers>");
        std::process::exit(2);
    };
    let writers: usize = writers.parse().unwrap_or(4);
    let rt = snodo_tests::runtime();
    let result: Result<(), String> = rt.block_on(async move {
        let store: Arc<dyn Store> =
            Arc::new(RedbStore::open(&path).map_err(|e| format!("open: {e}"))?);
        say("ready".into());
        let counter = Arc::new(AtomicUsize::new(0));
        let mut joins = Vec::new();
        for _ in 0..writers {
            let store = store.clone();
            let counter = counter.clone();
            joins.push(tokio::spawn(async move { writer(store, counter).await }));
        }
        for j in joins {
            j.await.map_err(|e| e.to_string())??;
        }
        Ok(())
    });
    if let Err(e) = result {
        eprintln!("store-workload: {e}");
        std::process::exit(1);
    }
}

async fn writer(store: Arc<dyn Store>, counter: Arc<AtomicUsize>) -> Result<(), String> {
    loop {
        let n = counter.fetch_add(1, Ordering::Relaxed);
        if n >= MAX_TASKS {
            return Ok(());
        }
        let plan = Plan::for_index(n);
        let id = TaskId::generate();
        let work = Work::new("crash/op", json!({"n": n}), id.to_string());
        store
            .create(NewTask::new(id, Scope::new("crash"), work))
            .await
            .map_err(|e| format!("create: {e}"))?;
        say(format!("created {id} {}", plan.as_str()));
        let claimed = store
            .claim(&id, &snodo::store::ClaimRequest::new(600_000, "workload"))
            .await
            .map_err(|e| format!("claim: {e}"))?;
        say(format!("claimed {id} {}", claimed.lease.generation()));
        match plan {
            Plan::Complete => {
                let kind = EventKind::Completed {
                    result: json!({"content": [{"type": "text", "text": format!("done {n}")}]}),
                };
                store
                    .transition(
                        Authority::Worker(&claimed.lease),
                        TaskEvent::random(kind),
                        None,
                    )
                    .await
                    .map_err(|e| format!("complete: {e}"))?;
                say(format!("completed {id}"));
            }
            Plan::Input => {
                let request = json!({"method": "elicitation/create", "params": {"message": "ok?"}});
                store
                    .request_input(&claimed.lease, EventId::random(), "confirm", request)
                    .await
                    .map_err(|e| format!("input: {e}"))?;
                say(format!("input {id}"));
            }
            Plan::Run => {}
        }
    }
}
