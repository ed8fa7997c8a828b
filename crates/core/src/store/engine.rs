//! The store's rules, written once over a small key-value transaction interface.
//!
//! An adapter keeps a record table plus three ordered indexes; it implements [`Txn`] over
//! them, and its [`Backend`](super::Backend) runs these functions inside its own atomic
//! write. Every rule of the [`super::Store`] contract lives here, so the adapters differ only
//! in how bytes are kept.
//!
//! Every operation validates and decides before it writes: an operation that returns an
//! error has written nothing, so an adapter may batch several operations in one commit.

use serde_json::Value;

use crate::model::{
    Claim, ComponentInfo, Deployment, EventKind, HistoryKind, JournalEntry, MAX_COMPONENT_BYTES,
    MAX_SIGNATURE_BYTES, Principal, Rejected, Scope, StoredComponent, Task, TaskEvent, TaskId,
    TaskStatus, TaskView, Timestamp, Work,
};

use super::listing::{self, Fed, PageBuilder, TaskCounts, TaskPage, TaskQuery};
use super::types::{
    Access, Action, Authority, ClaimRequest, Claimed, Committed, JournalBounds, Lease,
    MAX_LEASE_MS, MAX_TTL_MS, NewTask, NextClaim, Reaped,
};
use super::{StoreError, StoreResult};

const MAX_POLL_INTERVAL_MS: u64 = 24 * 60 * 60 * 1000;
const MAX_OWNER_LEN: usize = 128;
/// How many due-index entries one `claim_next` looks at past expired tasks.
const CLAIM_SCAN: usize = 64;

/// A task and its work descriptor: the unit every adapter stores.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    pub(crate) task: Task,
    pub(crate) work: Work,
}

/// The ordered secondary indexes. Each maps `(key, task id)` to nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Index {
    /// Key: when a runner may claim the task ([`Task::due_at`]).
    Due,
    /// Key: when the TTL runs out ([`Task::expires_at`]).
    Expiry,
    /// Key: the boot epoch of the task's claim, to fence a previous process's claims.
    Claimed,
}

/// The counts every adapter keeps in the same commit as the change it counts (per scope,
/// or per component digest), so a cap on them is exact under concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Count {
    /// Non-terminal tasks still stored.
    Live,
    /// Every task still stored, terminal ones included.
    Stored,
    /// Live tasks pinned to a component, keyed by its digest.
    Pinned,
    /// Stored tasks per tenant, tool and status ([`listing::tally_key`]).
    Tally,
    /// The bytes a scope's stored tasks count ([`Task::stored_bytes`]): moved by
    /// [`Txn::add_bytes`], never by one.
    StoredBytes,
}

impl Count {
    /// The key [`Count::StoredBytes`] keeps `scope`'s bytes under, for an adapter that
    /// keeps them in its stored-task counts' table: a scope name never starts with this
    /// control character, so the two never meet.
    #[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
    pub(crate) fn bytes_key(scope: &str) -> String {
        format!("\u{1e}bytes\u{1e}{scope}")
    }
}

/// The small tables beside the tasks, each an ordered map of bytes to bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kv {
    /// Component digest → its bytes.
    ComponentBytes,
    /// Component digest → [`ComponentMeta`], encoded.
    ComponentMeta,
    /// Revision (big-endian u64) → [`Deployment`], encoded.
    Deployments,
}

impl Kv {
    /// A one-byte tag, for adapters that keep every space in one table.
    #[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
    pub(crate) fn tag(self) -> u8 {
        match self {
            Kv::ComponentBytes => 1,
            Kv::ComponentMeta => 2,
            Kv::Deployments => 3,
        }
    }
}

/// What the store keeps about a component beside its bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ComponentMeta {
    pub(crate) size: u64,
    pub(crate) stored_at: Timestamp,
    pub(crate) retired_at: Option<Timestamp>,
    /// The signature stored with it, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signature: Option<String>,
}

impl ComponentMeta {
    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> StoreResult<Self> {
        serde_json::from_slice(bytes)
            .map_err(|e| StoreError::corrupt(format!("a component's metadata is unreadable: {e}")))
    }
}

/// The caps a creation is admitted under; `None` never refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Caps {
    pub(crate) live: Option<u64>,
    pub(crate) stored: Option<u64>,
    /// The scope's stored bytes ([`Count::StoredBytes`]) after the admission.
    pub(crate) stored_bytes: Option<u64>,
}

impl Caps {
    pub(crate) fn of(new: &NewTask) -> Self {
        Self {
            live: new.max_live_in_scope,
            stored: new.max_stored_in_scope,
            stored_bytes: new.max_stored_bytes_in_scope,
        }
    }

    pub(crate) fn any(&self) -> bool {
        self.live.is_some() || self.stored.is_some() || self.stored_bytes.is_some()
    }

    /// The refusal for counts `live` and `stored`, if either is at its cap, or for `bytes`
    /// stored when `adding` more would pass the bytes cap.
    pub(crate) fn refusal(
        &self,
        live: u64,
        stored: u64,
        bytes: u64,
        adding: u64,
    ) -> Option<StoreError> {
        if let Some(max) = self.live.filter(|m| live >= *m) {
            return Some(StoreError::LiveLimit { max });
        }
        if let Some(max) = self.stored.filter(|m| stored >= *m) {
            return Some(StoreError::StoredLimit { max });
        }
        self.stored_bytes
            .filter(|m| bytes.saturating_add(adding) > *m)
            .map(|max| StoreError::StoredBytesLimit { max })
    }
}

/// Counts the bytes written to it.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sets what `rec` counts under its scope's stored bytes ([`Task::stored_bytes`]): the
/// record's JSON length, the field itself left out, plus its journal's bytes. Measured
/// without allocating, when a task is created and when its status or inputs change (the
/// changes that bring arguments, answers and results); what other changes add between
/// (history, a status message) is bounded per task.
pub(crate) fn measure(rec: &mut Record) {
    rec.task.stored_bytes = 0;
    let mut n = ByteCount(0);
    // Serializing values that are already JSON cannot fail; a failure counts nothing.
    let _ = serde_json::to_writer(&mut n, &rec.task);
    let _ = serde_json::to_writer(&mut n, &rec.work);
    rec.task.stored_bytes = n.0.saturating_add(rec.task.journal_bytes);
}

impl Index {
    pub(crate) const ALL: [Index; 3] = [Index::Due, Index::Expiry, Index::Claimed];

    fn key(self, task: &Task) -> Option<u64> {
        match self {
            Index::Due => task.due_at().map(Timestamp::as_millis),
            Index::Expiry => task.expires_at().map(Timestamp::as_millis),
            Index::Claimed => task.claim.as_ref().map(|c| c.epoch),
        }
    }
}

/// What authorizing a request needs of a task: whose it is and until when. Fixed at
/// creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) scope: Scope,
    pub(crate) expires_at: Option<Timestamp>,
}

impl Head {
    pub(crate) fn of(task: &Task) -> Self {
        Self {
            scope: task.scope.clone(),
            expires_at: task.expires_at(),
        }
    }
}

