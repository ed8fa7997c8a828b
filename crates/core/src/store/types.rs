//! The values that cross the store boundary: creation requests, access values, leases and
//! commit reports.

use serde_json::Value;

use crate::model::{Scope, Task, TaskId, Timestamp, Work};

/// The longest lease a claim may ask for: one hour. Leases are renewed by heartbeats; a
/// long lease only delays recovery after a crash.
pub const MAX_LEASE_MS: u64 = 60 * 60 * 1000;

/// The longest TTL a task may have: one year.
pub const MAX_TTL_MS: u64 = 366 * 24 * 60 * 60 * 1000;

/// What [`crate::store::TaskStore::create`] needs.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The new task's id (see [`TaskId::generate`]).
    pub id: TaskId,
    /// The scope it belongs to.
    pub scope: Scope,
    /// What it does.
    pub work: Work,
    /// Lifetime from creation; `None` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: Option<u64>,
    /// The first status message.
    pub status_message: Option<String>,
    /// The creating request's declared client capabilities (the capability set only).
    pub client_capabilities: Value,
    /// Refuse the creation ([`crate::store::StoreError::LiveLimit`]) when the scope already
    /// has this many live (non-terminal, unexpired) tasks; `None` never refuses.
    pub max_live_in_scope: Option<u64>,
    /// Refuse the creation ([`crate::store::StoreError::StoredLimit`]) when the scope
    /// already has this many stored tasks, terminal ones included (until they are reaped);
    /// `None` never refuses.
    pub max_stored_in_scope: Option<u64>,
    /// Refuse the creation ([`crate::store::StoreError::StoredBytesLimit`]) when the
    /// scope's stored bytes (its tasks' records and journals, see
    /// [`crate::model::Task::stored_bytes`]) plus the new task's record would pass this;
    /// `None` never refuses.
    pub max_stored_bytes_in_scope: Option<u64>,
    /// The schedule firing that creates it, if one does: its row moves in the same commit.
    pub firing: Option<ScheduleMove>,
    /// The webhook subscriptions told of its transitions ([`crate::model::Task::notify`]).
    pub notify: Vec<crate::model::Notify>,
}

/// A schedule's row moved by the commit that creates a firing's task: from revision
/// `expected` to `after` (whose revision is one more).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleMove {
    /// The revision the firing was planned from.
    pub expected: u64,
    /// The row after the firing.
    pub after: crate::model::Schedule,
}

impl NewTask {
    /// A task in `scope` doing `work`, with no TTL, no poll interval and no capabilities.
    pub fn new(id: TaskId, scope: Scope, work: Work) -> Self {
        Self {
            id,
            scope,
            work,
            ttl_ms: None,
            poll_interval_ms: None,
            status_message: None,
            client_capabilities: Value::Object(Default::default()),
            max_live_in_scope: None,
            max_stored_in_scope: None,
            max_stored_bytes_in_scope: None,
            firing: None,
            notify: Vec::new(),
        }
    }
}

/// What a request wants to do with a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Read it (`tasks/get`, subscriptions).
    Read,
    /// Answer its input requests (`tasks/update`).
    Update,
    /// Cancel it (`tasks/cancel`).
    Cancel,
}

/// An opaque permission for one action on one task, from [`crate::store::TaskStore::authorize`].
///
/// It cannot be built outside the store, names no credential, and is only accepted by the
/// store instance that issued it for the action it was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub(crate) task_id: TaskId,
    pub(crate) scope: Scope,
    pub(crate) action: Action,
    pub(crate) issuer: u64,
}

impl Access {
    /// For store adapters: the access value a store instance issues, `issuer` being that
    /// instance's random secret. Without the secret nobody can make one the store accepts.
    pub fn issue(task_id: TaskId, scope: Scope, action: Action, issuer: u64) -> Self {
        Self {
            task_id,
            scope,
            action,
            issuer,
        }
    }

    /// For store adapters: whether the store instance whose secret is `issuer` issued this
    /// value (the secret itself is never readable from the value).
    pub fn issued_by(&self, issuer: u64) -> bool {
        self.issuer == issuer
    }

    /// The scope of the task it was issued for.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The task this access is for.
    pub fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    /// The action it permits.
    pub fn action(&self) -> Action {
        self.action
    }
}

/// A worker's lease on one claim of one task. Lifecycle events, renewals and releases need
/// it; it stops working the moment a newer claim exists, the lease runs out, or the store
/// reboots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) task_id: TaskId,
    pub(crate) generation: u64,
    pub(crate) token: u64,
    pub(crate) epoch: u64,
    pub(crate) expires_at: Timestamp,
}

impl Lease {
    /// For store adapters: the lease of a claim the adapter committed. `token` is the
    /// claim's random secret, so a lease made up by anyone else is refused.
    pub fn issue(
        task_id: TaskId,
        generation: u64,
        token: u64,
        epoch: u64,
        expires_at: Timestamp,
    ) -> Self {
        Self {
            task_id,
            generation,
            token,
            epoch,
            expires_at,
        }
    }

    /// The claim's secret, for the adapter that checks it (a worker holding the lease
    /// holds the token already).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The store boot epoch the claim was made in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The claimed task.
    pub fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    /// The claim's generation (the fencing token).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// When the lease runs out (store clock).
    pub fn expires_at(&self) -> Timestamp {
        self.expires_at
    }
}

