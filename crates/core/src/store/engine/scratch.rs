//! A write that changes one record several times holds it between the steps.

use crate::model::{Scope, Task, TaskId, TaskView, Timestamp};
use crate::store::StoreResult;

use super::{Caps, Count, Head, Index, Kv, Record, Txn, View};

/// A write that changes one record several times (create, claim, start) keeps the record
/// here between the steps and stores it once at the end: each step's rules run unchanged,
/// but the record is encoded once instead of after every step and never decoded back.
///
/// Everything but the records passes straight to the transaction underneath (index
/// entries, heads, live counts), in the order the steps make them; only `put` is deferred,
/// and [`Scratch::flush`] makes it. A step that fails leaves the write to be abandoned, as
/// it would without the scratch.
pub(super) struct Scratch<'t> {
    txn: &'t mut dyn Txn,
    records: Vec<Record>,
}

impl<'t> Scratch<'t> {
    pub(super) fn new(txn: &'t mut dyn Txn) -> Self {
        Self {
            txn,
            records: Vec::new(),
        }
    }

    fn held(&self, id: &TaskId) -> Option<&Record> {
        self.records.iter().find(|r| r.task.id == *id)
    }

    /// Stores every record the steps saved, once each.
    pub(super) fn flush(self) -> StoreResult<()> {
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

    fn kv_range(
        &self,
        space: Kv,
        from: &[u8],
        limit: usize,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.txn.kv_range(space, from, limit)
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

    fn schedule_swap(
        &mut self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Schedule>,
    ) -> StoreResult<()> {
        self.txn.schedule_swap(name, expected, after)
    }

    fn event_put(&mut self, event: &crate::model::OutboxEvent) -> StoreResult<()> {
        self.txn.event_put(event)
    }

    fn webhook_swap(
        &mut self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Webhook>,
    ) -> StoreResult<()> {
        self.txn.webhook_swap(name, expected, after)
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
