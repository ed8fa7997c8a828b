//! The attempt path: a guest's `await-input` recorded in the store before it waits, woken
//! by an answer the store accepted, replayed from the store after recovery, and refused
//! for an attempt whose lease was superseded.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use snodo::model::{ManualClock, Scope, Task, TaskId, TaskStatus, Timestamp, Work};
use snodo::runner::{InputWaiters, TaskIo};
use snodo::store::{ClaimRequest, Lease, MemoryStore, NewTask, Store};
use snodo::wasm::{AttemptError, CancelToken, Component, Execution, ExecutionReport, GuestOutcome};

mod common;

const LEASE_MS: u64 = 30_000;

async fn fixtures() -> Arc<Component> {
    common::load_guests(8, 64 << 20).await.fixtures
}

async fn create(store: &dyn Store, tool: &str, args: Value) -> TaskId {
    let id = TaskId::generate();
    let work = Work::new(
        "snodo/tool-call",
        json!({"tool": tool, "arguments": args}),
        id.to_string(),
    );
    let mut new = NewTask::new(id, Scope::new("acme"), work);
    new.client_capabilities = json!({"elicitation": {}});
    store.create(new).await.expect("create").id
}

fn attempt(
    component: &Arc<Component>,
    store: &Arc<dyn Store>,
    waiters: &Arc<InputWaiters>,
    lease: Lease,
    tool: &str,
    args: Value,
    cancel: CancelToken,
) -> tokio::task::JoinHandle<ExecutionReport> {
    let io = Arc::new(TaskIo::new(
        store.clone(),
        lease.clone(),
        json!({"elicitation": {}}),
        waiters.clone(),
    ));
    let mut exec = Execution::new(tool, args, io);
    exec.task_id = Some(lease.task_id().to_string());
    exec.idempotency_key = lease.task_id().to_string();
    exec.cancel = cancel;
    let component = component.clone();
    tokio::spawn(async move { component.execute(exec).await })
}

/// Waits (without sleeping) until the stored task satisfies `pred`.
async fn await_state(store: &dyn Store, id: &TaskId, pred: impl Fn(&Task) -> bool) -> Task {
    common::eventually("the task's state", || async {
        let (t, _) = store.inspect(id).await.expect("inspect").expect("present");
        pred(&t).then_some(t)
    })
    .await
}

fn text(report: &ExecutionReport) -> String {
    match &report.outcome {
        Ok(GuestOutcome::Completed(r)) => r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        other => panic!("expected a result, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_is_recorded_answered_and_replayed_from_the_store() {
    let component = fixtures().await;
    let clock = ManualClock::new(Timestamp(1_700_000_000_000));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let waiters = Arc::new(InputWaiters::new());
    let id = create(&*store, "confirm_delete", json!({"filename": "a.txt"})).await;
    let first = store
        .claim(&id, &ClaimRequest::new(LEASE_MS, "t"))
        .await
        .expect("claim");

    let running = attempt(
        &component,
        &store,
        &waiters,
        first.lease.clone(),
        "confirm_delete",
        json!({"filename": "a.txt"}),
        CancelToken::new(),
    );
    // The question is in the store before anyone answers it.
    let parked = await_state(&*store, &id, |t| t.status == TaskStatus::InputRequired).await;
    let questions: Vec<&str> = parked.outstanding_inputs().map(|(k, _)| k).collect();
    assert_eq!(questions, vec!["confirm"]);
    assert!(!running.is_finished(), "the guest waits for the answer");

    // tasks/update: the store accepts first, then the waiter is woken.
    common::confirm(&*store, &id).await;
    waiters.notify(&id);
    let report = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("finished")
        .expect("join");
    assert_eq!(text(&report), "Deleted a.txt");
    assert!(waiters.is_empty(), "the attempt unregistered");

    // Recovery: the lease runs out, a new generation replays the guest, which gets the
    // stored answer without a new input event.
    let revision = store
        .inspect(&id)
        .await
        .expect("inspect")
        .expect("present")
        .0
        .revision;
    clock.advance(LEASE_MS);
    let second = store
        .claim_next(&ClaimRequest::new(LEASE_MS, "t"))
        .await
        .expect("claim")
        .expect("due");
    assert!(second.lease.generation() > first.lease.generation());
    let report = attempt(
        &component,
        &store,
        &waiters,
        second.lease.clone(),
        "confirm_delete",
        json!({"filename": "a.txt"}),
        CancelToken::new(),
    )
    .await
    .expect("join");
    assert_eq!(text(&report), "Deleted a.txt");
    let after = store
        .inspect(&id)
        .await
        .expect("inspect")
        .expect("present")
        .0;
    assert_eq!(after.revision, revision, "no second question to the user");

    // The superseded attempt cannot ask anything any more.
    let report = attempt(
        &component,
        &store,
        &waiters,
        first.lease.clone(),
        "multi_input",
        json!({}),
        CancelToken::new(),
    )
    .await
    .expect("join");
    assert!(
        matches!(report.outcome, Err(AttemptError::Stopped(_))),
        "{:?}",
        report.outcome
    );
    assert_eq!(
        store
            .inspect(&id)
            .await
            .expect("inspect")
            .expect("present")
            .0
            .revision,
        revision
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_guest_is_released_by_cancellation() {
    let component = fixtures().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let waiters = Arc::new(InputWaiters::new());
    let id = create(&*store, "multi_input", json!({})).await;
    let claimed = store
        .claim(&id, &ClaimRequest::new(LEASE_MS, "t"))
        .await
        .expect("claim");
    let cancel = CancelToken::new();
    let running = attempt(
        &component,
        &store,
        &waiters,
        claimed.lease,
        "multi_input",
        json!({}),
        cancel.clone(),
    );
    let parked = await_state(&*store, &id, |t| t.outstanding_inputs().count() == 2).await;
    assert_eq!(
        parked.status,
        TaskStatus::InputRequired,
        "both questions are outstanding at once"
    );
    cancel.cancel();
    let report = tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("stopped")
        .expect("join");
    // The guest was told through its input error and answered with a tool error.
    let out = report.outcome.expect("a cooperative outcome");
    assert!(
        matches!(out, GuestOutcome::Completed(ref r) if r["isError"] == json!(true)),
        "{out:?}"
    );
}
