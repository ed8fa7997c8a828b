//! What an execution's imports talk to: [`ExecutionIo`], with the two implementations the
//! host needs: [`SyncIo`] for a synchronous `tools/call` (input through MRTR round trips)
//! and [`TaskIo`] for a task attempt (input recorded in the store, answered by
//! `tasks/update`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc};

use crate::model::{ClientCapabilities, EventId, EventKind, TaskEvent, TaskId};
use crate::store::{Authority, Effect, InputReply, Lease, Store, StoreError};

use super::CancelToken;

/// Why an input request did not produce answers.
#[derive(Debug, Clone, PartialEq)]
pub enum InputFailure {
    /// The execution is being cancelled (the guest sees `input-error::cancelled`).
    Cancelled,
    /// The client did not declare the capability the request needs.
    Unsupported(String),
    /// The key was used before with a different request.
    KeyConflict(String),
    /// The request is malformed.
    Invalid(String),
    /// The answers must come from the client first: stop the guest, the host answers the
    /// request with `input_required` and the listed questions.
    Suspend(Vec<(String, Value)>),
    /// The attempt lost its right to continue (lease lost, task finished or gone).
    Stop(String),
    /// The guest has waited longer than the park limit: release it (the store keeps the
    /// questions and will keep the answers).
    Park,
}

/// A progress report from a guest.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Progress so far.
    pub progress: f64,
    /// The total, if known.
    pub total: Option<f64>,
    /// A message.
    pub message: Option<String>,
}

/// The host side of an execution's imports.
#[async_trait]
pub trait ExecutionIo: Send + Sync {
    /// Obtains answers to `requests` (key, MCP input request JSON), in order.
    async fn await_inputs(
        &self,
        requests: Vec<(String, Value)>,
        cancel: &CancelToken,
    ) -> Result<Vec<Value>, InputFailure>;

    /// Sets the status message. An error stops the attempt.
    async fn set_status(&self, message: String) -> Result<(), String>;

    /// Reports progress.
    async fn progress(&self, progress: Progress);
}

/// The client capability an input request needs, as a path into `ClientCapabilities`.
/// Checks `requests` against the client's declared capabilities.
pub fn check_capabilities(
    capabilities: &Value,
    requests: &[(String, Value)],
) -> Result<(), InputFailure> {
    let caps = ClientCapabilities::of(capabilities);
    for (key, request) in requests {
        if let Err(what) = caps.can_answer(request) {
            return Err(InputFailure::Unsupported(format!(
                "input {key:?} needs the client capability `{what}`, which the request did not declare"
            )));
        }
    }
    Ok(())
}

/// Input for a synchronous call: answers come from the request's `inputResponses`; any
/// question without one suspends the guest so the host can answer `input_required`.
pub struct SyncIo {
    responses: Map<String, Value>,
    capabilities: Value,
    progress: Option<mpsc::Sender<Progress>>,
}

impl SyncIo {
    /// IO for a request that carried `responses` and declared `capabilities`, sending
    /// progress to `progress` when the request asked for it.
    pub fn new(
        responses: Map<String, Value>,
        capabilities: Value,
        progress: Option<mpsc::Sender<Progress>>,
    ) -> Self {
        Self {
            responses,
            capabilities,
            progress,
        }
    }
}

#[async_trait]
impl ExecutionIo for SyncIo {
    async fn await_inputs(
        &self,
        requests: Vec<(String, Value)>,
        _cancel: &CancelToken,
    ) -> Result<Vec<Value>, InputFailure> {
        check_capabilities(&self.capabilities, &requests)?;
        let missing: Vec<(String, Value)> = requests
            .iter()
            .filter(|(k, _)| !self.responses.contains_key(k))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(InputFailure::Suspend(missing));
        }
        Ok(requests
            .iter()
            .map(|(k, _)| self.responses.get(k).cloned().unwrap_or(Value::Null))
            .collect())
    }

    async fn set_status(&self, _message: String) -> Result<(), String> {
        Ok(())
    }

    async fn progress(&self, progress: Progress) {
        if let Some(tx) = &self.progress {
            // Progress is lossy by nature: a report that finds the queue full (a client
            // that does not read) is dropped rather than queued without bound.
            let _ = tx.try_send(progress);
        }
    }
}

