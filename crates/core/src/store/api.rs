//! The [`Store`] contract, in groups by concern: tasks, claims, input, deployments,
//! revocations, the journal, and operators' reads. `Store` is the one name the rest of the
//! workspace holds (`Arc<dyn Store>`); the groups are its supertraits, so every method is
//! callable through it without naming a group. Every adapter gets all of them from
//! [`Backend`](super::Backend) (`backend.rs`).

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::model::{
    AuditPage, AuditRecord, ComponentInfo, Deployment, EventId, EventKind, JournalEntry, Principal,
    Schedule, StoredComponent, Task, TaskEvent, TaskId, TaskView, Timestamp, Work,
};

#[cfg(doc)]
use super::StoreError;
use super::StoreResult;
use super::listing::{TaskCounts, TaskPage, TaskQuery};
use super::types::{
    Access, Action, Authority, ClaimRequest, Claimed, Committed, JournalBounds, Lease, NewTask,
    NextClaim, Reaped,
};

/// The task store contract.
///
/// # Guarantees every adapter gives
///
/// - **Authoritative answers.** A method returns only once its effect is committed (or
///   definitely not committed, with an error). No adapter times out on its own; a caller
///   that gives up on a future may still find the write committed, and event ids make the
///   retry safe.
/// - **Durability** (durable adapters): every acknowledged `create`, `transition`, `claim`,
///   `claim_next`, `renew`, `release` and `reap` survives a crash of the process.
/// - **Store time.** "Now" is the store's clock: lease expiry, `retry_at`, TTL and
///   timestamps never come from the caller.
/// - **Scope isolation.** A task of another scope is reported exactly like an unknown one
///   ([`StoreError::NotFound`]), by every method a request can reach.
/// - **TTL.** A task whose `createdAt + ttlMs` has passed is gone for every method
///   (reported as [`StoreError::NotFound`]) even before [`ClaimStore::reap`] removes it.
/// - **Cost.** Every per-request operation is O(log n) or better in the number of stored
///   tasks; nothing scans the whole store.
/// - **Counts.** Each scope's live (non-terminal, still stored) tasks and stored tasks
///   (terminal ones included) are counted in the same commit that creates, finishes or
///   removes one, so [`NewTask::max_live_in_scope`] ([`StoreError::LiveLimit`]) and
///   [`NewTask::max_stored_in_scope`] ([`StoreError::StoredLimit`]) are exact under
///   concurrency. So are each scope's stored bytes ([`Task::stored_bytes`], moved in the
///   commit that creates a task, changes its status or inputs, appends to its journal or
///   removes it), which [`NewTask::max_stored_bytes_in_scope`] and
///   [`JournalBounds::scope_bytes`] cap ([`StoreError::StoredBytesLimit`]).
///
/// # The groups
///
/// [`TaskStore`], [`ClaimStore`], [`InputStore`], [`DeploymentStore`],
/// [`RevocationStore`], [`JournalStore`], [`OperatorStore`], [`ScheduleStore`] and
/// [`OutboxStore`] hold the methods by
/// concern; `Store` adds what concerns the store as a whole: its clock, the probe that it
/// can commit, and its key.
#[async_trait]
pub trait Store:
    TaskStore
    + ClaimStore
    + InputStore
    + DeploymentStore
    + RevocationStore
    + JournalStore
    + OperatorStore
    + ScheduleStore
    + OutboxStore
{
    /// The store's current time.
    async fn now(&self) -> StoreResult<Timestamp>;

    /// Proves the store can still commit: a write that changes nothing goes through the
    /// same path as every other write (for a durable adapter: the writer and its sync).
    ///
    /// The one method with a bound of its own, because it serves health checks: if the
    /// probe has not committed within `within` it reports [`StoreError::Unavailable`]
    /// naming the bound (the probe may still commit later; it changes nothing).
    async fn check_writable(&self, within: std::time::Duration) -> StoreResult<()>;

    /// Copies the whole store, as of one commit, into a new file at `to` while it keeps
    /// serving, and reads the copy back (integrity, and every table's rows against the
    /// snapshot's) before linking it at `to`: see [`super::backup`]. A redb or SQLite store
    /// only ([`StoreError::Invalid`] otherwise); `to` must not exist.
    async fn backup(&self, to: &std::path::Path) -> StoreResult<super::Backup>;

    /// A 256-bit secret created once per store and kept with it, for integrity tags the
    /// server hands to clients (MRTR `requestState`): they verify after restarts and on
    /// every node sharing the store.
    async fn server_key(&self) -> StoreResult<[u8; 32]>;
}

