//! One write as two round trips: read what the rules need, decide, write what they changed.
//!
//! A write on a shared store is one PostgreSQL transaction. Its first round trip sends
//! `BEGIN`, the time and the rows the operation needs (locked `FOR UPDATE`) together,
//! pipelined; the engine's rules then run in memory over those rows ([`Staged`], the
//! engine's `Txn`); the second round trip sends every change they made and `COMMIT`,
//! pipelined again. Nothing waits on a thread, and a task's commit costs the network two
//! round trips whatever the operation.
//!
//! The rows an operation may touch are known before it runs (one task by id, the oldest
//! due task, a batch past their TTL, a node's claims); a rule that reaches for another row
//! is a bug, reported as such rather than served from a stale read.

use std::collections::{BTreeMap, HashMap, HashSet};

use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row as PgRow, Statement};

use crate::model::{Scope, Task, TaskId, Timestamp};
use crate::store::engine::{Caps, Count, Head, Index, Kv, Record, Txn, View};
use crate::store::listing;
use crate::store::sql::{self, ClaimCols};
use crate::store::{StoreError, StoreResult};

use super::pg_error;
use super::write::MAX_GROUP;

/// How many shards each scope's live count is spread over for admission. A creation's +1
/// is written to one of them in the write's first round trip and holds its row lock, so
/// at most this many writes adding to one scope's count are in flight at any moment;
/// admission counts on that bound (see [`Staged::admit`]).
///
/// What a write moves later (in its second round trip: completions, removals, and what is
/// left of its creations' count after refusals, never more than it already added) goes to
/// a second set of as many shards, `LIVE_SHARDS..2 * LIVE_SHARDS`. Every write takes its
/// first-set locks before its second-set ones, each set in scope order, so a group that
/// admits in one scope and finishes tasks of another cannot wait on a group doing the
/// opposite. A scope's count is the sum of all its rows.
pub(super) const LIVE_SHARDS: i16 = 16;

/// The most bytes one creation may add to its scope and still be admitted on the fast
/// path: each of the other uncommitted writes holding an admission shard of the scope
/// adds at most [`MAX_GROUP`] of them, which bounds what a fast admission's sum may miss
/// (see [`Staged::admit`]). A larger creation is counted exactly.
pub(super) const FAST_ADMIT_BYTES: u64 = 64 << 10;

/// The database's time at the start of the transaction, in store milliseconds: one value
/// for every statement of a write, so the rows a write selects as due and the rules that
/// judge them agree.
pub(super) const TXN_NOW: &str =
    "floor(extract(epoch from transaction_timestamp()) * 1000)::bigint";

/// The columns [`record_of`] reads, in order.
pub(super) const RECORD_COLS: &str = "id, body, work, claim_generation, claim_token, \
     claim_epoch, claim_expires_at, claim_owner";

pub(super) fn claim_cols(r: &PgRow, at: usize) -> Option<ClaimCols> {
    let generation: Option<i64> = r.get(at);
    generation.map(|generation| ClaimCols {
        generation,
        token: r.get(at + 1),
        epoch: r.get(at + 2),
        expires_at: r.get(at + 3),
        owner: r.get(at + 4),
    })
}

/// A task's id and record from a row selected with [`RECORD_COLS`] starting at `at`.
pub(super) fn record_of(r: &PgRow, at: usize) -> StoreResult<(TaskId, Record)> {
    let id = sql::id_of(r.get(at))?;
    let rec = sql::decode_record(r.get(at + 1), r.get(at + 2), claim_cols(r, at + 3))?;
    Ok((id, rec))
}

/// How far a write moves one scope's counts: live, stored, bytes.
pub(super) type Moved = (i64, i64, i64);
/// A scope's sums as a fast admission reads them: live, stored, bytes.
pub(super) type Sums = (i64, i64, i64);
/// A scope's exact counts: live, stored, bytes.
pub(super) type Counted = (u64, u64, u64);

