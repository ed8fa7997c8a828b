//! PgStore: the shared adapter, many `snodo serve` nodes on one PostgreSQL database.
//!
//! Every node answers every request from the database: a task's row is the truth, a claim
//! is a lease in its columns, and a node that dies is recovered by the others once its
//! leases run out. Time is the database's (the transaction's start), so nodes with
//! drifting clocks agree on every lease, `retry_at` and TTL.
//!
//! The rules are the engine's ([`super::engine`]), run over the rows a write fetched
//! ([`staged`]): one transaction, two pipelined round trips. The row a write needs is
//! chosen in SQL: `claim_next` takes the oldest due row with `FOR UPDATE SKIP LOCKED`
//! (nodes never wait on one another's claims); a heartbeat is one `UPDATE` of the lease
//! columns; reads fetch one row without a transaction.
//!
//! Changes a node commits are announced to the others after the commit, coalesced into one
//! `NOTIFY` per batch (never inside a hot transaction): see [`notify`].

mod deploy;
mod group;
mod listing;
mod notify;
mod schema;
mod staged;
mod write;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::model::{Clock, Task, TaskId, Timestamp, Work};

use super::backend::{ReadFn, WriteFn};
use super::engine::{self, Caps, Count, Ctx, Head, Index, Record, Touches, Txn, View};
use super::{Backend, ChangeKind, Lease, NewTask, Reaped, StoreError, StoreResult};

pub use notify::{RemoteChange, RemoteChanges};
pub use schema::{POSTGRES_SCHEMA_VERSION, drop_schema, drop_schema_blocking, migrate};
use staged::{TXN_NOW, prepared};
use write::{Batcher, NEEDS_EXACT, NOW_PARAM, Writer};

/// How to reach the database and who this node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// A libpq-style connection string or `postgres://` URL.
    pub url: String,
    /// The schema that holds Snodo's tables (created by [`migrate`]).
    pub schema: String,
    /// Connections this node keeps open at most: a quarter of them (at least one) for reads
    /// alone ([`PgOptions::read_connections`]), the rest for writes.
    pub pool_size: usize,
    /// This node's identity, unique among the nodes sharing the database. Claims carry
    /// it; on open, claims this identity held are released (its previous life is gone).
    pub node: String,
    /// Grouped write transactions in flight at once (at least one, at most the write
    /// connections). Each holds a write connection; the writes that queue meanwhile go out
    /// together in the next. Fewer groups take more writes each, which costs the database
    /// less per write; more shorten the wait under light load when the database has cores
    /// to spare.
    pub write_groups: usize,
    /// Apply pending migrations on open (otherwise an out-of-date schema is refused).
    pub migrate: bool,
    /// How long connecting may take before a request fails.
    pub connect_timeout: Duration,
}

impl PgOptions {
    /// The connections kept for reads (`tasks/get`, `inspect`): a quarter of the pool, at
    /// least one, and none of a pool of one. Writes wait for one of theirs under a flood
    /// of creations; a read never waits behind them.
    pub fn read_connections(&self) -> usize {
        if self.pool_size <= 1 {
            0
        } else {
            (self.pool_size / 4).max(1)
        }
    }