/// Tasks as requests reach them: creation, authorization, reads, and moving a task by its
/// events (what the state machine allows, as a compare-and-set).
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Commits a new task and its work descriptor in one atomic write.
    ///
    /// When this returns, reads of the task (by anyone authorized for its scope) see it.
    /// The task starts `working`, unclaimed, revision 0, generation 0; `createdAt` and
    /// `lastUpdatedAt` are the store's commit time.
    ///
    /// With [`NewTask::firing`], the schedule's row moves as the firing says in the same
    /// commit (see [`ScheduleStore`]): the task exists exactly when the row says it fired.
    ///
    /// Errors: [`StoreError::Invalid`] for a bad descriptor, TTL or poll interval;
    /// [`StoreError::AlreadyExists`] if the id is taken (ids are random, so this is a bug or
    /// an attack, never a normal outcome; a firing's id is derived, and a second attempt at
    /// one meets it); for a firing, [`StoreError::Conflict`] when the schedule's row is no
    /// longer at the revision the firing was planned from (another node fired it, or an
    /// operator changed it), and nothing is written.
    async fn create(&self, new: NewTask) -> StoreResult<Task>;

    /// Checks that `principal` may perform `action` on the task named by `task_id` (the
    /// wire form) and returns an access value bound to that task and that action only.
    ///
    /// Unknown ids, malformed ids, expired tasks and tasks of another scope all return
    /// [`StoreError::NotFound`], indistinguishably.
    async fn authorize(
        &self,
        principal: &Principal,
        action: Action,
        task_id: &str,
    ) -> StoreResult<Access>;

    /// Reads the task through a [`Action::Read`] access value. A pure read: changes nothing.
    async fn get(&self, access: &Access) -> StoreResult<Task>;

    /// [`TaskStore::authorize`] for [`Action::Read`] and what a client may see of the task
    /// ([`TaskView`]) in one read: what `tasks/get` needs. Errors as for `authorize` and
    /// [`TaskStore::get`]. An adapter that keeps tasks as JSON decodes the view alone, so a
    /// lookup never builds what only the runner reads.
    async fn authorize_read(
        &self,
        principal: &Principal,
        task_id: &str,
    ) -> StoreResult<(Access, TaskView)> {
        let access = self.authorize(principal, Action::Read, task_id).await?;
        let task = self.get(&access).await?;
        Ok((access, TaskView::of(&task)))
    }

    /// Applies one state-transition event as a compare-and-set.
    ///
    /// In order:
    /// 1. the task must exist (and be in the access value's scope): else `NotFound`;
    /// 2. an event id already committed on this task with the same content returns the
    ///    original commit (`replayed: true`, the original revision) and changes nothing;
    ///    the same id with different content is [`StoreError::EventIdReused`];
    /// 3. the authority must fit the event: worker events need the lease of the live claim
    ///    ([`StoreError::LeaseLost`] otherwise), `input_accepted` an `update` access and
    ///    `cancelled` a `cancel` access ([`StoreError::WrongAction`]);
    /// 4. a terminal task rejects every event with [`StoreError::Terminal`], so a late
    ///    result cannot resurrect a cancelled task and of two racing terminal events
    ///    exactly one commits;
    /// 5. `expected_revision`, when given, must equal the current revision
    ///    ([`StoreError::Conflict`] otherwise);
    /// 6. the event is applied and the revision grows by one.
    ///
    /// Per kind:
    /// - `started`: `attempt` += 1; the status becomes `working` unless inputs are still
    ///   outstanding.
    /// - `status_message`: replaces the status message. Only the newest
    ///   [`REMEMBERED_STATUS_EVENTS`](crate::model::REMEMBERED_STATUS_EVENTS) of these ids
    ///   are remembered for replay.
    /// - `input_requested`: a new key is recorded and the task becomes `input_required`.
    ///   The same key with a structurally identical request commits nothing and returns
    ///   [`Effect::Input`](super::Effect::Input) with the stored answer or `Pending`
    ///   (reattach); the same key with a different request is
    ///   [`StoreError::InputConflict`].
    /// - `input_accepted`: responses for outstanding keys are stored in the inbox; unknown
    ///   and already answered keys are ignored. Commits only if at least one key was
    ///   accepted; reports the accepted keys. When none remain outstanding the task returns
    ///   to `working` (and, if unclaimed, becomes due for a runner).
    /// - `retry_requested`: with an entry left in the retry policy, schedules
    ///   `retry_at = commit time + delays_ms[retry_count]`, increments `retry_count` and
    ///   releases the claim, in one commit; with none left, fails the task with the
    ///   event's error in that same commit.
    /// - `completed` / `failed` / `cancelled`: terminal; the claim is released, and the
    ///   status message becomes the event's own (none for `completed`, the error's message
    ///   for a `failed` without one): what was said while the task ran is over.
    async fn transition(
        &self,
        by: Authority<'_>,
        event: TaskEvent,
        expected_revision: Option<u64>,
    ) -> StoreResult<Committed>;

    /// A requester's cancellation: the `cancelled` transition under `access` (from
    /// [`TaskStore::authorize`] with [`Action::Cancel`]), with `message` as the task's last
    /// status message. Errors as for [`TaskStore::transition`].
    async fn cancel(&self, access: &Access, message: Option<String>) -> StoreResult<Committed> {
        let event = TaskEvent::random(EventKind::Cancelled {
            status_message: message,
        });
        self.transition(Authority::Request(access), event, None)
            .await
    }
}

