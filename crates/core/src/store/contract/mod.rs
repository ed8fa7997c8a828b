//! The store contract suite: plain async functions over `&dyn Store`, one per named group,
//! that every adapter runs through [`store_contract_suite!`](crate::store_contract_suite), one
//! file per group.
//!
//! Time is driven with a [`ManualClock`] shared with the store; nothing sleeps. A backend
//! that cannot offer a behaviour (the memory store does not survive a reopen) declares it
//! through [`Backend::durable`]; an assertion is never weakened for one backend.

mod access_and_scope;
mod archiving;
mod audit;
mod claim_batches;
mod claims_and_fencing;
mod creation;
mod deployments;
mod durability_across_reopen;
mod event_idempotency;
mod input_lifecycle;
mod journal;
mod listing;
mod outbox;
mod reaping;
mod renewal_and_expiry;
mod retry_scheduling;
mod revocations;
mod schedules;
mod stored_caps;
mod terminal_races;
mod transitions_and_cas;
mod wake_times;

pub use access_and_scope::access_and_scope;
pub use archiving::archiving;
pub use audit::audit;
pub use claim_batches::claim_batches;
pub use claims_and_fencing::claims_and_fencing;
pub use creation::creation;
pub use deployments::deployments;
pub use durability_across_reopen::durability_across_reopen;
pub use event_idempotency::event_idempotency;
pub use input_lifecycle::input_lifecycle;
pub use journal::journal;
pub use listing::listing;
pub use outbox::outbox;
pub use reaping::reaping;
pub use renewal_and_expiry::renewal_and_expiry;
pub use retry_scheduling::retry_scheduling;
pub use revocations::revocations;
pub use schedules::schedules;
pub use stored_caps::{stored_bytes_caps, stored_caps};
pub use terminal_races::terminal_races;
pub use transitions_and_cas::transitions_and_cas;
pub use wake_times::wake_times;

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::model::{
    EventId, EventKind, IncomingTrace, JsonRpcError, ManualClock, Outcome, Principal, RawJson,
    RetryPolicy, Scope, TaskEvent, TaskId, TaskStatus, Timestamp, TraceContext, ViewOutcome, Work,
};

use super::{Action, Authority, ClaimRequest, Effect, InputReply, NewTask, Store, StoreError};

/// An adapter under test.
#[async_trait::async_trait]
pub trait Backend: Send {
    /// Whether a reopened store keeps what was committed.
    fn durable(&self) -> bool;
    /// Opens the store (again, for durable backends: the same data) on `clock`. The caller
    /// drops every handle to the previous instance first.
    async fn open(&mut self, clock: &ManualClock) -> Arc<dyn Store>;
}

/// A durable adapter kept in one file in a temporary directory: every open, after the
/// first, reopens the same file, so a test can check what a reopen keeps.
#[cfg(all(test, any(feature = "redb", feature = "sqlite")))]
pub(crate) struct FileBackend {
    dir: tempfile::TempDir,
    file: &'static str,
    open: OpenFile,
}

/// Opens a file store at a path on a clock.
#[cfg(all(test, any(feature = "redb", feature = "sqlite")))]
pub(crate) type OpenFile =
    fn(&std::path::Path, Arc<dyn crate::model::Clock>) -> Result<Arc<dyn Store>, StoreError>;

#[cfg(all(test, any(feature = "redb", feature = "sqlite")))]
impl FileBackend {
    /// A backend whose store lives in `file` inside a new temporary directory, opened with
    /// `open` (on the blocking pool: opening a file does I/O and may wait for a lock).
    pub(crate) fn new(file: &'static str, open: OpenFile) -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            file,
            open,
        }
    }
}

#[cfg(all(test, any(feature = "redb", feature = "sqlite")))]
#[async_trait::async_trait]
impl Backend for FileBackend {
    fn durable(&self) -> bool {
        true
    }

    async fn open(&mut self, clock: &ManualClock) -> Arc<dyn Store> {
        let path = self.dir.path().join(self.file);
        let clock = Arc::new(clock.clone());
        let open = self.open;
        tokio::task::spawn_blocking(move || open(&path, clock))
            .await
            .expect("open task panicked")
            .unwrap_or_else(|e| panic!("open the store at {}: {e}", self.file))
    }
}

const T0: u64 = 1_700_000_000_000;
const LEASE: u64 = 30_000;