/// Who is asking for a transition.
#[derive(Debug, Clone, Copy)]
pub enum Authority<'a> {
    /// A worker holding the task's live claim.
    Worker(&'a Lease),
    /// A request holding an access value.
    Request(&'a Access),
}

impl Authority<'_> {
    /// The task it speaks for.
    pub fn task_id(&self) -> &TaskId {
        match self {
            Self::Worker(lease) => lease.task_id(),
            Self::Request(access) => access.task_id(),
        }
    }
}

/// An [`Authority`] that owns its lease or access, for a write that runs on another
/// thread.
#[derive(Debug, Clone)]
pub(crate) enum HeldAuthority {
    Worker(Lease),
    Request(Access),
}

impl HeldAuthority {
    pub(crate) fn of(by: Authority<'_>) -> Self {
        match by {
            Authority::Worker(lease) => Self::Worker(lease.clone()),
            Authority::Request(access) => Self::Request(access.clone()),
        }
    }

    pub(crate) fn authority(&self) -> Authority<'_> {
        match self {
            Self::Worker(lease) => Authority::Worker(lease),
            Self::Request(access) => Authority::Request(access),
        }
    }
}

/// Parameters of a claim.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// Lease length, 1..=[`MAX_LEASE_MS`].
    pub lease_ms: u64,
    /// Who claims, for operators (e.g. `node-a/runner-1`).
    pub owner: String,
    /// `claim_next` passes over due tasks of these scopes (tenants at their share of
    /// execution slots). It looks at most [`CLAIM_SKIP_SCAN`] due entries past them.
    pub skip_scopes: Vec<Scope>,
    /// Also commit the attempt's `started` event, with the id
    /// `EventId::for_claim(generation, "started")`, in the claim's own commit: a worker
    /// that will run the task at once saves a commit. Committing that event again later is
    /// a replay.
    pub start: bool,
    /// How many due tasks `claim_next` may claim in its one write (1..=[`MAX_CLAIM_BATCH`];
    /// default 1): a runner with several free slots takes as many tasks in one commit
    /// rather than one commit each.
    pub batch: usize,
}

/// The most tasks one `claim_next` claims.
pub const MAX_CLAIM_BATCH: usize = 32;

/// The most ids one [`ClaimStore::reap_ids`](super::ClaimStore::reap_ids) removes.
pub const MAX_REAP_IDS: usize = 1_000;

/// How many due entries one `claim_next` looks at when it skips scopes.
pub const CLAIM_SKIP_SCAN: usize = 1_024;

impl ClaimRequest {
    /// A claim for `lease_ms` by `owner`.
    pub fn new(lease_ms: u64, owner: impl Into<String>) -> Self {
        Self {
            lease_ms,
            owner: owner.into(),
            skip_scopes: Vec::new(),
            start: false,
            batch: 1,
        }
    }
}

/// What one journal append may fill: the task's own journal, and its scope's stored
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalBounds {
    /// The most encoded bytes the task's entries may hold together.
    pub task_bytes: u64,
    /// The most bytes the scope's tasks and journals may hold together
    /// ([`crate::model::Task::stored_bytes`]); `None` never refuses.
    pub scope_bytes: Option<u64>,
}

impl JournalBounds {
    /// The task's bound alone.
    pub fn task(task_bytes: u64) -> Self {
        Self {
            task_bytes,
            scope_bytes: None,
        }
    }
}

/// A successful claim: the lease and what the worker needs to run the task.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The lease.
    pub lease: Lease,
    /// The task as claimed (and started, when the request asked for it).
    pub task: Task,
    /// Its work descriptor.
    pub work: Work,
    /// Whether the claim's commit also started the attempt ([`ClaimRequest::start`]).
    pub started: bool,
}

/// What [`crate::store::ClaimStore::claim_next`] did: the claim it made, and the tasks it
/// removed on the way because their TTL had passed. Every removal at a TTL is reported
/// as [`Reaped`], whoever made it, so work cut off unfinished is counted and logged.
#[derive(Debug, Default)]
pub struct NextClaim {
    /// The claim on the task due longest, if any was.
    pub claimed: Option<Claimed>,
    /// Claims on the next tasks due, in due order, up to the request's `batch` with the
    /// first: each as [`NextClaim::claimed`] is, in the same commit.
    pub more: Vec<Claimed>,
    /// Due tasks found past their TTL and removed (all of them unfinished: a finished
    /// task is never due).
    pub reaped: Vec<Reaped>,
    /// When nothing was claimed: how long until the next task is due, by the store's
    /// clock (`Some(0)`: one is due but was passed over); `None` when no task is waiting
    /// for a time. A runner with nothing to claim sleeps at most this long, so a sleep or
    /// a retry is taken when it is due, not at the next poll.
    pub next_due_in_ms: Option<u64>,
}

/// A task removed at its TTL, by [`crate::store::ClaimStore::reap`] or on the way of a
/// [`crate::store::ClaimStore::claim_next`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Its id.
    pub id: TaskId,
    /// Its status when removed: a non-terminal one means work was cut off by its TTL.
    pub status: crate::model::TaskStatus,
}

pub use crate::model::{Effect, InputReply};

/// The report of a transition.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The task after the transition.
    pub task: Task,
    /// The revision the event committed (for a replay, the original revision).
    pub revision: u64,
    /// The event id had been committed before; nothing changed now.
    pub replayed: bool,
    /// What happened.
    pub effect: Effect,
}
