//! Writes: one PostgreSQL transaction per write, or per group of writes on named tasks.
//!
//! Every write runs the engine's rules over rows it fetched and locked ([`Staged`]), in one
//! transaction of two pipelined round trips: `BEGIN`, the time and the rows (and a
//! creation's admission) in the first; every change and `COMMIT` in the second.
//!
//! Writes that name their task (a creation, a transition, a claim by id) are queued and
//! grouped ([`Batcher`]): a few transactions are in flight at once, and the writes that
//! arrive while they are take the next one together, as the embedded stores' writer
//! groups its commits. A group fetches its rows in one statement, locked in id order, runs
//! each write's rules in turn over them (a later write sees an earlier one's changes), and
//! writes the sum: one statement for the inserted rows, one for the updated ones, one per
//! moved count. A write whose rules refuse it wrote nothing (the engine decides before it
//! writes), so the others go on. The group's answers go out after its `COMMIT` returned,
//! each write's own; a group that fails as a whole tells each write that nothing of it was
//! written, or that the outcome is unknown when the `COMMIT`'s fate is.
//!
//! Writes that select their rows by a condition (the next due task, expired ones, a node's
//! claims), append to a journal (a position already taken fails the statement), or count a
//! creation exactly run alone, through the same transaction.
//!
//! Lock order, the same in every write so that none waits on another in a cycle: task rows
//! (a group's in id order), then the live counts' admission shards (first round trip, in
//! scope order), then their other shards, the pinned counts and the tallies (second round
//! trip, each in key order).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use deadpool_postgres::{Object, Pool};
use tokio::sync::oneshot;
use tokio_postgres::types::ToSql;

use crate::model::{Clock, TaskId, Timestamp};
use crate::store::engine::{Ctx, Record, Touches, Txn};
use crate::store::group_commit::{self, Reply};
use crate::store::{StoreError, StoreResult};

use super::group::Groups;
use super::staged::{
    Change, Counted, LIVE_SHARDS, RECORD_COLS, Staged, Sums, Writes, prepared, record_of,
};
use super::{pg_error, pool_error};

/// Most writes in one group. It bounds how far one uncommitted group may move a scope's
/// live count, which the fast admission allows for ([`Staged::admit`]).
pub(super) const MAX_GROUP: usize = 32;

/// Returned from a write whose admission needs exact mode; never leaves this module's
/// callers.
pub(super) const NEEDS_EXACT: StoreError = StoreError::LiveLimit { max: u64::MAX };

/// `$1` of the time-dependent fetches: a test clock's value, or the transaction's time.
pub(super) const NOW_PARAM: &str =
    "coalesce($1::bigint, floor(extract(epoch from transaction_timestamp()) * 1000)::bigint)";

