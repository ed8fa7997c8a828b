//! The engine's transaction interface over one PostgreSQL transaction.
//!
//! The engine is synchronous; a [`PgTxn`] lives on a blocking thread and drives the async
//! driver one statement at a time with the runtime's handle. Every row the engine loads in
//! a write is locked (`FOR UPDATE`), so concurrent writers on other nodes serialize per
//! task exactly as the embedded stores' single writer does, and nodes never block on tasks
//! they do not touch.

use std::collections::{BTreeMap, HashSet};

use deadpool_postgres::Transaction;
use tokio::runtime::Handle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row as PgRow, Statement};

use crate::model::{Scope, Task, TaskId};
use crate::store::engine::{Head, Index, Record, Txn, View};
use crate::store::sql::{self, ClaimCols};
use crate::store::{StoreError, StoreResult};

use super::pg_error;

/// How many shards each scope's live count is spread over. An uncommitted change holds
/// its shard's row lock, so at most this many changes to one scope's count are in flight
/// at any moment; the admission check counts on that bound (see [`PgTxn::admit_live`]).
pub(super) const LIVE_SHARDS: i16 = 16;

pub(super) struct PgTxn<'a> {
    pub(super) tx: &'a Transaction<'a>,
    pub(super) rt: &'a Handle,
    /// Tasks created in this transaction: `put` inserts them (with their work).
    inserted: HashSet<TaskId>,
    /// Live-count changes not yet written, by scope (written in scope order at the end, so
    /// two transactions never take shard locks in opposite orders).
    live_delta: BTreeMap<String, i64>,
    /// The one shard this transaction writes its count changes to.
    shard: i16,
    /// Admission in exact mode: lock every shard of the scope first.
    pub(super) exact: bool,
    /// Set when a fast admission could not decide: the caller re-runs in exact mode.
    pub(super) needs_exact: bool,
}

impl<'a> PgTxn<'a> {
    pub(super) fn new(tx: &'a Transaction<'a>, rt: &'a Handle, exact: bool) -> Self {
        Self {
            tx,
            rt,
            inserted: HashSet::new(),
            live_delta: BTreeMap::new(),
            shard: (crate::store::engine::random_u64() % LIVE_SHARDS as u64) as i16,
            exact,
            needs_exact: false,
        }
    }

    fn prepare(&self, sql: &str) -> StoreResult<Statement> {
        self.rt
            .block_on(self.tx.prepare_cached(sql))
            .map_err(pg_error)
    }

    pub(super) fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Vec<PgRow>> {
        let st = self.prepare(sql)?;
        self.rt
            .block_on(self.tx.query(&st, params))
            .map_err(pg_error)
    }

    pub(super) fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<u64> {
        let st = self.prepare(sql)?;
        self.rt
            .block_on(self.tx.execute(&st, params))
            .map_err(pg_error)
    }

    /// The due task that has waited longest, locked, skipping rows other nodes hold and
    /// tasks past their TTL (the reaper removes those).
    pub(super) fn next_due(&self, now: i64, skip: &[Scope]) -> StoreResult<Option<TaskId>> {
        let skip: Vec<&str> = skip.iter().map(Scope::as_str).collect();
        let rows = self.query(
            "SELECT id FROM tasks
             WHERE due_at <= $1 AND (expires_at IS NULL OR expires_at > $1)
               AND scope <> ALL($2)
             ORDER BY due_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
            &[&now, &skip],
        )?;
        rows.first().map(|r| sql::id_of(r.get(0))).transpose()
    }

