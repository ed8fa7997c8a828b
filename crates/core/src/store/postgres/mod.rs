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
mod listing;
mod notify;
mod schema;
mod staged;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, Statement};

use crate::model::{Clock, Task, TaskId, Timestamp, Work};

use super::backend::{ReadFn, WriteFn};
use super::engine::{self, Caps, Count, Ctx, Head, Index, Record, Touches, Txn, View};
use super::{Backend, ChangeKind, Lease, NewTask, StoreError, StoreResult};

pub use notify::{RemoteChange, RemoteChanges};
pub use schema::{POSTGRES_SCHEMA_VERSION, drop_schema, drop_schema_blocking, migrate};
use staged::{
    Admission, Change, LIVE_SHARDS, RECORD_COLS, Staged, TXN_NOW, Writes, prepared, record_of,
};

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
    /// Connections for reads alone (the same pool when it is too small to split).
    reads: Pool,
    node: String,
    schema: String,
    /// A test clock; `None` (always, outside tests) means database time.
    clock: Option<Arc<dyn Clock>>,
    issuer: u64,
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
        let mut store = Self {
            pool,
            reads,
            node: options.node,
            schema: options.schema,
            clock,
            issuer: engine::random_u64(),
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
        self.clock.as_ref().map(|c| c.now().as_millis() as i64)
    }

    /// Runs the rules `f` over the rows `touches` selects, in one transaction: `BEGIN`, the
    /// time and the rows in one round trip, the changes and `COMMIT` in another. Nothing
    /// is committed when `f` fails.
    ///
    /// A creation capped at `admit` = (scope, caps) is admitted on the way: the fast
    /// admission rides in the first round trip; `exact` locks every shard of the scope
    /// first. A fast admission that cannot decide fails with [`NEEDS_EXACT`].
    async fn write_admitted<T>(
        &self,
        touches: Touches<'_>,
        admit: Option<(&str, Caps)>,
        exact: bool,
        f: impl FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut conn = Conn::new(self.pool.get().await.map_err(pool_error)?);
        let c = conn.client()?;
        let writes = Writes::prepare(c).await?;
        let now_param = self.now_param();
        let fetch_st = prepared(c, &fetch_sql(&touches)).await?;
        let shard = (engine::random_u64() % LIVE_SHARDS as u64) as i16;
        let sum_st = prepared(
            c,
            "SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(stored), 0)::bigint
             FROM live WHERE scope = $1",
        )
        .await?;
        // The task a write names, if it names one: known absent when the fetch finds nothing.
        let id_param = match touches {
            Touches::Task(id) | Touches::TaskWork(id) | Touches::Journal(id) | Touches::New(id) => {
                Some(id)
            }
            _ => None,
        };
        let args = FetchArgs::new(touches, &id_param);
        let fetch_params = args.params(touches, &now_param);
        let fast = admit.filter(|_| !exact);

        let read = begin_and_fetch(c, &writes, &fetch_st, &fetch_params, &sum_st, fast, shard);
        let (now, rows, fast_sum) = match read.await {
            Ok(r) => r,
            Err(e) => {
                conn.rollback().await;
                return Err(e);
            }
        };
        let admission = match decide_admission(c, admit, exact, fast_sum).await {
            Ok(a) => a,
            Err(e) => {
                conn.rollback().await;
                return Err(e);
            }
        };
        let ctx = Ctx {
            now: Timestamp(now.unwrap_or(0).max(0) as u64),
            // Claims on a shared store are not tied to a boot epoch: one node's restart
            // must not end the others' leases. A node's own earlier claims are fenced by
            // owner on open.
            epoch: 0,
            issuer: self.issuer,
        };
        let (value, changes) = match stage(&rows, id_param, admission, &ctx, shard, f) {
            Ok(staged) => staged,
            Err(e) => {
                conn.rollback().await;
                return Err(e);
            }
        };
        let probe = matches!(touches, Touches::Nothing);
        if changes.is_empty() && fast_sum.is_none() && !probe {
            // Nothing to write (a replay, an empty queue): nothing to make durable.
            conn.rollback().await;
            return Ok(value);
        }

        match apply_and_commit(c, &writes, &changes, probe).await {
            (Some(e), _) => {
                conn.finish();
                Err(e)
            }
            (None, Err(e)) => Err(pg_error(e)),
            (None, Ok(())) => {
                conn.finish();
                Ok(value)
            }
        }
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
            issuer: self.issuer,
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

/// Returned from a write whose admission needs exact mode; never leaves this module.
const NEEDS_EXACT: StoreError = StoreError::LiveLimit { max: u64::MAX };

/// The values a write's fetch binds after the time, taken from what the write touches.
struct FetchArgs<'a> {
    id_bytes: Option<&'a [u8]>,
    skip: Vec<&'a str>,
    limit: i64,
    owner: &'a str,
}

