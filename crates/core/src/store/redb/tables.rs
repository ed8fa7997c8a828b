//! The data tables inside one transaction: the engine's `View` and `Txn` over redb, and
//! the mapping of redb's errors into the contract's.

use redb::{ReadableTable, Table, WriteTransaction};

use crate::model::{Scope, Task, TaskId, TaskView};

use super::super::engine::{Head, Index, Record, Txn, View};
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
    /// Opened by writes and by the reads that say they need it.
    pub(super) journal: Option<T>,
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

    fn live_count(&self, scope: &Scope) -> StoreResult<u64> {
        Ok(self
            .live
            .get(scope.as_str())
            .map_err(backend)?
            .map_or(0, |v| v.value()))
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

    fn set_live_count(&mut self, scope: &Scope, count: u64) -> StoreResult<()> {
        if count == 0 {
            self.live.remove(scope.as_str()).map_err(backend)?;
        } else {
            self.live.insert(scope.as_str(), count).map_err(backend)?;
        }
        Ok(())
    }
}
