//! Tasks: creation, authorization and reads, transitions by events, an operator's
//! retry-now, delete and inspect, and the reaper.

use serde_json::Value;

use crate::model::{
    EventKind, HistoryKind, Principal, Rejected, Task, TaskEvent, TaskId, TaskStatus, TaskView,
    Work,
};
use crate::store::types::{
    Access, Action, Authority, Committed, MAX_REAP_IDS, MAX_TTL_MS, NewTask, Reaped,
};
use crate::store::{StoreError, StoreResult};

use super::checks::{check_access, check_lease, check_message, load_for_access, load_live};
use super::txn::measure;
use super::{Caps, Ctx, Index, Record, Txn, View};

const MAX_POLL_INTERVAL_MS: u64 = 24 * 60 * 60 * 1000;

pub(crate) fn create(txn: &mut dyn Txn, ctx: &Ctx, new: NewTask) -> StoreResult<Task> {
    new.work
        .validate()
        .map_err(|e| StoreError::invalid(e.to_string()))?;
    if let Some(ttl) = new.ttl_ms
        && !(1..=MAX_TTL_MS).contains(&ttl)
    {
        return Err(StoreError::invalid(format!(
            "ttlMs must be 1..={MAX_TTL_MS} or unlimited, got {ttl}"
        )));
    }
    if let Some(p) = new.poll_interval_ms
        && !(1..=MAX_POLL_INTERVAL_MS).contains(&p)
    {
        return Err(StoreError::invalid(format!(
            "pollIntervalMs must be 1..={MAX_POLL_INTERVAL_MS}, got {p}"
        )));
    }
    check_message(new.status_message.as_deref())?;
    let caps = Caps::of(&new);
    let client_capabilities = match new.client_capabilities {
        Value::Null => Value::Object(Default::default()),
        v @ Value::Object(_) => v,
        _ => {
            return Err(StoreError::invalid(
                "client capabilities must be a JSON object",
            ));
        }
    };
    if txn.head(&new.id)?.is_some() {
        return Err(StoreError::AlreadyExists);
    }
    let mut task = Task {
        id: new.id,
        scope: new.scope,
        status: TaskStatus::Working,
        status_message: new.status_message,
        created_at: ctx.now,
        last_updated_at: ctx.now,
        ttl_ms: new.ttl_ms,
        poll_interval_ms: new.poll_interval_ms,
        revision: 0,
        attempt: 0,
        retry_count: 0,
        retry_at: None,
        wake_at: None,
        inputs: Default::default(),
        outcome: None,
        generation: 0,
        recoveries: 0,
        journal_entries: 0,
        journal_bytes: 0,
        stored_bytes: 0,
        claim: None,
        client_capabilities,
        events: Vec::new(),
        history: Default::default(),
        span: new.work.trace.as_ref().and_then(|t| {
            // A tool call's tool; any other work is named by its kind.
            let tool = new
                .work
                .input
                .get("tool")
                .and_then(serde_json::Value::as_str);
            t.task_span(tool.unwrap_or(&new.work.kind))
        }),
        notify: new.notify,
    };
    task.history.push(ctx.now, HistoryKind::Created);
    let mut rec = Record {
        task,
        work: new.work,
    };
    measure(&mut rec);
    if caps.any() {
        txn.admit(&rec.task.scope, caps, rec.task.stored_bytes)?;
    }
    // The last check, and the first write: a schedule's row that moved meanwhile refuses
    // the firing before anything of its task is written.
    if let Some(firing) = &new.firing {
        super::schedules::fire(txn, firing)?;
    }
    txn.save(None, &rec)?;
    Ok(rec.task)
}

