//! PgStore: the shared adapter, many `snodo serve` nodes on one PostgreSQL database.
//!
//! Every node answers every request from the database: a task's row is the truth, a claim
//! is a lease in its columns, and a node that dies is recovered by the others once its
//! leases run out. Time is the database's (`clock_timestamp()`), read once per transaction,
//! so nodes with drifting clocks agree on every lease, `retry_at` and TTL.
//!
//! The rules are the engine's ([`super::engine`]) run over one PostgreSQL transaction
//! ([`txn::PgTxn`]), with three paths written in SQL where the engine's generic form would
//! cost more: `claim_next` takes the oldest due row with `FOR UPDATE SKIP LOCKED` (nodes
//! never wait on one another's claims), a heartbeat rewrites only the lease columns, and
//! reads fetch one row without a transaction.
//!
//! Changes a node commits are announced to the others after the commit, coalesced into one
//! `NOTIFY` per batch (never inside a hot transaction): see [`notify`].

mod notify;
mod schema;
mod txn;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::runtime::Handle;
use tokio_postgres::NoTls;

use crate::model::{Clock, Principal, Task, TaskEvent, TaskId, Timestamp, Work};

use super::engine::{self, Ctx, Head, Index, Record, View};
use super::{
    Access, Action, Authority, ClaimRequest, Claimed, Committed, Lease, NewTask, Reaped, Store,
    StoreError, StoreResult,
};

pub use notify::{ChangeKind, RemoteChange, RemoteChanges};
pub use schema::{POSTGRES_SCHEMA_VERSION, migrate};
use txn::{PgTxn, RECORD_COLS, record_of};

/// The database's time in store milliseconds, as SQL.
const DB_NOW: &str = "floor(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// How to reach the database and who this node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// A libpq-style connection string or `postgres://` URL.
    pub url: String,
    /// The schema that holds Snodo's tables (created by [`migrate`]).
    pub schema: String,
    /// Connections this node keeps open at most.
    pub pool_size: usize,
    /// This node's identity, unique among the nodes sharing the database. Claims carry
    /// it; on open, claims this identity held are released (its previous life is gone).
    pub node: String,
    /// Apply pending migrations on open (otherwise an out-of-date schema is refused).
    pub migrate: bool,
    /// How long connecting may take before a request fails.
    pub connect_timeout: Duration,
}

impl PgOptions {
    /// Options with the documented defaults: schema `snodo`, 16 connections, migrations on
    /// open, a 5 s connect timeout.
    pub fn new(url: impl Into<String>, node: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "snodo".into(),
            pool_size: 16,
            node: node.into(),
            migrate: true,
            connect_timeout: Duration::from_secs(5),
        }
    }

    pub(crate) fn pg_config(&self) -> StoreResult<tokio_postgres::Config> {
        super::sql::check_identifier(&self.schema)?;
        let mut cfg: tokio_postgres::Config = self.url.parse().map_err(|e| {
            StoreError::invalid(format!(
                "store.url is not a PostgreSQL connection string: {e}"
            ))
        })?;
        cfg.options(format!("-c search_path={}", self.schema))
            .connect_timeout(self.connect_timeout)
            .application_name("snodo");
        Ok(cfg)
    }
}

/// Maps a driver error into the contract's terms. The message names the SQLSTATE but never
/// the statement or its parameters.
pub(crate) fn pg_error(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        return StoreError::unavailable(format!(
            "PostgreSQL refused the operation ({}): {}",
            db.code().code(),
            db.message()
        ));
    }
    if e.is_closed() {
        return StoreError::unavailable(
            "the connection to PostgreSQL was lost; the operation's outcome is unknown",
        );
    }
    StoreError::unavailable(format!("PostgreSQL: {e}"))
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_error(e),
        deadpool_postgres::PoolError::Timeout(_) => {
            StoreError::unavailable("no PostgreSQL connection became free in time (store.pool)")
        }
        other => StoreError::unavailable(format!("PostgreSQL connection pool: {other}")),
    }
}