/// Claims and leases, as runners hold them: claiming a task (a new one, a given one, or the
/// one due longest), renewing and releasing the lease, a worker's snapshot under it, and
/// the reaper that removes tasks past their TTL.
#[async_trait]
pub trait ClaimStore: TaskStore {
    /// [`TaskStore::create`] and [`ClaimStore::claim`] of the new task in one atomic write: what a
    /// node with a free execution slot does with a task it creates, one commit instead of
    /// two. The claim is the task's first (generation 1); with `request.start` the first
    /// attempt is started in the same commit.
    ///
    /// Errors: those of `create`, and [`StoreError::Invalid`] for a bad claim request;
    /// either way nothing is written. The default runs the two operations one after the
    /// other (a crash between them leaves an unclaimed task, which recovery claims);
    /// every adapter here overrides it with one write.
    async fn create_claimed(&self, new: NewTask, request: &ClaimRequest) -> StoreResult<Claimed> {
        super::engine::check_claim_request(request)?;
        let task = self.create(new).await?;
        self.claim(&task.id, request).await
    }

    /// Claims exactly this task for a worker.
    ///
    /// Errors: `NotFound`; `Terminal`; [`StoreError::Busy`] while another live lease holds
    /// it; [`StoreError::NotDue`] while a retry backoff runs; [`StoreError::Parked`] while it
    /// waits, with no claim, for an answer to its question. The new claim's generation is
    /// one more than the task's previous highest.
    async fn claim(&self, task_id: &TaskId, request: &ClaimRequest) -> StoreResult<Claimed>;

    /// Claims the task that has been due longest: unclaimed work, work whose lease expired
    /// (or was made in an earlier boot epoch), and retries whose `retry_at` has passed.
    /// Tasks parked on unanswered input with no claim are not due; no claim if nothing is.
    /// Due tasks past their TTL that it meets are removed, never claimed, and reported in
    /// [`NextClaim::reaped`] as [`ClaimStore::reap`] reports its own, so the caller counts and
    /// logs the work they cut off.
    async fn claim_next(&self, request: &ClaimRequest) -> StoreResult<NextClaim>;

    /// Extends a live lease to `lease_ms` from now.
    ///
    /// Errors: `Terminal` if the task finished (e.g. it was cancelled: stop the guest);
    /// `LeaseLost` if the lease expired, was released, or a newer claim exists; `NotFound`
    /// if the task was reaped.
    async fn renew(&self, lease: &Lease, lease_ms: u64) -> StoreResult<Lease>;

    /// Gives up a live claim without an outcome, so another runner can take the task at
    /// once (or at `retry_at`). Errors as for [`ClaimStore::renew`].
    async fn release(&self, lease: &Lease) -> StoreResult<()>;

    /// Reads the task and its work under a live lease. Errors as for [`ClaimStore::renew`].
    async fn worker_snapshot(&self, lease: &Lease) -> StoreResult<(Task, Work)>;

    /// Removes up to `limit` whole aggregates whose `createdAt + ttlMs` has passed, active
    /// ones included, and reports each with its status, so running attempts can be stopped
    /// and cut-off work counted. Tasks with no TTL are never reaped.
    async fn reap(&self, limit: usize) -> StoreResult<Vec<Reaped>>;