impl<'a> FetchArgs<'a> {
    /// The values `touches` binds; `id_param` is the task it names, if it names one.
    fn new(touches: Touches<'a>, id_param: &'a Option<TaskId>) -> Self {
        let id_bytes: Option<&[u8]> = id_param.as_ref().map(|i| i.as_bytes().as_slice());
        let skip: Vec<&str> = match touches {
            Touches::NextDue(skip) => skip.iter().map(|s| s.as_str()).collect(),
            _ => Vec::new(),
        };
        let limit: i64 = match touches {
            Touches::ExpiredDue(n) | Touches::Expired(n) => n.min(i64::MAX as usize) as i64,
            _ => 0,
        };
        let owner: &str = match touches {
            Touches::Owner(o) => o,
            _ => "",
        };
        Self {
            id_bytes,
            skip,
            limit,
            owner,
        }
    }

    /// The parameters of the statement [`fetch_sql`] makes for `touches`: the time, then
    /// what it binds.
    fn params<'p>(
        &'p self,
        touches: Touches<'_>,
        now_param: &'p Option<i64>,
    ) -> Vec<&'p (dyn ToSql + Sync)> {
        match touches {
            Touches::Task(_) | Touches::TaskWork(_) | Touches::Journal(_) => {
                vec![now_param, &self.id_bytes]
            }
            Touches::NextDue(_) => vec![now_param, &self.skip],
            Touches::ExpiredDue(_) | Touches::Expired(_) => vec![now_param, &self.limit],
            Touches::Owner(_) => vec![now_param, &self.owner],
            Touches::New(_)
            | Touches::Nothing
            | Touches::Revocations
            | Touches::Deployments
            | Touches::Listing => {
                vec![now_param]
            }
        }
    }
}

/// A write's first round trip: `BEGIN`, the time, the rows (and a fast admission's shard
/// bump and count sums when `fast` names a scope), pipelined. Returns the time, the rows
/// and the scope's live and stored sums.
async fn begin_and_fetch(
    c: &Object,
    writes: &Writes,
    fetch_st: &Statement,
    fetch_params: &[&(dyn ToSql + Sync)],
    sum_st: &Statement,
    fast: Option<(&str, Caps)>,
    shard: i16,
) -> StoreResult<(Option<i64>, Vec<Row>, Option<(i64, i64)>)> {
    let one: i64 = 1;

    // Round trip 1: BEGIN, the time, the rows (and a fast admission), pipelined.
    let begin = c.batch_execute("BEGIN");
    let rows_f = c.query(fetch_st, fetch_params);
    let admit_f = async {
        match fast {
            Some((scope, _)) => {
                // Its shard's lock first (by writing the +1s), then the sums.
                let bump_params: [&(dyn ToSql + Sync); 4] = [&scope, &shard, &one, &one];
                let sum_params: [&(dyn ToSql + Sync); 1] = [&scope];
                let bump = c.query(writes.bump(), &bump_params);
                let sum = c.query_one(sum_st, &sum_params);
                let (b, s) = tokio::join!(bump, sum);
                b?;
                let s = s?;
                Ok(Some((s.get::<_, i64>(0), s.get::<_, i64>(1))))
            }
            None => Ok(None),
        }
    };
    let (begun, rows, fast_sum) = tokio::join!(begin, rows_f, admit_f);
    begun.map_err(pg_error)?;
    let rows = rows.map_err(pg_error)?;
    // Every row carries the time; a fetch that found nothing still has one row.
    let now: Option<i64> = rows.first().map(|r| r.get(0));
    let fast_sum: Option<(i64, i64)> = fast_sum.map_err(pg_error)?;
    Ok((now, rows, fast_sum))
}