/// What a transaction's first round trip fetches and locks.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fetch<'a> {
    /// The rows of these tasks, locked in id order (sorted and without repeats); an id
    /// without a row is known absent.
    Ids(&'a [TaskId]),
    /// What a write alone selects: see [`fetch_sql`].
    Alone(Touches<'a>),
}

/// How a transaction admits the creations in it under their scopes' caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit<'a> {
    /// No creation in it is capped.
    None,
    /// Fast: each capped scope's shard takes the creations' +1s and the sums are read in
    /// the first round trip.
    Fast,
    /// Exact: every shard of this scope is locked and counted (one creation, alone).
    Exact(&'a str),
    /// Exact, in the scope of the task fetched (one journal append, alone): its shards are
    /// locked and counted after its row, the order every write takes them in.
    ExactFetched,
}

/// One queued write: its rules, and where its answer goes.
pub(super) trait Job: Send {
    /// The task it names, if it names one.
    fn id(&self) -> Option<TaskId>;
    /// The scope a capped creation is admitted in.
    fn capped_scope(&self) -> Option<&str>;
    /// Runs the rules over the transaction's rows; the answer waits for the commit.
    fn run(self: Box<Self>, staged: &mut Staged, ctx: &Ctx) -> Box<dyn Reply>;
    /// The transaction failed before this write ran.
    fn fail(self: Box<Self>, err: StoreError);
}

/// A write's rules and the channel its caller waits on.
pub(super) struct WriteJob<F, T> {
    id: Option<TaskId>,
    scope: Option<String>,
    f: F,
    tx: oneshot::Sender<StoreResult<T>>,
}

impl<F, T> WriteJob<F, T>
where
    F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static,
    T: Send + 'static,
{
    /// A write of `f` on task `id` (a creation capped in `scope`, if it names one), and the
    /// receiver of its answer.
    pub(super) fn queued(
        id: Option<TaskId>,
        scope: Option<String>,
        f: F,
    ) -> (Box<dyn Job>, oneshot::Receiver<StoreResult<T>>) {
        let (tx, rx) = oneshot::channel();
        (Box::new(Self { id, scope, f, tx }), rx)
    }
}

impl<F, T> Job for WriteJob<F, T>
where
    F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static,
    T: Send + 'static,
{
    fn id(&self) -> Option<TaskId> {
        self.id
    }

    fn capped_scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    fn run(self: Box<Self>, staged: &mut Staged, ctx: &Ctx) -> Box<dyn Reply> {
        staged.needs_exact = false;
        let result = match (self.f)(staged, ctx) {
            // The rules may have wrapped the admission's refusal; it still means "count".
            Err(_) if staged.needs_exact => Err(NEEDS_EXACT),
            other => other,
        };
        group_commit::pending(result, self.tx)
    }

    fn fail(self: Box<Self>, err: StoreError) {
        let _ = self.tx.send(Err(err));
    }
}

/// What every transaction needs: the write connections, the clock and the claim issuer.
#[derive(Clone)]
pub(super) struct Writer {
    pub(super) pool: Pool,
    /// A test clock; `None` (always, outside tests) means database time.
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) issuer: u64,
}

impl Writer {
    /// `$1` of every statement that reads the time: the test clock's value, if any.
    pub(super) fn now_param(&self) -> Option<i64> {
        self.clock.as_ref().map(|c| c.now().as_millis() as i64)
    }