    /// Up to `limit` tasks past their TTL, the oldest expiry first, with their work: what
    /// an archive keeps before [`ClaimStore::reap_ids`] removes them. Changes nothing. A
    /// task past its TTL never changes again (every operation treats it as gone), so what
    /// this returns is what a later removal deletes.
    async fn expired(&self, limit: usize) -> StoreResult<Vec<(Task, Work)>>;

    /// Removes the tasks among `ids` that are still stored and past their TTL, and reports
    /// each as [`ClaimStore::reap`] does; the others are left as they are. At most
    /// [`MAX_REAP_IDS`](super::MAX_REAP_IDS) ids ([`StoreError::Invalid`]).
    async fn reap_ids(&self, ids: &[TaskId]) -> StoreResult<Vec<Reaped>>;
}

/// Input a running task asks its client for, and the client's answers: the
/// `input_requested` and `input_accepted` transitions under their names.
#[async_trait]
pub trait InputStore: TaskStore {
    /// Records an input request under `lease` (an `input_requested` transition) and says
    /// whether it is answered yet.
    async fn request_input(
        &self,
        lease: &Lease,
        event_id: EventId,
        key: &str,
        request: Value,
    ) -> StoreResult<Committed> {
        let kind = EventKind::InputRequested {
            key: key.to_owned(),
            request,
        };
        self.transition(
            Authority::Worker(lease),
            TaskEvent::new(event_id, kind),
            None,
        )
        .await
    }

    /// Accepts input responses through an `update` access (an `input_accepted`
    /// transition); [`Effect::Accepted`](super::Effect::Accepted) lists the keys taken.
    async fn accept_input(
        &self,
        access: &Access,
        event_id: EventId,
        responses: Map<String, Value>,
    ) -> StoreResult<Committed> {
        let kind = EventKind::InputAccepted { responses };
        self.transition(
            Authority::Request(access),
            TaskEvent::new(event_id, kind),
            None,
        )
        .await
    }
}

/// Components and deployments: the bytes every node loads, stored once under their
/// digest, the deployments that name which serve, and the collection of retired ones.
#[async_trait]
pub trait DeploymentStore: Send + Sync + 'static {
    /// Stores a component's bytes, once, under their digest (SHA-256, lower-case hex),
    /// which it returns, with `signature` when given (one stored unsigned gains it; a
    /// stored signature is kept). A component is at most
    /// [`MAX_COMPONENT_BYTES`](crate::model::MAX_COMPONENT_BYTES), a signature at most
    /// [`MAX_SIGNATURE_BYTES`](crate::model::MAX_SIGNATURE_BYTES) ([`StoreError::Invalid`]).
    /// A stored component stays until [`DeploymentStore::collect_components`] removes it.
    async fn store_component(&self, bytes: &[u8], signature: Option<&[u8]>) -> StoreResult<String>;

    /// A stored component's bytes and signature.
    async fn component(&self, digest: &str) -> StoreResult<Option<StoredComponent>>;

    /// Every stored component: size, when stored, when retired, and the live tasks pinned
    /// to it (those created against it and not yet terminal).
    async fn components(&self) -> StoreResult<Vec<ComponentInfo>>;

    /// Makes a new deployment of `components` (each stored already, else
    /// [`StoreError::Invalid`]) current, in one commit, when the current revision is
    /// `expected` (0 for none yet; `None` for whatever it is; else
    /// [`StoreError::Conflict`] naming the current one). Components the previous
    /// deployment named and this one does not are retired from now.
    async fn deploy(
        &self,
        components: &[String],
        note: &str,
        expected: Option<u64>,
    ) -> StoreResult<Deployment>;

    /// The deployment at `revision`, or the current one for `None`.
    async fn deployment(&self, revision: Option<u64>) -> StoreResult<Option<Deployment>>;

    /// Up to `limit` deployments, newest first.
    async fn deployments(&self, limit: usize) -> StoreResult<Vec<Deployment>>;

    /// Up to `limit` live tasks pinned to the component `digest`, whatever their scope. An
    /// operator read that scans the live tasks: never on a request's path.
    async fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>>;

    /// Removes the components retired at least `retention_ms` ago that no live task is
    /// pinned to; returns their digests.
    async fn collect_components(&self, retention_ms: u64) -> StoreResult<Vec<String>>;
}