/// The engine's `Txn` over the rows a write fetched.
pub(super) struct Staged {
    /// Rows as fetched (`None`: known absent), then as the rules changed them.
    rows: HashMap<TaskId, Option<Record>>,
    /// Ids the fetch found, in the order an index scan would give them.
    index: Vec<TaskId>,
    /// Which ids the rules changed, in first-change order.
    dirty: Vec<TaskId>,
    existed: HashSet<TaskId>,
    /// Per scope: how far this write moves its live and stored counts and stored bytes.
    count_delta: BTreeMap<String, Moved>,
    /// Per component digest: how far this write moves its pin count.
    pinned_delta: BTreeMap<String, i64>,
    /// Per tally key (tenant, tool, status): how far this write moves it.
    tally_delta: BTreeMap<String, i64>,
    /// Per capped scope: the +1s a fast admission already wrote to this write's shard (to
    /// both counts), one per capped creation the write holds.
    prebumped: BTreeMap<String, i64>,
    /// Per capped scope: the live and stored sums and the stored bytes a fast admission
    /// read after its +1s.
    sums: HashMap<String, Sums>,
    /// Exact mode: the scope and its exact live and stored counts and stored bytes (every
    /// shard locked).
    counted: Option<(String, Counted)>,
    /// Set by a fast admission that cannot decide: the creation must be counted exactly.
    pub(super) needs_exact: bool,
    /// Journal entries to insert: (task, position, entry).
    journal: Vec<(TaskId, u32, Vec<u8>)>,
    /// A schedule's row to swap (a firing's), checked by `swap_schedule` as it commits.
    schedule: Option<ScheduleSwap>,
    /// Outbox events to append, in the order the rules wrote them.
    events: Vec<crate::model::OutboxEvent>,
}

/// A schedule's row swapped by a write: `swap_schedule`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScheduleSwap {
    name: String,
    expected: Option<i64>,
    body: Option<Vec<u8>>,
    revision: Option<i64>,
}

impl ScheduleSwap {
    pub(super) fn new(
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Schedule>,
    ) -> StoreResult<Self> {
        Ok(Self {
            name: name.to_owned(),
            expected: expected.map(|r| r as i64),
            body: after.map(crate::store::engine::encode_row).transpose()?,
            revision: after.map(|s| s.revision as i64),
        })
    }

    /// Runs `swap_schedule` (prepared as `st`) on `client`.
    pub(super) async fn run(&self, client: &Object, st: &Statement) -> StoreResult<()> {
        let max = crate::model::MAX_SCHEDULES as i64;
        client
            .execute(
                st,
                &[&self.name, &self.expected, &self.body, &self.revision, &max],
            )
            .await
            .map_err(|e| schedule_error(&self.name, e))?;
        Ok(())
    }
}

/// `swap_webhook`, as a statement.
pub(super) const SWAP_WEBHOOK: &str = "SELECT swap_webhook($1, $2, $3, $4, $5)";

/// A driver error of `swap_webhook` in the contract's terms.
pub(super) fn webhook_error(name: &str, e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error().map(|d| (d.code().code(), d.message())) {
        Some(("SN409", current)) => StoreError::WebhookConflict {
            name: name.to_owned(),
            current: current.parse().ok(),
        },
        Some(("SN413", _)) => crate::store::engine::too_many::<crate::model::Webhook>(),
        _ => pg_error(e),
    }
}

/// `swap_schedule`, as a statement.
pub(super) const SWAP_SCHEDULE: &str = "SELECT swap_schedule($1, $2, $3, $4, $5)";

/// A driver error of `swap_schedule` in the contract's terms.
pub(super) fn schedule_error(name: &str, e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error().map(|d| (d.code().code(), d.message())) {
        Some(("SN409", current)) => StoreError::ScheduleConflict {
            name: name.to_owned(),
            current: current.parse().ok(),
        },
        Some(("SN413", _)) => crate::store::engine::too_many::<crate::model::Schedule>(),
        _ => pg_error(e),
    }
}

impl Staged {
    /// The rules' view of the rows `fetched`; the `named` ids it did not find are known
    /// absent. `prebumped`, `sums` and `counted` are what the first round trip admitted.
    pub(super) fn new(
        fetched: Vec<(TaskId, Record)>,
        named: &[TaskId],
        prebumped: BTreeMap<String, i64>,
        sums: HashMap<String, Sums>,
        counted: Option<(String, Counted)>,
    ) -> Self {
        let mut s = Self {
            rows: HashMap::new(),
            index: Vec::new(),
            dirty: Vec::new(),
            existed: HashSet::new(),
            count_delta: BTreeMap::new(),
            pinned_delta: BTreeMap::new(),
            tally_delta: BTreeMap::new(),
            prebumped,
            sums,
            counted,
            needs_exact: false,
            journal: Vec::new(),
            schedule: None,
            events: Vec::new(),
        };
        for (id, rec) in fetched {
            s.index.push(id);
            s.existed.insert(id);
            s.rows.insert(id, Some(rec));
        }
        for id in named {
            s.rows.entry(*id).or_insert(None);
        }
        s
    }