/// Read access to records.
pub(crate) trait View {
    /// The record, if stored (expired or not).
    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>>;
    /// The task's head, if stored, without reading the record: refusing another scope's
    /// task must cost what refusing a missing one does, however large its record.
    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>>;
    /// Up to `limit` task ids whose `index` key is `<= upto`, smallest key first.
    fn index_upto(&self, index: Index, upto: u64, limit: usize) -> StoreResult<Vec<TaskId>>;
    /// The count of `kind` under `key` (a scope's name, or a component's digest).
    fn count(&self, kind: Count, key: &str) -> StoreResult<u64>;
    /// The value under `key` in `space`.
    fn kv_get(&self, space: Kv, key: &[u8]) -> StoreResult<Option<Vec<u8>>>;
    /// Up to `limit` live tasks whose work is pinned to the component `digest`. A scan of
    /// the tasks: for operators, never on a request's path.
    fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>>;
    /// Up to `limit` entries of `space`, by key: the largest first when `newest_first`.
    fn kv_scan(
        &self,
        space: Kv,
        limit: usize,
        newest_first: bool,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Whether `key` is revoked (whatever its expiry: what it names expires by then).
    fn revoked(&self, key: &str) -> StoreResult<bool>;
    /// The task's journal entries (position, encoded entry), by position. A read reaches
    /// them only when it says so ([`Touches::Journal`]).
    fn journal(&self, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>>;
    /// Up to `limit` listing entries (key, tool) with `from <= key < to`, the largest key
    /// first. A read reaches them only when it says so ([`Touches::Listing`]).
    fn listing(&self, from: &[u8], to: &[u8], limit: usize) -> StoreResult<Vec<(Vec<u8>, String)>>;
    /// Every [`Count::Tally`] whose key starts with `prefix`, with its count.
    fn tallies(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>>;
    /// The task, if stored (expired or not), without its work descriptor: what a read of
    /// the task's state needs. An adapter that keeps the work apart skips reading it.
    fn load_task(&self, id: &TaskId) -> StoreResult<Option<Task>> {
        Ok(self.load(id)?.map(|r| r.task))
    }
    /// What a client may see of the task, if stored (expired or not): what a lookup needs.
    /// An adapter that keeps records as JSON decodes the view alone.
    fn load_view(&self, id: &TaskId) -> StoreResult<Option<TaskView>> {
        Ok(self.load_task(id)?.map(|t| TaskView::of(&t)))
    }
}

/// Write access: records and index entries, inside one atomic write.
pub(crate) trait Txn: View {
    fn put(&mut self, record: &Record) -> StoreResult<()>;
    /// Removes the record, its head and its journal.
    fn remove(&mut self, id: &TaskId) -> StoreResult<()>;
    /// Stores a journal entry at `seq`; one already there fails the write
    /// ([`journal_taken`]), so the task's counts stay exact.
    fn journal_put(&mut self, id: &TaskId, seq: u32, entry: &[u8]) -> StoreResult<()>;
    fn index_put(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()>;
    fn index_del(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()>;
    fn set_count(&mut self, kind: Count, key: &str, count: u64) -> StoreResult<()>;
    /// Adds a listing entry whose value is the task's tool.
    fn listing_put(&mut self, key: &[u8], tool: &str) -> StoreResult<()>;
    fn listing_del(&mut self, key: &[u8]) -> StoreResult<()>;
    fn kv_put(&mut self, space: Kv, key: &[u8], value: &[u8]) -> StoreResult<()>;
    fn kv_del(&mut self, space: Kv, key: &[u8]) -> StoreResult<()>;
    /// Records `key` as revoked until `until` (a later `until` extends it; an earlier one
    /// keeps it).
    fn revoke_put(&mut self, key: &str, until: Timestamp) -> StoreResult<()>;
    /// Removes up to `limit` revocations whose time has passed at `now`.
    fn revoke_sweep(&mut self, now: Timestamp, limit: usize) -> StoreResult<()>;
    /// A task was created: an adapter that keeps heads apart from records stores its head
    /// (records are removed with their head by `remove`).
    fn created(&mut self, _task: &Task) -> StoreResult<()> {
        Ok(())
    }

    /// Refuses one more task in `scope` when a count is at its cap
    /// ([`StoreError::LiveLimit`], [`StoreError::StoredLimit`]), and `bytes` more when
    /// they would take the scope's stored bytes past theirs
    /// ([`StoreError::StoredBytesLimit`]). An adapter whose counts are not serialized by
    /// its write lock answers this exactly under concurrency in its own way (and its
    /// `add_count` and `add_bytes` then keep what this admitted).
    fn admit(&mut self, scope: &Scope, caps: Caps, bytes: u64) -> StoreResult<()> {
        let count = |txn: &Self, cap: Option<u64>, kind| match cap {
            Some(_) => txn.count(kind, scope.as_str()),
            None => Ok(0),
        };
        let live = count(self, caps.live, Count::Live)?;
        let stored = count(self, caps.stored, Count::Stored)?;
        let stored_bytes = count(self, caps.stored_bytes, Count::StoredBytes)?;
        caps.refusal(live, stored, stored_bytes, bytes)
            .map_or(Ok(()), Err)
    }

    /// Moves the stored bytes of `scope` by `delta`.
    fn add_bytes(&mut self, scope: &str, delta: i64) -> StoreResult<()> {
        let n = self.count(Count::StoredBytes, scope)?;
        let n = n.saturating_add_signed(delta);
        self.set_count(Count::StoredBytes, scope, n)
    }

    /// Moves the count of `kind` under `key` by one.
    fn add_count(&mut self, kind: Count, key: &str, up: bool) -> StoreResult<()> {
        let n = self.count(kind, key)?;
        let n = if up { n + 1 } else { n.saturating_sub(1) };
        self.set_count(kind, key, n)
    }

    /// Moves the live count of `task`'s scope, and the pin on its component, by one.
    fn add_live(&mut self, task: &Task, work: &Work, up: bool) -> StoreResult<()> {
        self.add_count(Count::Live, task.scope.as_str(), up)?;
        if let Some(digest) = &work.component_digest {
            self.add_count(Count::Pinned, digest, up)?;
        }
        Ok(())
    }

    /// Stores `after` and moves its index entries from where `before` had them. The
    /// scope's counts follow every creation and every change between live and terminal
    /// here (and every removal in `delete`), so no operation can forget them.
    fn save(&mut self, before: Option<&Task>, after: &Record) -> StoreResult<()> {
        if before.is_none() {
            self.created(&after.task)?;
            self.add_count(Count::Stored, after.task.scope.as_str(), true)?;
        }
        let counted = before.map_or(0, |t| t.stored_bytes);
        if counted != after.task.stored_bytes {
            let delta = after.task.stored_bytes as i64 - counted as i64;
            self.add_bytes(after.task.scope.as_str(), delta)?;
        }
        self.move_listing(before, Some(&after.task), listing::tool_of(&after.work))?;
        let was_live = before.is_some_and(|t| !t.status.is_terminal());
        let is_live = !after.task.status.is_terminal();
        if was_live != is_live {
            self.add_live(&after.task, &after.work, is_live)?;
        }
        for index in Index::ALL {
            let old = before.and_then(|t| index.key(t));
            let new = index.key(&after.task);
            if old != new {
                if let Some(k) = old {
                    self.index_del(index, k, &after.task.id)?;
                }
                if let Some(k) = new {
                    self.index_put(index, k, &after.task.id)?;
                }
            }
        }
        self.put(after)
    }

    /// Moves a task's listing entries and its tally from where `before` had them to where
    /// `after` has them (`None`: not stored). Only the status moves them once stored.
    fn move_listing(
        &mut self,
        before: Option<&Task>,
        after: Option<&Task>,
        tool: &str,
    ) -> StoreResult<()> {
        if let (Some(b), Some(a)) = (before, after)
            && b.status == a.status
        {
            return Ok(());
        }
        if let Some(b) = before {
            for k in listing::listing_keys(b) {
                self.listing_del(&k)?;
            }
            let key = listing::tally_key(b.scope.tenant(), tool, b.status);
            self.add_count(Count::Tally, &key, false)?;
        }
        if let Some(a) = after {
            for k in listing::listing_keys(a) {
                self.listing_put(&k, tool)?;
            }
            let key = listing::tally_key(a.scope.tenant(), tool, a.status);
            self.add_count(Count::Tally, &key, true)?;
        }
        Ok(())
    }

    /// Removes the record and all its index entries.
    fn delete(&mut self, rec: &Record) -> StoreResult<()> {
        let task = &rec.task;
        if !task.status.is_terminal() {
            self.add_live(task, &rec.work, false)?;
        }
        self.add_count(Count::Stored, task.scope.as_str(), false)?;
        if task.stored_bytes > 0 {
            self.add_bytes(task.scope.as_str(), -(task.stored_bytes as i64))?;
        }
        self.move_listing(Some(task), None, listing::tool_of(&rec.work))?;
        for index in Index::ALL {
            if let Some(k) = index.key(task) {
                self.index_del(index, k, &task.id)?;
            }
        }
        self.remove(&task.id)
    }
}

/// A write that changes one record several times (create, claim, start) keeps the record
/// here between the steps and stores it once at the end: each step's rules run unchanged,
/// but the record is encoded once instead of after every step and never decoded back.
///
/// Everything but the records passes straight to the transaction underneath (index
/// entries, heads, live counts), in the order the steps make them; only `put` is deferred,
/// and [`Scratch::flush`] makes it. A step that fails leaves the write to be abandoned, as
/// it would without the scratch.
struct Scratch<'t> {
    txn: &'t mut dyn Txn,
    records: Vec<Record>,
}

impl<'t> Scratch<'t> {
    fn new(txn: &'t mut dyn Txn) -> Self {
        Self {
            txn,
            records: Vec::new(),
        }
    }

    fn held(&self, id: &TaskId) -> Option<&Record> {
        self.records.iter().find(|r| r.task.id == *id)
    }

    /// Stores every record the steps saved, once each.
    fn flush(self) -> StoreResult<()> {
        for r in &self.records {
            self.txn.put(r)?;
        }
        Ok(())
    }
}

impl View for Scratch<'_> {
    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        match self.held(id) {
            Some(r) => Ok(Some(r.clone())),
            None => self.txn.load(id),
        }
    }

    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        match self.held(id) {
            Some(r) => Ok(Some(Head::of(&r.task))),
            None => self.txn.head(id),
        }
    }

    fn index_upto(&self, index: Index, upto: u64, limit: usize) -> StoreResult<Vec<TaskId>> {
        self.txn.index_upto(index, upto, limit)
    }

    fn count(&self, kind: Count, key: &str) -> StoreResult<u64> {
        self.txn.count(kind, key)
    }

    fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>> {
        self.txn.pinned_tasks(digest, limit)
    }

    fn kv_get(&self, space: Kv, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        self.txn.kv_get(space, key)
    }

    fn kv_scan(
        &self,
        space: Kv,
        limit: usize,
        newest_first: bool,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.txn.kv_scan(space, limit, newest_first)
    }

    fn revoked(&self, key: &str) -> StoreResult<bool> {
        self.txn.revoked(key)
    }

    fn journal(&self, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>> {
        self.txn.journal(id)
    }

    fn listing(&self, from: &[u8], to: &[u8], limit: usize) -> StoreResult<Vec<(Vec<u8>, String)>> {
        self.txn.listing(from, to, limit)
    }

    fn tallies(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        self.txn.tallies(prefix)
    }

    fn load_task(&self, id: &TaskId) -> StoreResult<Option<Task>> {
        match self.held(id) {
            Some(r) => Ok(Some(r.task.clone())),
            None => self.txn.load_task(id),
        }
    }

    fn load_view(&self, id: &TaskId) -> StoreResult<Option<TaskView>> {
        match self.held(id) {
            Some(r) => Ok(Some(TaskView::of(&r.task))),
            None => self.txn.load_view(id),
        }
    }
}

impl Txn for Scratch<'_> {
    fn put(&mut self, record: &Record) -> StoreResult<()> {
        match self
            .records
            .iter_mut()
            .find(|r| r.task.id == record.task.id)
        {
            Some(held) => *held = record.clone(),
            None => self.records.push(record.clone()),
        }
        Ok(())
    }

    fn remove(&mut self, id: &TaskId) -> StoreResult<()> {
        self.records.retain(|r| r.task.id != *id);
        self.txn.remove(id)
    }

    fn journal_put(&mut self, id: &TaskId, seq: u32, entry: &[u8]) -> StoreResult<()> {
        self.txn.journal_put(id, seq, entry)
    }

    fn index_put(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.txn.index_put(index, key, id)
    }

    fn index_del(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.txn.index_del(index, key, id)
    }

    fn set_count(&mut self, kind: Count, key: &str, count: u64) -> StoreResult<()> {
        self.txn.set_count(kind, key, count)
    }

    fn kv_put(&mut self, space: Kv, key: &[u8], value: &[u8]) -> StoreResult<()> {
        self.txn.kv_put(space, key, value)
    }

    fn listing_put(&mut self, key: &[u8], tool: &str) -> StoreResult<()> {
        self.txn.listing_put(key, tool)
    }

    fn listing_del(&mut self, key: &[u8]) -> StoreResult<()> {
        self.txn.listing_del(key)
    }

    fn kv_del(&mut self, space: Kv, key: &[u8]) -> StoreResult<()> {
        self.txn.kv_del(space, key)
    }

    fn revoke_put(&mut self, key: &str, until: Timestamp) -> StoreResult<()> {
        self.txn.revoke_put(key, until)
    }

    fn revoke_sweep(&mut self, now: Timestamp, limit: usize) -> StoreResult<()> {
        self.txn.revoke_sweep(now, limit)
    }

    fn created(&mut self, task: &Task) -> StoreResult<()> {
        self.txn.created(task)
    }

    fn admit(&mut self, scope: &Scope, caps: Caps, bytes: u64) -> StoreResult<()> {
        self.txn.admit(scope, caps, bytes)
    }

    fn add_bytes(&mut self, scope: &str, delta: i64) -> StoreResult<()> {
        self.txn.add_bytes(scope, delta)
    }

    fn add_count(&mut self, kind: Count, key: &str, up: bool) -> StoreResult<()> {
        self.txn.add_count(kind, key, up)
    }
}

/// What every operation is evaluated against: the commit time, the store's boot epoch and
/// the identity of the store instance (for access values).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    pub(crate) now: Timestamp,
    pub(crate) epoch: u64,
    pub(crate) issuer: u64,
}