    /// Up to `limit` due tasks past their TTL, locked (rows others hold are skipped).
    pub(super) fn expired_due(&self, now: i64, limit: i64) -> StoreResult<Vec<TaskId>> {
        let rows = self.query(
            "SELECT id FROM tasks WHERE due_at <= $1 AND expires_at <= $1
             ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&now, &limit],
        )?;
        rows.iter().map(|r| sql::id_of(r.get(0))).collect()
    }

    /// Writes the count changes this transaction made.
    pub(super) fn flush(&mut self) -> StoreResult<()> {
        for (scope, delta) in std::mem::take(&mut self.live_delta) {
            if delta != 0 {
                self.bump(&scope, delta)?;
            }
        }
        Ok(())
    }

    fn bump(&self, scope: &str, delta: i64) -> StoreResult<()> {
        self.execute(
            "INSERT INTO live (scope, shard, n) VALUES ($1, $2, $3)
             ON CONFLICT (scope, shard) DO UPDATE SET n = live.n + EXCLUDED.n",
            &[&scope, &self.shard, &delta],
        )?;
        Ok(())
    }

    fn scope_sum(&self, scope: &str) -> StoreResult<i64> {
        let rows = self.query(
            "SELECT coalesce(sum(n), 0)::bigint FROM live WHERE scope = $1",
            &[&scope],
        )?;
        Ok(rows.first().map_or(0, |r| r.get(0)))
    }
}

fn claim_cols(r: &PgRow, at: usize) -> Option<ClaimCols> {
    let generation: Option<i64> = r.get(at);
    generation.map(|generation| ClaimCols {
        generation,
        token: r.get(at + 1),
        epoch: r.get(at + 2),
        expires_at: r.get(at + 3),
        owner: r.get(at + 4),
    })
}

/// The columns [`record_of`] reads, in order.
pub(super) const RECORD_COLS: &str = "body, work, claim_generation, claim_token, claim_epoch, \
     claim_expires_at, claim_owner";

/// A record from a row selected with [`RECORD_COLS`] starting at column `at`.
pub(super) fn record_of(r: &PgRow, at: usize) -> StoreResult<Record> {
    sql::decode_record(r.get(at), r.get(at + 1), claim_cols(r, at + 2))
}

impl View for PgTxn<'_> {
    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        let id = id.as_bytes().as_slice();
        let rows = self.query(
            &format!("SELECT {RECORD_COLS} FROM tasks WHERE id = $1 FOR UPDATE"),
            &[&id],
        )?;
        rows.first().map(|r| record_of(r, 0)).transpose()
    }

    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        let id = id.as_bytes().as_slice();
        let rows = self.query("SELECT scope, expires_at FROM tasks WHERE id = $1", &[&id])?;
        Ok(rows.first().map(|r| sql::head_of(r.get(0), r.get(1))))
    }

    fn index_upto(&self, index: Index, upto: u64, limit: usize) -> StoreResult<Vec<TaskId>> {
        let column = match index {
            Index::Due => "due_at",
            Index::Expiry => "expires_at",
            // Boot epochs fence an exclusive store; nodes sharing this one are fenced by
            // owner when they restart (see `PgStore::open`).
            Index::Claimed => {
                return Err(StoreError::invalid(
                    "the PostgreSQL store fences claims by owner, not by boot epoch",
                ));
            }
        };
        let upto = upto.min(i64::MAX as u64) as i64;
        let limit = limit.min(i64::MAX as usize) as i64;
        // Rows another transaction holds are skipped: it is deciding about them now.
        let rows = self.query(
            &format!(
                "SELECT id FROM tasks WHERE {column} <= $1 ORDER BY {column}, id LIMIT $2 \
                 FOR UPDATE SKIP LOCKED"
            ),
            &[&upto, &limit],
        )?;
        rows.iter().map(|r| sql::id_of(r.get(0))).collect()
    }

    fn live_count(&self, scope: &Scope) -> StoreResult<u64> {
        Ok(self.scope_sum(scope.as_str())?.max(0) as u64)
    }
}