    fn touch(&mut self, id: TaskId) {
        if !self.dirty.contains(&id) {
            self.dirty.push(id);
        }
    }

    /// The statements that write what the rules changed, with their parameters.
    pub(super) fn changes(&self, shard: i16) -> StoreResult<Vec<Change>> {
        let mut out = Vec::new();
        // First: its row's lock comes before the task's insert (schema_7.sql).
        if let Some(swap) = &self.schedule {
            out.push(Change::Schedule(swap.clone()));
        }
        let (mut inserts, mut updates, mut deletes) =
            (TaskRows::default(), TaskRows::default(), Vec::new());
        for id in &self.dirty {
            match (
                self.rows.get(id).and_then(Option::as_ref),
                self.existed.contains(id),
            ) {
                (Some(rec), true) => updates.push(sql::row_of(&rec.task)?, None),
                (Some(rec), false) => inserts.push(
                    sql::row_of(&rec.task)?,
                    Some(Created {
                        work: sql::encode_work(&rec.work)?,
                        tenant: rec.task.scope.tenant().to_owned(),
                        tool: listing::cut(listing::tool_of(&rec.work)).to_owned(),
                    }),
                ),
                (None, true) => deletes.push(id.as_bytes().to_vec()),
                (None, false) => {}
            }
        }
        // Each kind of row change in one statement, whatever the number of rows.
        if !inserts.ids.is_empty() {
            out.push(Change::Insert(inserts));
        }
        if !updates.ids.is_empty() {
            out.push(Change::Update(updates));
        }
        if !deletes.is_empty() {
            out.push(Change::Delete(deletes));
        }
        // After the task's row: a journal row references it.
        for (id, seq, entry) in &self.journal {
            out.push(Change::Journal {
                id: *id,
                seq: *seq,
                entry: entry.clone(),
            });
        }
        // Row locks are taken in one order by every write: the live counts (a creation's
        // admission already holds its shard from the first round trip), then the pinned
        // counts, then the tallies. A creation and a completion on the same shard that
        // took them in opposite orders would deadlock, and PostgreSQL would fail one.
        // The fast admission's +1s are written already: what is left to write is what the
        // rules moved, less them (refused creations moved nothing).
        let mut counts = self.count_delta.clone();
        for (scope, &n) in &self.prebumped {
            let delta = counts.entry(scope.clone()).or_default();
            delta.0 -= n;
            delta.1 -= n;
        }
        for (scope, &(live, stored, bytes)) in &counts {
            if (live, stored, bytes) != (0, 0, 0) {
                out.push(Change::Counts(CountMove {
                    scope: scope.clone(),
                    shard: LIVE_SHARDS + shard,
                    live,
                    stored,
                    bytes,
                }));
            }
        }
        for (digest, &delta) in &self.pinned_delta {
            if delta != 0 {
                out.push(Change::Pinned {
                    digest: digest.clone(),
                    shard,
                    delta,
                });
            }
        }
        // Last, in key order: every write that moves tallies locks its shard's rows in
        // the same order, so two cannot wait on each other.
        let mut tally = Tally::default();
        for (key, &delta) in &self.tally_delta {
            if delta == 0 {
                continue;
            }
            let mut parts = key.splitn(3, '\u{1f}');
            let (Some(tenant), Some(tool), Some(status)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(StoreError::corrupt(format!(
                    "a malformed tally key {key:?}"
                )));
            };
            tally.tenants.push(tenant.to_owned());
            tally.tools.push(tool.to_owned());
            tally.statuses.push(status.to_owned());
            tally.deltas.push(delta);
        }
        if !tally.deltas.is_empty() {
            tally.shard = shard;
            out.push(Change::Tally(tally));
        }
        // Very last: the outbox counter's lock is held from here to the commit, which
        // serializes only the writes that report a transition, and only for that long.
        out.extend(self.events_change()?);
        Ok(out)
    }

    /// The outbox events this write appends, as one change (none without events).
    fn events_change(&self) -> StoreResult<Option<Change>> {
        if self.events.is_empty() {
            return Ok(None);
        }
        let mut append = Events::default();
        for e in &self.events {
            append.bodies.push(crate::store::engine::encode_event(e)?);
            append.ats.push(e.at.as_millis() as i64);
        }
        Ok(Some(Change::Events(append)))
    }
}

fn listing_statements() -> StoreError {
    StoreError::invalid("the shared store lists and counts tasks in statements of their own")
}