    /// Runs `f` alone in one transaction over the rows `touches` selects. `admit` is a
    /// capped creation's scope: admitted fast, or exactly when `exact`.
    pub(super) async fn alone<T: Send + 'static>(
        &self,
        touches: Touches<'_>,
        admit: Option<&str>,
        exact: bool,
        f: impl FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let id = touched_id(&touches);
        let (job, rx) = WriteJob::queued(id, admit.map(str::to_owned), f);
        let mode = match (admit, exact) {
            (None, _) => Admit::None,
            (Some(_), false) => Admit::Fast,
            (Some(scope), true) => Admit::Exact(scope),
        };
        let ids = id.map(|id| [id]);
        let fetch = match (&ids, touches) {
            (Some(one), _) => Fetch::Ids(one),
            (None, Touches::Ids(many)) => Fetch::Ids(many),
            (None, _) => Fetch::Alone(touches),
        };
        self.transact(fetch, mode, vec![job]).await;
        rx.await
            .map_err(|_| StoreError::unavailable("a PostgreSQL write was abandoned"))?
    }

    /// Runs `f`, a journal append on task `id` capped by its scope's stored bytes, alone:
    /// the task's row first, then every shard of its scope, counted exactly.
    pub(super) async fn alone_counted(
        &self,
        id: TaskId,
        f: impl FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<()> + Send + 'static,
    ) -> StoreResult<()> {
        let (job, rx) = WriteJob::queued(Some(id), None, f);
        self.transact(Fetch::Ids(&[id]), Admit::ExactFetched, vec![job])
            .await;
        rx.await
            .map_err(|_| StoreError::unavailable("a PostgreSQL write was abandoned"))?
    }

    /// One transaction over `jobs`: fetch and lock, admit, run each write's rules, write
    /// the changes and commit, then answer every job.
    pub(super) async fn transact(
        &self,
        fetch: Fetch<'_>,
        admit: Admit<'_>,
        jobs: Vec<Box<dyn Job>>,
    ) {
        let mut conn = match self.pool.get().await {
            Ok(c) => Conn::new(c),
            Err(e) => return fail_all(jobs, pool_error(e)),
        };
        let grouped = jobs.len() > 1;
        let (replies, ended) = match self.run(&mut conn, fetch, admit, jobs).await {
            Ok(done) => done,
            Err((unrun, e)) => {
                conn.rollback().await;
                return fail_all(unrun, e);
            }
        };
        let outcome = match ended {
            Ended::RolledBack => {
                conn.rollback().await;
                Ok(())
            }
            Ended::Committed => {
                conn.finish();
                Ok(())
            }
            Ended::Abandoned(e) => {
                conn.rollback().await;
                Err(if grouped { grouped_failure(e) } else { e })
            }
            Ended::Failed { error: e, over } => {
                // A failed statement aborts the transaction, so the `COMMIT` after it
                // rolled back and the connection may serve again. A failed `COMMIT` leaves
                // the outcome unknown, and the connection is closed.
                if over {
                    conn.finish();
                }
                Err(if grouped { grouped_failure(e) } else { e })
            }
        };
        for reply in replies {
            reply.deliver(outcome.clone());
        }
    }

    /// The transaction's body; on an error before any rules ran, the jobs come back.
    async fn run(
        &self,
        conn: &mut Conn,
        fetch: Fetch<'_>,
        admit: Admit<'_>,
        jobs: Vec<Box<dyn Job>>,
    ) -> Result<(Vec<Box<dyn Reply>>, Ended), (Vec<Box<dyn Job>>, StoreError)> {
        let c = match conn.client() {
            Ok(c) => c,
            Err(e) => return Err((jobs, e)),
        };
        let shard = (crate::ids::random_u64() % LIVE_SHARDS as u64) as i16;
        // The capped scopes this transaction admits creations in, and how many in each.
        let mut capped: BTreeMap<&str, i64> = BTreeMap::new();
        for job in &jobs {
            if let Some(scope) = job.capped_scope() {
                *capped.entry(scope).or_default() += 1;
            }
        }
        let fast = if admit == Admit::Fast {
            capped
        } else {
            BTreeMap::new()
        };
        let read = self.first_trip(c, fetch, &fast, shard).await;
        let (now, fetched, sums) = match read {
            Ok(r) => r,
            Err(e) => return Err((jobs, e)),
        };
        let exact_scope = match admit {
            Admit::Exact(scope) => Some(scope.to_owned()),
            // A task not found has nothing to count: its rules refuse it before admitting.
            Admit::ExactFetched => fetched
                .first()
                .map(|(_, rec)| rec.task.scope.as_str().to_owned()),
            _ => None,
        };
        let exact = match exact_scope {
            Some(scope) => match exact_count(c, &scope).await {
                Ok(counted) => Some((scope, counted)),
                Err(e) => return Err((jobs, e)),
            },
            None => None,
        };
        let ctx = Ctx {
            now: Timestamp(now.max(0) as u64),
            // Claims on a shared store are not tied to a boot epoch: one node's restart
            // must not end the others' leases. A node's own earlier claims are fenced by
            // owner on open.
            epoch: 0,
            issuer: self.issuer,
        };
        let named: &[TaskId] = match fetch {
            Fetch::Ids(ids) => ids,
            Fetch::Alone(_) => &[],
        };
        let mut staged = Staged::new(fetched, named, fast_prebumped(&fast), sums, exact);
        let replies: Vec<Box<dyn Reply>> = jobs
            .into_iter()
            .map(|job| job.run(&mut staged, &ctx))
            .collect();
        let changes = match staged.changes(shard) {
            Ok(c) => c,
            Err(e) => return Ok((replies, Ended::Abandoned(e))),
        };
        let probe = matches!(fetch, Fetch::Alone(Touches::Nothing));
        if changes.is_empty() && !probe {
            // Nothing to write (replays, refusals, an empty queue): nothing to make durable.
            return Ok((replies, Ended::RolledBack));
        }
        let writes = match Writes::prepare(c).await {
            Ok(w) => w,
            Err(e) => return Ok((replies, Ended::Abandoned(e))),
        };
        let ended = match apply_and_commit(c, &writes, &changes, probe).await {
            (Some(error), committed) => Ended::Failed {
                error,
                over: committed.is_ok(),
            },
            (None, Err(e)) => Ended::Failed {
                error: pg_error(e),
                over: false,
            },
            (None, Ok(())) => Ended::Committed,
        };
        Ok((replies, ended))
    }

    /// The first round trip: `BEGIN`, the time, the rows (and a fast admission's shard
    /// bumps and count sums for the scopes in `fast`), pipelined.
    async fn first_trip(
        &self,
        c: &Object,
        fetch: Fetch<'_>,
        fast: &BTreeMap<&str, i64>,
        shard: i16,
    ) -> StoreResult<(i64, Vec<(TaskId, Record)>, HashMap<String, Sums>)> {
        let now_param = self.now_param();
        let fetch_st = prepared(c, &fetch_sql(&fetch)).await?;
        let args = FetchArgs::new(&fetch);
        let params = args.params(&fetch, &now_param);
        let (bump_st, sum_st) = if fast.is_empty() {
            (None, None)
        } else {
            (
                Some(prepared(c, BUMP_ADMITTED).await?),
                Some(prepared(c, SUM_ADMITTED).await?),
            )
        };
        let scopes: Vec<&str> = fast.keys().copied().collect();
        let adds: Vec<i64> = fast.values().copied().collect();

        let begin = c.batch_execute("BEGIN");
        let rows_f = c.query(&fetch_st, &params);
        let admit_f = async {
            match (&bump_st, &sum_st) {
                (Some(bump), Some(sum)) => {
                    // The shards' locks first (by writing the +1s), then the sums.
                    let bump_params: [&(dyn ToSql + Sync); 3] = [&shard, &scopes, &adds];
                    let sum_params: [&(dyn ToSql + Sync); 1] = [&scopes];
                    let (b, s) =
                        tokio::join!(c.execute(bump, &bump_params), c.query(sum, &sum_params));
                    b?;
                    Ok(s?)
                }
                _ => Ok(Vec::new()),
            }
        };
        let (begun, rows, sums) = tokio::join!(begin, rows_f, admit_f);
        begun.map_err(pg_error)?;
        let rows = rows.map_err(pg_error)?;
        let sums = sums.map_err(pg_error)?;
        // Every row carries the time; a fetch that found nothing still has one row.
        let now: i64 = rows
            .first()
            .map(|r| r.get(0))
            .ok_or_else(|| StoreError::corrupt("a write's fetch returned no row"))?;
        let fetched = rows
            .iter()
            .filter(|r| r.get::<_, Option<&[u8]>>(1).is_some())
            .map(|r| record_of(r, 1))
            .collect::<StoreResult<Vec<_>>>()?;
        let sums = sums
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    (r.get::<_, i64>(1), r.get::<_, i64>(2), r.get::<_, i64>(3)),
                )
            })
            .collect();
        Ok((now, fetched, sums))
    }
}