/// The admission of a creation capped at `admit` = (scope, caps): decided from the fast
/// sums when there are some, else from exact counts; `None` for a write without a cap.
async fn decide_admission(
    c: &Object,
    admit: Option<(&str, Caps)>,
    exact: bool,
    fast_sum: Option<(i64, i64)>,
) -> StoreResult<Option<Admission>> {
    // Every change in flight on another shard may be one more.
    let fits = |sum: i64, cap: Option<u64>| {
        cap.is_none_or(|max| sum + i64::from(LIVE_SHARDS - 1) <= max.min(i64::MAX as u64) as i64)
    };
    Ok(match (admit, exact, fast_sum) {
        (None, _, _) => None,
        (Some((_, caps)), false, Some((live, stored))) => {
            Some(if fits(live, caps.live) && fits(stored, caps.stored) {
                Admission::Admitted
            } else {
                Admission::Undecided
            })
        }
        (Some((scope, _)), _, _) => {
            let (live, stored) = exact_count(c, scope).await?;
            Some(Admission::Counted(live, stored))
        }
    })
}

/// Runs the rules `f` over the fetched rows and returns its value with the changes it
/// made. An `f` that failed because its admission needs exact mode fails with
/// [`NEEDS_EXACT`].
fn stage<T>(
    rows: &[Row],
    id_param: Option<TaskId>,
    admission: Option<Admission>,
    ctx: &Ctx,
    shard: i16,
    f: impl FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T>,
) -> StoreResult<(T, Vec<Change>)> {
    let fetched = rows
        .iter()
        .filter(|r| r.get::<_, Option<&[u8]>>(1).is_some())
        .map(|r| record_of(r, 1))
        .collect::<StoreResult<Vec<_>>>()?;
    let mut staged = Staged::new(fetched, id_param);
    if let Some(a) = admission {
        staged = staged.with_admission(a);
    }
    let value = match f(&mut staged, ctx) {
        Ok(v) => v,
        Err(e) => return Err(if staged.needs_exact { NEEDS_EXACT } else { e }),
    };
    let changes = staged.changes(shard)?;
    Ok((value, changes))
}

/// A write's second round trip: the changes (or the probe's write) and `COMMIT`,
/// pipelined. Returns the first change that failed, and how the commit went.
async fn apply_and_commit(
    c: &Object,
    writes: &Writes,
    changes: &[Change],
    probe: bool,
) -> (Option<StoreError>, Result<(), tokio_postgres::Error>) {
    // Round trip 2: the changes and COMMIT, pipelined. A failed change aborts the
    // transaction, so the COMMIT after it rolls back.
    let applied = futures_util::future::join_all(changes.iter().map(|ch| ch.apply(c, writes)));
    let probe = async {
        if probe {
            // A write that changes nothing, so the commit flushes like any other.
            c.execute("UPDATE server_key SET value = value", &[])
                .await
                .map(|_| ())
                .map_err(pg_error)
        } else {
            Ok(())
        }
    };
    let commit = c.batch_execute("COMMIT");
    let (applied, probed, committed) = tokio::join!(applied, probe, commit);
    let result = applied
        .into_iter()
        .chain(std::iter::once(probed))
        .find_map(Result::err);
    (result, committed)
}

/// `$1` of the time-dependent fetches: a test clock's value, or the transaction's time.
const NOW_PARAM: &str =
    "coalesce($1::bigint, floor(extract(epoch from transaction_timestamp()) * 1000)::bigint)";

/// The statement a write's first round trip runs: the time and the rows `touches` names,
/// read and locked. Time-dependent fetches skip rows other transactions hold (nodes never
/// wait on one another's claims); fetches by id and by owner wait for them.
fn fetch_sql(touches: &Touches<'_>) -> String {
    let cols = RECORD_COLS;
    let rows = match touches {
        Touches::Task(_) | Touches::TaskWork(_) | Touches::Journal(_) => {
            format!("SELECT {cols} FROM tasks WHERE id = $2 FOR UPDATE")
        }
        Touches::NextDue(_) => format!(
            "SELECT {cols} FROM tasks
             WHERE due_at <= {NOW_PARAM} AND (expires_at IS NULL OR expires_at > {NOW_PARAM})
               AND scope <> ALL($2)
             ORDER BY due_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
        ),
        Touches::ExpiredDue(_) => format!(
            "SELECT {cols} FROM tasks WHERE due_at <= {NOW_PARAM} AND expires_at <= {NOW_PARAM}
             ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
        ),
        Touches::Expired(_) => format!(
            "SELECT {cols} FROM tasks WHERE expires_at <= {NOW_PARAM}
             ORDER BY expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
        ),
        Touches::Owner(_) => {
            format!("SELECT {cols} FROM tasks WHERE claim_owner = $2 FOR UPDATE")
        }
        Touches::New(_)
        | Touches::Nothing
        | Touches::Revocations
        | Touches::Deployments
        | Touches::Listing => {
            format!("SELECT {cols} FROM tasks WHERE false")
        }
    };
    // The time and the rows in one statement: the lateral side locks what it selects,
    // and the outer row carries the time when it selects nothing.
    format!("SELECT {NOW_PARAM}, t.* FROM (SELECT 1) one LEFT JOIN LATERAL ({rows}) t ON true")
}