fn own_statements() -> StoreError {
    StoreError::invalid("the shared store keeps components and deployments in tables of their own")
}

/// What a task's first write adds to its row: the columns fixed at creation.
pub(super) struct Created {
    work: Vec<u8>,
    tenant: String,
    tool: String,
}

/// Task rows as the parallel arrays one statement unnests: the columns every write sets,
/// then (for inserts) the ones fixed at creation.
#[derive(Default)]
pub(super) struct TaskRows {
    ids: Vec<Vec<u8>>,
    scopes: Vec<String>,
    statuses: Vec<&'static str>,
    lives: Vec<bool>,
    due: Vec<Option<i64>>,
    expires: Vec<Option<i64>>,
    generations: Vec<Option<i64>>,
    tokens: Vec<Option<i64>>,
    epochs: Vec<Option<i64>>,
    claim_expires: Vec<Option<i64>>,
    owners: Vec<Option<String>>,
    bodies: Vec<Vec<u8>>,
    updated: Vec<i64>,
    works: Vec<Vec<u8>>,
    tenants: Vec<String>,
    tools: Vec<String>,
    created: Vec<i64>,
}

impl TaskRows {
    fn push(&mut self, row: sql::Row, created: Option<Created>) {
        let claim = row.claim;
        self.ids.push(row.id.to_vec());
        self.scopes.push(row.scope);
        self.statuses.push(row.status);
        self.lives.push(row.live);
        self.due.push(row.due_at);
        self.expires.push(row.expires_at);
        self.generations.push(claim.as_ref().map(|c| c.generation));
        self.tokens.push(claim.as_ref().map(|c| c.token));
        self.epochs.push(claim.as_ref().map(|c| c.epoch));
        self.claim_expires
            .push(claim.as_ref().map(|c| c.expires_at));
        self.owners.push(claim.map(|c| c.owner));
        self.bodies.push(row.body);
        self.updated.push(row.updated_at);
        if let Some(c) = created {
            self.works.push(c.work);
            self.tenants.push(c.tenant);
            self.tools.push(c.tool);
            self.created.push(row.created_at);
        }
    }

    /// The columns every write sets, in the order the statements bind them.
    fn columns(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.ids,
            &self.scopes,
            &self.statuses,
            &self.lives,
            &self.due,
            &self.expires,
            &self.generations,
            &self.tokens,
            &self.epochs,
            &self.claim_expires,
            &self.owners,
            &self.bodies,
            &self.updated,
        ]
    }
}

/// Tally moves, as the parallel arrays one statement unnests.
#[derive(Default)]
pub(super) struct Tally {
    shard: i16,
    tenants: Vec<String>,
    tools: Vec<String>,
    statuses: Vec<String>,
    deltas: Vec<i64>,
}

/// One write statement.
pub(super) enum Change {
    /// Insert tasks' rows, with what is fixed at creation.
    Insert(TaskRows),
    /// Update tasks' rows (each locked by the write's fetch).
    Update(TaskRows),
    /// Move tallies of one shard.
    Tally(Tally),
    /// Remove tasks, by id.
    Delete(Vec<Vec<u8>>),
    /// Move a scope's live and stored counts and its stored bytes.
    Counts(CountMove),
    /// Move a component's pin count.
    Pinned {
        digest: String,
        shard: i16,
        delta: i64,
    },
    /// Swap a schedule's row (a row not where the write expected it fails the write).
    Schedule(ScheduleSwap),
    /// Append events to the outbox, numbered in commit order (`outbox_append`).
    Events(Events),
    /// Record a journal entry (an entry already at the position fails the write).
    Journal {
        id: TaskId,
        seq: u32,
        entry: Vec<u8>,
    },
}

/// Outbox events to append: their bodies and commit times, in [`APPEND_EVENTS`]'s order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Events {
    bodies: Vec<Vec<u8>>,
    ats: Vec<i64>,
}

/// `outbox_append`, as a statement.
const APPEND_EVENTS: &str = "SELECT outbox_append($1::bytea[], $2::bigint[])";

/// A move of one scope's live and stored counts and its stored bytes on one shard, in
/// [`BUMP_COUNTS`]'s parameter order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CountMove {
    scope: String,
    shard: i16,
    live: i64,
    stored: i64,
    bytes: i64,
}

/// The columns every row write sets, as `unnest` takes them.
const ROW_ARRAYS: &str = "$1::bytea[], $2::text[], $3::text[], $4::boolean[], \
     $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], \
     $11::text[], $12::bytea[], $13::bigint[]";