/// How a transaction ended, for the answers that waited on it.
enum Ended {
    Committed,
    /// It has nothing to write: roll it back.
    RolledBack,
    /// It failed before its changes were sent: roll it back.
    Abandoned(StoreError),
    /// A change or the `COMMIT` failed; `over` when the transaction ended with it.
    Failed {
        error: StoreError,
        over: bool,
    },
}

/// What a failed group tells each of its writes: the same error when the outcome is
/// unknown; otherwise the group rolled back, and a write that did nothing wrong hears that
/// nothing of it was written and it may be sent again.
fn grouped_failure(e: StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(_) => e,
        other => StoreError::unavailable(format!(
            "a grouped PostgreSQL write rolled back, nothing of it was written: {other}"
        )),
    }
}

fn fail_all(jobs: Vec<Box<dyn Job>>, err: StoreError) {
    for job in jobs {
        job.fail(err.clone());
    }
}

/// The per-scope +1s a fast admission wrote in the first round trip.
fn fast_prebumped(fast: &BTreeMap<&str, i64>) -> BTreeMap<String, i64> {
    fast.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
}

/// The task a write names, if it names one: fetched by id, and known absent when there is
/// no row.
fn touched_id(touches: &Touches<'_>) -> Option<TaskId> {
    match touches {
        Touches::Task(id) | Touches::TaskWork(id) | Touches::Journal(id) | Touches::New(id) => {
            Some(*id)
        }
        _ => None,
    }
}

