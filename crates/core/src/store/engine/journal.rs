//! A task's outbound journal: entries appended under the live lease, bounded per task and
//! counted under the scope's stored bytes, read back by position.

use crate::model::{JournalEntry, TaskId};
use crate::store::types::{JournalBounds, Lease};
use crate::store::{StoreError, StoreResult};

use super::checks::{check_lease, load_live};
use super::{Caps, Ctx, Txn, View};

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
    journal_of(view, &lease.task_id)
}

/// A task's journal as stored, by position, its TTL aside: an operator's read.
pub(crate) fn journal_of(view: &dyn View, id: &TaskId) -> StoreResult<Vec<JournalEntry>> {
    view.journal(id)?
        .into_iter()
        .map(|(seq, bytes)| {
            let entry = JournalEntry::decode(&bytes).map_err(StoreError::corrupt)?;
            if entry.seq != seq {
                return Err(StoreError::corrupt(format!(
                    "journal entry {seq} of task {id} says it is entry {}",
                    entry.seq
                )));
            }
            Ok(entry)
        })
        .collect()
}
