//! MemoryStore: the volatile adapter. A readers-writer lock over a hash map and three
//! ordered indexes.
//!
//! Records are kept as JSON bytes (`store/record.rs`, uncompressed), with each task's head
//! beside them: a parked task then costs about a kilobyte instead of the several its
//! decoded JSON values would, and no reader can alias a stored value. A record a runner has
//! claimed is held decoded instead ([`Body::Held`]): its next transition (the outcome, or
//! the question it parks on) comes within the attempt, and the claimed records are as many
//! as the runners' execution slots, so holding them costs a bounded few kilobytes each and
//! saves a task's decode and encode on the way to its outcome.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use crate::model::{Clock, SystemClock, Task, TaskId, TaskView, Timestamp};

use super::backend::{ReadFn, WriteFn};
use super::engine::{self, Count, Ctx, Head, Index, Kv, Record, Touches, Txn, View};
use super::record;
use super::{Backend, StoreError, StoreResult};

/// A fast, volatile store: everything is lost when it is dropped.
///
/// Operations are atomic (one lock, held only for the synchronous rule evaluation, never
/// across an await; reads share it, so lookups on both cores do not queue behind each
/// other's decoding). There is one boot epoch for its whole life.
pub struct MemoryStore {
    inner: RwLock<Tables>,
    clock: Arc<dyn Clock>,
    issuer: u64,
    key: [u8; 32],
}

/// A stored record, and its head for checks that must not decode it.
struct Stored {
    head: Head,
    body: Body,
}

/// A record as the store keeps it: readers get a copy either way.
enum Body {
    /// Encoded JSON: every record no runner holds a claim on, parked and terminal ones
    /// among them, however many there are.
    Encoded(Box<[u8]>),
    /// Decoded, for a live task a runner has claimed. Loading it clones it.
    Held(Box<Record>),
}

impl Body {
    fn of(record: &Record) -> StoreResult<Self> {
        Ok(
            if record.task.claim.is_some() && !record.task.status.is_terminal() {
                Body::Held(Box::new(record.clone()))
            } else {
                Body::Encoded(record::encode_json(record)?.into_boxed_slice())
            },
        )
    }

    fn record(&self) -> StoreResult<Record> {
        match self {
            Body::Encoded(bytes) => record::decode(bytes),
            Body::Held(rec) => Ok((**rec).clone()),
        }
    }

    fn task(&self) -> StoreResult<Task> {
        match self {
            Body::Encoded(bytes) => record::decode_task(bytes),
            Body::Held(rec) => Ok(rec.task.clone()),
        }
    }

    fn view(&self) -> StoreResult<TaskView> {
        match self {
            Body::Encoded(bytes) => record::decode_view(bytes),
            Body::Held(rec) => Ok(TaskView::of(&rec.task)),
        }
    }
}

#[derive(Default)]
struct Tables {
    records: HashMap<TaskId, Stored>,
    indexes: [BTreeSet<(u64, TaskId)>; 3],
    /// The counts, by kind, then key: a lookup by a borrowed key allocates nothing, and a
    /// transition moves several counts.
    counts: HashMap<Count, HashMap<String, u64>>,
    kv: std::collections::BTreeMap<(Kv, Vec<u8>), Vec<u8>>,
    /// Revoked keys and until when, and the same ordered by time for the sweep.
    revoked: HashMap<String, Timestamp>,
    revoked_by_time: BTreeSet<(Timestamp, String)>,
    journal: std::collections::BTreeMap<(TaskId, u32), Box<[u8]>>,
    /// The listing indexes: key → the task's tool.
    listing: std::collections::BTreeMap<Box<[u8]>, Box<str>>,
}

fn slot(index: Index) -> usize {
    match index {
        Index::Due => 0,
        Index::Expiry => 1,
        Index::Claimed => 2,
    }
}

