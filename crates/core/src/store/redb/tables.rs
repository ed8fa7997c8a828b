//! The data tables inside one transaction: the engine's `View` and `Txn` over redb, and
//! the mapping of redb's errors into the contract's.

use redb::{ReadableTable, Table, WriteTransaction};

use crate::model::{Task, TaskId, TaskView, Timestamp};

use super::super::engine::{Count, Head, Index, Kv, Record, Txn, View};
use super::super::record::{decode, decode_task, decode_view, encode};
use super::super::{StoreError, StoreResult};
use super::codec::{decode_head, encode_head, id_of_index_key, index_key};
use super::*;

/// The data tables, opened in one transaction.
pub(super) struct Tables<T, I, L> {
    pub(super) tasks: T,
    pub(super) indexes: [I; 3],
    pub(super) live: L,
    pub(super) heads: T,
    /// Opened by writes and by the reads that say they need it, as are the two below.
    pub(super) journal: Option<T>,
    pub(super) stored: Option<L>,
    pub(super) pinned: Option<L>,
    pub(super) kv: Option<T>,
    /// The listing indexes and the tallies.
    pub(super) listing: Option<T>,
    pub(super) tally: Option<L>,
    /// Revoked keys, and the same by time.
    pub(super) revoked: Option<(L, I)>,
}

/// A revocation's place in the time order: until (big-endian, so they sort), then the key.
fn revoked_at_key(until: u64, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len());
    k.extend_from_slice(&until.to_be_bytes());
    k.extend_from_slice(key.as_bytes());
    k
}

/// A key of the `kv` table: the space's tag, then the key.
fn kv_key(space: Kv, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + key.len());
    k.push(space.tag());
    k.extend_from_slice(key);
    k
}

fn not_open(what: &str) -> StoreError {
    StoreError::unavailable(format!("the {what} table is not open in this transaction"))
}