/// What one operation reaches, told to its backend before the rules run.
///
/// A backend that holds every record within reach (the embedded ones) ignores it. One that
/// fetches rows per operation (PostgreSQL) reads, and for a write locks, exactly these
/// before the rules run, so a rule that reaches for anything else is a bug it reports
/// rather than serves from a stale read. Borrowed from the caller: naming what an
/// operation touches costs no allocation.
// Only the PostgreSQL adapter reads it, and makes the variants only it needs.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum Touches<'a> {
    /// No task. A read: the clock alone. A write: the probe that proves the store can
    /// commit, which commits like any other write though it changes nothing.
    Nothing,
    /// One task by id (absent is an answer too). A write reads the whole record; a read
    /// leaves out the work descriptor.
    Task(TaskId),
    /// One task by id with its work descriptor: a read for a worker or an operator.
    TaskWork(TaskId),
    /// A task being created: nothing to read (a taken id fails the write).
    New(TaskId),
    /// The task due longest that is outside these scopes and not past its TTL
    /// (`claim_next`).
    NextDue(&'a [Scope]),
    /// Up to this many due tasks past their TTL (cleared when nothing else is due).
    ExpiredDue(usize),
    /// Up to this many tasks past their TTL, the oldest expiry first (`reap`).
    Expired(usize),
    /// One task by id and its journal: a read for a worker replaying its attempt, or a
    /// write appending to it.
    Journal(TaskId),
    /// The revocations table alone (nothing of any task).
    Revocations,
    /// The components and deployments tables, and the pin counts (nothing of any task).
    Deployments,
    /// Every task whose claim names this owner (a shared store's node releasing the claims
    /// of its previous life).
    Owner(&'a str),
    /// The listing indexes and the tallies, and the tasks they name (operators' queries).
    Listing,
}

/// Fills `buf` from the OS randomness source (it never fails on a supported system).
pub fn fill_random(buf: &mut [u8]) {
    #[allow(clippy::expect_used)]
    getrandom::fill(buf).expect("the OS randomness source is unavailable");
}

pub(crate) fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut b).expect("the OS randomness source is unavailable");
    u64::from_le_bytes(b)
}

