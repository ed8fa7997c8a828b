//! What the adapters implement and every rule shares: the [`Record`] an adapter stores, its
//! ordered indexes, counts and small tables, [`View`] and [`Txn`] over them, and the
//! bookkeeping every save and removal does through them.

use crate::model::{Scope, Task, TaskId, TaskView, Timestamp, Work};
use crate::store::listing;
use crate::store::types::NewTask;
use crate::store::{StoreError, StoreResult};

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
    /// Schedule name → [`Schedule`](crate::model::Schedule), as JSON.
    Schedules,
    /// Sequence number (big-endian u64) → [`OutboxEvent`](crate::model::OutboxEvent), as
    /// JSON.
    Events,
    /// The outbox's counters (`seq`: the last sequence number given).
    Outbox,
    /// Subscription name → [`Webhook`](crate::model::Webhook), as JSON.
    Webhooks,
    /// [`AuditRecord::key`](crate::model::AuditRecord::key) → the record, as JSON.
    Audit,
}

impl Kv {
    /// A one-byte tag, for adapters that keep every space in one table.
    #[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
    pub(crate) fn tag(self) -> u8 {
        match self {
            Kv::ComponentBytes => 1,
            Kv::ComponentMeta => 2,
            Kv::Deployments => 3,
            Kv::Schedules => 4,
            Kv::Events => 5,
            Kv::Outbox => 6,
            Kv::Webhooks => 7,
            Kv::Audit => 8,
        }
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
    /// Up to `limit` entries of `space` whose key is at least `from`, by key.
    fn kv_range(
        &self,
        space: Kv,
        from: &[u8],
        limit: usize,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Whether `key` is revoked (whatever its expiry: what it names expires by then).
    fn revoked(&self, key: &str) -> StoreResult<bool>;
    /// The task's journal entries (position, encoded entry), by position. A read reaches
    /// them only when it says so ([`Touches::Journal`](super::Touches::Journal)).
    fn journal(&self, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>>;
    /// Up to `limit` listing entries (key, tool) with `from <= key < to`, the largest key
    /// first. A read reaches them only when it says so
    /// ([`Touches::Listing`](super::Touches::Listing)).
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
    /// ([`journal_taken`](super::journal_taken)), so the task's counts stay exact.
    fn journal_put(&mut self, id: &TaskId, seq: u32, entry: &[u8]) -> StoreResult<()>;
    fn index_put(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()>;
    fn index_del(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()>;
    fn set_count(&mut self, kind: Count, key: &str, count: u64) -> StoreResult<()>;
    /// Adds a listing entry whose value is the task's tool.
    fn listing_put(&mut self, key: &[u8], tool: &str) -> StoreResult<()>;
    fn listing_del(&mut self, key: &[u8]) -> StoreResult<()>;
    fn kv_put(&mut self, space: Kv, key: &[u8], value: &[u8]) -> StoreResult<()>;
    fn kv_del(&mut self, space: Kv, key: &[u8]) -> StoreResult<()>;
    /// Replaces the schedule `name` at revision `expected` (`None`: absent) with `after`
    /// (`None`: removed); [`StoreError::ScheduleConflict`] when it is not at `expected`.
    /// An adapter that cannot read the row in its write checks it when the write commits.
    fn schedule_swap(
        &mut self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Schedule>,
    ) -> StoreResult<()> {
        super::rows::swap_in_kv(self, name, expected, after)
    }
    /// Writes `event` to the outbox, numbered after every event committed before it (the
    /// store sets its `seq`).
    fn event_put(&mut self, event: &crate::model::OutboxEvent) -> StoreResult<()> {
        super::outbox::put_in_kv(self, event)
    }
    /// Replaces the webhook `name` at revision `expected` (`None`: absent) with `after`
    /// (`None`: removed); [`StoreError::WebhookConflict`] when it is not at `expected`.
    fn webhook_swap(
        &mut self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Webhook>,
    ) -> StoreResult<()> {
        super::rows::swap_in_kv(self, name, expected, after)
    }
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
        if before.is_none_or(|t| t.status != after.task.status) {
            super::outbox::transitioned(self, &after.task, &after.work)?;
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
