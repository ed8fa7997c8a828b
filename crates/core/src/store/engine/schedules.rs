//! Schedules' rows: read, listed, and swapped by revision; a firing's swap runs inside the
//! write that creates its task ([`super::create`]).

use crate::model::Schedule;
use crate::store::StoreResult;
use crate::store::types::ScheduleMove;

use super::Txn;

/// The swap of [`crate::store::ScheduleStore::swap_schedule`].
pub(crate) fn swap(
    txn: &mut dyn Txn,
    name: &str,
    expected: Option<u64>,
    after: Option<&Schedule>,
) -> StoreResult<()> {
    super::rows::check_swap(name, expected, after)?;
    txn.schedule_swap(name, expected, after)
}

/// A firing's move of its schedule, checked and made: the caller creates the task in the
/// same write.
pub(crate) fn fire(txn: &mut dyn Txn, firing: &ScheduleMove) -> StoreResult<()> {
    let name = firing.after.spec.name.clone();
    swap(txn, &name, Some(firing.expected), Some(&firing.after))
}