pub(super) const DELETE_TASKS: &str = "DELETE FROM tasks WHERE id = ANY($1)";
pub(super) const BUMP_TALLY: &str = "INSERT INTO tally (tenant, tool, status, shard, n) \
     SELECT t, o, s, $1, d FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) \
     AS m(t, o, s, d) \
     ON CONFLICT (tenant, tool, status, shard) DO UPDATE SET n = tally.n + EXCLUDED.n";
pub(super) const INSERT_JOURNAL: &str = "INSERT INTO journal (task_id, seq, entry) \
     VALUES ($1, $2, $3)";
pub(super) const BUMP_PINNED: &str = "INSERT INTO pinned (digest, shard, n) \
     VALUES ($1, $2, $3) ON CONFLICT (digest, shard) DO UPDATE SET n = pinned.n + EXCLUDED.n";
pub(super) const BUMP_COUNTS: &str = "INSERT INTO live (scope, shard, n, stored, bytes) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, shard) \
     DO UPDATE SET n = live.n + EXCLUDED.n, stored = live.stored + EXCLUDED.stored, \
     bytes = live.bytes + EXCLUDED.bytes";

/// The write statements, prepared before a write's changes are sent: a change must go out
/// the moment it is first polled, so the changes and the `COMMIT` after them reach the
/// server in order.
pub(super) struct Writes {
    insert: Statement,
    update: Statement,
    delete: Statement,
    bump: Statement,
    pin: Statement,
    journal: Statement,
    tally: Statement,
    schedule: Statement,
    events: Statement,
}

impl Writes {
    pub(super) async fn prepare(client: &Object) -> StoreResult<Self> {
        Ok(Self {
            insert: prepared(
                client,
                &format!(
                    "INSERT INTO tasks (id, scope, status, live, due_at, expires_at, \
                     claim_generation, claim_token, claim_epoch, claim_expires_at, claim_owner, \
                     body, updated_at, work, tenant, tool, created_at) \
                     SELECT * FROM unnest({ROW_ARRAYS}, $14::bytea[], $15::text[], \
                     $16::text[], $17::bigint[])"
                ),
            )
            .await?,
            update: prepared(
                client,
                &format!(
                    "UPDATE tasks AS t SET scope = u.scope, status = u.status, live = u.live, \
                     due_at = u.due_at, expires_at = u.expires_at, \
                     claim_generation = u.generation, claim_token = u.token, \
                     claim_epoch = u.epoch, claim_expires_at = u.claim_expires_at, \
                     claim_owner = u.owner, body = u.body, updated_at = u.updated_at \
                     FROM unnest({ROW_ARRAYS}) AS u(id, scope, status, live, due_at, \
                     expires_at, generation, token, epoch, claim_expires_at, owner, body, \
                     updated_at) WHERE t.id = ANY($1) AND t.id = u.id"
                ),
            )
            .await?,
            delete: prepared(client, DELETE_TASKS).await?,
            bump: prepared(client, BUMP_COUNTS).await?,
            pin: prepared(client, BUMP_PINNED).await?,
            journal: prepared(client, INSERT_JOURNAL).await?,
            tally: prepared(client, BUMP_TALLY).await?,
            schedule: prepared(client, SWAP_SCHEDULE).await?,
            events: prepared(client, APPEND_EVENTS).await?,
        })
    }
}