    /// Options with the documented defaults: schema `snodo`, 16 connections, 2 write
    /// groups, migrations on open, a 5 s connect timeout.
    pub fn new(url: impl Into<String>, node: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "snodo".into(),
            pool_size: 16,
            write_groups: 2,
            node: node.into(),
            migrate: true,
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// Checks the connection string and the schema name, without connecting.
    pub fn check(&self) -> StoreResult<()> {
        self.pg_config().map(|_| ())
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
    /// Connections for writes (every transaction).
    pool: Pool,
    /// Runs transactions on `pool`.
    writer: Writer,
    /// Groups the writes that name their task.
    batcher: Batcher,
    /// Connections for reads alone (the same pool when it is too small to split).
    reads: Pool,
    node: String,
    schema: String,
    key: [u8; 32],
    fenced: usize,
    notifier: notify::Notifier,
    /// When `claim_next` last removed expired due tasks (this node's clock, ms; only paces
    /// the cleanup).
    last_clean: std::sync::atomic::AtomicU64,
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
    /// Schedules' rows, by name: every one, or the one named.
    async fn pg_schedules(&self, name: Option<&str>) -> StoreResult<Vec<crate::model::Schedule>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(
            &client,
            "SELECT body FROM schedules WHERE $1::text IS NULL OR name = $1 ORDER BY name",
        )
        .await?;
        let rows = client.query(&st, &[&name]).await.map_err(pg_error)?;
        rows.iter()
            .map(|r| engine::decode_row(r.get::<_, &[u8]>(0)))
            .collect()
    }

    /// Webhook subscriptions' rows, by name: every one, or the one named.
    async fn pg_webhooks(&self, name: Option<&str>) -> StoreResult<Vec<crate::model::Webhook>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(
            &client,
            "SELECT body FROM webhooks WHERE $1::text IS NULL OR name = $1 ORDER BY name",
        )
        .await?;
        let rows = client.query(&st, &[&name]).await.map_err(pg_error)?;
        rows.iter()
            .map(|r| engine::decode_row(r.get::<_, &[u8]>(0)))
            .collect()
    }

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
        let timeout = Some(options.connect_timeout);
        let pool_of = |manager: Manager, size: usize| {
            Pool::builder(manager)
                .max_size(size.max(1))
                .runtime(Runtime::Tokio1)
                .wait_timeout(timeout)
                .create_timeout(timeout)
                .recycle_timeout(timeout)
                .build()
                .map_err(|e| StoreError::unavailable(format!("PostgreSQL connection pool: {e}")))
        };
        let read_connections = options.read_connections();
        let manager_for = || {
            Manager::from_config(
                cfg.clone(),
                NoTls,
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            )
        };
        let pool = pool_of(manager_for(), options.pool_size.max(1) - read_connections)?;
        let reads = if read_connections == 0 {
            pool.clone()
        } else {
            pool_of(manager_for(), read_connections)?
        };
        {
            let client = pool.get().await.map_err(pool_error)?;
            schema::check_current(&client).await?;
        }
        let key = schema::server_key(&pool).await?;
        let notifier = notify::Notifier::start(cfg, &options.schema);
        let writer = Writer {
            pool: pool.clone(),
            clock: clock.clone(),
            issuer: crate::ids::random_u64(),
        };
        let batcher = Batcher::start(writer.clone(), group_slots(&options));
        let mut store = Self {
            pool,
            writer: writer.clone(),
            batcher,
            reads,
            node: options.node,
            schema: options.schema,
            key,
            fenced: 0,
            notifier,
            last_clean: std::sync::atomic::AtomicU64::new(0),
        };
        store.fenced = store
            .write(Touches::Owner(&store.node), |txn, ctx| {
                let ids = txn.index_upto(Index::Claimed, 0, usize::MAX)?;
                engine::release_dead_claims(txn, ctx, &ids)
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
        self.writer.now_param()
    }

    /// Reads one task's row (and the time) without a transaction, then evaluates `f` over
    /// it as the engine's view.
    async fn read_one<T>(
        &self,
        id: Option<TaskId>,
        with_work: bool,
        journal: bool,
        f: impl FnOnce(&dyn View, &Ctx) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let client = self.reads.get().await.map_err(pool_error)?;
        // The work descriptor only when the caller needs it: a status read never decodes it.
        let st = prepared(
            &client,
            &format!(
                "SELECT {TXN_NOW}, t.scope, t.expires_at, t.body,
                        CASE WHEN $2 THEN t.work END,
                        t.claim_generation, t.claim_token, t.claim_epoch, t.claim_expires_at,
                        t.claim_owner
                 FROM (SELECT 1) one LEFT JOIN tasks t ON t.id = $1"
            ),
        )
        .await?;
        let bytes: Vec<u8> = id.map(|i| i.as_bytes().to_vec()).unwrap_or_default();
        let row = client
            .query_one(&st, &[&bytes, &with_work])
            .await
            .map_err(pg_error)?;
        let now = self
            .now_param()
            .unwrap_or_else(|| row.get::<_, i64>(0))
            .max(0) as u64;
        let ctx = Ctx {
            now: Timestamp(now),
            epoch: 0,
            issuer: self.writer.issuer,
        };
        let found = match (id, row.get::<_, Option<String>>(1)) {
            (Some(id), Some(scope)) => {
                let claim = staged::claim_cols(&row, 5);
                let body: &[u8] = row.get(3);
                let work: Option<&[u8]> = row.get(4);
                let (task, work) = match work {
                    Some(w) => {
                        let r = super::sql::decode_record(body, w, claim)?;
                        (r.task, Some(r.work))
                    }
                    None => (super::sql::decode_task(body, claim)?, None),
                };
                Some(OneTask {
                    id,
                    head: super::sql::head_of(scope, row.get(2)),
                    task,
                    work,
                })
            }
            _ => None,
        };
        let journal = match (journal, id) {
            (true, Some(id)) => Some(self.journal_rows(&client, &id).await?),
            _ => None,
        };
        f(&OneRow(found, journal), &ctx)
    }

    /// A task's journal rows, by position. Only the task's lease holder appends to it, so
    /// this read and the task's (a statement earlier) see the same entries.
    async fn journal_rows(&self, client: &Object, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>> {
        let st = prepared(
            client,
            "SELECT seq, entry FROM journal WHERE task_id = $1 ORDER BY seq",
        )
        .await?;
        let rows = client
            .query(&st, &[&id.as_bytes().as_slice()])
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|r| {
                let seq: i32 = r.get(0);
                let seq = u32::try_from(seq)
                    .map_err(|_| StoreError::corrupt(format!("a journal position is {seq}")))?;
                Ok((seq, r.get::<_, Vec<u8>>(1)))
            })
            .collect()
    }
}

/// How many grouped write transactions a node runs at once: as configured, within the
/// write connections.
fn group_slots(options: &PgOptions) -> usize {
    let writes = options.pool_size.max(1) - options.read_connections();
    options.write_groups.clamp(1, writes.max(1))
}

/// The one task a read fetched; its work only when the read asked for it.
struct OneTask {
    id: TaskId,
    head: Head,
    task: Task,
    work: Option<Work>,
}

/// A view holding at most one task.
struct OneRow(Option<OneTask>, Option<Vec<(u32, Vec<u8>)>>);

impl OneRow {
    fn get(&self, id: &TaskId) -> Option<&OneTask> {
        self.0.as_ref().filter(|t| t.id == *id)
    }
}

impl View for OneRow {
    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        self.get(id)
            .map(|t| match &t.work {
                Some(work) => Ok(Record {
                    task: t.task.clone(),
                    work: work.clone(),
                }),
                None => Err(StoreError::invalid(
                    "this read did not fetch the work descriptor",
                )),
            })
            .transpose()
    }