pub(crate) fn random_key() -> [u8; 32] {
    let mut k = [0u8; 32];
    #[allow(clippy::expect_used)]
    getrandom::fill(&mut k).expect("the OS randomness source is unavailable");
    k
}

/// The record if it exists and its TTL has not run out.
fn load_live(view: &dyn View, id: &TaskId, now: Timestamp) -> StoreResult<Record> {
    match view.load(id)? {
        Some(r) if !r.task.is_expired(now) => Ok(r),
        _ => Err(StoreError::NotFound),
    }
}

fn check_access(access: &Access, ctx: &Ctx, wanted: Action) -> StoreResult<()> {
    if access.issuer != ctx.issuer || access.action != wanted {
        return Err(StoreError::WrongAction {
            granted: access.action,
        });
    }
    Ok(())
}

/// The record behind an access value, re-checking its scope (the task may be gone).
fn load_for_access(view: &dyn View, ctx: &Ctx, access: &Access) -> StoreResult<Record> {
    let rec = load_live(view, &access.task_id, ctx.now)?;
    if rec.task.scope != access.scope {
        return Err(StoreError::NotFound);
    }
    Ok(rec)
}

fn check_lease(task: &Task, lease: &Lease, ctx: &Ctx) -> StoreResult<()> {
    if task.status.is_terminal() {
        return Err(StoreError::Terminal {
            status: task.status,
        });
    }
    match task.live_claim(ctx.now, ctx.epoch) {
        Some(c) if c.generation == lease.generation && c.token == lease.token => Ok(()),
        _ => Err(StoreError::LeaseLost),
    }
}

fn check_message(m: Option<&str>) -> StoreResult<()> {
    crate::model::check_message(m).map_err(|e| StoreError::invalid(e.0))
}

pub(crate) fn create(txn: &mut dyn Txn, ctx: &Ctx, new: NewTask) -> StoreResult<Task> {
    new.work
        .validate()
        .map_err(|e| StoreError::invalid(e.to_string()))?;
    if let Some(ttl) = new.ttl_ms
        && !(1..=MAX_TTL_MS).contains(&ttl)
    {
        return Err(StoreError::invalid(format!(
            "ttlMs must be 1..={MAX_TTL_MS} or unlimited, got {ttl}"
        )));
    }
    if let Some(p) = new.poll_interval_ms
        && !(1..=MAX_POLL_INTERVAL_MS).contains(&p)
    {
        return Err(StoreError::invalid(format!(
            "pollIntervalMs must be 1..={MAX_POLL_INTERVAL_MS}, got {p}"
        )));
    }
    check_message(new.status_message.as_deref())?;
    let caps = Caps::of(&new);
    let client_capabilities = match new.client_capabilities {
        Value::Null => Value::Object(Default::default()),
        v @ Value::Object(_) => v,
        _ => {
            return Err(StoreError::invalid(
                "client capabilities must be a JSON object",
            ));
        }
    };
    if txn.head(&new.id)?.is_some() {
        return Err(StoreError::AlreadyExists);
    }
    let mut task = Task {
        id: new.id,
        scope: new.scope,
        status: TaskStatus::Working,
        status_message: new.status_message,
        created_at: ctx.now,
        last_updated_at: ctx.now,
        ttl_ms: new.ttl_ms,
        poll_interval_ms: new.poll_interval_ms,
        revision: 0,
        attempt: 0,
        retry_count: 0,
        retry_at: None,
        inputs: Default::default(),
        outcome: None,
        generation: 0,
        recoveries: 0,
        journal_entries: 0,
        journal_bytes: 0,
        stored_bytes: 0,
        claim: None,
        client_capabilities,
        events: Vec::new(),
        history: Default::default(),
        span: new.work.trace.as_ref().and_then(|t| {
            // A tool call's tool; any other work is named by its kind.
            let tool = new
                .work
                .input
                .get("tool")
                .and_then(serde_json::Value::as_str);
            t.task_span(tool.unwrap_or(&new.work.kind))
        }),
    };
    task.history.push(ctx.now, HistoryKind::Created);
    let mut rec = Record {
        task,
        work: new.work,
    };
    measure(&mut rec);
    if caps.any() {
        txn.admit(&rec.task.scope, caps, rec.task.stored_bytes)?;
    }
    txn.save(None, &rec)?;
    Ok(rec.task)
}

