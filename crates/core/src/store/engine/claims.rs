//! Claims and leases: claiming one task or the one due longest, renewing and releasing a
//! lease, a worker's snapshot under it, and releasing the claims of a process that is gone.

use crate::ids::random_u64;
use crate::model::{Claim, EventKind, HistoryKind, Task, TaskEvent, TaskId, Work};
use crate::store::types::{
    Authority, CLAIM_SKIP_SCAN, ClaimRequest, Claimed, Lease, MAX_CLAIM_BATCH, MAX_LEASE_MS,
    NewTask, NextClaim, Reaped,
};
use crate::store::{StoreError, StoreResult};

use super::checks::{check_lease, load_live};
use super::scratch::Scratch;
use super::tasks::{create, transition};
use super::{Ctx, Index, Record, Txn, View};

const MAX_OWNER_LEN: usize = 128;
/// How many due-index entries one `claim_next` looks at past expired tasks.
const CLAIM_SCAN: usize = 64;

pub(crate) fn check_claim_request(req: &ClaimRequest) -> StoreResult<()> {
    if !(1..=MAX_LEASE_MS).contains(&req.lease_ms) {
        return Err(StoreError::invalid(format!(
            "a lease is 1..={MAX_LEASE_MS} ms, got {}",
            req.lease_ms
        )));
    }
    if req.owner.len() > MAX_OWNER_LEN {
        return Err(StoreError::invalid(format!(
            "a claim owner is at most {MAX_OWNER_LEN} bytes"
        )));
    }
    if !(1..=MAX_CLAIM_BATCH).contains(&req.batch) {
        return Err(StoreError::invalid(format!(
            "a claim batch is 1..={MAX_CLAIM_BATCH} tasks, got {}",
            req.batch
        )));
    }
    Ok(())
}

/// Takes a claim on `rec`, whose claimability the caller has checked.
fn take_claim(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    rec: Record,
    req: &ClaimRequest,
) -> StoreResult<Claimed> {
    let before = rec.task.clone();
    let mut after = rec;
    let generation = after.task.generation + 1;
    let claim = Claim {
        generation,
        token: random_u64(),
        epoch: ctx.epoch,
        expires_at: ctx.now.plus_ms(req.lease_ms),
        owner: req.owner.clone(),
    };
    let lease = Lease {
        task_id: after.task.id,
        generation,
        token: claim.token,
        epoch: claim.epoch,
        expires_at: claim.expires_at,
    };
    after.task.generation = generation;
    // A claim still on the record here is one whose lease ran out (live claims refuse a
    // new claim): its worker never let go.
    let recovered = after.task.claim.is_some();
    if recovered {
        after.task.recoveries = after.task.recoveries.saturating_add(1);
    }
    let waited_ms = before
        .due_at()
        .map_or(0, |due| ctx.now.as_millis().saturating_sub(due.as_millis()));
    after.task.history.push(
        ctx.now,
        HistoryKind::Claimed {
            generation,
            owner: claim.owner.clone(),
            waited_ms,
            recovered,
        },
    );
    after.task.claim = Some(claim);
    // The backoff or the sleep, if any, is over: this claim is the retry, or the wake.
    after.task.retry_at = None;
    after.task.wake_at = None;
    if req.start {
        // The claim and the start in one store of the record.
        let mut scratch = Scratch::new(txn);
        scratch.save(Some(&before), &after)?;
        let event = TaskEvent::new(
            crate::model::EventId::for_claim(generation, "started"),
            EventKind::Started,
        );
        let c = transition(&mut scratch, ctx, Authority::Worker(&lease), event, None)?;
        scratch.flush()?;
        return Ok(Claimed {
            lease,
            task: c.task,
            work: after.work,
            started: true,
        });
    }
    txn.save(Some(&before), &after)?;
    Ok(Claimed {
        lease,
        task: after.task,
        work: after.work,
        started: false,
    })
}

/// [`create`] then [`claim`] of the new task, in the caller's one write.
pub(crate) fn create_claimed(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    new: NewTask,
    req: &ClaimRequest,
) -> StoreResult<Claimed> {
    check_claim_request(req)?;
    let mut scratch = Scratch::new(txn);
    let task = create(&mut scratch, ctx, new)?;
    let claimed = claim(&mut scratch, ctx, &task.id, req)?;
    scratch.flush()?;
    Ok(claimed)
}

pub(crate) fn claim(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    id: &TaskId,
    req: &ClaimRequest,
) -> StoreResult<Claimed> {
    check_claim_request(req)?;
    let rec = load_live(txn, id, ctx.now)?;
    let t = &rec.task;
    if t.status.is_terminal() {
        return Err(StoreError::Terminal { status: t.status });
    }
    if let Some(c) = t.live_claim(ctx.now, ctx.epoch) {
        return Err(StoreError::Busy {
            until: c.expires_at,
        });
    }
    if let Some(at) = t.held_until()
        && at > ctx.now
    {
        return Err(StoreError::NotDue { retry_at: at });
    }
    // Parked on an unanswered question with no claim: only an answer (or a cancel) makes it
    // runnable, so a late submit (a stale queue entry) must not start a guest that would
    // only ask again. An expired claim keeps the task due, so recovery still takes it.
    if t.due_at().is_none() {
        return Err(StoreError::Parked);
    }
    take_claim(txn, ctx, rec, req)
}