    fn load_task(&self, id: &TaskId) -> StoreResult<Option<Task>> {
        Ok(self.get(id).map(|t| t.task.clone()))
    }

    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        Ok(self.get(id).map(|t| t.head.clone()))
    }

    fn index_upto(&self, _: Index, _: u64, _: usize) -> StoreResult<Vec<TaskId>> {
        Err(StoreError::invalid("a one-row read has no index"))
    }

    fn count(&self, _: Count, _: &str) -> StoreResult<u64> {
        Err(StoreError::invalid("a one-row read has no counts"))
    }

    fn kv_get(&self, _: engine::Kv, _: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        Err(StoreError::invalid("a one-row read has no other tables"))
    }

    fn pinned_tasks(&self, _: &str, _: usize) -> StoreResult<Vec<TaskId>> {
        Err(StoreError::invalid("a one-row read has no other tables"))
    }

    fn listing(&self, _: &[u8], _: &[u8], _: usize) -> StoreResult<Vec<(Vec<u8>, String)>> {
        Err(StoreError::invalid("a one-row read has no other tables"))
    }

    fn tallies(&self, _: &str) -> StoreResult<Vec<(String, u64)>> {
        Err(StoreError::invalid("a one-row read has no other tables"))
    }

    fn kv_scan(&self, _: engine::Kv, _: usize, _: bool) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Err(StoreError::invalid("a one-row read has no other tables"))
    }

    fn kv_range(&self, _: engine::Kv, _: &[u8], _: usize) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Err(StoreError::invalid("a one-row read has no other tables"))
    }

    fn revoked(&self, _: &str) -> StoreResult<bool> {
        Err(StoreError::invalid("a one-row read has no revocations"))
    }

    fn journal(&self, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>> {
        match (&self.1, self.get(id)) {
            (Some(j), Some(_)) => Ok(j.clone()),
            (Some(_), None) => Ok(Vec::new()),
            (None, _) => Err(StoreError::invalid("this read did not fetch the journal")),
        }
    }
}