impl View for Tables {
    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        self.records.get(id).map(|s| s.body.record()).transpose()
    }

    fn index_upto(&self, index: Index, upto: u64, limit: usize) -> StoreResult<Vec<TaskId>> {
        let hi = (upto, TaskId::from_bytes([0xff; 16]));
        Ok(self.indexes[slot(index)]
            .range(..=hi)
            .take(limit)
            .map(|(_, id)| *id)
            .collect())
    }

    fn load_task(&self, id: &TaskId) -> StoreResult<Option<Task>> {
        self.records.get(id).map(|s| s.body.task()).transpose()
    }

    fn load_view(&self, id: &TaskId) -> StoreResult<Option<TaskView>> {
        self.records.get(id).map(|s| s.body.view()).transpose()
    }

    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        Ok(self.records.get(id).map(|s| s.head.clone()))
    }

    fn count(&self, kind: Count, key: &str) -> StoreResult<u64> {
        Ok(self
            .counts
            .get(&kind)
            .and_then(|by_key| by_key.get(key))
            .copied()
            .unwrap_or(0))
    }

    fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>> {
        let mut out = Vec::new();
        for (id, stored) in &self.records {
            if out.len() >= limit {
                break;
            }
            let rec = stored.body.record()?;
            if !rec.task.status.is_terminal()
                && rec.work.component_digest.as_deref() == Some(digest)
            {
                out.push(*id);
            }
        }
        out.sort();
        Ok(out)
    }

    fn kv_get(&self, space: Kv, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.kv.get(&(space, key.to_vec())).cloned())
    }

    fn kv_scan(
        &self,
        space: Kv,
        limit: usize,
        newest_first: bool,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let range = self
            .kv
            .range((space, Vec::new())..)
            .take_while(|((s, _), _)| *s == space)
            .map(|((_, k), v)| (k.clone(), v.clone()));
        Ok(if newest_first {
            let mut all: Vec<_> = range.collect();
            all.reverse();
            all.truncate(limit);
            all
        } else {
            range.take(limit).collect()
        })
    }

    fn kv_range(
        &self,
        space: Kv,
        from: &[u8],
        limit: usize,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .kv
            .range((space, from.to_vec())..)
            .take_while(|((s, _), _)| *s == space)
            .take(limit)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
    }

    fn revoked(&self, key: &str) -> StoreResult<bool> {
        Ok(self.revoked.contains_key(key))
    }

    fn listing(&self, from: &[u8], to: &[u8], limit: usize) -> StoreResult<Vec<(Vec<u8>, String)>> {
        if from >= to {
            return Ok(Vec::new());
        }
        Ok(self
            .listing
            .range::<[u8], _>((
                std::ops::Bound::Included(from),
                std::ops::Bound::Excluded(to),
            ))
            .rev()
            .take(limit)
            .map(|(k, v)| (k.to_vec(), v.to_string()))
            .collect())
    }

    fn tallies(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        Ok(self
            .counts
            .get(&Count::Tally)
            .into_iter()
            .flatten()
            .filter(|(key, _)| key.starts_with(prefix))
            .map(|(key, n)| (key.clone(), *n))
            .collect())
    }

    fn journal(&self, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>> {
        Ok(self
            .journal
            .range((*id, 0)..=(*id, u32::MAX))
            .map(|((_, seq), bytes)| (*seq, bytes.to_vec()))
            .collect())
    }
}

impl Txn for Tables {
    fn put(&mut self, record: &Record) -> StoreResult<()> {
        let stored = Stored {
            head: Head::of(&record.task),
            body: Body::of(record)?,
        };
        self.records.insert(record.task.id, stored);
        Ok(())
    }

    fn remove(&mut self, id: &TaskId) -> StoreResult<()> {
        self.records.remove(id);
        let seqs: Vec<u32> = self.journal(id)?.into_iter().map(|(s, _)| s).collect();
        for seq in seqs {
            self.journal.remove(&(*id, seq));
        }
        Ok(())
    }