/// The shared store.
pub struct PgStore {
    pool: Pool,
    node: String,
    schema: String,
    /// A test clock; `None` (always, outside tests) means database time.
    clock: Option<Arc<dyn Clock>>,
    issuer: u64,
    key: [u8; 32],
    fenced: usize,
    notifier: notify::Notifier,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("node", &self.node)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects, applies migrations when `options.migrate` (else refuses an out-of-date
    /// schema), releases the claims this node's previous life held, and starts listening
    /// for other nodes' changes.
    pub async fn open(options: PgOptions) -> StoreResult<Self> {
        Self::open_inner(options, None).await
    }

    /// [`PgStore::open`] with time from `clock` instead of the database: for tests that
    /// move time without sleeping.
    pub async fn open_with_clock(options: PgOptions, clock: Arc<dyn Clock>) -> StoreResult<Self> {
        Self::open_inner(options, Some(clock)).await
    }

    async fn open_inner(options: PgOptions, clock: Option<Arc<dyn Clock>>) -> StoreResult<Self> {
        if options.node.is_empty() || options.node.len() > 128 {
            return Err(StoreError::invalid("a node id is 1..=128 bytes"));
        }
        if options.migrate {
            migrate(&options).await?;
        }
        let cfg = options.pg_config()?;
        let manager = Manager::from_config(
            cfg.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let timeout = Some(options.connect_timeout);
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(timeout)
            .create_timeout(timeout)
            .recycle_timeout(timeout)
            .build()
            .map_err(|e| StoreError::unavailable(format!("PostgreSQL connection pool: {e}")))?;
        {
            let client = pool.get().await.map_err(pool_error)?;
            schema::check_current(&client).await?;
        }
        let key = schema::server_key(&pool).await?;
        let notifier = notify::Notifier::start(cfg, &options.schema);
        let mut store = Self {
            pool,
            node: options.node,
            schema: options.schema,
            clock,
            issuer: engine::random_u64(),
            key,
            fenced: 0,
            notifier,
        };
        let node = store.node.clone();
        store.fenced = store
            .write(move |txn, _| {
                let rows = txn.query(
                    "SELECT id FROM tasks WHERE claim_owner = $1 FOR UPDATE",
                    &[&node],
                )?;
                let ids = rows
                    .iter()
                    .map(|r| super::sql::id_of(r.get(0)))
                    .collect::<StoreResult<Vec<_>>>()?;
                engine::release_dead_claims(txn, &ids)
            })
            .await?;
        Ok(store)
    }

    /// This node's identity.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// How many claims of this node's previous life were released on open.
    pub fn fenced_claims(&self) -> usize {
        self.fenced
    }

    /// Task ids other nodes changed, as they announce them.
    pub fn remote_changes(&self) -> RemoteChanges {
        self.notifier.subscribe()
    }

    /// Resolves once this node listens for other nodes' announcements.
    pub async fn listening(&self) {
        self.notifier.listening().await;
    }

    fn now_param(&self) -> Option<i64> {
        self.clock.as_ref().map(|c| c.now().as_millis() as i64)
    }

    /// Runs `f` in one transaction and commits it. Nothing is committed when `f` fails.
    async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        F: FnOnce(&mut PgTxn<'_>, &Ctx) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        self.write_mode(false, f).await
    }

    /// [`PgStore::write`] with live-count admission in exact mode or not; a fast admission
    /// that cannot decide fails with [`NEEDS_EXACT`].
    async fn write_mode<T, F>(&self, exact: bool, f: F) -> StoreResult<T>
    where
        F: FnOnce(&mut PgTxn<'_>, &Ctx) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let now = self.now_param();
        let issuer = self.issuer;
        let rt = Handle::current();
        tokio::task::spawn_blocking(move || {
            let tx = rt.block_on(client.transaction()).map_err(pg_error)?;
            let mut txn = PgTxn::new(&tx, &rt, exact);
            let now = match now {
                Some(n) => n,
                None => {
                    let rows = txn.query(&format!("SELECT {DB_NOW}"), &[])?;
                    rows.first()
                        .map(|r| r.get::<_, i64>(0))
                        .ok_or_else(|| StoreError::unavailable("PostgreSQL returned no time"))?
                }
            };
            let ctx = Ctx {
                now: Timestamp(now.max(0) as u64),
                // Claims on a shared store are not tied to a boot epoch: one node's restart
                // must not end the others' leases. A node's own earlier claims are fenced
                // by owner on open.
                epoch: 0,
                issuer,
            };
            let out = f(&mut txn, &ctx);
            let needs_exact = txn.needs_exact;
            match out {
                Ok(v) => {
                    txn.flush()?;
                    drop(txn);
                    rt.block_on(tx.commit()).map_err(pg_error)?;
                    Ok(v)
                }
                Err(StoreError::LiveLimit { .. }) if needs_exact => {
                    drop(txn);
                    let _ = rt.block_on(tx.rollback());
                    Err(NEEDS_EXACT)
                }
                Err(e) => {
                    drop(txn);
                    let _ = rt.block_on(tx.rollback());
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| StoreError::unavailable(format!("a store write was abandoned: {e}")))?
    }

    /// Reads one task's row (and the time) without a transaction, then evaluates `f` over
    /// it as the engine's view.
    async fn read_one<T>(
        &self,
        id: Option<TaskId>,
        f: impl FnOnce(&OneRow, &Ctx) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = client
            .prepare_cached(&format!(
                "SELECT {DB_NOW}, t.scope, t.expires_at, {RECORD_COLS}
                 FROM (SELECT 1) one LEFT JOIN tasks t ON t.id = $1"
            ))
            .await
            .map_err(pg_error)?;
        let bytes: Vec<u8> = id.map(|i| i.as_bytes().to_vec()).unwrap_or_default();
        let row = client.query_one(&st, &[&bytes]).await.map_err(pg_error)?;
        let now = self
            .now_param()
            .unwrap_or_else(|| row.get::<_, i64>(0))
            .max(0) as u64;
        let ctx = Ctx {
            now: Timestamp(now),
            epoch: 0,
            issuer: self.issuer,
        };
        let found = match (id, row.get::<_, Option<String>>(1)) {
            (Some(id), Some(scope)) => Some((
                id,
                super::sql::head_of(scope, row.get(2)),
                record_of(&row, 3)?,
            )),
            _ => None,
        };
        f(&OneRow(found), &ctx)
    }
}

/// Returned from a write whose admission needs exact mode; never leaves this module.
const NEEDS_EXACT: StoreError = StoreError::LiveLimit { max: u64::MAX };

/// A view holding at most one row.
struct OneRow(Option<(TaskId, Head, Record)>);

impl View for OneRow {
    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        Ok(self
            .0
            .as_ref()
            .filter(|(i, _, _)| i == id)
            .map(|(_, _, r)| r.clone()))
    }

    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        Ok(self
            .0
            .as_ref()
            .filter(|(i, _, _)| i == id)
            .map(|(_, h, _)| h.clone()))
    }

    fn index_upto(&self, _: Index, _: u64, _: usize) -> StoreResult<Vec<TaskId>> {
        Err(StoreError::invalid("a one-row read has no index"))
    }

    fn live_count(&self, _: &crate::model::Scope) -> StoreResult<u64> {
        Err(StoreError::invalid("a one-row read has no counts"))
    }
}

#[async_trait]
impl Store for PgStore {
    async fn now(&self) -> StoreResult<Timestamp> {
        self.read_one(None, |_, ctx| Ok(ctx.now)).await
    }

    async fn check_writable(&self, within: Duration) -> StoreResult<()> {
        match tokio::time::timeout(within, self.write(|_, _| Ok(()))).await {
            Ok(committed) => committed,
            Err(_) => Err(StoreError::unavailable(format!(
                "a probe write did not commit within {} ms",
                within.as_millis()
            ))),
        }
    }

    async fn create(&self, new: NewTask) -> StoreResult<Task> {
        let again = new.clone();
        let task = match self
            .write_mode(false, move |txn, ctx| engine::create(txn, ctx, new))
            .await
        {
            Err(e) if e == NEEDS_EXACT => {
                self.write_mode(true, move |txn, ctx| engine::create(txn, ctx, again))
                    .await?
            }
            other => other?,
        };
        self.notifier.announce(task.id, ChangeKind::Created);
        Ok(task)
    }

    async fn authorize(
        &self,
        principal: &Principal,
        action: Action,
        task_id: &str,
    ) -> StoreResult<Access> {
        let id = TaskId::parse(task_id).ok_or(StoreError::NotFound)?;
        self.read_one(Some(id), |view, ctx| {
            engine::authorize(view, ctx, principal, action, task_id)
        })
        .await
    }

    async fn authorize_read(
        &self,
        principal: &Principal,
        task_id: &str,
    ) -> StoreResult<(Access, Task)> {
        let id = TaskId::parse(task_id).ok_or(StoreError::NotFound)?;
        self.read_one(Some(id), |view, ctx| {
            engine::authorize_read(view, ctx, principal, task_id)
        })
        .await
    }

    async fn get(&self, access: &Access) -> StoreResult<Task> {
        self.read_one(Some(access.task_id), |view, ctx| {
            engine::get(view, ctx, access)
        })
        .await
    }

    async fn transition(
        &self,
        by: Authority<'_>,
        event: TaskEvent,
        expected_revision: Option<u64>,
    ) -> StoreResult<Committed> {
        let kind = match event.kind {
            crate::model::EventKind::InputAccepted { .. } => ChangeKind::InputAccepted,
            crate::model::EventKind::Cancelled { .. } => ChangeKind::Cancelled,
            _ => ChangeKind::Other,
        };
        let committed = match by {
            Authority::Worker(lease) => {
                let lease = lease.clone();
                self.write(move |txn, ctx| {
                    engine::transition(
                        txn,
                        ctx,
                        Authority::Worker(&lease),
                        event,
                        expected_revision,
                    )
                })
                .await?
            }
            Authority::Request(access) => {
                let access = access.clone();
                self.write(move |txn, ctx| {
                    engine::transition(
                        txn,
                        ctx,
                        Authority::Request(&access),
                        event,
                        expected_revision,
                    )
                })
                .await?
            }
        };
        if !committed.replayed {
            self.notifier.announce(committed.task.id, kind);
        }
        Ok(committed)
    }

    async fn claim(&self, task_id: &TaskId, request: &ClaimRequest) -> StoreResult<Claimed> {
        let (id, request) = (*task_id, request.clone());
        self.write(move |txn, ctx| engine::claim(txn, ctx, &id, &request))
            .await
    }

    async fn claim_next(&self, request: &ClaimRequest) -> StoreResult<Option<Claimed>> {
        let request = request.clone();
        self.write(move |txn, ctx| {
            engine::check_claim_request(&request)?;
            let now = ctx.now.as_millis() as i64;
            match txn.next_due(now, &request.skip_scopes)? {
                // The row is locked and due, so the engine's checks pass: it takes the claim.
                Some(id) => engine::claim(txn, ctx, &id, &request).map(Some),
                None => {
                    // Nothing to run: remove due tasks past their TTL now rather than at the
                    // next reap (the claim query already passes over them).
                    for id in txn.expired_due(now, 64)? {
                        if let Some(rec) = txn.load(&id)? {
                            engine::Txn::delete(txn, &rec.task)?;
                        }
                    }
                    Ok(None)
                }
            }
        })
        .await
    }

    async fn renew(&self, lease: &Lease, lease_ms: u64) -> StoreResult<Lease> {
        if !(1..=super::MAX_LEASE_MS).contains(&lease_ms) {
            // The engine refuses it with the reason.
            let lease = lease.clone();
            return self
                .write(move |txn, ctx| engine::renew(txn, ctx, &lease, lease_ms))
                .await;
        }
        let l = lease.clone();
        // The heartbeat: the lease columns and nothing else, when the lease is live.
        let renewed = self
            .write(move |txn, ctx| {
                let now = ctx.now.as_millis() as i64;
                let until = now + lease_ms as i64;
                let id = l.task_id().as_bytes().as_slice();
                let rows = txn.query(
                    "UPDATE tasks SET claim_expires_at = $4, due_at = $4
                     WHERE id = $1 AND claim_generation = $2 AND claim_token = $3
                       AND claim_expires_at > $5 AND claim_epoch = 0 AND live
                       AND (expires_at IS NULL OR expires_at > $5)
                     RETURNING claim_expires_at",
                    &[
                        &id,
                        &(l.generation() as i64),
                        &(l.token() as i64),
                        &until,
                        &now,
                    ],
                )?;
                Ok(rows.first().map(|r| Timestamp(r.get::<_, i64>(0) as u64)))
            })
            .await?;
        match renewed {
            Some(expires_at) => Ok(Lease {
                expires_at,
                ..lease.clone()
            }),
            // Not live: the engine says why (terminal, lost, gone).
            None => {
                let lease = lease.clone();
                self.write(move |txn, ctx| engine::renew(txn, ctx, &lease, lease_ms))
                    .await
            }
        }
    }

    async fn release(&self, lease: &Lease) -> StoreResult<()> {
        let lease = lease.clone();
        self.write(move |txn, ctx| engine::release(txn, ctx, &lease))
            .await
    }

    async fn worker_snapshot(&self, lease: &Lease) -> StoreResult<(Task, Work)> {
        self.read_one(Some(*lease.task_id()), |view, ctx| {
            engine::worker_snapshot(view, ctx, lease)
        })
        .await
    }

    async fn reap(&self, limit: usize) -> StoreResult<Vec<Reaped>> {
        self.write(move |txn, ctx| engine::reap(txn, ctx, limit))
            .await
    }

    async fn inspect(&self, task_id: &TaskId) -> StoreResult<Option<(Task, Work)>> {
        let id = *task_id;
        self.read_one(Some(id), |view, _| engine::inspect(view, &id))
            .await
    }

    async fn server_key(&self) -> StoreResult<[u8; 32]> {
        Ok(self.key)
    }
}

#[cfg(test)]
mod tests;