impl Change {
    /// Sends this change on `client` (pipelined with whatever else is in flight) and
    /// checks that it did what it must.
    pub(super) async fn apply(&self, client: &Object, st: &Writes) -> StoreResult<()> {
        match self {
            Change::Insert(rows) => {
                let mut params = rows.columns();
                params.extend_from_slice(&[
                    &rows.works as &(dyn ToSql + Sync),
                    &rows.tenants,
                    &rows.tools,
                    &rows.created,
                ]);
                client.execute(&st.insert, &params).await.map_err(|e| {
                    if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
                        StoreError::AlreadyExists
                    } else {
                        pg_error(e)
                    }
                })?;
            }
            Change::Update(rows) => {
                let n = client
                    .execute(&st.update, &rows.columns())
                    .await
                    .map_err(pg_error)?;
                if n != rows.ids.len() as u64 {
                    return Err(StoreError::corrupt(
                        "a locked task row vanished before its update",
                    ));
                }
            }
            Change::Journal { id, seq, entry } => {
                client
                    .execute(
                        &st.journal,
                        &[&id.as_bytes().as_slice(), &(*seq as i32), entry],
                    )
                    .await
                    .map_err(|e| {
                        // The failed insert aborts the transaction: nothing of it commits.
                        if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
                            super::super::engine::journal_taken(*seq)
                        } else {
                            pg_error(e)
                        }
                    })?;
            }
            Change::Delete(ids) => {
                client.execute(&st.delete, &[ids]).await.map_err(pg_error)?;
            }
            Change::Schedule(swap) => swap.run(client, &st.schedule).await?,
            Change::Events(e) => {
                client
                    .execute(&st.events, &[&e.bodies, &e.ats])
                    .await
                    .map_err(pg_error)?;
            }
            Change::Pinned {
                digest,
                shard,
                delta,
            } => {
                client
                    .execute(&st.pin, &[digest, shard, delta])
                    .await
                    .map_err(pg_error)?;
            }
            Change::Counts(c) => {
                client
                    .execute(
                        &st.bump,
                        &[&c.scope, &c.shard, &c.live, &c.stored, &c.bytes],
                    )
                    .await
                    .map_err(pg_error)?;
            }
            Change::Tally(t) => {
                client
                    .execute(
                        &st.tally,
                        &[&t.shard, &t.tenants, &t.tools, &t.statuses, &t.deltas],
                    )
                    .await
                    .map_err(pg_error)?;
            }
        }
        Ok(())
    }
}

/// A cached prepared statement (one round trip the first time on a connection).
pub(super) async fn prepared(client: &Object, sql: &str) -> StoreResult<Statement> {
    client.prepare_cached(sql).await.map_err(pg_error)
}

impl View for Staged {
    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        match self.rows.get(id) {
            Some(r) => Ok(r.clone()),
            None => Err(StoreError::invalid(format!(
                "task {id} was not read by this write"
            ))),
        }
    }

    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        Ok(self.load(id)?.map(|r| Head::of(&r.task)))
    }

    fn index_upto(&self, _: Index, _: u64, limit: usize) -> StoreResult<Vec<TaskId>> {
        // The fetch selected exactly the rows the operation's scan would reach.
        Ok(self.index.iter().take(limit).copied().collect())
    }

    fn count(&self, _: Count, _: &str) -> StoreResult<u64> {
        Err(StoreError::invalid(
            "counts are admitted before a shared-store write runs",
        ))
    }

    fn revoked(&self, _: &str) -> StoreResult<bool> {
        Err(StoreError::invalid(
            "the shared store reads revocations in a statement of their own",
        ))
    }

    fn kv_get(&self, _: Kv, _: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        Err(own_statements())
    }

    fn pinned_tasks(&self, _: &str, _: usize) -> StoreResult<Vec<TaskId>> {
        Err(own_statements())
    }

    fn kv_scan(&self, _: Kv, _: usize, _: bool) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Err(own_statements())
    }

    fn kv_range(&self, _: Kv, _: &[u8], _: usize) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Err(own_statements())
    }

    fn listing(&self, _: &[u8], _: &[u8], _: usize) -> StoreResult<Vec<(Vec<u8>, String)>> {
        Err(listing_statements())
    }

    fn tallies(&self, _: &str) -> StoreResult<Vec<(String, u64)>> {
        Err(listing_statements())
    }

    fn journal(&self, _: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>> {
        Err(StoreError::invalid(
            "a shared-store write does not read the journal",
        ))
    }
}

impl Txn for Staged {
    fn put(&mut self, record: &Record) -> StoreResult<()> {
        let id = record.task.id;
        self.rows.insert(id, Some(record.clone()));
        self.touch(id);
        Ok(())
    }

    /// The task's journal rows go with it (`ON DELETE CASCADE`).
    fn remove(&mut self, id: &TaskId) -> StoreResult<()> {
        self.rows.insert(*id, None);
        self.touch(*id);
        Ok(())
    }

    fn journal_put(&mut self, id: &TaskId, seq: u32, entry: &[u8]) -> StoreResult<()> {
        self.journal.push((*id, seq, entry.to_vec()));
        Ok(())
    }

    // The indexes are SQL indexes over the columns a row's write sets from the task.
    fn index_put(&mut self, _: Index, _: u64, _: &TaskId) -> StoreResult<()> {
        Ok(())
    }

    fn index_del(&mut self, _: Index, _: u64, _: &TaskId) -> StoreResult<()> {
        Ok(())
    }

