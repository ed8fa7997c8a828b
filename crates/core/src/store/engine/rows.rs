//! Rows swapped by revision (schedules, webhook subscriptions): kept as JSON in a key-value
//! space by name, read and listed, and replaced only by a compare-and-set on the revision.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::{MAX_SCHEDULES, MAX_WEBHOOKS, Schedule, Webhook};
use crate::store::{StoreError, StoreResult};

use super::{Kv, Txn, View};

/// A row kind: where its rows live, how many may, and how a swap is refused.
pub(crate) trait Row: Serialize + DeserializeOwned {
    /// The space its rows live in, by name.
    const SPACE: Kv;
    /// Most rows of the kind a store keeps.
    const MAX: usize;
    /// What operators call one ("schedule").
    const WHAT: &'static str;
    fn name(&self) -> &str;
    fn revision(&self) -> u64;
    /// The refusal of a swap that found the row at `current`.
    fn conflict(name: &str, current: Option<u64>) -> StoreError;
}

impl Row for Schedule {
    const SPACE: Kv = Kv::Schedules;
    const MAX: usize = MAX_SCHEDULES;
    const WHAT: &'static str = "schedule";
    fn name(&self) -> &str {
        &self.spec.name
    }
    fn revision(&self) -> u64 {
        self.revision
    }
    fn conflict(name: &str, current: Option<u64>) -> StoreError {
        StoreError::ScheduleConflict {
            name: name.to_owned(),
            current,
        }
    }
}

impl Row for Webhook {
    const SPACE: Kv = Kv::Webhooks;
    const MAX: usize = MAX_WEBHOOKS;
    const WHAT: &'static str = "webhook subscription";
    fn name(&self) -> &str {
        &self.spec.name
    }
    fn revision(&self) -> u64 {
        self.revision
    }
    fn conflict(name: &str, current: Option<u64>) -> StoreError {
        StoreError::WebhookConflict {
            name: name.to_owned(),
            current,
        }
    }
}

pub(crate) fn decode<R: Row>(bytes: &[u8]) -> StoreResult<R> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::corrupt(format!("a stored {} does not decode: {e}", R::WHAT)))
}

pub(crate) fn encode<R: Row>(row: &R) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(row).map_err(|e| StoreError::invalid(format!("a {}: {e}", R::WHAT)))
}

/// Every row of the kind, by name.
pub(crate) fn all<R: Row>(view: &dyn View) -> StoreResult<Vec<R>> {
    view.kv_scan(R::SPACE, R::MAX, false)?
        .iter()
        .map(|(_, v)| decode(v))
        .collect()
}

/// The row `name`, if there is one.
pub(crate) fn one<R: Row>(view: &dyn View, name: &str) -> StoreResult<Option<R>> {
    view.kv_get(R::SPACE, name.as_bytes())?
        .map(|b| decode(&b))
        .transpose()
}

/// What a swap must be before it is tried: `after` named `name`, one revision on.
pub(crate) fn check_swap<R: Row>(
    name: &str,
    expected: Option<u64>,
    after: Option<&R>,
) -> StoreResult<()> {
    let Some(after) = after else {
        return Ok(());
    };
    let what = R::WHAT;
    if after.name() != name {
        return Err(StoreError::invalid(format!(
            "{what} {name:?} cannot be replaced by one named {:?}",
            after.name()
        )));
    }
    let want = expected.map_or(0, |r| r + 1);
    if after.revision() != want {
        return Err(StoreError::invalid(format!(
            "{what} {name:?}: the new row's revision must be {want}, not {}",
            after.revision()
        )));
    }
    Ok(())
}

/// A swap over the key-value space, for the adapters whose writes hold every row within
/// reach: the row must be at `expected` (`None`: absent); `after` replaces it (`None`:
/// removes it).
pub(crate) fn swap_in_kv<R: Row, T: Txn + ?Sized>(
    txn: &mut T,
    name: &str,
    expected: Option<u64>,
    after: Option<&R>,
) -> StoreResult<()> {
    let current = match txn.kv_get(R::SPACE, name.as_bytes())? {
        Some(b) => Some(decode::<R>(&b)?.revision()),
        None => None,
    };
    if current != expected {
        return Err(R::conflict(name, current));
    }
    match after {
        Some(row) => {
            if current.is_none() && txn.kv_scan(R::SPACE, R::MAX, false)?.len() >= R::MAX {
                return Err(too_many::<R>());
            }
            txn.kv_put(R::SPACE, name.as_bytes(), &encode(row)?)
        }
        None => txn.kv_del(R::SPACE, name.as_bytes()),
    }
}

/// The refusal of one row more than [`Row::MAX`].
pub(crate) fn too_many<R: Row>() -> StoreError {
    StoreError::invalid(format!(
        "a store keeps at most {} {}s; remove one first",
        R::MAX,
        R::WHAT
    ))
}