impl Backend for PgStore {
    async fn write<T: Send + 'static>(
        &self,
        touches: Touches<'_>,
        f: impl WriteFn<T>,
    ) -> StoreResult<T> {
        match touches {
            // Writes on one named task are grouped (see `write`); a journal append runs
            // alone, since a position already taken fails its statement.
            Touches::Task(id) | Touches::TaskWork(id) => self.batcher.submit(id, None, f).await,
            other => self.writer.alone(other, None, false, f).await,
        }
    }

    async fn read<T: Send + 'static>(
        &self,
        touches: Touches<'_>,
        f: impl ReadFn<T>,
    ) -> StoreResult<T> {
        let (id, with_work, journal) = match touches {
            Touches::Nothing => (None, false, false),
            Touches::Task(id) => (Some(id), false, false),
            Touches::TaskWork(id) => (Some(id), true, false),
            Touches::Journal(id) => (Some(id), false, true),
            // Many rows with their work: a write that changes nothing fetches them, past
            // the rows other transactions hold (a reaper on another node has those).
            Touches::Expired(_) => {
                return self
                    .writer
                    .alone(touches, None, false, move |txn, ctx| f(&*txn, ctx))
                    .await;
            }
            other => {
                return Err(StoreError::invalid(format!(
                    "a read on a shared store fetches one task or none, not {other:?}"
                )));
            }
        };
        self.read_one(id, with_work, journal, f).await
    }

    async fn time(&self) -> StoreResult<Timestamp> {
        self.read_one(None, false, false, |_, ctx| Ok(ctx.now))
            .await
    }

    fn key(&self) -> [u8; 32] {
        self.key
    }

    async fn store_component(
        &self,
        digest: String,
        bytes: Vec<u8>,
        signature: Option<Vec<u8>>,
    ) -> StoreResult<()> {
        self.pg_store_component(&digest, &bytes, signature.as_deref())
            .await
    }

    async fn component(&self, digest: &str) -> StoreResult<Option<crate::model::StoredComponent>> {
        self.pg_component(digest).await
    }

    async fn components(&self) -> StoreResult<Vec<crate::model::ComponentInfo>> {
        self.pg_components().await
    }

    async fn deploy(
        &self,
        components: Vec<String>,
        note: String,
        expected: Option<u64>,
    ) -> StoreResult<crate::model::Deployment> {
        self.pg_deploy(&components, &note, expected).await
    }

    async fn deployment(
        &self,
        revision: Option<u64>,
    ) -> StoreResult<Option<crate::model::Deployment>> {
        Ok(self.pg_deployments(revision, 1).await?.into_iter().next())
    }

    async fn deployments(&self, limit: usize) -> StoreResult<Vec<crate::model::Deployment>> {
        self.pg_deployments(None, limit).await
    }

    async fn collect_components(&self, retention_ms: u64) -> StoreResult<Vec<String>> {
        self.pg_collect_components(retention_ms).await
    }

    async fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>> {
        self.pg_pinned_tasks(digest, limit).await
    }

    async fn list_tasks(
        &self,
        query: super::listing::TaskQuery,
    ) -> StoreResult<super::listing::TaskPage> {
        self.pg_list(query).await
    }

    async fn count_tasks(&self, tenant: Option<String>) -> StoreResult<super::listing::TaskCounts> {
        self.pg_counts(tenant).await
    }

    /// Two statements on their own: the sweep (a few lapsed revocations, never this key's
    /// row) and the upsert. Only the upsert must commit for the revocation to hold.
    async fn revoke(&self, key: &str, until: Timestamp) -> StoreResult<()> {
        engine::check_revoke_key(key)?;
        let client = self.pool.get().await.map_err(pool_error)?;
        let sweep = prepared(
            &client,
            &format!(
                "DELETE FROM revoked WHERE key IN (SELECT key FROM revoked
                   WHERE until <= {NOW_PARAM} AND key <> $2 ORDER BY until LIMIT $3)"
            ),
        )
        .await?;
        let put = prepared(
            &client,
            &format!(
                "INSERT INTO revoked (key, until) SELECT $2, $3 WHERE $3 > {NOW_PARAM}
                 ON CONFLICT (key) DO UPDATE SET until = greatest(revoked.until, EXCLUDED.until)"
            ),
        )
        .await?;
        let now = self.now_param();
        let until = until.as_millis().min(i64::MAX as u64) as i64;
        client
            .execute(&sweep, &[&now, &key, &(engine::REVOKE_SWEEP as i64)])
            .await
            .map_err(pg_error)?;
        client
            .execute(&put, &[&now, &key, &until])
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    async fn revoked(&self, key: &str) -> StoreResult<bool> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(&client, "SELECT 1 FROM revoked WHERE key = $1").await?;
        let rows = client.query(&st, &[&key]).await.map_err(pg_error)?;
        Ok(!rows.is_empty())
    }

    /// A journal append capped by its scope's stored bytes counts them exactly: alone, with
    /// every shard of the scope locked after the task's row (an entry's bytes are not
    /// bounded as a fast admission's margin needs).
    async fn journal_write(
        &self,
        id: TaskId,
        capped: bool,
        f: impl WriteFn<()>,
    ) -> StoreResult<()> {
        if capped {
            self.writer.alone_counted(id, f).await
        } else {
            self.write(Touches::Journal(id), f).await
        }
    }

    /// Admits the creation against the scope's caps: on the fast sharded counts first, and
    /// exactly when a count is close to its cap (`f` runs again, in a new transaction).
    async fn create_with<T, F>(&self, new: NewTask, f: F) -> StoreResult<T>
    where
        F: Fn(&mut dyn Txn, &Ctx, NewTask) -> StoreResult<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        let id = new.id;
        let scope = new.scope.as_str().to_owned();
        let admit = Caps::of(&new).any().then_some(scope.as_str());
        if new.firing.is_some() {
            // A firing runs alone, counted exactly: its row's swap may refuse it as it
            // commits, which would roll back a group's other writes with it.
            return self
                .writer
                .alone(Touches::New(id), admit, admit.is_some(), move |txn, ctx| {
                    f(txn, ctx, new)
                })
                .await;
        }
        let again = new.clone();
        let f = Arc::new(f);
        let first = f.clone();
        match self
            .batcher
            .submit(id, admit, move |txn, ctx| first(txn, ctx, new))
            .await
        {
            Err(e) if e == NEEDS_EXACT => {
                self.writer
                    .alone(Touches::New(id), admit, true, move |txn, ctx| {
                        f(txn, ctx, again)
                    })
                    .await
            }
            other => other,
        }
    }

    /// The heartbeat: one statement, the lease columns only, when the lease is live. A
    /// refusal goes to the rules, which say why (terminal, lost, gone, a bad length).
    async fn renew_in_place(&self, lease: &Lease, lease_ms: u64) -> StoreResult<Option<Lease>> {
        if !(1..=super::MAX_LEASE_MS).contains(&lease_ms) {
            return Ok(None);
        }
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(
            &client,
            &format!(
                "UPDATE tasks SET claim_expires_at = {NOW_PARAM} + $5, due_at = {NOW_PARAM} + $5
                 WHERE id = $2 AND claim_generation = $3 AND claim_token = $4
                   AND claim_expires_at > {NOW_PARAM} AND claim_epoch = 0 AND live
                   AND (expires_at IS NULL OR expires_at > {NOW_PARAM})
                 RETURNING claim_expires_at"
            ),
        )
        .await?;
        let rows = client
            .query(
                &st,
                &[
                    &self.now_param(),
                    &lease.task_id().as_bytes().as_slice(),
                    &(lease.generation() as i64),
                    &(lease.token() as i64),
                    &(lease_ms as i64),
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows.first().map(|r| Lease {
            expires_at: Timestamp(r.get::<_, i64>(0).max(0) as u64),
            ..lease.clone()
        }))
    }

    /// Nothing to run: removes due tasks past their TTL now rather than at the next reap
    /// (the claim query passes over them), at most once a second per node: an idle queue is
    /// polled far more often.
    async fn nothing_due(&self) -> StoreResult<Vec<Reaped>> {
        let now = self.now_param().map_or_else(
            || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64)
            },
            |n| n as u64,
        );
        let due_clean = self.last_clean.load(std::sync::atomic::Ordering::Relaxed) + 1_000 <= now
            || self.writer.clock.is_some();
        if !due_clean {
            return Ok(Vec::new());
        }
        self.last_clean
            .store(now, std::sync::atomic::Ordering::Relaxed);
        self.write(Touches::ExpiredDue(64), |txn, _| {
            let ids = txn.index_upto(Index::Due, 0, 64)?;
            engine::delete_tasks(txn, ids)
        })
        .await
    }

    /// The head of the due index, read in a statement of its own (the claim's write fetched
    /// only due rows, and found none).
    async fn next_due_in(&self) -> StoreResult<Option<u64>> {
        let c = self.pool.get().await.map_err(pool_error)?;
        let row = c
            .query_one(
                &format!(
                    "SELECT (SELECT due_at FROM tasks WHERE due_at IS NOT NULL
                       ORDER BY due_at LIMIT 1) - {NOW_PARAM}"
                ),
                &[&self.now_param()],
            )
            .await
            .map_err(pg_error)?;
        let wait: Option<i64> = row.get(0);
        Ok(wait.map(|w| w.max(0) as u64))
    }

    async fn schedules(&self) -> StoreResult<Vec<crate::model::Schedule>> {
        self.pg_schedules(None).await
    }

    async fn schedule(&self, name: &str) -> StoreResult<Option<crate::model::Schedule>> {
        Ok(self.pg_schedules(Some(name)).await?.into_iter().next())
    }

    async fn swap_schedule(
        &self,
        name: String,
        expected: Option<u64>,
        after: Option<crate::model::Schedule>,
    ) -> StoreResult<()> {
        let swap = staged::ScheduleSwap::new(&name, expected, after.as_ref())?;
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(&client, staged::SWAP_SCHEDULE).await?;
        swap.run(&client, &st).await
    }

    async fn webhooks(&self) -> StoreResult<Vec<crate::model::Webhook>> {
        self.pg_webhooks(None).await
    }

    async fn webhook(&self, name: &str) -> StoreResult<Option<crate::model::Webhook>> {
        Ok(self.pg_webhooks(Some(name)).await?.into_iter().next())
    }

    async fn swap_webhook(
        &self,
        name: String,
        expected: Option<u64>,
        after: Option<crate::model::Webhook>,
    ) -> StoreResult<()> {
        engine::check_swap(&name, expected, after.as_ref())?;
        let body = after.as_ref().map(engine::encode_row).transpose()?;
        let revision = after.as_ref().map(|w| w.revision as i64);
        let max = crate::model::MAX_WEBHOOKS as i64;
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(&client, staged::SWAP_WEBHOOK).await?;
        client
            .execute(
                &st,
                &[&name, &expected.map(|r| r as i64), &body, &revision, &max],
            )
            .await
            .map_err(|e| staged::webhook_error(&name, e))?;
        Ok(())
    }

    async fn record_audit(
        &self,
        mut record: crate::model::AuditRecord,
    ) -> StoreResult<crate::model::AuditRecord> {
        record.at = self.time().await?;
        let body = serde_json::to_vec(&record)
            .map_err(|e| StoreError::invalid(format!("an audit record: {e}")))?;
        let cutoff = record
            .at
            .as_millis()
            .saturating_sub(crate::model::AUDIT_RETENTION_MS);
        // Every key of a record older than the cutoff is greater than this one.
        let mut past = (u64::MAX - cutoff).to_be_bytes().to_vec();
        past.extend_from_slice(&[0xff; 8]);
        let client = self.pool.get().await.map_err(pool_error)?;
        let insert = prepared(
            &client,
            "INSERT INTO audit (k, at, body) VALUES ($1, $2, $3)",
        )
        .await?;
        client
            .execute(
                &insert,
                &[&record.key(), &(record.at.as_millis() as i64), &body],
            )
            .await
            .map_err(pg_error)?;
        let sweep = prepared(
            &client,
            "DELETE FROM audit WHERE k IN (SELECT k FROM audit WHERE k > $1 ORDER BY k DESC LIMIT 8)",
        )
        .await?;
        client.execute(&sweep, &[&past]).await.map_err(pg_error)?;
        Ok(record)
    }

    async fn audit(
        &self,
        from: Option<String>,
        limit: usize,
    ) -> StoreResult<crate::model::AuditPage> {
        engine::check_audit_limit(limit)?;
        let start = match &from {
            Some(c) => engine::audit_after(&engine::audit_cursor_key(c)?),
            None => Vec::new(),
        };
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(
            &client,
            "SELECT k, body FROM audit WHERE k >= $1 ORDER BY k LIMIT $2",
        )
        .await?;
        let rows = client
            .query(&st, &[&start, &(limit as i64 + 1)])
            .await
            .map_err(pg_error)?;
        let more = rows.len() > limit;
        let mut page = crate::model::AuditPage::default();
        let mut last: Option<Vec<u8>> = None;
        for r in rows.iter().take(limit) {
            page.records
                .push(serde_json::from_slice(r.get::<_, &[u8]>(1)).map_err(|e| {
                    StoreError::corrupt(format!("a stored audit record does not decode: {e}"))
                })?);
            last = Some(r.get::<_, Vec<u8>>(0));
        }
        if more {
            page.next = last.map(|k| crate::ids::hex(&k));
        }
        Ok(page)
    }

    async fn events_after(
        &self,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<crate::model::OutboxEvent>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(
            &client,
            "SELECT seq, body FROM outbox_events WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(&st, &[&(after as i64), &limit])
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|r| {
                let mut e = engine::decode_event(r.get::<_, &[u8]>(1))?;
                e.seq = r.get::<_, i64>(0) as u64;
                Ok(e)
            })
            .collect()
    }

    async fn last_event(&self) -> StoreResult<u64> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(&client, "SELECT n FROM outbox_seq").await?;
        let row = client.query_one(&st, &[]).await.map_err(pg_error)?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    async fn sweep_events(
        &self,
        below: u64,
        before: Timestamp,
        limit: usize,
    ) -> StoreResult<usize> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let st = prepared(
            &client,
            "DELETE FROM outbox_events WHERE seq IN (SELECT seq FROM outbox_events \
             WHERE seq < $1 AND at < $2 ORDER BY seq LIMIT $3)",
        )
        .await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let n = client
            .execute(
                &st,
                &[&(below as i64), &(before.as_millis() as i64), &limit],
            )
            .await
            .map_err(pg_error)?;
        Ok(n as usize)
    }

    /// Tells the other nodes, after the commit, coalesced (see [`notify`]).
    fn announce(&self, id: TaskId, kind: ChangeKind) {
        self.notifier.announce(id, kind);
    }
}

#[cfg(test)]
mod tests;