pub(crate) fn authorize(
    view: &dyn View,
    ctx: &Ctx,
    principal: &Principal,
    action: Action,
    task_id: &str,
) -> StoreResult<Access> {
    let id = TaskId::parse(task_id).ok_or(StoreError::NotFound)?;
    let head = match view.head(&id)? {
        Some(h) if h.expires_at.is_none_or(|at| at > ctx.now) => h,
        _ => return Err(StoreError::NotFound),
    };
    if !principal.owns(&head.scope) {
        return Err(StoreError::NotFound);
    }
    Ok(Access {
        task_id: id,
        scope: head.scope,
        action,
        issuer: ctx.issuer,
    })
}

/// [`authorize`] for reading, then what a client may see of the task, in one view.
pub(crate) fn authorize_read(
    view: &dyn View,
    ctx: &Ctx,
    principal: &Principal,
    task_id: &str,
) -> StoreResult<(Access, TaskView)> {
    let access = authorize(view, ctx, principal, Action::Read, task_id)?;
    // The same checks as `get`, on the view.
    match view.load_view(&access.task_id)? {
        Some(t) if !t.is_expired(ctx.now) && t.scope == access.scope => Ok((access, t)),
        _ => Err(StoreError::NotFound),
    }
}

pub(crate) fn get(view: &dyn View, ctx: &Ctx, access: &Access) -> StoreResult<Task> {
    check_access(access, ctx, Action::Read)?;
    // The same checks as `load_for_access`, on the task alone.
    match view.load_task(&access.task_id)? {
        Some(t) if !t.is_expired(ctx.now) && t.scope == access.scope => Ok(t),
        _ => Err(StoreError::NotFound),
    }
}

pub(crate) fn transition(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    by: Authority<'_>,
    event: TaskEvent,
    expected_revision: Option<u64>,
) -> StoreResult<Committed> {
    event.validate()?;
    let rec = match by {
        Authority::Worker(lease) => {
            if !event.kind.is_worker_event() {
                return Err(StoreError::invalid(format!(
                    "`{}` comes from a request, not from a worker",
                    event.kind.name()
                )));
            }
            load_live(txn, &lease.task_id, ctx.now)?
        }
        Authority::Request(access) => {
            let wanted = match event.kind {
                EventKind::InputAccepted { .. } => Action::Update,
                EventKind::Cancelled { .. } => Action::Cancel,
                _ => {
                    return Err(StoreError::WrongAction {
                        granted: access.action,
                    });
                }
            };
            check_access(access, ctx, wanted)?;
            load_for_access(txn, ctx, access)?
        }
    };
    let generation = match by {
        Authority::Worker(lease) => Some(lease.generation),
        Authority::Request(_) => None,
    };

    if let Some((revision, effect)) = rec.task.replay_of(&event, generation).map_err(rejected)? {
        return Ok(Committed {
            revision,
            task: rec.task,
            replayed: true,
            effect,
        });
    }
    if rec.task.status.is_terminal() {
        return Err(StoreError::Terminal {
            status: rec.task.status,
        });
    }
    if let Authority::Worker(lease) = by {
        check_lease(&rec.task, lease, ctx)?;
    }
    if let Some(expected) = expected_revision
        && expected != rec.task.revision
    {
        return Err(StoreError::Conflict {
            current: rec.task.revision,
        });
    }

    let before = rec.task.clone();
    let mut after = rec;
    let step = after
        .task
        .apply(event, generation, &after.work.retry_policy, ctx.now)
        .map_err(rejected)?;
    if !step.changed {
        return Ok(Committed {
            revision: before.revision,
            task: before,
            replayed: false,
            effect: step.effect,
        });
    }
    // Arguments, answers and results arrive with a change of status or inputs: the record
    // is measured again then (never refused: what was accepted is kept).
    if after.task.status != before.status || after.task.inputs != before.inputs {
        measure(&mut after);
    }
    txn.save(Some(&before), &after)?;
    Ok(Committed {
        revision: after.task.revision,
        task: after.task,
        replayed: false,
        effect: step.effect,
    })
}

