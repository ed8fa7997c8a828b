//! The attempt path: a guest's `await-input` recorded in the store before it waits, woken
//! by an answer the store accepted, replayed from the store after recovery, and refused
//! for an attempt whose lease was superseded.

use std::sync::Arc;

use serde_json::{Value, json};
use snodo_core::model::{ManualClock, Task, TaskId, TaskStatus, Timestamp};
use snodo_core::store::{ClaimRequest, Lease, MemoryStore, Store};
use snodo_runner::InputWaiters;
use snodo_wasm::{AttemptError, CancelToken, Component, ExecutionReport, GuestOutcome};

use crate::common;

const LEASE_MS: u64 = 30_000;

/// What the attempts of a test share: the fixtures, a store and the input waiters.
struct Attempts {
    component: Arc<Component>,
    store: Arc<dyn Store>,
    waiters: Arc<InputWaiters>,
}

impl Attempts {
    async fn new(store: Arc<dyn Store>) -> Self {
        Self {
            component: common::load_guests(8, 64 << 20).await.fixtures,
            store,
            waiters: Arc::new(InputWaiters::new()),
        }
    }

    /// Starts an attempt of `tool` under `lease`, as the runner would.
    fn start(
        &self,
        lease: Lease,
        tool: &str,
        args: Value,
        cancel: CancelToken,
    ) -> tokio::task::JoinHandle<ExecutionReport> {
        let mut exec =
            common::attempt_execution(self.store.clone(), &lease, self.waiters.clone(), tool, args);
        exec.cancel = cancel;
        let component = self.component.clone();
        tokio::spawn(async move { component.execute(exec).await })
    }

    /// Starts an attempt under `lease` of deleting `a.txt`, a question to confirm first.
    fn delete_a_txt(&self, lease: Lease) -> tokio::task::JoinHandle<ExecutionReport> {
        let args = json!({"filename": "a.txt"});
        self.start(lease, "confirm_delete", args, CancelToken::new())
    }

    /// The task `id` as stored.
    async fn stored(&self, id: &TaskId) -> Task {
        let (task, _) = self
            .store
            .inspect(id)
            .await
            .expect("inspect")
            .expect("present");
        task
    }
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
    let clock = ManualClock::new(Timestamp(1_700_000_000_000));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let attempts = Attempts::new(store.clone()).await;
    let waiters = &attempts.waiters;
    let id =
        common::create_tool_task(&*store, "confirm_delete", json!({"filename": "a.txt"})).await;
    let first = store
        .claim(&id, &ClaimRequest::new(LEASE_MS, "t"))
        .await
        .expect("claim");

    let running = attempts.delete_a_txt(first.lease.clone());
    // The question is in the store before anyone answers it.
    let parked = common::await_stored(&*store, &id, "the question stored", |t| {
        t.status == TaskStatus::InputRequired
    })
    .await;
    let questions: Vec<&str> = parked.outstanding_inputs().map(|(k, _)| k).collect();
    assert_eq!(questions, vec!["confirm"]);
    assert!(!running.is_finished(), "the guest waits for the answer");

    // tasks/update: the store accepts first, then the waiter is woken.
    common::confirm(&*store, &id).await;
    waiters.notify(&id);
    let report = common::join_soon(running, "finished").await;
    assert_eq!(text(&report), "Deleted a.txt");
    assert!(waiters.is_empty(), "the attempt unregistered");

    // Recovery: the lease runs out, a new generation replays the guest, which gets the
    // stored answer without a new input event.
    let revision = attempts.stored(&id).await.revision;
    clock.advance(LEASE_MS);
    let second = store
        .claim_next(&ClaimRequest::new(LEASE_MS, "t"))
        .await
        .expect("claim")
        .claimed
        .expect("due");
    assert!(second.lease.generation() > first.lease.generation());
    let report = attempts
        .delete_a_txt(second.lease.clone())
        .await
        .expect("join");
    assert_eq!(text(&report), "Deleted a.txt");
    let after = attempts.stored(&id).await;
    assert_eq!(after.revision, revision, "no second question to the user");

    // The superseded attempt cannot ask anything any more.
    let report = attempts
        .start(
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
    assert_eq!(attempts.stored(&id).await.revision, revision);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_guest_is_released_by_cancellation() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let attempts = Attempts::new(store.clone()).await;
    let id = common::create_tool_task(&*store, "multi_input", json!({})).await;
    let claimed = store
        .claim(&id, &ClaimRequest::new(LEASE_MS, "t"))
        .await
        .expect("claim");
    let cancel = CancelToken::new();
    let running = attempts.start(claimed.lease, "multi_input", json!({}), cancel.clone());
    let parked = common::await_stored(&*store, &id, "both questions stored", |t| {
        t.outstanding_inputs().count() == 2
    })
    .await;
    assert_eq!(
        parked.status,
        TaskStatus::InputRequired,
        "both questions are outstanding at once"
    );
    cancel.cancel();
    let report = common::join_soon(running, "stopped").await;
    // The guest was told through its input error and answered with a tool error.
    let out = report.outcome.expect("a cooperative outcome");
    assert!(
        matches!(out, GuestOutcome::Completed(ref r) if r["isError"] == json!(true)),
        "{out:?}"
    );
}