/// Stores a component's bytes under its digest (the caller computed it from the bytes);
/// one already stored is left as it is.
pub(crate) fn store_component(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    digest: &str,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> StoreResult<()> {
    check_component(digest, bytes, signature)?;
    let signature = signature.map(hex);
    if let Some(mut meta) = component_meta(txn, digest)? {
        // Stored once; an unsigned one gains a signature, a signed one keeps its own.
        if meta.signature.is_none() && signature.is_some() {
            meta.signature = signature;
            txn.kv_put(Kv::ComponentMeta, digest.as_bytes(), &meta.encode())?;
        }
        return Ok(());
    }
    txn.kv_put(Kv::ComponentBytes, digest.as_bytes(), bytes)?;
    let meta = ComponentMeta {
        size: bytes.len() as u64,
        stored_at: ctx.now,
        // Not deployed yet: collectable after the retention unless a deployment names it.
        retired_at: Some(ctx.now),
        signature,
    };
    txn.kv_put(Kv::ComponentMeta, digest.as_bytes(), &meta.encode())
}

/// A stored component's bytes and signature.
pub(crate) fn component(view: &dyn View, digest: &str) -> StoreResult<Option<StoredComponent>> {
    let Some(meta) = component_meta(view, digest)? else {
        return Ok(None);
    };
    let bytes = view
        .kv_get(Kv::ComponentBytes, digest.as_bytes())?
        .ok_or_else(|| StoreError::corrupt(format!("component {digest} has no bytes")))?;
    let signature = match meta.signature {
        None => None,
        Some(s) => Some(unhex(&s).ok_or_else(|| {
            StoreError::corrupt(format!("component {digest} has an unreadable signature"))
        })?),
    };
    Ok(Some(StoredComponent { bytes, signature }))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What every adapter checks before storing a component.
pub(crate) fn check_component(
    digest: &str,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> StoreResult<()> {
    crate::model::check_digest(digest)?;
    if let Some(s) = signature
        && (s.is_empty() || s.len() > MAX_SIGNATURE_BYTES)
    {
        return Err(StoreError::invalid(format!(
            "a component's signature is 1..={MAX_SIGNATURE_BYTES} bytes, got {}",
            s.len()
        )));
    }
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(StoreError::invalid(format!(
            "a component is at most {MAX_COMPONENT_BYTES} bytes, got {}",
            bytes.len()
        )));
    }
    if crate::model::component_digest(bytes) != digest {
        return Err(StoreError::invalid(format!(
            "the bytes given do not have digest {digest}"
        )));
    }
    Ok(())
}

fn component_meta(view: &dyn View, digest: &str) -> StoreResult<Option<ComponentMeta>> {
    view.kv_get(Kv::ComponentMeta, digest.as_bytes())?
        .map(|b| ComponentMeta::decode(&b))
        .transpose()
}

/// The newest deployment, if there is one.
pub(crate) fn current_deployment(view: &dyn View) -> StoreResult<Option<Deployment>> {
    Ok(deployments(view, 1)?.into_iter().next())
}

/// Up to `limit` deployments, newest first.
pub(crate) fn deployments(view: &dyn View, limit: usize) -> StoreResult<Vec<Deployment>> {
    view.kv_scan(Kv::Deployments, limit, true)?
        .into_iter()
        .map(|(_, v)| Deployment::decode(&v).map_err(|e| StoreError::corrupt(e.0)))
        .collect()
}

/// One deployment by revision.
pub(crate) fn deployment(view: &dyn View, revision: u64) -> StoreResult<Option<Deployment>> {
    view.kv_get(Kv::Deployments, &revision.to_be_bytes())?
        .map(|v| Deployment::decode(&v).map_err(|e| StoreError::corrupt(e.0)))
        .transpose()
}

/// Commits a new deployment naming `components` (each already stored), when the current
/// revision is `expected` (0: none yet; `None`: whatever it is). Components the previous
/// deployment named and this one does not are retired now; those this one names are not.
pub(crate) fn deploy(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    components: &[String],
    note: &str,
    expected: Option<u64>,
) -> StoreResult<Deployment> {
    crate::model::check_deployment(components, note)?;
    let current = current_deployment(txn)?;
    let at = current.as_ref().map_or(0, |d| d.revision);
    if expected.is_some_and(|e| e != at) {
        return Err(StoreError::Conflict { current: at });
    }
    let mut metas = Vec::with_capacity(components.len());
    for d in components {
        match component_meta(txn, d)? {
            Some(m) => metas.push(m),
            None => {
                return Err(StoreError::invalid(format!(
                    "component {d} is not stored: store it before deploying it"
                )));
            }
        }
    }
    if let Some(cur) = &current {
        for d in cur.components.iter().filter(|d| !components.contains(d)) {
            if let Some(mut m) = component_meta(txn, d)? {
                m.retired_at = Some(ctx.now);
                txn.kv_put(Kv::ComponentMeta, d.as_bytes(), &m.encode())?;
            }
        }
    }
    for (d, mut m) in components.iter().zip(metas) {
        if m.retired_at.is_some() {
            m.retired_at = None;
            txn.kv_put(Kv::ComponentMeta, d.as_bytes(), &m.encode())?;
        }
    }
    let dep = Deployment {
        revision: at + 1,
        deployed_at: ctx.now,
        components: components.to_vec(),
        note: note.to_owned(),
    };
    txn.kv_put(Kv::Deployments, &dep.revision.to_be_bytes(), &dep.encode())?;
    Ok(dep)
}

/// Every stored component, with its pins.
pub(crate) fn components(view: &dyn View) -> StoreResult<Vec<ComponentInfo>> {
    let mut out = Vec::new();
    for (k, v) in view.kv_scan(Kv::ComponentMeta, usize::MAX, false)? {
        let digest = String::from_utf8(k)
            .map_err(|_| StoreError::corrupt("a component digest is not UTF-8"))?;
        let m = ComponentMeta::decode(&v)?;
        out.push(ComponentInfo {
            pinned: view.count(Count::Pinned, &digest)?,
            digest,
            size: m.size,
            stored_at: m.stored_at,
            retired_at: m.retired_at,
            signed: m.signature.is_some(),
        });
    }
    Ok(out)
}

/// Removes the components retired at least `retention_ms` ago that no live task is pinned
/// to, and returns their digests.
pub(crate) fn collect_components(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    retention_ms: u64,
) -> StoreResult<Vec<String>> {
    let mut gone = Vec::new();
    for c in components(txn)? {
        let due = c
            .retired_at
            .is_some_and(|at| at.as_millis().saturating_add(retention_ms) <= ctx.now.as_millis());
        if due && c.pinned == 0 {
            txn.kv_del(Kv::ComponentBytes, c.digest.as_bytes())?;
            txn.kv_del(Kv::ComponentMeta, c.digest.as_bytes())?;
            gone.push(c.digest);
        }
    }
    Ok(gone)
}

/// The longest key a revocation takes.
pub(crate) const MAX_REVOKE_KEY: usize = 512;
/// How many lapsed revocations each new one removes: more than one, so lapsed ones never
/// pile up whatever the rate of new ones.
pub(crate) const REVOKE_SWEEP: usize = 4;

pub(crate) fn check_revoke_key(key: &str) -> StoreResult<()> {
    if key.is_empty() || key.len() > MAX_REVOKE_KEY {
        return Err(StoreError::invalid(format!(
            "a revocation key must be 1..={MAX_REVOKE_KEY} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

/// Records `key` as revoked until `until`, and clears a few revocations that have lapsed.
pub(crate) fn revoke(txn: &mut dyn Txn, ctx: &Ctx, key: &str, until: Timestamp) -> StoreResult<()> {
    check_revoke_key(key)?;
    txn.revoke_sweep(ctx.now, REVOKE_SWEEP)?;
    // Nothing to remember for what has lapsed already.
    if until > ctx.now {
        txn.revoke_put(key, until)?;
    }
    Ok(())
}

pub(crate) fn authorize(
    view: &dyn View,
    ctx: &Ctx,
    principal: &Principal,
    action: Action,
    task_id: &str,
) -> StoreResult<Access> {
    let id = TaskId::parse(task_id).ok_or(StoreError::NotFound)?;
    let head = match view.head(&id)? {
        Some(h) if h.expires_at.is_none_or(|at| at > ctx.now) => h,
        _ => return Err(StoreError::NotFound),
    };
    if !principal.owns(&head.scope) {
        return Err(StoreError::NotFound);
    }
    Ok(Access {
        task_id: id,
        scope: head.scope,
        action,
        issuer: ctx.issuer,
    })
}

/// [`authorize`] for reading, then what a client may see of the task, in one view.
pub(crate) fn authorize_read(
    view: &dyn View,
    ctx: &Ctx,
    principal: &Principal,
    task_id: &str,
) -> StoreResult<(Access, TaskView)> {
    let access = authorize(view, ctx, principal, Action::Read, task_id)?;
    // The same checks as `get`, on the view.
    match view.load_view(&access.task_id)? {
        Some(t) if !t.is_expired(ctx.now) && t.scope == access.scope => Ok((access, t)),
        _ => Err(StoreError::NotFound),
    }
}

pub(crate) fn get(view: &dyn View, ctx: &Ctx, access: &Access) -> StoreResult<Task> {
    check_access(access, ctx, Action::Read)?;
    // The same checks as `load_for_access`, on the task alone.
    match view.load_task(&access.task_id)? {
        Some(t) if !t.is_expired(ctx.now) && t.scope == access.scope => Ok(t),
        _ => Err(StoreError::NotFound),
    }
}

pub(crate) fn transition(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    by: Authority<'_>,
    event: TaskEvent,
    expected_revision: Option<u64>,
) -> StoreResult<Committed> {
    event.validate()?;
    let rec = match by {
        Authority::Worker(lease) => {
            if !event.kind.is_worker_event() {
                return Err(StoreError::invalid(format!(
                    "`{}` comes from a request, not from a worker",
                    event.kind.name()
                )));
            }
            load_live(txn, &lease.task_id, ctx.now)?
        }
        Authority::Request(access) => {
            let wanted = match event.kind {
                EventKind::InputAccepted { .. } => Action::Update,
                EventKind::Cancelled { .. } => Action::Cancel,
                _ => {
                    return Err(StoreError::WrongAction {
                        granted: access.action,
                    });
                }
            };
            check_access(access, ctx, wanted)?;
            load_for_access(txn, ctx, access)?
        }
    };
    let generation = match by {
        Authority::Worker(lease) => Some(lease.generation),
        Authority::Request(_) => None,
    };

    if let Some((revision, effect)) = rec.task.replay_of(&event, generation).map_err(rejected)? {
        return Ok(Committed {
            revision,
            task: rec.task,
            replayed: true,
            effect,
        });
    }
    if rec.task.status.is_terminal() {
        return Err(StoreError::Terminal {
            status: rec.task.status,
        });
    }
    if let Authority::Worker(lease) = by {
        check_lease(&rec.task, lease, ctx)?;
    }
    if let Some(expected) = expected_revision
        && expected != rec.task.revision
    {
        return Err(StoreError::Conflict {
            current: rec.task.revision,
        });
    }

    let before = rec.task.clone();
    let mut after = rec;
    let step = after
        .task
        .apply(event, generation, &after.work.retry_policy, ctx.now)
        .map_err(rejected)?;
    if !step.changed {
        return Ok(Committed {
            revision: before.revision,
            task: before,
            replayed: false,
            effect: step.effect,
        });
    }
    // Arguments, answers and results arrive with a change of status or inputs: the record
    // is measured again then (never refused: what was accepted is kept).
    if after.task.status != before.status || after.task.inputs != before.inputs {
        measure(&mut after);
    }
    txn.save(Some(&before), &after)?;
    Ok(Committed {
        revision: after.task.revision,
        task: after.task,
        replayed: false,
        effect: step.effect,
    })
}

/// The store's error for a transition the state machine refused.
fn rejected(r: Rejected) -> StoreError {
    match r {
        Rejected::Terminal(status) => StoreError::Terminal { status },
        Rejected::InputConflict(key) => StoreError::InputConflict { key },
        Rejected::EventIdReused(id) => StoreError::EventIdReused { id },
    }
}

pub(crate) fn check_claim_request(req: &ClaimRequest) -> StoreResult<()> {
    if !(1..=MAX_LEASE_MS).contains(&req.lease_ms) {
        return Err(StoreError::invalid(format!(
            "a lease is 1..={MAX_LEASE_MS} ms, got {}",
            req.lease_ms
        )));
    }
    if req.owner.len() > MAX_OWNER_LEN {
        return Err(StoreError::invalid(format!(
            "a claim owner is at most {MAX_OWNER_LEN} bytes"
        )));
    }
    Ok(())
}

/// Takes a claim on `rec`, whose claimability the caller has checked.
fn take_claim(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    rec: Record,
    req: &ClaimRequest,
) -> StoreResult<Claimed> {
    let before = rec.task.clone();
    let mut after = rec;
    let generation = after.task.generation + 1;
    let claim = Claim {
        generation,
        token: random_u64(),
        epoch: ctx.epoch,
        expires_at: ctx.now.plus_ms(req.lease_ms),
        owner: req.owner.clone(),
    };
    let lease = Lease {
        task_id: after.task.id,
        generation,
        token: claim.token,
        epoch: claim.epoch,
        expires_at: claim.expires_at,
    };
    after.task.generation = generation;
    // A claim still on the record here is one whose lease ran out (live claims refuse a
    // new claim): its worker never let go.
    let recovered = after.task.claim.is_some();
    if recovered {
        after.task.recoveries = after.task.recoveries.saturating_add(1);
    }
    let waited_ms = before
        .due_at()
        .map_or(0, |due| ctx.now.as_millis().saturating_sub(due.as_millis()));
    after.task.history.push(
        ctx.now,
        HistoryKind::Claimed {
            generation,
            owner: claim.owner.clone(),
            waited_ms,
            recovered,
        },
    );
    after.task.claim = Some(claim);
    // The backoff, if any, is over: this claim is the retry.
    after.task.retry_at = None;
    if req.start {
        // The claim and the start in one store of the record.
        let mut scratch = Scratch::new(txn);
        scratch.save(Some(&before), &after)?;
        let event = TaskEvent::new(
            crate::model::EventId::for_claim(generation, "started"),
            EventKind::Started,
        );
        let c = transition(&mut scratch, ctx, Authority::Worker(&lease), event, None)?;
        scratch.flush()?;
        return Ok(Claimed {
            lease,
            task: c.task,
            work: after.work,
            started: true,
        });
    }
    txn.save(Some(&before), &after)?;
    Ok(Claimed {
        lease,
        task: after.task,
        work: after.work,
        started: false,
    })
}

/// [`create`] then [`claim`] of the new task, in the caller's one write.
pub(crate) fn create_claimed(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    new: NewTask,
    req: &ClaimRequest,
) -> StoreResult<Claimed> {
    check_claim_request(req)?;
    let mut scratch = Scratch::new(txn);
    let task = create(&mut scratch, ctx, new)?;
    let claimed = claim(&mut scratch, ctx, &task.id, req)?;
    scratch.flush()?;
    Ok(claimed)
}

pub(crate) fn claim(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    id: &TaskId,
    req: &ClaimRequest,
) -> StoreResult<Claimed> {
    check_claim_request(req)?;
    let rec = load_live(txn, id, ctx.now)?;
    let t = &rec.task;
    if t.status.is_terminal() {
        return Err(StoreError::Terminal { status: t.status });
    }
    if let Some(c) = t.live_claim(ctx.now, ctx.epoch) {
        return Err(StoreError::Busy {
            until: c.expires_at,
        });
    }
    if let Some(at) = t.retry_at
        && at > ctx.now
    {
        return Err(StoreError::NotDue { retry_at: at });
    }
    take_claim(txn, ctx, rec, req)
}

pub(crate) fn claim_next(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    req: &ClaimRequest,
) -> StoreResult<NextClaim> {
    check_claim_request(req)?;
    let scan = if req.skip_scopes.is_empty() {
        CLAIM_SCAN
    } else {
        super::types::CLAIM_SKIP_SCAN
    };
    let mut next = NextClaim::default();
    for id in txn.index_upto(Index::Due, ctx.now.as_millis(), scan)? {
        let Some(rec) = txn.load(&id)? else {
            return Err(StoreError::corrupt(format!(
                "the due index names task {id}, which is not stored"
            )));
        };
        if rec.task.is_expired(ctx.now) {
            // Past its TTL: nobody may run it. Remove it now rather than let it block the
            // head of the queue until the next reap, and report it as the reaper would.
            txn.delete(&rec)?;
            next.reaped.push(Reaped {
                id,
                status: rec.task.status,
            });
            continue;
        }
        if req.skip_scopes.contains(&rec.task.scope) {
            continue;
        }
        next.claimed = Some(take_claim(txn, ctx, rec, req)?);
        break;
    }
    Ok(next)
}

pub(crate) fn renew(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    lease: &Lease,
    lease_ms: u64,
) -> StoreResult<Lease> {
    check_claim_request(&ClaimRequest::new(lease_ms, ""))?;
    let rec = load_live(txn, &lease.task_id, ctx.now)?;
    check_lease(&rec.task, lease, ctx)?;
    let before = rec.task.clone();
    let mut after = rec;
    let expires_at = ctx.now.plus_ms(lease_ms);
    if let Some(c) = after.task.claim.as_mut() {
        c.expires_at = expires_at;
    }
    txn.save(Some(&before), &after)?;
    Ok(Lease {
        expires_at,
        ..lease.clone()
    })
}

pub(crate) fn release(txn: &mut dyn Txn, ctx: &Ctx, lease: &Lease) -> StoreResult<()> {
    let rec = load_live(txn, &lease.task_id, ctx.now)?;
    check_lease(&rec.task, lease, ctx)?;
    let before = rec.task.clone();
    let mut after = rec;
    after.task.claim = None;
    let note = if after.task.has_outstanding_inputs() {
        HistoryKind::Parked
    } else {
        HistoryKind::Released
    };
    after.task.history.push(ctx.now, note);
    txn.save(Some(&before), &after)
}

pub(crate) fn worker_snapshot(
    view: &dyn View,
    ctx: &Ctx,
    lease: &Lease,
) -> StoreResult<(Task, Work)> {
    let rec = load_live(view, &lease.task_id, ctx.now)?;
    check_lease(&rec.task, lease, ctx)?;
    Ok((rec.task, rec.work))
}

/// The refusal of a second entry at a journal position.
pub(crate) fn journal_taken(seq: u32) -> StoreError {
    StoreError::invalid(format!(
        "the journal already holds an entry at position {seq}"
    ))
}

/// Records a journal entry under `lease`: fenced like every worker write, bounded by
/// `bounds.task_bytes` for the whole task and admitted under its scope's stored bytes
/// (`bounds.scope_bytes`), which the entry's bytes join.
pub(crate) fn journal_append(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    lease: &Lease,
    entry: &JournalEntry,
    bounds: JournalBounds,
) -> StoreResult<()> {
    let rec = load_live(txn, &lease.task_id, ctx.now)?;
    check_lease(&rec.task, lease, ctx)?;
    let bytes = entry.encode();
    let size = bytes.len() as u64;
    let total = rec.task.journal_bytes.saturating_add(size);
    let max_bytes = bounds.task_bytes;
    if total > max_bytes {
        return Err(StoreError::invalid(format!(
            "the task's journal would hold {total} bytes, past its bound of {max_bytes} \
             (outbound.journal_task_bytes)"
        )));
    }
    if bounds.scope_bytes.is_some() {
        let caps = Caps {
            stored_bytes: bounds.scope_bytes,
            ..Caps::default()
        };
        txn.admit(&rec.task.scope, caps, size)?;
    }
    txn.journal_put(&lease.task_id, entry.seq, &bytes)?;
    let before = rec.task.clone();
    let mut after = rec;
    after.task.journal_entries += 1;
    after.task.journal_bytes = total;
    after.task.stored_bytes = after.task.stored_bytes.saturating_add(size);
    txn.save(Some(&before), &after)
}

/// The task's journal, read under `lease`.
pub(crate) fn journal(view: &dyn View, ctx: &Ctx, lease: &Lease) -> StoreResult<Vec<JournalEntry>> {
    let task = match view.load_task(&lease.task_id)? {
        Some(t) if !t.is_expired(ctx.now) => t,
        _ => return Err(StoreError::NotFound),
    };
    check_lease(&task, lease, ctx)?;
    view.journal(&lease.task_id)?
        .into_iter()
        .map(|(seq, bytes)| {
            let entry = JournalEntry::decode(&bytes).map_err(StoreError::corrupt)?;
            if entry.seq != seq {
                return Err(StoreError::corrupt(format!(
                    "journal entry {seq} of task {} says it is entry {}",
                    lease.task_id, entry.seq
                )));
            }
            Ok(entry)
        })
        .collect()
}

pub(crate) fn reap(txn: &mut dyn Txn, ctx: &Ctx, limit: usize) -> StoreResult<Vec<Reaped>> {
    let ids = txn.index_upto(Index::Expiry, ctx.now.as_millis(), limit)?;
    let mut reaped = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(rec) = txn.load(&id)? {
            txn.delete(&rec)?;
            reaped.push(Reaped {
                id,
                status: rec.task.status,
            });
        }
    }
    Ok(reaped)
}

/// A listing entry: its key and the task's tool.
type Entry = (Vec<u8>, String);

/// One page of tasks: a walk down the listing ranges the query picks (see [`listing`]),
/// merged newest first, reading only the tasks whose entries can match.
pub(crate) fn list(view: &dyn View, ctx: &Ctx, q: &TaskQuery) -> StoreResult<TaskPage> {
    q.check()?;
    let walk = listing::walk(q);
    let mut page = PageBuilder::new(q, ctx.now);
    // Read in chunks: a first page without checks left reads one more entry than it shows.
    let chunk = if walk.tool.is_some() || q.filter.updated_after.is_some() {
        256
    } else {
        q.limit + 1
    };
    // Per range: entries read and not yet fed (newest last, so `pop` takes the newest),
    // and where the next read ends (`None`: the range is exhausted).
    let mut heads: Vec<(Vec<Entry>, Option<Vec<u8>>)> = walk
        .ranges
        .iter()
        .map(|r| (Vec::new(), Some(r.to.clone())))
        .collect();
    loop {
        for (i, (buf, to)) in heads.iter_mut().enumerate() {
            if buf.is_empty()
                && let Some(upto) = to.take()
            {
                let mut entries = view.listing(&walk.ranges[i].from, &upto, chunk)?;
                if entries.len() == chunk
                    && let Some((last, _)) = entries.last()
                {
                    *to = Some(last.clone());
                }
                entries.reverse();
                *buf = entries;
            }
        }
        // The newest entry of all the ranges' heads.
        let mut best: Option<(usize, listing::Cursor)> = None;
        for (i, (buf, _)) in heads.iter().enumerate() {
            if let Some((key, _)) = buf.last() {
                let at = listing::cursor_of_key(key)?;
                if best.is_none_or(|(_, b)| at > b) {
                    best = Some((i, at));
                }
            }
        }
        let Some((i, at)) = best else {
            return Ok(page.finish(true));
        };
        let Some((_, tool)) = heads[i].0.pop() else {
            return Ok(page.finish(true));
        };
        let task = if PageBuilder::wants(&walk, &tool) {
            view.load_task(&at.id)?
        } else {
            None
        };
        if let Fed::Done = page.feed(at, task.as_ref().map(|t| (t, tool.as_str()))) {
            return Ok(page.finish(false));
        }
    }
}

/// Stored tasks by status and by tool, of one tenant or of all.
pub(crate) fn counts(view: &dyn View, tenant: Option<&str>) -> StoreResult<TaskCounts> {
    let mut counts = TaskCounts::default();
    for (key, n) in view.tallies(&listing::tally_prefix(tenant))? {
        listing::add_tally(&mut counts, &key, n)?;
    }
    Ok(counts.with_every_status())
}

/// An operator's "retry now": a task waiting out its retry delay becomes due at once.
pub(crate) fn retry_now(txn: &mut dyn Txn, ctx: &Ctx, access: &Access) -> StoreResult<Task> {
    check_access(access, ctx, Action::Update)?;
    let rec = load_for_access(txn, ctx, access)?;
    let t = &rec.task;
    if t.status.is_terminal() {
        return Err(StoreError::Terminal { status: t.status });
    }
    let Some(retry_at) = t.retry_at.filter(|at| *at > ctx.now && t.claim.is_none()) else {
        return Err(StoreError::invalid(
            "the task is not waiting for a retry (only a task whose retry is still ahead can be retried now)",
        ));
    };
    let before = rec.task.clone();
    let mut after = rec;
    after.task.retry_at = Some(ctx.now);
    after.task.history.push(
        ctx.now,
        HistoryKind::RetryNow {
            was_due_at: retry_at,
        },
    );
    txn.save(Some(&before), &after)?;
    Ok(after.task)
}

pub(crate) fn delete_finished(txn: &mut dyn Txn, ctx: &Ctx, access: &Access) -> StoreResult<()> {
    check_access(access, ctx, Action::Cancel)?;
    let rec = load_for_access(txn, ctx, access)?;
    if !rec.task.status.is_terminal() {
        return Err(StoreError::invalid(format!(
            "task {} is {}: only a finished task can be deleted (cancel it first)",
            rec.task.id,
            rec.task.status.as_str()
        )));
    }
    txn.delete(&rec)
}

pub(crate) fn inspect(view: &dyn View, id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
    Ok(view.load(id)?.map(|r| (r.task, r.work)))
}

/// Releases every claim made in a boot epoch before `ctx.epoch`: the process that held it
/// is gone (the store is exclusively ours), so its work is due again at once. Returns how
/// many claims were released.
#[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
pub(crate) fn fence_previous_epochs(txn: &mut dyn Txn, ctx: &Ctx) -> StoreResult<usize> {
    let mut released = 0;
    loop {
        let ids = txn.index_upto(Index::Claimed, ctx.epoch.saturating_sub(1), 256)?;
        if ids.is_empty() {
            return Ok(released);
        }
        let n = release_dead_claims(txn, ctx, &ids)?;
        if n == 0 {
            return Err(StoreError::corrupt(
                "the claim index names tasks that hold no claim",
            ));
        }
        released += n;
    }
}

/// Releases the claims on `ids`, whose holders are known to be gone (a previous boot of
/// this store, or of this node on a shared store), counting each as a recovery. Returns
/// how many were released.
#[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
pub(crate) fn release_dead_claims(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    ids: &[TaskId],
) -> StoreResult<usize> {
    let mut released = 0;
    for id in ids {
        let Some(rec) = txn.load(id)? else {
            return Err(StoreError::corrupt(format!(
                "the claim index names task {id}, which is not stored"
            )));
        };
        if rec.task.claim.is_none() {
            continue;
        }
        let before = rec.task.clone();
        let mut after = rec;
        if let Some(claim) = after.task.claim.take() {
            after.task.history.push(
                ctx.now,
                HistoryKind::Fenced {
                    generation: claim.generation,
                },
            );
        }
        after.task.recoveries = after.task.recoveries.saturating_add(1);
        txn.save(Some(&before), &after)?;
        released += 1;
    }
    Ok(released)
}