/// Wakes attempts parked in `await-input` when their task's inputs change.
///
/// The store is the authority: a waiter woken here re-reads the task, so a spurious or
/// early wake is harmless, and a wake that comes before the waiter parks is kept
/// (`Notify` stores one permit).
#[derive(Default)]
pub struct InputWaiters {
    waiters: Mutex<HashMap<TaskId, Arc<Notify>>>,
}

impl InputWaiters {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn subscribe(&self, task: TaskId) -> Arc<Notify> {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        w.entry(task).or_default().clone()
    }

    fn unsubscribe(&self, task: &TaskId) {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        w.remove(task);
    }

    /// Tells the attempt running `task` (if any, on this node) that its inputs changed.
    pub fn notify(&self, task: &TaskId) {
        let w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = w.get(task) {
            n.notify_one();
        }
    }

    /// How many attempts are registered.
    pub fn len(&self) -> usize {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Input for a task attempt: questions are recorded in the store under the attempt's lease
/// before it waits; answers are what the store accepted.
pub struct TaskIo {
    store: Arc<dyn Store>,
    lease: Lease,
    capabilities: Value,
    waiters: Arc<InputWaiters>,
    park_after: Option<std::time::Duration>,
    status: Arc<Mutex<StatusGate>>,
}

/// The shortest gap between two status commits of one attempt. A guest that sets its
/// status faster has its messages coalesced: the newest is committed once the gap has
/// passed, so a status loop costs a few commits a second, not one per call.
pub(crate) const STATUS_COMMIT_INTERVAL: std::time::Duration =
    std::time::Duration::from_millis(250);

/// Coalescing of one attempt's status messages.
#[derive(Default)]
struct StatusGate {
    committed_at: Option<tokio::time::Instant>,
    last: Option<String>,
    pending: Option<String>,
    flushing: bool,
    /// The scheduled flush, stopped with the attempt's IO: nothing outlives the attempt
    /// holding the store.
    flush: Option<tokio::task::AbortHandle>,
}

impl Drop for TaskIo {
    fn drop(&mut self) {
        let gate = self.status.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = &gate.flush {
            f.abort();
        }
    }
}

impl TaskIo {
    /// IO for the attempt holding `lease`. `capabilities` are those the creating request
    /// declared (stored with the task).
    pub fn new(
        store: Arc<dyn Store>,
        lease: Lease,
        capabilities: Value,
        waiters: Arc<InputWaiters>,
    ) -> Self {
        Self {
            store,
            lease,
            capabilities,
            waiters,
            park_after: None,
            status: Arc::default(),
        }
    }

    /// Releases the guest (with [`InputFailure::Park`]) once it has waited `idle` for
    /// answers, so parked tasks hold no live instance.
    pub fn park_after(mut self, idle: std::time::Duration) -> Self {
        self.park_after = Some(idle);
        self
    }
}

async fn commit_status(store: &dyn Store, lease: &Lease, message: String) -> Result<(), String> {
    let event = TaskEvent::random(EventKind::StatusMessage { message });
    store
        .transition(Authority::Worker(lease), event, None)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn stop(e: StoreError) -> InputFailure {
    match e {
        StoreError::InputConflict { key } => InputFailure::KeyConflict(key),
        StoreError::Invalid(m) => InputFailure::Invalid(m.to_string()),
        other => InputFailure::Stop(other.to_string()),
    }
}

#[async_trait]
impl ExecutionIo for TaskIo {
    async fn await_inputs(
        &self,
        requests: Vec<(String, Value)>,
        cancel: &CancelToken,
    ) -> Result<Vec<Value>, InputFailure> {
        check_capabilities(&self.capabilities, &requests)?;
        let task = *self.lease.task_id();
        // Subscribe before recording, so an answer that lands in between still wakes us.
        let notify = self.waiters.subscribe(task);
        let _unsubscribe = Unsubscribe {
            waiters: &self.waiters,
            task,
        };
        let mut answers: Vec<Option<Value>> = vec![None; requests.len()];
        for (i, (key, request)) in requests.iter().enumerate() {
            let committed = self
                .store
                .request_input(&self.lease, EventId::random(), key, request.clone())
                .await
                .map_err(stop)?;
            if let Effect::Input(InputReply::Answered(v)) = committed.effect {
                answers[i] = Some(v);
            }
        }
        let park = async {
            match self.park_after {
                // A real-time idle allowance: how long a live guest may sit waiting.
                Some(idle) => tokio::time::sleep(idle).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(park);
        loop {
            if answers.iter().all(Option::is_some) {
                return Ok(answers.into_iter().flatten().collect());
            }
            tokio::select! {
                _ = notify.notified() => {}
                _ = cancel.cancelled() => return Err(InputFailure::Cancelled),
                () = &mut park => return Err(InputFailure::Park),
            }
            let (t, _) = self
                .store
                .worker_snapshot(&self.lease)
                .await
                .map_err(stop)?;
            for (i, (key, _)) in requests.iter().enumerate() {
                if answers[i].is_none() {
                    answers[i] = t.inputs.get(key).and_then(|e| e.response.clone());
                }
            }
        }
    }

    async fn set_status(&self, message: String) -> Result<(), String> {
        let now = tokio::time::Instant::now();
        // `Some(message)`: commit it now; `None`: coalesced (with a flush due at `flush_at`
        // when this call scheduled one).
        let (now_message, flush_at) = {
            let mut gate = self.status.lock().unwrap_or_else(|p| p.into_inner());
            if gate.pending.is_none() && gate.last.as_deref() == Some(message.as_str()) {
                return Ok(());
            }
            match gate.committed_at {
                Some(at) if now < at + STATUS_COMMIT_INTERVAL => {
                    gate.pending = Some(message);
                    let schedule = !gate.flushing;
                    gate.flushing = true;
                    (None, schedule.then_some(at + STATUS_COMMIT_INTERVAL))
                }
                _ => {
                    gate.committed_at = Some(now);
                    gate.last = Some(message.clone());
                    (Some(message), None)
                }
            }
        };
        if let Some(m) = now_message {
            return commit_status(&*self.store, &self.lease, m).await;
        }
        let Some(flush_at) = flush_at else {
            return Ok(());
        };
        // Commit the newest pending message when the gap has passed. Its lease may be gone
        // by then (the attempt ended): the store refuses it and nothing changes.
        let (store, lease, gate) = (self.store.clone(), self.lease.clone(), self.status.clone());
        let flush = tokio::spawn(async move {
            tokio::time::sleep_until(flush_at).await;
            let message = {
                let mut g = gate.lock().unwrap_or_else(|p| p.into_inner());
                g.flushing = false;
                g.committed_at = Some(tokio::time::Instant::now());
                let m = g.pending.take();
                g.last.clone_from(&m);
                m
            };
            if let Some(m) = message {
                let _ = commit_status(&*store, &lease, m).await;
            }
        });
        self.status.lock().unwrap_or_else(|p| p.into_inner()).flush = Some(flush.abort_handle());
        Ok(())
    }

    async fn progress(&self, _progress: Progress) {
        // Progress notifications are not part of tasks; the status message is the channel.
    }
}

struct Unsubscribe<'a> {
    waiters: &'a InputWaiters,
    task: TaskId,
}

impl Drop for Unsubscribe<'_> {
    fn drop(&mut self) {
        self.waiters.unsubscribe(&self.task);
    }
}