impl Txn for PgTxn<'_> {
    fn put(&mut self, record: &Record) -> StoreResult<()> {
        let row = sql::row_of(&record.task)?;
        let c = row.claim.as_ref();
        let (generation, token, epoch, expires, owner) = (
            c.map(|c| c.generation),
            c.map(|c| c.token),
            c.map(|c| c.epoch),
            c.map(|c| c.expires_at),
            c.map(|c| c.owner.as_str()),
        );
        let id = row.id.as_slice();
        if self.inserted.remove(&record.task.id) {
            let work = sql::encode_work(&record.work)?;
            let n = self.execute(
                "INSERT INTO tasks (id, scope, status, live, due_at, expires_at,
                    claim_generation, claim_token, claim_epoch, claim_expires_at, claim_owner,
                    body, work)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                 ON CONFLICT (id) DO NOTHING",
                &[
                    &id,
                    &row.scope,
                    &row.status,
                    &row.live,
                    &row.due_at,
                    &row.expires_at,
                    &generation,
                    &token,
                    &epoch,
                    &expires,
                    &owner,
                    &row.body,
                    &work,
                ],
            )?;
            if n == 0 {
                return Err(StoreError::AlreadyExists);
            }
            return Ok(());
        }
        self.execute(
            "UPDATE tasks SET status = $2, live = $3, due_at = $4, expires_at = $5,
                claim_generation = $6, claim_token = $7, claim_epoch = $8,
                claim_expires_at = $9, claim_owner = $10, body = $11
             WHERE id = $1",
            &[
                &id,
                &row.status,
                &row.live,
                &row.due_at,
                &row.expires_at,
                &generation,
                &token,
                &epoch,
                &expires,
                &owner,
                &row.body,
            ],
        )?;
        Ok(())
    }

    fn remove(&mut self, id: &TaskId) -> StoreResult<()> {
        let id = id.as_bytes().as_slice();
        self.execute("DELETE FROM tasks WHERE id = $1", &[&id])?;
        Ok(())
    }

    // The indexes are SQL indexes over the columns `put` writes from the task itself.
    fn index_put(&mut self, _: Index, _: u64, _: &TaskId) -> StoreResult<()> {
        Ok(())
    }

    fn index_del(&mut self, _: Index, _: u64, _: &TaskId) -> StoreResult<()> {
        Ok(())
    }

    fn set_live_count(&mut self, _: &Scope, _: u64) -> StoreResult<()> {
        Err(StoreError::invalid(
            "the PostgreSQL store moves live counts by deltas",
        ))
    }

    fn created(&mut self, task: &Task) -> StoreResult<()> {
        self.inserted.insert(task.id);
        Ok(())
    }

    fn add_live(&mut self, scope: &Scope, up: bool) -> StoreResult<()> {
        *self
            .live_delta
            .entry(scope.as_str().to_owned())
            .or_default() += if up { 1 } else { -1 };
        Ok(())
    }

    /// Exact under concurrency without a per-tenant lock on the common path.
    ///
    /// Fast path: this transaction first takes its shard's row lock by writing its +1, then
    /// reads the committed sum (which includes its own change). Every other uncommitted
    /// change holds a different shard's lock, so at most `LIVE_SHARDS - 1` of them are not
    /// in the sum; admitting only when the sum plus that many fits under `max` keeps the
    /// true count under `max` whatever commits next.
    ///
    /// Near the cap the fast path cannot decide; the caller re-runs the creation in exact
    /// mode, which locks all of the scope's shards in shard order (waiting for the changes
    /// in flight) and counts exactly. Fast transactions hold one shard and wait for nothing
    /// after it, and exact ones lock in one order, so no lock cycle can form.
    fn admit_live(&mut self, scope: &Scope, max: u64) -> StoreResult<bool> {
        let max = max.min(i64::MAX as u64) as i64;
        let name = scope.as_str();
        if !self.exact {
            self.bump(name, 1)?;
            let sum = self.scope_sum(name)?;
            if sum + i64::from(LIVE_SHARDS - 1) <= max {
                // The +1 is written: the coming `add_live` must not count it again.
                *self.live_delta.entry(name.to_owned()).or_default() -= 1;
                return Ok(true);
            }
            self.needs_exact = true;
            return Ok(false);
        }
        self.execute(
            "INSERT INTO live (scope, shard, n)
             SELECT $1, s::smallint, 0 FROM generate_series(0, $2::int - 1) s
             ON CONFLICT (scope, shard) DO NOTHING",
            &[&name, &i32::from(LIVE_SHARDS)],
        )?;
        let rows = self.query(
            "SELECT coalesce(sum(n), 0)::bigint FROM
               (SELECT n FROM live WHERE scope = $1 ORDER BY shard FOR UPDATE) s",
            &[&name],
        )?;
        let sum: i64 = rows.first().map_or(0, |r| r.get(0));
        Ok(sum < max)
    }
}
