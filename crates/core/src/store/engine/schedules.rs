//! Schedules' rows: read, listed, and swapped by revision; a firing's swap runs inside the
//! write that creates its task ([`super::create`]).

use crate::model::Schedule;
use crate::store::StoreResult;
use crate::store::types::ScheduleMove;

use super::rows;
use super::{Txn, View};

pub(crate) fn decode(bytes: &[u8]) -> StoreResult<Schedule> {
    rows::decode(bytes)
}

pub(crate) fn encode(s: &Schedule) -> StoreResult<Vec<u8>> {
    rows::encode(s)
}

/// Every schedule, by name.
pub(crate) fn schedules(view: &dyn View) -> StoreResult<Vec<Schedule>> {
    rows::all(view)
}

pub(crate) fn schedule(view: &dyn View, name: &str) -> StoreResult<Option<Schedule>> {
    rows::one(view, name)
}

pub(crate) fn check_swap(
    name: &str,
    expected: Option<u64>,
    after: Option<&Schedule>,
) -> StoreResult<()> {
    rows::check_swap(name, expected, after)
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

/// [`Txn::schedule_swap`] over the key-value space.
pub(crate) fn swap_in_kv<T: Txn + ?Sized>(
    txn: &mut T,
    name: &str,
    expected: Option<u64>,
    after: Option<&Schedule>,
) -> StoreResult<()> {
    rows::swap_in_kv(txn, name, expected, after)
}

pub(crate) fn too_many() -> crate::store::StoreError {
    rows::too_many::<Schedule>()
}