    fn journal_put(&mut self, id: &TaskId, seq: u32, entry: &[u8]) -> StoreResult<()> {
        match self.journal.entry((*id, seq)) {
            std::collections::btree_map::Entry::Occupied(_) => Err(engine::journal_taken(seq)),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(entry.into());
                Ok(())
            }
        }
    }

    fn index_put(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.indexes[slot(index)].insert((key, *id));
        Ok(())
    }

    fn index_del(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.indexes[slot(index)].remove(&(key, *id));
        Ok(())
    }

    fn set_count(&mut self, kind: Count, key: &str, count: u64) -> StoreResult<()> {
        if count == 0 {
            if let Some(by_key) = self.counts.get_mut(&kind) {
                by_key.remove(key);
            }
        } else {
            let by_key = self.counts.entry(kind).or_default();
            match by_key.get_mut(key) {
                Some(n) => *n = count,
                None => {
                    by_key.insert(key.to_owned(), count);
                }
            }
        }
        Ok(())
    }

    fn kv_put(&mut self, space: Kv, key: &[u8], value: &[u8]) -> StoreResult<()> {
        self.kv.insert((space, key.to_vec()), value.to_vec());
        Ok(())
    }

    fn listing_put(&mut self, key: &[u8], tool: &str) -> StoreResult<()> {
        self.listing.insert(key.into(), tool.into());
        Ok(())
    }

    fn listing_del(&mut self, key: &[u8]) -> StoreResult<()> {
        self.listing.remove(key);
        Ok(())
    }

    fn kv_del(&mut self, space: Kv, key: &[u8]) -> StoreResult<()> {
        self.kv.remove(&(space, key.to_vec()));
        Ok(())
    }

    fn revoke_put(&mut self, key: &str, until: Timestamp) -> StoreResult<()> {
        if let Some(&at) = self.revoked.get(key) {
            if at >= until {
                return Ok(());
            }
            self.revoked_by_time.remove(&(at, key.to_owned()));
        }
        self.revoked.insert(key.to_owned(), until);
        self.revoked_by_time.insert((until, key.to_owned()));
        Ok(())
    }

    fn revoke_sweep(&mut self, now: Timestamp, limit: usize) -> StoreResult<()> {
        for _ in 0..limit {
            match self.revoked_by_time.first() {
                Some((at, _)) if *at <= now => {
                    if let Some((_, key)) = self.revoked_by_time.pop_first() {
                        self.revoked.remove(&key);
                    }
                }
                _ => break,
            }
        }
        Ok(())
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock::new()))
    }

    /// An empty store on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: RwLock::new(Tables::default()),
            clock,
            issuer: crate::ids::random_u64(),
            key: crate::ids::random_bytes::<32>(),
        }
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            now: self.clock.now(),
            epoch: 1,
            issuer: self.issuer,
        }
    }
}

impl Backend for MemoryStore {
    async fn write<T: Send + 'static>(&self, _: Touches<'_>, f: impl WriteFn<T>) -> StoreResult<T> {
        let mut tables = self
            .inner
            .write()
            .map_err(|_| StoreError::unavailable("a store operation panicked earlier"))?;
        let ctx = self.ctx();
        f(&mut *tables, &ctx)
    }

    async fn read<T: Send + 'static>(&self, _: Touches<'_>, f: impl ReadFn<T>) -> StoreResult<T> {
        let tables = self
            .inner
            .read()
            .map_err(|_| StoreError::unavailable("a store operation panicked earlier"))?;
        let ctx = self.ctx();
        f(&*tables, &ctx)
    }

    async fn time(&self) -> StoreResult<Timestamp> {
        Ok(self.ctx().now)
    }

    fn key(&self) -> [u8; 32] {
        self.key
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::model::ManualClock;
    use crate::store::MemoryStore;
    use crate::store::contract::Backend;
    use crate::store::prelude::*;

    struct Memory;

    #[async_trait::async_trait]
    impl Backend for Memory {
        fn durable(&self) -> bool {
            false
        }

        async fn open(&mut self, clock: &ManualClock) -> Arc<dyn Store> {
            Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())))
        }
    }

    crate::store_contract_suite!(|| Memory);

    /// Whether `id`'s record is held decoded.
    fn held(store: &MemoryStore, id: &crate::model::TaskId) -> bool {
        let tables = store.inner.read().expect("lock");
        matches!(tables.records[id].body, super::Body::Held(_))
    }

    /// A claimed task's record is held decoded; once no runner holds it (parked, or
    /// ended) it is encoded again, so the records held stay as many as the claims.
    /// Readers see the same task either way.
    #[tokio::test]
    async fn only_a_claimed_record_is_held_decoded() {
        use crate::store::contract::{as_worker, ask, claimed, completed, elicit, view};
        let store = Arc::new(MemoryStore::new());
        let (id, lease) = claimed(&*store, "acme").await;
        assert!(held(&store, &id), "a claimed task is held");
        let running = view(&*store, "acme", &id).await;
        assert_eq!(running.status, crate::model::TaskStatus::Working);

        ask(&*store, &lease, "q", elicit("ok?")).await.expect("ask");
        assert!(
            held(&store, &id),
            "asking keeps the claim until the runner parks"
        );
        let asked = view(&*store, "acme", &id).await;
        store.release(&lease).await.expect("park");
        assert!(!held(&store, &id), "a parked task is encoded");
        let parked = view(&*store, "acme", &id).await;
        assert_eq!(
            (parked.status, parked.input_requests),
            (asked.status, asked.input_requests),
            "the same question, encoded"
        );

        let (done, lease) = claimed(&*store, "acme").await;
        as_worker(&*store, &lease, completed("fine")).await;
        assert!(!held(&store, &done), "an ended task is encoded");
        assert!(view(&*store, "acme", &done).await.outcome.is_some());
    }
}
