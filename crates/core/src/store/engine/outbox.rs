//! The outbox and webhook subscriptions' rows: an event written in the commit of the
//! transition it reports ([`Txn::save`] calls [`transitioned`]), events read after a cursor
//! and swept once every subscription is past them, and rows swapped by revision.

use crate::model::{OutboxEvent, Task, Timestamp, Webhook, event_of};
use crate::store::listing;
use crate::store::{StoreError, StoreResult};

use super::rows;
use super::{Kv, Txn, View};

/// The key of the outbox's sequence counter in [`Kv::Outbox`].
const SEQ_KEY: &[u8] = b"seq";

pub(crate) fn decode_event(bytes: &[u8]) -> StoreResult<OutboxEvent> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::corrupt(format!("a stored outbox event does not decode: {e}")))
}

pub(crate) fn encode_event(e: &OutboxEvent) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(e).map_err(|e| StoreError::invalid(format!("an outbox event: {e}")))
}

/// Writes the event `task` makes by reaching its status, if one of its subscriptions hears
/// it: called by every save that changes a task's status, in the same write.
pub(crate) fn transitioned<T: Txn + ?Sized>(
    txn: &mut T,
    task: &Task,
    work: &crate::model::Work,
) -> StoreResult<()> {
    if task.notify.is_empty() {
        return Ok(());
    }
    let id = format!("evt_{}", crate::ids::hex(&crate::ids::random_bytes::<16>()));
    match event_of(task, listing::tool_of(work), id) {
        Some(event) => txn.event_put(&event),
        None => Ok(()),
    }
}

fn seq_of(bytes: &[u8]) -> u64 {
    bytes.try_into().map_or(0, u64::from_be_bytes)
}

/// [`Txn::event_put`] over the key-value spaces, for the adapters whose writes are
/// serialized: the next number of the counter, and the event under it.
pub(crate) fn put_in_kv<T: Txn + ?Sized>(txn: &mut T, event: &OutboxEvent) -> StoreResult<()> {
    let seq = txn.kv_get(Kv::Outbox, SEQ_KEY)?.map_or(0, |b| seq_of(&b)) + 1;
    let mut event = event.clone();
    event.seq = seq;
    txn.kv_put(Kv::Outbox, SEQ_KEY, &seq.to_be_bytes())?;
    txn.kv_put(Kv::Events, &seq.to_be_bytes(), &encode_event(&event)?)
}

/// The last sequence number the outbox gave (0: none yet).
pub(crate) fn last_seq(view: &dyn View) -> StoreResult<u64> {
    Ok(view.kv_get(Kv::Outbox, SEQ_KEY)?.map_or(0, |b| seq_of(&b)))
}

/// Up to `limit` events after `after`, in commit order.
pub(crate) fn events_after(
    view: &dyn View,
    after: u64,
    limit: usize,
) -> StoreResult<Vec<OutboxEvent>> {
    view.kv_range(Kv::Events, &(after + 1).to_be_bytes(), limit)?
        .iter()
        .map(|(_, v)| decode_event(v))
        .collect()
}

/// Removes up to `limit` events numbered below `below` that committed before `before`.
pub(crate) fn sweep_events(
    txn: &mut dyn Txn,
    below: u64,
    before: Timestamp,
    limit: usize,
) -> StoreResult<usize> {
    let mut n = 0;
    for (k, v) in txn.kv_range(Kv::Events, &0u64.to_be_bytes(), limit)? {
        let e = decode_event(&v)?;
        if e.seq >= below || e.at >= before {
            break;
        }
        txn.kv_del(Kv::Events, &k)?;
        n += 1;
    }
    Ok(n)
}

/// The swap of [`crate::store::OutboxStore::swap_webhook`].
pub(crate) fn swap(
    txn: &mut dyn Txn,
    name: &str,
    expected: Option<u64>,
    after: Option<&Webhook>,
) -> StoreResult<()> {
    rows::check_swap(name, expected, after)?;
    txn.webhook_swap(name, expected, after)
}
