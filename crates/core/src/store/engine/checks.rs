//! What operations check before they act: the record is live, an access value grants
//! what is asked, a lease is the live claim's.

use crate::model::{Task, TaskId, Timestamp};
use crate::store::types::{Access, Action, Lease};
use crate::store::{StoreError, StoreResult};

use super::{Ctx, Record, View};

/// The record if it exists and its TTL has not run out.
pub(super) fn load_live(view: &dyn View, id: &TaskId, now: Timestamp) -> StoreResult<Record> {
    match view.load(id)? {
        Some(r) if !r.task.is_expired(now) => Ok(r),
        _ => Err(StoreError::NotFound),
    }
}

pub(super) fn check_access(access: &Access, ctx: &Ctx, wanted: Action) -> StoreResult<()> {
    if access.issuer != ctx.issuer || access.action != wanted {
        return Err(StoreError::WrongAction {
            granted: access.action,
        });
    }
    Ok(())
}

/// The record behind an access value, re-checking its scope (the task may be gone).
pub(super) fn load_for_access(view: &dyn View, ctx: &Ctx, access: &Access) -> StoreResult<Record> {
    let rec = load_live(view, &access.task_id, ctx.now)?;
    if rec.task.scope != access.scope {
        return Err(StoreError::NotFound);
    }
    Ok(rec)
}

pub(super) fn check_lease(task: &Task, lease: &Lease, ctx: &Ctx) -> StoreResult<()> {
    if task.status.is_terminal() {
        return Err(StoreError::Terminal {
            status: task.status,
        });
    }
    match task.live_claim(ctx.now, ctx.epoch) {
        Some(c) if c.generation == lease.generation && c.token == lease.token => Ok(()),
        _ => Err(StoreError::LeaseLost),
    }
}

pub(super) fn check_message(m: Option<&str>) -> StoreResult<()> {
    crate::model::check_message(m).map_err(|e| StoreError::invalid(e.0))
}