/// Generates one test per contract group for a backend factory (an expression that makes
/// a fresh [`Backend`]). Adapters outside this crate use it with the `contract-suite`
/// feature: `snodo_core::store_contract_suite!(|| MyBackend::new());`.
///
/// A backend that needs a service which may be absent (a database server) passes a guard,
/// `store_contract_suite!(make, skip_unless = || available())`; each test returns at once
/// when the guard says no. The guard must say why it skipped, and should refuse to skip
/// where the service is required (CI).
#[macro_export]
macro_rules! store_contract_suite {
    ($make:expr) => {
        $crate::store_contract_suite!($make, skip_unless = || true);
    };
    ($make:expr, skip_unless = $guard:expr) => {
        $crate::store_contract_suite!(@groups $make; $guard;
            creation,
            access_and_scope,
            transitions_and_cas,
            event_idempotency,
            terminal_races,
            input_lifecycle,
            claims_and_fencing,
            claim_batches,
            renewal_and_expiry,
            retry_scheduling,
            wake_times,
            reaping,
            archiving,
            durability_across_reopen,
            journal,
            stored_caps,
            stored_bytes_caps,
            revocations,
            deployments,
            listing,
            schedules,
            outbox,
            audit,
        );
    };
    (@groups $make:expr; $guard:expr; $($group:ident),* $(,)?) => {
        mod contract {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $group() {
                    if !($guard)() {
                        return;
                    }
                    let mut backend = ($make)();
                    $crate::store::contract::$group(&mut backend).await;
                }
            )*
        }
    };
}

fn clock() -> ManualClock {
    ManualClock::new(Timestamp(T0))
}

fn tenant(name: &str) -> Principal {
    Principal::new(name, "user-1")
}

fn work() -> Work {
    Work::new(
        "snodo/tool-call",
        json!({"tool": "export", "arguments": {"n": 1}}),
        "k",
    )
}

fn ids(reaped: Vec<super::Reaped>) -> Vec<TaskId> {
    reaped.into_iter().map(|r| r.id).collect()
}

fn new_task(tenant: &str) -> NewTask {
    let id = TaskId::generate();
    let mut t = NewTask::new(
        id,
        Scope::new(tenant),
        Work {
            idempotency_key: id.to_string(),
            ..work()
        },
    );
    t.poll_interval_ms = Some(1_000);
    t
}

fn ev(kind: EventKind) -> TaskEvent {
    TaskEvent::random(kind)
}

fn ev_id(id: &str, kind: EventKind) -> TaskEvent {
    TaskEvent::new(EventId::new(id).expect("valid event id"), kind)
}

pub(crate) fn completed(text: &str) -> EventKind {
    EventKind::Completed {
        result: json!({"content": [{"type": "text", "text": text}]}),
    }
}

fn cancelled() -> EventKind {
    EventKind::Cancelled {
        status_message: Some("cancelled by the user".into()),
    }
}

pub(crate) fn elicit(message: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}})
}