/// Revocations: keys the server issued (sessions, tokens) and withdrew, shared by every
/// node of the store.
#[async_trait]
pub trait RevocationStore: Send + Sync + 'static {
    /// Records `key` (a session, a token: anything the server issued and may withdraw) as
    /// revoked until `until`, durably, for every node sharing the store. Revoking again
    /// keeps the later time. Revocations past their time are removed by later ones, so
    /// they do not pile up. A key is 1 to 512 bytes ([`StoreError::Invalid`]).
    async fn revoke(&self, key: &str, until: Timestamp) -> StoreResult<()>;

    /// Whether `key` was revoked (and its time has not been cleared since).
    async fn revoked(&self, key: &str) -> StoreResult<bool>;
}

/// A task's outbound journal: what its attempts sent and received, fenced by the lease and
/// replayed by a later attempt.
#[async_trait]
pub trait JournalStore: Send + Sync + 'static {
    /// Records `entry` in the task's outbound journal under `lease`, fenced like every
    /// worker write (a stale attempt's entry is refused with [`StoreError::LeaseLost`]).
    /// A second entry at a position is refused ([`StoreError::Invalid`]) and the first
    /// stays as it was. The task's entries together may
    /// hold at most `max_bytes` encoded bytes ([`StoreError::Invalid`] naming the bound);
    /// the journal is removed with its task. [`JournalStore::journal_append_bounded`] with the
    /// task's bound alone.
    async fn journal_append(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
        max_bytes: u64,
    ) -> StoreResult<()> {
        self.journal_append_bounded(lease, entry, JournalBounds::task(max_bytes))
            .await
    }

    /// [`JournalStore::journal_append`] under `bounds`: besides the task's own bound, an entry
    /// that would take its scope's stored bytes (records and journals,
    /// [`Task::stored_bytes`]) past `bounds.scope_bytes` is refused with
    /// [`StoreError::StoredBytesLimit`], exactly under concurrency, and nothing of it is
    /// written. The entry's bytes count under the scope until the task is removed.
    async fn journal_append_bounded(
        &self,
        lease: &Lease,
        entry: &JournalEntry,
        bounds: JournalBounds,
    ) -> StoreResult<()>;

    /// The task's outbound journal under `lease`, by position. Errors as for
    /// [`ClaimStore::renew`].
    async fn journal(&self, lease: &Lease) -> StoreResult<Vec<JournalEntry>>;
}

/// Operators' reads and actions, whatever the scope: inspection, listing and counts, retry
/// now and delete. Never on a request's path.
#[async_trait]
pub trait OperatorStore: Send + Sync + 'static {
    /// Operator read of any task, bypassing scopes. Never reachable from a request.
    async fn inspect(&self, task_id: &TaskId) -> StoreResult<Option<(Task, Work)>>;

    /// One page of the tasks `query` selects, newest first, whatever their scope (the
    /// filter's tenant narrows it): an operator read, never on a request's path.
    ///
    /// Keyset paging: a page's `next` continues exactly after it, so a task created while
    /// an operator pages is never shown twice and never shifts a page (new tasks are newer
    /// than every cursor). Each page walks at most [`LIST_SCAN`](super::LIST_SCAN) index
    /// entries (a page may be short and still have a `next`), so no filter makes a page
    /// slow. Tasks past their
    /// TTL are left out. Errors: [`StoreError::Invalid`] for a limit outside
    /// 1..=[`MAX_LIST_LIMIT`](super::MAX_LIST_LIMIT) or an empty or overlong tenant or tool.
    async fn list_tasks(&self, query: &TaskQuery) -> StoreResult<TaskPage>;

    /// Stored tasks by status and by tool, of `tenant` or of every tenant: kept in the
    /// commits that change them, so reading them scans no task. Tasks past their TTL count
    /// until the reaper removes them.
    async fn count_tasks(&self, tenant: Option<&str>) -> StoreResult<TaskCounts>;

    /// An operator's "retry now", under an `update` access: a task waiting out its retry
    /// delay (working, unclaimed, `retry_at` ahead) becomes due at once, and its history
    /// says so. Errors: `NotFound`, `Terminal`, [`StoreError::WrongAction`], and
    /// [`StoreError::Invalid`] for a task that is not waiting for a retry.
    async fn retry_now(&self, access: &Access) -> StoreResult<Task>;

    /// An operator's delete, under a `cancel` access: removes a finished task (completed,
    /// failed or cancelled) as the reaper would, which frees its place under
    /// [`NewTask::max_stored_in_scope`] before its TTL. Errors: `NotFound`,
    /// [`StoreError::WrongAction`], and [`StoreError::Invalid`] for an unfinished task
    /// (cancel it first: its worker must hear of the end).
    async fn delete_finished(&self, access: &Access) -> StoreResult<()>;

    /// A task's outbound journal, by position, whatever its scope and whether or not its
    /// TTL has run out (an archive reads it before the reaper removes the task): empty for
    /// a task without entries or without a record.
    async fn task_journal(&self, task_id: &TaskId) -> StoreResult<Vec<JournalEntry>>;

    /// Records an operator's action, stamped with the store's time, and returns it as
    /// stored; each record written sweeps a few older than
    /// [`AUDIT_RETENTION_MS`](crate::model::AUDIT_RETENTION_MS).
    async fn record_audit(&self, record: AuditRecord) -> StoreResult<AuditRecord>;

    /// A page of the audit, newest first: at most `limit` records
    /// (1..=[`MAX_AUDIT_PAGE`](crate::model::MAX_AUDIT_PAGE), else [`StoreError::Invalid`])
    /// after the cursor `from` (a page's `next`; `None`: the newest).
    async fn audit(&self, from: Option<&str>, limit: usize) -> StoreResult<AuditPage>;
}