/// A pooled connection inside a transaction. A connection whose transaction was not
/// ended cleanly (an error on the way, or the future dropped mid-flight) is closed, never
/// handed back to the pool half-way through a transaction.
struct Conn {
    obj: Option<Object>,
    clean: bool,
}

impl Conn {
    fn new(obj: Object) -> Self {
        Self {
            obj: Some(obj),
            clean: false,
        }
    }

    fn client(&self) -> StoreResult<&Object> {
        self.obj
            .as_ref()
            .ok_or_else(|| StoreError::unavailable("the connection was closed"))
    }

    fn finish(&mut self) {
        self.clean = true;
    }

    async fn rollback(&mut self) {
        if let Some(c) = &self.obj
            && c.batch_execute("ROLLBACK").await.is_ok()
        {
            self.clean = true;
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if !self.clean
            && let Some(obj) = self.obj.take()
        {
            drop(Object::take(obj));
        }
    }
}

/// Exact mode: every shard of `scope` locked in shard order, then counted (live, stored).
async fn exact_count(c: &Object, scope: &str) -> StoreResult<(u64, u64)> {
    c.execute(
        "INSERT INTO live (scope, shard, n, stored)
         SELECT $1, s::smallint, 0, 0 FROM generate_series(0, $2::int - 1) s
         ON CONFLICT (scope, shard) DO NOTHING",
        &[&scope, &i32::from(LIVE_SHARDS)],
    )
    .await
    .map_err(pg_error)?;
    let row = c
        .query_one(
            "SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(stored), 0)::bigint FROM
               (SELECT n, stored FROM live WHERE scope = $1 ORDER BY shard FOR UPDATE) s",
            &[&scope],
        )
        .await
        .map_err(pg_error)?;
    Ok((
        row.get::<_, i64>(0).max(0) as u64,
        row.get::<_, i64>(1).max(0) as u64,
    ))
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
    fn write<T: Send + 'static>(
        &self,
        touches: Touches<'_>,
        f: impl WriteFn<T>,
    ) -> impl std::future::Future<Output = StoreResult<T>> + Send {
        self.write_admitted(touches, None, false, f)
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

    /// Admits the creation against the scope's caps: on the fast sharded counts first, and
    /// exactly when a count is close to its cap (`f` runs again, in a new transaction).
    async fn create_with<T, F>(&self, new: NewTask, f: F) -> StoreResult<T>
    where
        F: Fn(&mut dyn Txn, &Ctx, NewTask) -> StoreResult<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        let id = new.id;
        let scope = new.scope.as_str().to_owned();
        let caps = Caps::of(&new);
        let admit = caps.any().then_some((scope.as_str(), caps));
        let again = new.clone();
        match self
            .write_admitted(Touches::New(id), admit, false, |txn, ctx| f(txn, ctx, new))
            .await
        {
            Err(e) if e == NEEDS_EXACT => {
                self.write_admitted(Touches::New(id), admit, true, |txn, ctx| f(txn, ctx, again))
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
    async fn nothing_due(&self) -> StoreResult<()> {
        let now = self.now_param().map_or_else(
            || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64)
            },
            |n| n as u64,
        );
        let due_clean = self.last_clean.load(std::sync::atomic::Ordering::Relaxed) + 1_000 <= now
            || self.clock.is_some();
        if !due_clean {
            return Ok(());
        }
        self.last_clean
            .store(now, std::sync::atomic::Ordering::Relaxed);
        self.write(Touches::ExpiredDue(64), |txn, _| {
            for id in txn.index_upto(Index::Due, 0, 64)? {
                if let Some(rec) = txn.load(&id)? {
                    txn.delete(&rec)?;
                }
            }
            Ok(())
        })
        .await
    }

    /// Tells the other nodes, after the commit, coalesced (see [`notify`]).
    fn announce(&self, id: TaskId, kind: ChangeKind) {
        self.notifier.announce(id, kind);
    }
}

#[cfg(test)]
mod tests;