    fn set_count(&mut self, _: Count, _: &str, _: u64) -> StoreResult<()> {
        Err(StoreError::invalid(
            "the PostgreSQL store moves counts by deltas",
        ))
    }

    fn revoke_put(&mut self, _: &str, _: Timestamp) -> StoreResult<()> {
        Err(StoreError::invalid(
            "the shared store writes revocations in a statement of their own",
        ))
    }

    fn revoke_sweep(&mut self, _: Timestamp, _: usize) -> StoreResult<()> {
        Err(StoreError::invalid(
            "the shared store sweeps revocations in a statement of their own",
        ))
    }

    fn kv_put(&mut self, _: Kv, _: &[u8], _: &[u8]) -> StoreResult<()> {
        Err(own_statements())
    }

    /// Checked as the write commits: `swap_schedule` refuses a row not at `expected`, and
    /// the transaction with it.
    fn schedule_swap(
        &mut self,
        name: &str,
        expected: Option<u64>,
        after: Option<&crate::model::Schedule>,
    ) -> StoreResult<()> {
        if self.schedule.is_some() {
            return Err(StoreError::invalid(
                "a shared-store write swaps at most one schedule",
            ));
        }
        self.schedule = Some(ScheduleSwap::new(name, expected, after)?);
        Ok(())
    }

    // The listing indexes are SQL indexes over the columns a row's write sets.
    fn listing_put(&mut self, _: &[u8], _: &str) -> StoreResult<()> {
        Ok(())
    }

    fn listing_del(&mut self, _: &[u8]) -> StoreResult<()> {
        Ok(())
    }

    fn kv_del(&mut self, _: Kv, _: &[u8]) -> StoreResult<()> {
        Err(own_statements())
    }

    /// Appended as the write commits (`outbox_append`), which numbers it.
    fn event_put(&mut self, event: &crate::model::OutboxEvent) -> StoreResult<()> {
        self.events.push(event.clone());
        Ok(())
    }

    fn webhook_swap(
        &mut self,
        _: &str,
        _: Option<u64>,
        _: Option<&crate::model::Webhook>,
    ) -> StoreResult<()> {
        Err(own_statements())
    }

    fn created(&mut self, _: &Task) -> StoreResult<()> {
        Ok(())
    }

    fn add_count(&mut self, kind: Count, key: &str, up: bool) -> StoreResult<()> {
        let step = if up { 1 } else { -1 };
        match kind {
            Count::Live => self.count_delta.entry(key.to_owned()).or_default().0 += step,
            Count::Stored => self.count_delta.entry(key.to_owned()).or_default().1 += step,
            Count::Pinned => *self.pinned_delta.entry(key.to_owned()).or_default() += step,
            Count::Tally => *self.tally_delta.entry(key.to_owned()).or_default() += step,
            Count::StoredBytes => return self.add_bytes(key, step),
        }
        Ok(())
    }

    fn add_bytes(&mut self, scope: &str, delta: i64) -> StoreResult<()> {
        self.count_delta.entry(scope.to_owned()).or_default().2 += delta;
        Ok(())
    }

