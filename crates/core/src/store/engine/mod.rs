//! The store's rules, written once over a small key-value transaction interface.
//!
//! An adapter keeps a record table plus three ordered indexes; it implements [`Txn`] over
//! them, and its [`Backend`](super::Backend) runs these functions inside its own atomic
//! write. Every rule of the [`super::Store`] contract lives here, so the adapters differ only
//! in how bytes are kept.
//!
//! Every operation validates and decides before it writes: an operation that returns an
//! error has written nothing, so an adapter may batch several operations in one commit.
//!
//! The parts, one concern each, over the same [`View`] / [`Txn`]:
//!
//! - `txn`: what the adapters implement and every rule shares: the [`Record`], the
//!   indexes, counts and small tables, [`View`] and [`Txn`] with the bookkeeping every
//!   save and removal does (counts, listing entries, index moves), and the caps a
//!   creation is admitted under.
//! - `scratch`: a write that changes one record several times stores it once.
//! - `checks`: what operations check before they act: a live record, an access value, a
//!   lease.
//! - `tasks`: creating, authorizing, reading and moving a task by its events; an
//!   operator's retry-now, delete and inspect; the reaper.
//! - `claims`: claims and leases: claiming one task or the next due, renewing,
//!   releasing, a worker's snapshot, and fencing the claims of a process that is gone.
//! - `components`: stored components and deployments.
//! - `revocations`: revoked keys.
//! - `rows`: rows swapped by revision (schedules, webhook subscriptions), over a
//!   key-value space.
//! - `schedules`: schedules' rows, swapped by revision (a firing's inside its task's
//!   creation).
//! - `outbox`: events written in the commit of the transition they report, and webhook
//!   subscriptions' rows, swapped by revision.
//! - `journal`: a task's outbound journal.
//! - `listing`: operators' pages of tasks and the counts by status and tool.

mod audit;
mod checks;
mod claims;
mod components;
mod journal;
mod listing;
mod outbox;
mod revocations;
mod rows;
mod schedules;
mod scratch;
mod tasks;
mod txn;

#[cfg_attr(not(feature = "postgres"), allow(unused_imports))]
pub(crate) use audit::{
    after as audit_after, check_limit as check_audit_limit, cursor_key as audit_cursor_key,
};
pub(crate) use audit::{append as audit_append, page as audit_page};
#[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(unused_imports))]
pub(crate) use claims::fence_previous_epochs;
#[cfg_attr(not(feature = "postgres"), allow(unused_imports))]
pub(crate) use claims::release_dead_claims;
pub(crate) use claims::{
    check_claim_request, claim, claim_next, create_claimed, release, renew, worker_snapshot,
};
pub(crate) use components::{
    check_component, collect_components, component, components, current_deployment, deploy,
    deployment, deployments, store_component,
};
pub(crate) use journal::{journal, journal_append, journal_of, journal_taken};
pub(crate) use listing::{counts, list};
#[cfg_attr(not(feature = "postgres"), allow(unused_imports))]
pub(crate) use outbox::{decode_event, encode_event};
pub(crate) use outbox::{events_after, last_seq, swap as swap_webhook, sweep_events};
pub(crate) use revocations::revoke;
#[cfg_attr(not(feature = "postgres"), allow(unused_imports))]
pub(crate) use revocations::{REVOKE_SWEEP, check_revoke_key};
pub(crate) use rows::{all as rows, one as row};
#[cfg_attr(not(feature = "postgres"), allow(unused_imports))]
pub(crate) use rows::{check_swap, decode as decode_row, encode as encode_row, too_many};
pub(crate) use schedules::swap as swap_schedule;
#[cfg_attr(not(feature = "postgres"), allow(unused_imports))]
pub(crate) use tasks::delete_tasks;
pub(crate) use tasks::{
    authorize, authorize_read, create, delete_finished, expired, get, inspect, reap, reap_ids,
    retry_now, transition,
};
pub(crate) use txn::{Caps, Count, Head, Index, Kv, Record, Txn, View};

use crate::model::{Scope, TaskId, Timestamp};

/// What every operation is evaluated against: the commit time, the store's boot epoch and
/// the identity of the store instance (for access values).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    pub(crate) now: Timestamp,
    pub(crate) epoch: u64,
    pub(crate) issuer: u64,
}

/// What one operation reaches, told to its backend before the rules run.
///
/// A backend that holds every record within reach (the embedded ones) ignores it. One that
/// fetches rows per operation (PostgreSQL) reads, and for a write locks, exactly these
/// before the rules run, so a rule that reaches for anything else is a bug it reports
/// rather than serves from a stale read. Borrowed from the caller: naming what an
/// operation touches costs no allocation.
// Only the PostgreSQL adapter reads it, and makes the variants only it needs.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum Touches<'a> {
    /// No task. A read: the clock alone. A write: the probe that proves the store can
    /// commit, which commits like any other write though it changes nothing.
    Nothing,
    /// One task by id (absent is an answer too). A write reads the whole record; a read
    /// leaves out the work descriptor.
    Task(TaskId),
    /// One task by id with its work descriptor: a read for a worker or an operator.
    TaskWork(TaskId),
    /// A task being created: nothing to read (a taken id fails the write).
    New(TaskId),
    /// The tasks due longest, up to this many, that are outside these scopes and not past
    /// their TTL (`claim_next`).
    NextDue(&'a [Scope], usize),
    /// Up to this many due tasks past their TTL (cleared when nothing else is due).
    ExpiredDue(usize),
    /// Up to this many tasks past their TTL, the oldest expiry first (`reap`, `expired`).
    Expired(usize),
    /// These tasks, by id (sorted, without repeats; absent is an answer too).
    Ids(&'a [TaskId]),
    /// One task by id and its journal: a read for a worker replaying its attempt, or a
    /// write appending to it.
    Journal(TaskId),
    /// The revocations table alone (nothing of any task).
    Revocations,
    /// The schedules' rows alone (nothing of any task).
    Schedules,
    /// The webhook subscriptions' rows and the outbox's events (nothing of any task).
    Outbox,
    /// The components and deployments tables, and the pin counts (nothing of any task).
    Deployments,
    /// The operators' audit records alone (nothing of any task).
    Audit,
    /// Every task whose claim names this owner (a shared store's node releasing the claims
    /// of its previous life).
    Owner(&'a str),
    /// The listing indexes and the tallies, and the tasks they name (operators' queries).
    Listing,
}