/// A fast admission's shard bumps, one row per capped scope, in scope order.
const BUMP_ADMITTED: &str = "INSERT INTO live (scope, shard, n, stored) \
     SELECT s, $1, d, d FROM unnest($2::text[], $3::bigint[]) AS m(s, d) \
     ON CONFLICT (scope, shard) \
     DO UPDATE SET n = live.n + EXCLUDED.n, stored = live.stored + EXCLUDED.stored";

/// The live and stored sums and the stored bytes of the scopes a fast admission bumped.
const SUM_ADMITTED: &str = "SELECT scope, coalesce(sum(n), 0)::bigint, \
     coalesce(sum(stored), 0)::bigint, coalesce(sum(bytes), 0)::bigint \
     FROM live WHERE scope = ANY($1) GROUP BY scope";

/// The values a fetch binds after the time.
struct FetchArgs<'a> {
    ids: Vec<&'a [u8]>,
    skip: Vec<&'a str>,
    limit: i64,
    owner: &'a str,
}

impl<'a> FetchArgs<'a> {
    fn new(fetch: &Fetch<'a>) -> Self {
        let mut args = Self {
            ids: Vec::new(),
            skip: Vec::new(),
            limit: 0,
            owner: "",
        };
        match *fetch {
            Fetch::Ids(ids) => args.ids = ids.iter().map(|i| i.as_bytes().as_slice()).collect(),
            Fetch::Alone(Touches::NextDue(skip, batch)) => {
                args.skip = skip.iter().map(|s| s.as_str()).collect();
                args.limit = batch.min(i64::MAX as usize) as i64;
            }
            Fetch::Alone(Touches::ExpiredDue(n) | Touches::Expired(n)) => {
                args.limit = n.min(i64::MAX as usize) as i64
            }
            Fetch::Alone(Touches::Owner(o)) => args.owner = o,
            Fetch::Alone(_) => {}
        }
        args
    }

    /// The parameters of the statement [`fetch_sql`] makes: the time, then what it binds.
    fn params<'p>(
        &'p self,
        fetch: &Fetch<'_>,
        now_param: &'p Option<i64>,
    ) -> Vec<&'p (dyn ToSql + Sync)> {
        match fetch {
            Fetch::Ids(_) => vec![now_param, &self.ids],
            Fetch::Alone(Touches::NextDue(..)) => vec![now_param, &self.skip, &self.limit],
            Fetch::Alone(Touches::ExpiredDue(_) | Touches::Expired(_)) => {
                vec![now_param, &self.limit]
            }
            Fetch::Alone(Touches::Owner(_)) => vec![now_param, &self.owner],
            Fetch::Alone(_) => vec![now_param],
        }
    }
}

/// The statement a transaction's first round trip runs: the time and the rows `fetch`
/// names, read and locked. Fetches by id and by owner wait for rows other transactions
/// hold; time-dependent fetches skip them (nodes never wait on one another's claims).
fn fetch_sql(fetch: &Fetch<'_>) -> String {
    let cols = RECORD_COLS;
    let rows = match fetch {
        Fetch::Ids(_) => {
            format!("SELECT {cols} FROM tasks WHERE id = ANY($2) ORDER BY id FOR UPDATE")
        }
        Fetch::Alone(Touches::NextDue(..)) => format!(
            "SELECT {cols} FROM tasks
             WHERE due_at <= {NOW_PARAM} AND (expires_at IS NULL OR expires_at > {NOW_PARAM})
               AND scope <> ALL($2)
             ORDER BY due_at, id LIMIT $3 FOR UPDATE SKIP LOCKED"
        ),
        Fetch::Alone(Touches::ExpiredDue(_)) => format!(
            "SELECT {cols} FROM tasks WHERE due_at <= {NOW_PARAM} AND expires_at <= {NOW_PARAM}
             ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
        ),
        Fetch::Alone(Touches::Expired(_)) => format!(
            "SELECT {cols} FROM tasks WHERE expires_at <= {NOW_PARAM}
             ORDER BY expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
        ),
        Fetch::Alone(Touches::Owner(_)) => {
            format!("SELECT {cols} FROM tasks WHERE claim_owner = $2 ORDER BY id FOR UPDATE")
        }
        // A write that names a task fetches it by id (`Fetch::Ids`); the rest read no task.
        Fetch::Alone(_) => format!("SELECT {cols} FROM tasks WHERE false"),
    };
    // The time and the rows in one statement: the lateral side locks what it selects,
    // and the outer row carries the time when it selects nothing.
    format!("SELECT {NOW_PARAM}, t.* FROM (SELECT 1) one LEFT JOIN LATERAL ({rows}) t ON true")
}