pub(crate) fn claim_next(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    req: &ClaimRequest,
) -> StoreResult<NextClaim> {
    check_claim_request(req)?;
    let scan = if req.skip_scopes.is_empty() {
        CLAIM_SCAN.max(req.batch)
    } else {
        CLAIM_SKIP_SCAN
    };
    let mut next = NextClaim::default();
    for id in txn.index_upto(Index::Due, ctx.now.as_millis(), scan)? {
        let Some(rec) = txn.load(&id)? else {
            return Err(StoreError::corrupt(format!(
                "the due index names task {id}, which is not stored"
            )));
        };
        if rec.task.is_expired(ctx.now) {
            // Past its TTL: nobody may run it. Remove it now rather than let it block the
            // head of the queue until the next reap, and report it as the reaper would.
            txn.delete(&rec)?;
            next.reaped.push(Reaped {
                id,
                status: rec.task.status,
            });
            continue;
        }
        if req.skip_scopes.contains(&rec.task.scope) {
            continue;
        }
        let claimed = take_claim(txn, ctx, rec, req)?;
        match next.claimed {
            None => next.claimed = Some(claimed),
            Some(_) => next.more.push(claimed),
        }
        if 1 + next.more.len() >= req.batch {
            break;
        }
    }
    if next.claimed.is_none() {
        next.next_due_in_ms = next_due_in(txn, ctx)?;
    }
    Ok(next)
}

/// How long until the first task in the due index is due (0 when it is already). An
/// adapter whose write sees only the rows it fetched finds nothing here and answers in
/// [`crate::store::backend::Backend::next_due_in`] instead.
fn next_due_in(txn: &dyn Txn, ctx: &Ctx) -> StoreResult<Option<u64>> {
    let Some(id) = txn.index_upto(Index::Due, u64::MAX, 1)?.pop() else {
        return Ok(None);
    };
    Ok(txn
        .load_task(&id)?
        .and_then(|t| t.due_at())
        .map(|due| due.as_millis().saturating_sub(ctx.now.as_millis())))
}

pub(crate) fn renew(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    lease: &Lease,
    lease_ms: u64,
) -> StoreResult<Lease> {
    check_claim_request(&ClaimRequest::new(lease_ms, ""))?;
    let rec = load_live(txn, &lease.task_id, ctx.now)?;
    check_lease(&rec.task, lease, ctx)?;
    let before = rec.task.clone();
    let mut after = rec;
    let expires_at = ctx.now.plus_ms(lease_ms);
    if let Some(c) = after.task.claim.as_mut() {
        c.expires_at = expires_at;
    }
    txn.save(Some(&before), &after)?;
    Ok(Lease {
        expires_at,
        ..lease.clone()
    })
}

pub(crate) fn release(txn: &mut dyn Txn, ctx: &Ctx, lease: &Lease) -> StoreResult<()> {
    let rec = load_live(txn, &lease.task_id, ctx.now)?;
    check_lease(&rec.task, lease, ctx)?;
    let before = rec.task.clone();
    let mut after = rec;
    after.task.claim = None;
    let note = if after.task.has_outstanding_inputs() {
        HistoryKind::Parked
    } else {
        HistoryKind::Released
    };
    after.task.history.push(ctx.now, note);
    txn.save(Some(&before), &after)
}

pub(crate) fn worker_snapshot(
    view: &dyn View,
    ctx: &Ctx,
    lease: &Lease,
) -> StoreResult<(Task, Work)> {
    let rec = load_live(view, &lease.task_id, ctx.now)?;
    check_lease(&rec.task, lease, ctx)?;
    Ok((rec.task, rec.work))
}

/// Releases every claim made in a boot epoch before `ctx.epoch`: the process that held it
/// is gone (the store is exclusively ours), so its work is due again at once. Returns how
/// many claims were released.
#[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
pub(crate) fn fence_previous_epochs(txn: &mut dyn Txn, ctx: &Ctx) -> StoreResult<usize> {
    let mut released = 0;
    loop {
        let ids = txn.index_upto(Index::Claimed, ctx.epoch.saturating_sub(1), 256)?;
        if ids.is_empty() {
            return Ok(released);
        }
        let n = release_dead_claims(txn, ctx, &ids)?;
        if n == 0 {
            return Err(StoreError::corrupt(
                "the claim index names tasks that hold no claim",
            ));
        }
        released += n;
    }
}

/// Releases the claims on `ids`, whose holders are known to be gone (a previous boot of
/// this store, or of this node on a shared store), counting each as a recovery. Returns
/// how many were released.
#[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
pub(crate) fn release_dead_claims(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    ids: &[TaskId],
) -> StoreResult<usize> {
    let mut released = 0;
    for id in ids {
        let Some(rec) = txn.load(id)? else {
            return Err(StoreError::corrupt(format!(
                "the claim index names task {id}, which is not stored"
            )));
        };
        if rec.task.claim.is_none() {
            continue;
        }
        let before = rec.task.clone();
        let mut after = rec;
        if let Some(claim) = after.task.claim.take() {
            after.task.history.push(
                ctx.now,
                HistoryKind::Fenced {
                    generation: claim.generation,
                },
            );
        }
        after.task.recoveries = after.task.recoveries.saturating_add(1);
        txn.save(Some(&before), &after)?;
        released += 1;
    }
    Ok(released)
}