    /// Exact under concurrency without a per-tenant lock on the common path.
    ///
    /// Fast path (decided from the first round trip): the transaction first takes its
    /// shard's row lock by writing the +1s of the creations it holds (to both counts), then
    /// reads the sums (which include its own). Every other uncommitted write holds a
    /// different shard's lock and at most [`MAX_GROUP`] creations in the scope, so at most
    /// `(LIVE_SHARDS - 1) * MAX_GROUP` are missing from a sum; admitting only when each sum
    /// plus that many fits under its cap keeps the true counts under the caps whatever
    /// commits next.
    ///
    /// Stored bytes are not bumped ahead (a creation's size is known only to its rules):
    /// the sum read misses what this write moved so far (added here) and what the other
    /// uncommitted admitting writes add, at most [`MAX_GROUP`] creations of at most
    /// [`FAST_ADMIT_BYTES`] each per shard. Whatever else adds bytes either is never
    /// refused (a transition: as if it committed after this admission) or counts exactly,
    /// holding every shard of the scope until it commits (a capped journal append).
    ///
    /// Near the cap the fast path cannot decide; the creation re-runs alone in exact mode,
    /// which locks all of the scope's shards in shard order (waiting for the changes in
    /// flight) and counts exactly. Fast transactions hold one shard per scope, taken in
    /// scope order, and wait for nothing after them but later counts; exact ones lock in
    /// one order, so no lock cycle can form.
    fn admit(&mut self, scope: &Scope, caps: Caps, bytes: u64) -> StoreResult<()> {
        let own_bytes = self.count_delta.get(scope.as_str()).map_or(0, |m| m.2);
        if let Some((counted_scope, (live, stored, stored_bytes))) = &self.counted
            && counted_scope == scope.as_str()
        {
            let stored_bytes = stored_bytes.saturating_add_signed(own_bytes);
            return caps
                .refusal(*live, *stored, stored_bytes, bytes)
                .map_or(Ok(()), Err);
        }
        if let Some(&(live, stored, stored_bytes)) = self.sums.get(scope.as_str()) {
            let margin = i64::from(LIVE_SHARDS - 1) * MAX_GROUP as i64;
            let fits = |sum: i64, margin: i64, cap: Option<u64>| {
                cap.is_none_or(|max| sum.saturating_add(margin) <= max.min(i64::MAX as u64) as i64)
            };
            let bytes_margin = margin * FAST_ADMIT_BYTES as i64;
            let adding = stored_bytes
                .saturating_add(own_bytes)
                .saturating_add(bytes.min(i64::MAX as u64) as i64);
            let bytes_fit = caps.stored_bytes.is_none()
                || (bytes <= FAST_ADMIT_BYTES && fits(adding, bytes_margin, caps.stored_bytes));
            if fits(live, margin, caps.live) && fits(stored, margin, caps.stored) && bytes_fit {
                return Ok(());
            }
            self.needs_exact = true;
            return Err(StoreError::invalid("the admission needs an exact count"));
        }
        Err(StoreError::invalid(
            "a capped creation reached the rules without an admission",
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::{Change, CountMove, LIVE_SHARDS, Staged};
    use crate::model::Scope;
    use crate::store::engine::{Caps, Count, Txn};

    /// A group admits in one scope and finishes a task of another: its later count moves
    /// (the second round trip's) go to the second set of shards, never to a row of the
    /// first set, which another group may hold while it waits for this group's later rows.
    #[test]
    fn later_count_moves_go_to_the_second_set_of_shards() {
        let acme = Scope::new("acme");
        let beta = Scope::new("beta");
        let mut staged = Staged::new(
            Vec::new(),
            &[],
            BTreeMap::from([(acme.as_str().to_owned(), 2)]),
            HashMap::from([(acme.as_str().to_owned(), (2, 2, 0))]),
            None,
        );
        let caps = Caps {
            live: Some(10_000),
            ..Caps::default()
        };
        // Two capped creations admitted, one of them refused later by the rules (it moved
        // nothing), and a task of the other scope finished.
        staged.admit(&acme, caps, 100).expect("admitted");
        staged.admit(&acme, caps, 100).expect("admitted");
        staged
            .add_count(Count::Live, acme.as_str(), true)
            .expect("count");
        staged
            .add_count(Count::Stored, acme.as_str(), true)
            .expect("count");
        staged
            .add_count(Count::Live, beta.as_str(), false)
            .expect("count");
        let counts: Vec<CountMove> = staged
            .changes(3)
            .expect("changes")
            .into_iter()
            .filter_map(|c| match c {
                Change::Counts(c) => Some(c),
                _ => None,
            })
            .collect();
        let moved = |scope: &Scope, live, stored| CountMove {
            scope: scope.as_str().to_owned(),
            shard: LIVE_SHARDS + 3,
            live,
            stored,
            bytes: 0,
        };
        // Two +1s were written at admission; one creation was made.
        assert_eq!(counts, vec![moved(&acme, -1, -1), moved(&beta, -1, 0)]);
        // Near the cap the fast admission cannot decide.
        let tight = Caps {
            live: Some(100),
            ..Caps::default()
        };
        assert!(staged.admit(&acme, tight, 100).is_err());
        assert!(staged.needs_exact);
        // So can it for stored bytes: near their cap, or for a creation too large for the
        // margin the other shards are allowed.
        for (cap, bytes) in [(1 << 20, 100), (u64::MAX, super::FAST_ADMIT_BYTES + 1)] {
            staged.needs_exact = false;
            let bytes_capped = Caps {
                stored_bytes: Some(cap),
                ..Caps::default()
            };
            assert!(staged.admit(&acme, bytes_capped, bytes).is_err());
            assert!(staged.needs_exact);
        }
        let roomy = Caps {
            stored_bytes: Some(1 << 30),
            ..Caps::default()
        };
        staged
            .admit(&acme, roomy, 100)
            .expect("far from the bytes cap");
    }
}
