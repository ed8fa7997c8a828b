//! Kill-and-reopen: a child process drives the redb store with concurrent writers and is
//! killed with SIGKILL mid-workload; the store is reopened and every write the child had
//! acknowledged (printed) must be there, with the dead process's claims fenced at once.
//! Repeated on the same file, so several crashes accumulate.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use snodo::model::{Principal, TaskId, TaskStatus};
use snodo::store::prelude::*;
use snodo::store::{Action, ClaimRequest, RedbStore};
use snodo_tests::Plan;

#[derive(Debug, Default)]
struct Acked {
    plan: Option<Plan>,
    generation: u64,
    completed: bool,
    input: bool,
}

/// Runs the child until it has printed `acks` operation lines, kills it, and returns every
/// line it printed (all of them acknowledged before the kill).
fn run_and_kill(path: &std::path::Path, acks: usize) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_store-workload"))
        .arg(path)
        .arg("8")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the workload");
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = BufReader::new(stdout);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut ops = 0;
    while ops < acks {
        line.clear();
        let n = reader.read_line(&mut line).expect("read");
        assert!(
            n > 0,
            "the workload exited early; lines so far: {}",
            lines.len()
        );
        if line.trim() != "ready" {
            ops += 1;
        }
        lines.push(line.trim().to_owned());
    }
    // std's kill is SIGKILL on Unix: no destructor, no flush, no clean close.
    child.kill().expect("SIGKILL");
    // Lines already in the pipe were acknowledged before the kill.
    for rest in reader.lines() {
        match rest {
            Ok(l) if !l.is_empty() => lines.push(l),
            _ => break,
        }
    }
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the child was killed, not finished");
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("crash.redb");
    let mut model: HashMap<TaskId, Acked> = HashMap::new();

    for (round, acks) in [300usize, 700, 150].into_iter().enumerate() {
        for line in run_and_kill(&path, acks) {
            let mut parts = line.split_whitespace();
            let (Some(op), Some(id)) = (parts.next(), parts.next()) else {
                continue;
            };
            let id = TaskId::parse(id).expect("task id");
            let entry = model.entry(id).or_default();
            match op {
                "created" => entry.plan = parts.next().and_then(Plan::parse),
                "claimed" => {
                    entry.generation = parts.next().and_then(|g| g.parse().ok()).expect("gen")
                }
                "completed" => entry.completed = true,
                "input" => entry.input = true,
                other => panic!("unexpected line {other}"),
            }
        }

        let store = RedbStore::open(&path).expect("reopen after SIGKILL");
        assert_eq!(
            store.epoch(),
            (round as u64 + 1) * 2,
            "the boot epoch advanced"
        );
        let principal = Principal::new("crash", "checker");
        let mut expect_due = Vec::new();
        for (id, acked) in &model {
            let plan = acked.plan.expect("every acknowledged task was created");
            let access = store
                .authorize(&principal, Action::Read, &id.to_string())
                .await
                .unwrap_or_else(|e| panic!("acknowledged task {id} is missing: {e}"));
            let task = store.get(&access).await.expect("get");
            assert!(
                task.generation >= acked.generation,
                "{id}: generation went back"
            );
            assert!(
                task.claim.is_none(),
                "{id}: the dead process's claim was not fenced"
            );
            match plan {
                Plan::Complete if acked.completed => {
                    assert_eq!(task.status, TaskStatus::Completed, "{id}");
                    assert!(task.outcome.is_some(), "{id}: the result is kept");
                }
                Plan::Complete => assert!(
                    matches!(task.status, TaskStatus::Working | TaskStatus::Completed),
                    "{id}: {:?}",
                    task.status
                ),
                Plan::Input if acked.input => {
                    assert_eq!(task.status, TaskStatus::InputRequired, "{id}");
                    let keys: Vec<&str> = task.outstanding_inputs().map(|(k, _)| k).collect();
                    assert_eq!(keys, vec!["confirm"], "{id}");
                }
                Plan::Input => assert!(
                    matches!(task.status, TaskStatus::Working | TaskStatus::InputRequired),
                    "{id}: {:?}",
                    task.status
                ),
                Plan::Run => assert_eq!(task.status, TaskStatus::Working, "{id}"),
            }
            if task.status == TaskStatus::Working {
                expect_due.push(*id);
            }
        }
        // Every non-terminal, non-parked task is due now, without waiting for its lease.
        // The checker's own claims are fenced by the next round's open, like any other.
        let mut due = Vec::new();
        let req = ClaimRequest::new(600_000, "checker");
        while let Some(c) = store.claim_next(&req).await.expect("claim_next").claimed {
            due.push(c.task.id);
        }
        // Tasks the child created but was killed before reporting are due too; of the
        // reported ones, exactly the working ones are.
        let mut reported_due: Vec<TaskId> = due
            .iter()
            .filter(|id| model.contains_key(id))
            .copied()
            .collect();
        reported_due.sort();
        let mut expected = expect_due.clone();
        expected.sort();
        assert_eq!(reported_due, expected, "exactly the working tasks are due");
        for id in &expect_due {
            assert!(due.contains(id), "{id} is not due after the crash");
        }
        eprintln!(
            "round {round}: {} acknowledged tasks checked, {} due after reopen",
            model.len(),
            expect_due.len()
        );
    }
}
