//! Schedules' rows: read, listed, and swapped by revision; a firing's swap runs inside the
//! write that creates its task ([`super::create`]).

use crate::model::{MAX_SCHEDULES, Schedule};
use crate::store::types::ScheduleMove;
use crate::store::{StoreError, StoreResult};

use super::{Kv, Txn, View};

pub(crate) fn decode(bytes: &[u8]) -> StoreResult<Schedule> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::corrupt(format!("a stored schedule does not decode: {e}")))
}

pub(crate) fn encode(s: &Schedule) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(s).map_err(|e| StoreError::invalid(format!("a schedule: {e}")))
}

/// Every schedule, by name.
pub(crate) fn schedules(view: &dyn View) -> StoreResult<Vec<Schedule>> {
    view.kv_scan(Kv::Schedules, MAX_SCHEDULES, false)?
        .iter()
        .map(|(_, v)| decode(v))
        .collect()
}

pub(crate) fn schedule(view: &dyn View, name: &str) -> StoreResult<Option<Schedule>> {
    view.kv_get(Kv::Schedules, name.as_bytes())?
        .map(|b| decode(&b))
        .transpose()
}

/// What a swap must be before it is tried: `after` named `name`, one revision on.
pub(crate) fn check_swap(
    name: &str,
    expected: Option<u64>,
    after: Option<&Schedule>,
) -> StoreResult<()> {
    let Some(after) = after else {
        return Ok(());
    };
    if after.spec.name != name {
        return Err(StoreError::invalid(format!(
            "schedule {name:?} cannot be replaced by one named {:?}",
            after.spec.name
        )));
    }
    let want = expected.map_or(0, |r| r + 1);
    if after.revision != want {
        return Err(StoreError::invalid(format!(
            "schedule {name:?}: the new row's revision must be {want}, not {}",
            after.revision
        )));
    }
    Ok(())
}

/// The swap of [`crate::store::ScheduleStore::swap_schedule`].
pub(crate) fn swap(
    txn: &mut dyn Txn,
    name: &str,
    expected: Option<u64>,
    after: Option<&Schedule>,
) -> StoreResult<()> {
    check_swap(name, expected, after)?;
    txn.schedule_swap(name, expected, after)
}

/// A firing's move of its schedule, checked and made: the caller creates the task in the
/// same write.
pub(crate) fn fire(txn: &mut dyn Txn, firing: &ScheduleMove) -> StoreResult<()> {
    let name = firing.after.spec.name.clone();
    swap(txn, &name, Some(firing.expected), Some(&firing.after))
}

/// [`Txn::schedule_swap`] over the key-value space, for the adapters whose writes hold
/// every row within reach.
pub(crate) fn swap_in_kv<T: Txn + ?Sized>(
    txn: &mut T,
    name: &str,
    expected: Option<u64>,
    after: Option<&Schedule>,
) -> StoreResult<()> {
    let current = match txn.kv_get(Kv::Schedules, name.as_bytes())? {
        Some(b) => Some(decode(&b)?.revision),
        None => None,
    };
    if current != expected {
        return Err(StoreError::ScheduleConflict {
            name: name.to_owned(),
            current,
        });
    }
    match after {
        Some(s) => {
            if current.is_none()
                && txn.kv_scan(Kv::Schedules, MAX_SCHEDULES, false)?.len() >= MAX_SCHEDULES
            {
                return Err(too_many());
            }
            txn.kv_put(Kv::Schedules, name.as_bytes(), &encode(s)?)
        }
        None => txn.kv_del(Kv::Schedules, name.as_bytes()),
    }
}

pub(crate) fn too_many() -> StoreError {
    StoreError::invalid(format!(
        "a store keeps at most {MAX_SCHEDULES} schedules; remove one first"
    ))
}