/// Schedules: an operator's recurring tool calls and where their firings stand, one row
/// per schedule, changed only by a compare-and-set on its revision. A firing moves its row
/// in the commit that creates its task ([`NewTask::firing`]), so of every node that plans
/// a firing exactly one creates its task.
#[async_trait]
pub trait ScheduleStore: Send + Sync + 'static {
    /// Every schedule, by name. At most
    /// [`MAX_SCHEDULES`](crate::model::MAX_SCHEDULES) exist.
    async fn schedules(&self) -> StoreResult<Vec<Schedule>>;

    /// The schedule named `name`, if there is one.
    async fn schedule(&self, name: &str) -> StoreResult<Option<Schedule>>;

    /// Replaces the schedule `name` at revision `expected` (`None`: there must be none)
    /// with `after` (`None`: removes it), in one commit.
    ///
    /// Errors: [`StoreError::Conflict`] when the row is not at `expected` (naming what it
    /// is); [`StoreError::Invalid`] when `after` is named otherwise, its revision is not one
    /// more than `expected` (0 for a new one), or a new one would pass
    /// [`MAX_SCHEDULES`](crate::model::MAX_SCHEDULES).
    async fn swap_schedule(
        &self,
        name: &str,
        expected: Option<u64>,
        after: Option<&Schedule>,
    ) -> StoreResult<()>;
}

/// Webhook subscriptions' rows and the outbox: the events the store writes in the commit of
/// each transition a task's subscriptions hear ([`crate::model::Task::notify`]), numbered in
/// commit order.
#[async_trait]
pub trait OutboxStore: Send + Sync + 'static {
    /// Every subscription, by name. At most [`MAX_WEBHOOKS`](crate::model::MAX_WEBHOOKS)
    /// exist.
    async fn webhooks(&self) -> StoreResult<Vec<crate::model::Webhook>>;

    /// The subscription named `name`, if there is one.
    async fn webhook(&self, name: &str) -> StoreResult<Option<crate::model::Webhook>>;

    /// Replaces the subscription `name` at revision `expected` (`None`: there must be none)
    /// with `after` (`None`: removes it), in one commit.
    ///
    /// Errors: [`StoreError::WebhookConflict`] when the row is not at `expected`;
    /// [`StoreError::Invalid`] when `after` is named otherwise, its revision is not one more
    /// than `expected` (0 for a new one), or a new one would pass
    /// [`MAX_WEBHOOKS`](crate::model::MAX_WEBHOOKS).
    async fn swap_webhook(
        &self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Webhook>,
    ) -> StoreResult<()>;

    /// Up to `limit` events numbered after `after`, in commit order. An event numbered `n`
    /// is readable only once every event before it is: a reader that saw `n` never meets a
    /// smaller number later.
    async fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<crate::model::OutboxEvent>>;

    /// The last number the outbox gave (0: none yet).
    async fn last_event(&self) -> StoreResult<u64>;

    /// Removes up to `limit` events numbered below `below` that committed before `before`;
    /// how many it removed.
    async fn sweep_events(&self, below: u64, before: Timestamp, limit: usize)
    -> StoreResult<usize>;
}