fn responses(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn cr() -> ClaimRequest {
    ClaimRequest::new(LEASE, "contract")
}

async fn create(store: &dyn Store, tenant: &str) -> TaskId {
    store.create(new_task(tenant)).await.expect("create").id
}

async fn read(store: &dyn Store, tenant_name: &str, id: &TaskId) -> crate::model::Task {
    let access = store
        .authorize(&tenant(tenant_name), Action::Read, &id.to_string())
        .await
        .expect("authorize read");
    store.get(&access).await.expect("get")
}

/// What a lookup of `id` sees as a user of `tenant_name`, checked against the view of the
/// whole task: every adapter's lookup must show exactly what the task holds.
pub(crate) async fn view(
    store: &dyn Store,
    tenant_name: &str,
    id: &TaskId,
) -> crate::model::TaskView {
    let (access, view) = store
        .authorize_read(&tenant(tenant_name), &id.to_string())
        .await
        .expect("authorize_read");
    assert_eq!((access.task_id(), access.action()), (id, Action::Read));
    let task = read(store, tenant_name, id).await;
    assert_eq!(
        view,
        crate::model::TaskView::of(&task),
        "the lookup of {id}"
    );
    view
}

/// Cancels `id` as a user of `tenant_name`, answering the new revision.
pub(crate) async fn cancel(
    store: &dyn Store,
    tenant_name: &str,
    id: &TaskId,
) -> Result<u64, StoreError> {
    let access = store
        .authorize(&tenant(tenant_name), Action::Cancel, &id.to_string())
        .await?;
    let message = Some("cancelled by the user".to_owned());
    store.cancel(&access, message).await.map(|c| c.revision)
}

/// A new task of `tenant`, claimed under [`cr`].
pub(crate) async fn claimed(store: &dyn Store, tenant: &str) -> (TaskId, super::Lease) {
    let id = create(store, tenant).await;
    let lease = store.claim(&id, &cr()).await.expect("claim").lease;
    (id, lease)
}

/// `tenant`'s right to `action` on `id`, which the test expects to be granted.
async fn access(
    store: &dyn Store,
    tenant_name: &str,
    action: Action,
    id: &TaskId,
) -> super::Access {
    store
        .authorize(&tenant(tenant_name), action, &id.to_string())
        .await
        .unwrap_or_else(|e| panic!("{tenant_name} may {action:?} {id}: {e}"))
}

/// Commits `kind` under `lease`, which the test expects to be accepted.
pub(crate) async fn as_worker(
    store: &dyn Store,
    lease: &super::Lease,
    kind: EventKind,
) -> super::Committed {
    commit_as_worker(store, lease, ev(kind)).await
}

/// Commits `event` under `lease`, which the test expects to be accepted.
async fn commit_as_worker(
    store: &dyn Store,
    lease: &super::Lease,
    event: TaskEvent,
) -> super::Committed {
    store
        .transition(Authority::Worker(lease), event, None)
        .await
        .unwrap_or_else(|e| panic!("the worker's event is accepted: {e}"))
}

/// Why `principal` is refused `action` on `id`; `None` if it was granted.
async fn denial(
    store: &dyn Store,
    principal: &Principal,
    action: Action,
    id: &TaskId,
) -> Option<StoreError> {
    store
        .authorize(principal, action, &id.to_string())
        .await
        .err()
}

/// The error a transition of `kind` by `by` is refused with; `None` if it was accepted.
async fn refusal(store: &dyn Store, by: Authority<'_>, kind: EventKind) -> Option<StoreError> {
    store.transition(by, ev(kind), None).await.err()
}

/// Asks the user `question` under `key` for the task `lease` holds.
pub(crate) async fn ask(
    store: &dyn Store,
    lease: &super::Lease,
    key: &str,
    question: Value,
) -> Result<super::Committed, StoreError> {
    store
        .request_input(lease, EventId::random(), key, question)
        .await
}

/// Delivers the user's answers with the rights `update` grants.
async fn answer(
    store: &dyn Store,
    update: &super::Access,
    pairs: &[(&str, Value)],
) -> Result<super::Committed, StoreError> {
    store
        .accept_input(update, EventId::random(), responses(pairs))
        .await
}

/// The effect of answers that accepted `keys`, `complete` when none is left outstanding.
fn accepted(keys: &[&str], complete: bool) -> super::Effect {
    super::Effect::Accepted {
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        complete,
    }
}

/// A refusal because the access was granted for another action.
fn wrong_action(granted: Action) -> Option<StoreError> {
    Some(StoreError::WrongAction { granted })
}

/// A refusal because the task already ended in `status`.
fn terminal(status: crate::model::TaskStatus) -> Option<StoreError> {
    Some(StoreError::Terminal { status })
}

/// The next due task, which the test expects there to be because `why`.
async fn next_due(store: &dyn Store, why: &str) -> super::Claimed {
    store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .claimed
        .unwrap_or_else(|| panic!("a task is due: {why}"))
}

/// Whether no task is due: a claim finds nothing.
async fn nothing_due(store: &dyn Store) -> bool {
    store
        .claim_next(&cr())
        .await
        .expect("claim_next")
        .claimed
        .is_none()
}

/// Completes the task `lease` holds with a one-line text result: how the adapters' own
/// tests finish a task they do not inspect the result of.
#[cfg(all(test, any(feature = "redb", feature = "sqlite", feature = "postgres")))]
pub(crate) async fn finish(
    store: &dyn Store,
    lease: &super::Lease,
) -> Result<super::Committed, StoreError> {
    store
        .transition(Authority::Worker(lease), ev(completed("ok")), None)
        .await
}