/// A journal entry's key: the task's id, then its position (big-endian, so they sort).
fn journal_key(id: &TaskId, seq: u32) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..16].copy_from_slice(id.as_bytes());
    k[16..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub(super) fn slot(index: Index) -> usize {
    match index {
        Index::Due => 0,
        Index::Expiry => 1,
        Index::Claimed => 2,
    }
}

impl<T, I, L> View for Tables<T, I, L>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
    I: ReadableTable<&'static [u8], ()>,
    L: ReadableTable<&'static str, u64>,
{
    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        match self.heads.get(id.as_bytes().as_slice()).map_err(backend)? {
            Some(v) => decode_head(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn count(&self, kind: Count, key: &str) -> StoreResult<u64> {
        let bytes_key;
        let (table, key) = match kind {
            Count::Live => (&self.live, key),
            Count::Stored => (self.stored.as_ref().ok_or_else(|| not_open("stored"))?, key),
            Count::Pinned => (self.pinned.as_ref().ok_or_else(|| not_open("pinned"))?, key),
            Count::Tally => (self.tally.as_ref().ok_or_else(|| not_open("tally"))?, key),
            // Beside the scope's stored-task count, under a key no scope has.
            Count::StoredBytes => {
                bytes_key = Count::bytes_key(key);
                let table = self.stored.as_ref().ok_or_else(|| not_open("stored"))?;
                (table, bytes_key.as_str())
            }
        };
        Ok(table.get(key).map_err(backend)?.map_or(0, |v| v.value()))
    }

    fn listing(&self, from: &[u8], to: &[u8], limit: usize) -> StoreResult<Vec<(Vec<u8>, String)>> {
        let table = self.listing.as_ref().ok_or_else(|| not_open("listing"))?;
        if from >= to {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for entry in table
            .range::<&[u8]>(from..to)
            .map_err(backend)?
            .rev()
            .take(limit)
        {
            let (k, v) = entry.map_err(backend)?;
            let tool = std::str::from_utf8(v.value())
                .map_err(|_| StoreError::corrupt("a listing entry's tool is not UTF-8"))?;
            out.push((k.value().to_vec(), tool.to_owned()));
        }
        Ok(out)
    }

    fn tallies(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        let table = self.tally.as_ref().ok_or_else(|| not_open("tally"))?;
        let mut out = Vec::new();
        for entry in table.range::<&str>(prefix..).map_err(backend)? {
            let (k, v) = entry.map_err(backend)?;
            if !k.value().starts_with(prefix) {
                break;
            }
            out.push((k.value().to_owned(), v.value()));
        }
        Ok(out)
    }

    fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>> {
        let mut out = Vec::new();
        for entry in self.tasks.iter().map_err(backend)? {
            if out.len() >= limit {
                break;
            }
            let (_, v) = entry.map_err(backend)?;
            let rec = decode(v.value())?;
            if !rec.task.status.is_terminal()
                && rec.work.component_digest.as_deref() == Some(digest)
            {
                out.push(rec.task.id);
            }
        }
        Ok(out)
    }

    fn kv_get(&self, space: Kv, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let table = self.kv.as_ref().ok_or_else(|| not_open("kv"))?;
        Ok(table
            .get(kv_key(space, key).as_slice())
            .map_err(backend)?
            .map(|v| v.value().to_vec()))
    }

    fn kv_scan(
        &self,
        space: Kv,
        limit: usize,
        newest_first: bool,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let table = self.kv.as_ref().ok_or_else(|| not_open("kv"))?;
        let (lo, hi) = ([space.tag()], [space.tag() + 1]);
        let range = table
            .range::<&[u8]>(lo.as_slice()..hi.as_slice())
            .map_err(backend)?;
        let mut out = Vec::new();
        let mut push = |e: Result<_, redb::StorageError>| -> StoreResult<()> {
            let (k, v): (redb::AccessGuard<'_, &[u8]>, redb::AccessGuard<'_, &[u8]>) =
                e.map_err(backend)?;
            out.push((k.value()[1..].to_vec(), v.value().to_vec()));
            Ok(())
        };
        if newest_first {
            for e in range.rev().take(limit) {
                push(e)?;
            }
        } else {
            for e in range.take(limit) {
                push(e)?;
            }
        }
        Ok(out)
    }

    fn kv_range(
        &self,
        space: Kv,
        from: &[u8],
        limit: usize,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let table = self.kv.as_ref().ok_or_else(|| not_open("kv"))?;
        let lo: Vec<u8> = std::iter::once(space.tag())
            .chain(from.iter().copied())
            .collect();
        let hi = [space.tag() + 1];
        let mut out = Vec::new();
        for e in table
            .range::<&[u8]>(lo.as_slice()..hi.as_slice())
            .map_err(backend)?
            .take(limit)
        {
            let (k, v) = e.map_err(backend)?;
            out.push((k.value()[1..].to_vec(), v.value().to_vec()));
        }
        Ok(out)
    }

    fn revoked(&self, key: &str) -> StoreResult<bool> {
        let (by_key, _) = self.revoked.as_ref().ok_or_else(|| not_open("revoked"))?;
        Ok(by_key.get(key).map_err(backend)?.is_some())
    }

    fn journal(&self, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>> {
        let Some(table) = &self.journal else {
            return Err(StoreError::unavailable(
                "a read that did not open the journal asked for it",
            ));
        };
        let (lo, hi) = (journal_key(id, 0), journal_key(id, u32::MAX));
        let mut out = Vec::new();
        for entry in table
            .range::<&[u8]>(lo.as_slice()..=hi.as_slice())
            .map_err(backend)?
        {
            let (k, v) = entry.map_err(backend)?;
            let k = k.value();
            let seq = u32::from_be_bytes([k[16], k[17], k[18], k[19]]);
            out.push((seq, v.value().to_vec()));
        }
        Ok(out)
    }

    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        match self.tasks.get(id.as_bytes().as_slice()).map_err(backend)? {
            Some(v) => decode(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn load_task(&self, id: &TaskId) -> StoreResult<Option<Task>> {
        match self.tasks.get(id.as_bytes().as_slice()).map_err(backend)? {
            Some(v) => decode_task(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn load_view(&self, id: &TaskId) -> StoreResult<Option<TaskView>> {
        match self.tasks.get(id.as_bytes().as_slice()).map_err(backend)? {
            Some(v) => decode_view(v.value()).map(Some),
            None => Ok(None),
        }
    }

    fn index_upto(&self, index: Index, upto: u64, limit: usize) -> StoreResult<Vec<TaskId>> {
        let hi = index_key(upto, &TaskId::from_bytes([0xff; 16]));
        let mut out = Vec::new();
        for entry in self.indexes[slot(index)]
            .range::<&[u8]>(..=hi.as_slice())
            .map_err(backend)?
            .take(limit)
        {
            let (k, _) = entry.map_err(backend)?;
            out.push(id_of_index_key(k.value())?);
        }
        Ok(out)
    }
}

pub(super) type WriteTables<'t> = Tables<
    Table<'t, &'static [u8], &'static [u8]>,
    Table<'t, &'static [u8], ()>,
    Table<'t, &'static str, u64>,
>;

impl<'t> WriteTables<'t> {
    pub(super) fn open(txn: &'t WriteTransaction) -> StoreResult<Self> {
        Ok(open_tables!(txn))
    }
}

impl Txn for WriteTables<'_> {
    fn put(&mut self, record: &Record) -> StoreResult<()> {
        let bytes = encode(record)?;
        self.tasks
            .insert(record.task.id.as_bytes().as_slice(), bytes.as_slice())
            .map_err(backend)?;
        Ok(())
    }

    fn remove(&mut self, id: &TaskId) -> StoreResult<()> {
        self.tasks
            .remove(id.as_bytes().as_slice())
            .map_err(backend)?;
        self.heads
            .remove(id.as_bytes().as_slice())
            .map_err(backend)?;
        let seqs: Vec<u32> = self.journal(id)?.into_iter().map(|(s, _)| s).collect();
        if let Some(table) = &mut self.journal {
            for seq in seqs {
                table
                    .remove(journal_key(id, seq).as_slice())
                    .map_err(backend)?;
            }
        }
        Ok(())
    }

    fn journal_put(&mut self, id: &TaskId, seq: u32, entry: &[u8]) -> StoreResult<()> {
        let Some(table) = &mut self.journal else {
            return Err(StoreError::unavailable("the journal's table is not open"));
        };
        let key = journal_key(id, seq);
        if table.get(key.as_slice()).map_err(backend)?.is_some() {
            return Err(super::super::engine::journal_taken(seq));
        }
        table.insert(key.as_slice(), entry).map_err(backend)?;
        Ok(())
    }

    fn created(&mut self, task: &Task) -> StoreResult<()> {
        self.heads
            .insert(
                task.id.as_bytes().as_slice(),
                encode_head(&Head::of(task)).as_slice(),
            )
            .map_err(backend)?;
        Ok(())
    }

    fn index_put(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.indexes[slot(index)]
            .insert(index_key(key, id).as_slice(), ())
            .map_err(backend)?;
        Ok(())
    }

    fn index_del(&mut self, index: Index, key: u64, id: &TaskId) -> StoreResult<()> {
        self.indexes[slot(index)]
            .remove(index_key(key, id).as_slice())
            .map_err(backend)?;
        Ok(())
    }

    fn set_count(&mut self, kind: Count, key: &str, count: u64) -> StoreResult<()> {
        let bytes_key;
        let (table, key) = match kind {
            Count::Live => (&mut self.live, key),
            Count::Stored => (self.stored.as_mut().ok_or_else(|| not_open("stored"))?, key),
            Count::Pinned => (self.pinned.as_mut().ok_or_else(|| not_open("pinned"))?, key),
            Count::Tally => (self.tally.as_mut().ok_or_else(|| not_open("tally"))?, key),
            Count::StoredBytes => {
                bytes_key = Count::bytes_key(key);
                let table = self.stored.as_mut().ok_or_else(|| not_open("stored"))?;
                (table, bytes_key.as_str())
            }
        };
        if count == 0 {
            table.remove(key).map_err(backend)?;
        } else {
            table.insert(key, count).map_err(backend)?;
        }
        Ok(())
    }

    fn listing_put(&mut self, key: &[u8], tool: &str) -> StoreResult<()> {
        let table = self.listing.as_mut().ok_or_else(|| not_open("listing"))?;
        table.insert(key, tool.as_bytes()).map_err(backend)?;
        Ok(())
    }

    fn listing_del(&mut self, key: &[u8]) -> StoreResult<()> {
        let table = self.listing.as_mut().ok_or_else(|| not_open("listing"))?;
        table.remove(key).map_err(backend)?;
        Ok(())
    }

    fn kv_put(&mut self, space: Kv, key: &[u8], value: &[u8]) -> StoreResult<()> {
        let table = self.kv.as_mut().ok_or_else(|| not_open("kv"))?;
        table
            .insert(kv_key(space, key).as_slice(), value)
            .map_err(backend)?;
        Ok(())
    }

    fn kv_del(&mut self, space: Kv, key: &[u8]) -> StoreResult<()> {
        let table = self.kv.as_mut().ok_or_else(|| not_open("kv"))?;
        table
            .remove(kv_key(space, key).as_slice())
            .map_err(backend)?;
        Ok(())
    }

    fn revoke_put(&mut self, key: &str, until: Timestamp) -> StoreResult<()> {
        let (by_key, by_time) = self.revoked.as_mut().ok_or_else(|| not_open("revoked"))?;
        let until = until.as_millis();
        let before = by_key.get(key).map_err(backend)?.map(|v| v.value());
        if let Some(at) = before {
            if at >= until {
                return Ok(());
            }
            by_time
                .remove(revoked_at_key(at, key).as_slice())
                .map_err(backend)?;
        }
        by_key.insert(key, until).map_err(backend)?;
        by_time
            .insert(revoked_at_key(until, key).as_slice(), ())
            .map_err(backend)?;
        Ok(())
    }

    fn revoke_sweep(&mut self, now: Timestamp, limit: usize) -> StoreResult<()> {
        let (by_key, by_time) = self.revoked.as_mut().ok_or_else(|| not_open("revoked"))?;
        let hi = (now.as_millis().saturating_add(1)).to_be_bytes();
        let mut lapsed = Vec::new();
        for entry in by_time
            .range::<&[u8]>(..hi.as_slice())
            .map_err(backend)?
            .take(limit)
        {
            let (k, _) = entry.map_err(backend)?;
            lapsed.push(k.value().to_vec());
        }
        for k in lapsed {
            by_time.remove(k.as_slice()).map_err(backend)?;
            let key = std::str::from_utf8(&k[8..])
                .map_err(|_| StoreError::corrupt("a revocation key is not UTF-8"))?;
            by_key.remove(key).map_err(backend)?;
        }
        Ok(())
    }
}