/// The store's error for a transition the state machine refused.
fn rejected(r: Rejected) -> StoreError {
    match r {
        Rejected::Terminal(status) => StoreError::Terminal { status },
        Rejected::InputConflict(key) => StoreError::InputConflict { key },
        Rejected::EventIdReused(id) => StoreError::EventIdReused { id },
    }
}

pub(crate) fn reap(txn: &mut dyn Txn, ctx: &Ctx, limit: usize) -> StoreResult<Vec<Reaped>> {
    let ids = txn.index_upto(Index::Expiry, ctx.now.as_millis(), limit)?;
    delete_tasks(txn, ids)
}

/// Up to `limit` tasks past their TTL, the oldest expiry first, with their work.
pub(crate) fn expired(view: &dyn View, ctx: &Ctx, limit: usize) -> StoreResult<Vec<(Task, Work)>> {
    let ids = view.index_upto(Index::Expiry, ctx.now.as_millis(), limit)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(rec) = view.load(&id)? {
            out.push((rec.task, rec.work));
        }
    }
    Ok(out)
}

/// Deletes the tasks among `ids` that are still stored and past their TTL.
pub(crate) fn reap_ids(txn: &mut dyn Txn, ctx: &Ctx, ids: &[TaskId]) -> StoreResult<Vec<Reaped>> {
    if ids.len() > MAX_REAP_IDS {
        return Err(StoreError::invalid(format!(
            "{} ids to reap at once, more than {MAX_REAP_IDS}",
            ids.len()
        )));
    }
    let mut reaped = Vec::new();
    for id in ids {
        if let Some(rec) = txn.load(id)?
            && rec.task.is_expired(ctx.now)
        {
            txn.delete(&rec)?;
            reaped.push(Reaped {
                id: *id,
                status: rec.task.status,
            });
        }
    }
    Ok(reaped)
}

/// Deletes the tasks among `ids` that still exist, saying what each one was.
pub(crate) fn delete_tasks(txn: &mut dyn Txn, ids: Vec<TaskId>) -> StoreResult<Vec<Reaped>> {
    let mut reaped = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(rec) = txn.load(&id)? {
            txn.delete(&rec)?;
            reaped.push(Reaped {
                id,
                status: rec.task.status,
            });
        }
    }
    Ok(reaped)
}

/// An operator's "retry now": a task waiting out its retry delay becomes due at once.
pub(crate) fn retry_now(txn: &mut dyn Txn, ctx: &Ctx, access: &Access) -> StoreResult<Task> {
    check_access(access, ctx, Action::Update)?;
    let rec = load_for_access(txn, ctx, access)?;
    let t = &rec.task;
    if t.status.is_terminal() {
        return Err(StoreError::Terminal { status: t.status });
    }
    let Some(retry_at) = t.retry_at.filter(|at| *at > ctx.now && t.claim.is_none()) else {
        return Err(StoreError::invalid(
            "the task is not waiting for a retry (only a task whose retry is still ahead can be retried now)",
        ));
    };
    let before = rec.task.clone();
    let mut after = rec;
    after.task.retry_at = Some(ctx.now);
    after.task.history.push(
        ctx.now,
        HistoryKind::RetryNow {
            was_due_at: retry_at,
        },
    );
    txn.save(Some(&before), &after)?;
    Ok(after.task)
}

pub(crate) fn delete_finished(txn: &mut dyn Txn, ctx: &Ctx, access: &Access) -> StoreResult<()> {
    check_access(access, ctx, Action::Cancel)?;
    let rec = load_for_access(txn, ctx, access)?;
    if !rec.task.status.is_terminal() {
        return Err(StoreError::invalid(format!(
            "task {} is {}: only a finished task can be deleted (cancel it first)",
            rec.task.id,
            rec.task.status.as_str()
        )));
    }
    txn.delete(&rec)
}

pub(crate) fn inspect(view: &dyn View, id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
    Ok(view.load(id)?.map(|r| (r.task, r.work)))
}