/// The second round trip: the changes (or the probe's write) and `COMMIT`, pipelined.
/// Returns the first change that failed, and how the commit went.
async fn apply_and_commit(
    c: &Object,
    writes: &Writes,
    changes: &[Change],
    probe: bool,
) -> (Option<StoreError>, Result<(), tokio_postgres::Error>) {
    // A failed change aborts the transaction, so the COMMIT after it rolls back.
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

/// Exact mode: every shard of `scope` locked in shard order, then counted (live, stored,
/// bytes).
///
/// Every row is made first, both sets of shards: the count's locking read sees the rows
/// that existed when it started, so a row another write inserted after that would be
/// missed, while a row that exists is waited for and read as committed.
async fn exact_count(c: &Object, scope: &str) -> StoreResult<Counted> {
    c.execute(
        "INSERT INTO live (scope, shard, n, stored)
         SELECT $1, s::smallint, 0, 0 FROM generate_series(0, $2::int - 1) s
         ON CONFLICT (scope, shard) DO NOTHING",
        &[&scope, &(2 * i32::from(LIVE_SHARDS))],
    )
    .await
    .map_err(pg_error)?;
    let row = c
        .query_one(
            "SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(stored), 0)::bigint,
               coalesce(sum(bytes), 0)::bigint FROM
               (SELECT n, stored, bytes FROM live WHERE scope = $1 ORDER BY shard FOR UPDATE) s",
            &[&scope],
        )
        .await
        .map_err(pg_error)?;
    Ok((
        row.get::<_, i64>(0).max(0) as u64,
        row.get::<_, i64>(1).max(0) as u64,
        row.get::<_, i64>(2).max(0) as u64,
    ))
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

/// The writes that name their task, grouped: at most `in_flight` transactions at once,
/// each taking what queued while the others ran (up to [`MAX_GROUP`]).
pub(super) struct Batcher {
    groups: Groups<Box<dyn Job>>,
}

impl Batcher {
    pub(super) fn start(writer: Writer, in_flight: usize) -> Self {
        let groups = Groups::start(in_flight, MAX_GROUP, move |jobs| {
            let writer = writer.clone();
            async move { writer.group(jobs).await }
        });
        Self { groups }
    }

    /// Queues `f`, a write on task `id` (a creation capped in `scope` when it names one),
    /// and waits for its answer, which comes only after its group's transaction ended.
    pub(super) async fn submit<T, F>(&self, id: TaskId, scope: Option<&str>, f: F) -> StoreResult<T>
    where
        F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let (job, rx) = WriteJob::queued(Some(id), scope.map(str::to_owned), f);
        self.groups.send(job)?;
        rx.await
            .map_err(|_| StoreError::unavailable("a PostgreSQL write was abandoned"))?
    }
}

impl Writer {
    /// One group's transaction: its rows locked in id order.
    async fn group(&self, jobs: Vec<Box<dyn Job>>) {
        let mut ids: Vec<TaskId> = jobs.iter().filter_map(|j| j.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        let admit = if jobs.iter().any(|j| j.capped_scope().is_some()) {
            Admit::Fast
        } else {
            Admit::None
        };
        self.transact(Fetch::Ids(&ids), admit, jobs).await;
    }
}
