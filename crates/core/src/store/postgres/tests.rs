//! PgStore against the PostgreSQL server of the machine: the contract suite and the
//! behaviours only a shared store has.

use std::sync::Arc;

use crate::model::ManualClock;
use crate::store::contract::Backend;
use crate::store::{PgOptions, PgStore, Store};

pub(crate) mod support {
    //! Finding the test database and making throwaway schemas in it.

    /// The test database: `SNODO_TEST_POSTGRES`, else the local server's `test` database.
    pub(crate) fn url() -> String {
        std::env::var("SNODO_TEST_POSTGRES")
            .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_owned())
    }

    /// Whether the test database answers (or another is named by `SNODO_TEST_POSTGRES`).
    /// Where it does not, the caller skips with a loud line, except under `CI=true`, where
    /// PostgreSQL is required and this panics.
    pub(crate) fn available() -> bool {
        std::env::var("SNODO_TEST_POSTGRES").is_ok()
            || crate::testing::postgres_reachable(
                "the PostgreSQL tests (SNODO_TEST_POSTGRES names another server)",
            )
    }

    /// A fresh schema name.
    pub(crate) fn schema() -> String {
        format!("snodo_test_{:016x}", crate::ids::random_u64())
    }

    /// Drops `schema` (called from `Drop`, so failures are ignored: the schema name is
    /// unique and a leftover harms nothing).
    pub(crate) fn drop_schema(schema: &str) {
        let mut options = crate::store::PgOptions::new(url(), "cleanup");
        options.schema = schema.to_owned();
        let _ = crate::store::drop_postgres_schema_blocking(&options);
    }
}

struct Pg {
    schema: String,
}

impl Drop for Pg {
    fn drop(&mut self) {
        support::drop_schema(&self.schema);
    }
}

fn options(schema: &str, node: &str) -> PgOptions {
    let mut o = PgOptions::new(support::url(), node);
    o.schema = schema.to_owned();
    o.pool_size = 4;
    o
}

#[async_trait::async_trait]
impl Backend for Pg {
    fn durable(&self) -> bool {
        true
    }

    async fn open(&mut self, clock: &ManualClock) -> Arc<dyn Store> {
        // The suite's claims name the owner `contract`: the node that reopens is that node.
        let store =
            PgStore::open_with_clock(options(&self.schema, "contract"), Arc::new(clock.clone()))
                .await
                .expect("open the PostgreSQL store");
        Arc::new(store)
    }
}

crate::store_contract_suite!(
    || Pg {
        schema: support::schema()
    },
    skip_unless = support::available
);

mod shared {
    //! What only a store shared by several nodes has to get right.

    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::{Pg, options, support};
    use crate::model::{ManualClock, Principal, Scope, TaskId, Timestamp, Work};
    use crate::store::contract::{cancel, finish};
    use crate::store::postgres::schema::POSTGRES_SCHEMA_VERSION;
    use crate::store::prelude::*;
    use crate::store::{
        Action, ChangeKind, ClaimRequest, NewTask, PgStore, RemoteChange, StoreError,
    };

    const T0: u64 = 1_800_000_000_000;

    fn new_task(tenant: &str) -> NewTask {
        let id = TaskId::generate();
        NewTask::new(
            id,
            Scope::new(tenant),
            Work::new("snodo/tool-call", json!({"tool": "t"}), id.to_string()),
        )
    }

    async fn node(pg: &Pg, name: &str, clock: &ManualClock) -> PgStore {
        PgStore::open_with_clock(options(&pg.schema, name), Arc::new(clock.clone()))
            .await
            .expect("open node")
    }

    /// Nodes A and B on a fresh schema (dropped with the `Pg`), reading one clock that
    /// stays at `T0`; `None` where PostgreSQL is not available (as [`fresh`] says).
    async fn two_nodes() -> Option<(Pg, Arc<PgStore>, Arc<PgStore>)> {
        let pg = fresh()?;
        let clock = ManualClock::new(Timestamp(T0));
        let a = Arc::new(node(&pg, "node-a", &clock).await);
        let b = Arc::new(node(&pg, "node-b", &clock).await);
        Some((pg, a, b))
    }

    fn fresh() -> Option<Pg> {
        support::available().then(|| Pg {
            schema: support::schema(),
        })
    }

    /// Two nodes that plan the same firings (or different ones from the same row) race to
    /// fire them: each time exactly one creates its task, the other is refused as a
    /// conflict (never as an unavailable store), and the row counts one firing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_nodes_racing_a_firing_create_one_task() {
        use crate::model::{
            Cadence, Firings, Missed, Schedule, ScheduleOrigin, ScheduleSpec, firing_id,
        };
        use crate::store::ScheduleMove;
        let Some((_pg, a, b)) = two_nodes().await else {
            return;
        };
        let spec = ScheduleSpec {
            name: "race".into(),
            tool: "t".into(),
            arguments: Default::default(),
            tenant: "acme".into(),
            subject: "ops".into(),
            cadence: Cadence::Every { ms: 1_000 },
            missed: Missed::One,
            missed_after_ms: 60_000,
            catch_up: 10,
        };
        let row = Schedule::new(spec, ScheduleOrigin::Config, Timestamp(T0));
        a.swap_schedule("race", None, Some(&row))
            .await
            .expect("made");
        let firing = |row: &Schedule, at: u64| {
            let at = Timestamp(at);
            let id = firing_id(row.key, at);
            let after = row.fired(
                at,
                id,
                at,
                Firings {
                    next_at: Some(Timestamp(at.as_millis() + 1_000)),
                    skipped: 0,
                    manual: false,
                },
            );
            let mut new = new_task("acme");
            new.id = id;
            new.work.idempotency_key = id.to_string();
            new.firing = Some(ScheduleMove {
                expected: row.revision,
                after,
            });
            new
        };
        let mut row = row;
        for k in 1..=20u64 {
            // Odd rounds: the same firing on both; even ones: each node saw another time.
            let at_a = T0 + k * 10_000;
            let at_b = if k % 2 == 1 { at_a } else { at_a + 1_000 };
            let (ra, rb) = tokio::join!(a.create(firing(&row, at_a)), b.create(firing(&row, at_b)));
            let won = match (&ra, &rb) {
                (Ok(t), Err(e)) | (Err(e), Ok(t)) => {
                    assert!(
                        matches!(
                            e,
                            StoreError::AlreadyExists | StoreError::ScheduleConflict { .. }
                        ),
                        "round {k}: the loser hears a conflict, not {e:?}"
                    );
                    t.id
                }
                other => panic!("round {k}: exactly one firing commits, got {other:?}"),
            };
            row = a.schedule("race").await.expect("read").expect("kept");
            assert_eq!(row.fired, k, "round {k}");
            assert_eq!(row.last.as_ref().map(|l| l.task_id), Some(won));
            let other = if ra.is_ok() {
                firing_id(row.key, Timestamp(at_b))
            } else {
                firing_id(row.key, Timestamp(at_a))
            };
            if other != won {
                assert!(
                    b.inspect(&other).await.expect("inspect").is_none(),
                    "round {k}"
                );
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_nodes_share_tasks_and_never_claim_the_same_one() {
        let Some((_pg, a, b)) = two_nodes().await else {
            return;
        };
        let mut ids = Vec::new();
        for _ in 0..40 {
            ids.push(a.create(new_task("acme")).await.expect("create").id);
        }
        // Both nodes claim concurrently until nothing is due: every task exactly once.
        let claim_all = |s: Arc<PgStore>, owner: &'static str| async move {
            let mut got = Vec::new();
            while let Some(c) = s
                .claim_next(&ClaimRequest::new(30_000, owner))
                .await
                .expect("claim_next")
                .claimed
            {
                got.push(c.task.id);
            }
            got
        };
        let (from_a, from_b) = tokio::join!(
            claim_all(a.clone(), "node-a"),
            claim_all(b.clone(), "node-b")
        );
        let mut all: Vec<TaskId> = from_a.iter().chain(&from_b).copied().collect();
        all.sort_unstable_by_key(|i| *i.as_bytes());
        ids.sort_unstable_by_key(|i| *i.as_bytes());
        assert_eq!(all, ids, "each task claimed exactly once across the nodes");

        // B reads and cancels what A created; A's lease then refuses to commit.
        let t = a.create(new_task("acme")).await.expect("create").id;
        let lease = a
            .claim(&t, &ClaimRequest::new(30_000, "node-a"))
            .await
            .expect("claim")
            .lease;
        cancel(&*b, "acme", &t).await.expect("cancel on b");
        assert!(matches!(
            a.renew(&lease, 30_000).await,
            Err(StoreError::Terminal { .. })
        ));
        assert!(matches!(
            finish(&*a, &lease).await,
            Err(StoreError::Terminal { .. })
        ));
        assert!(
            b.authorize(&Principal::new("other", "u"), Action::Read, &t.to_string())
                .await
                .is_err_and(|e| e == StoreError::NotFound),
            "another tenant's task stays invisible on every node"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarting_node_fences_only_its_own_claims() {
        let Some(pg) = fresh() else { return };
        let clock = ManualClock::new(Timestamp(T0));
        let a = node(&pg, "node-a", &clock).await;
        let b = node(&pg, "node-b", &clock).await;
        let ta = a.create(new_task("acme")).await.expect("create").id;
        let tb = a.create(new_task("acme")).await.expect("create").id;
        let la = a
            .claim(&ta, &ClaimRequest::new(30_000, "node-a"))
            .await
            .expect("a")
            .lease;
        let lb = b
            .claim(&tb, &ClaimRequest::new(30_000, "node-b"))
            .await
            .expect("b")
            .lease;
        drop(a);
        // Node A comes back under the same identity: its old claim is released at once and
        // counted as a recovery; B's claim is untouched.
        let a = node(&pg, "node-a", &clock).await;
        assert_eq!(a.fenced_claims(), 1);
        assert_eq!(
            a.renew(&la, 30_000).await.err(),
            Some(StoreError::LeaseLost)
        );
        assert!(b.renew(&lb, 30_000).await.is_ok());
        let again = a
            .claim_next(&ClaimRequest::new(30_000, "node-a"))
            .await
            .expect("claim_next")
            .claimed
            .expect("A's old task is due");
        assert_eq!(again.task.id, ta, "ta {ta} tb {tb}: {:?}", again.task);
        assert_eq!(again.task.recoveries, 1);
        assert!(again.lease.generation() > la.generation());
        finish(&a, &again.lease).await.expect("complete");
        // A node that dies without coming back is recovered by the others once its lease
        // has run out.
        clock.advance(30_000);
        let taken = a
            .claim_next(&ClaimRequest::new(30_000, "node-a"))
            .await
            .expect("claim_next")
            .claimed
            .expect("B's expired claim is due");
        assert_eq!(taken.task.id, tb);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_on_one_node_are_announced_to_the_others() {
        let Some(pg) = fresh() else { return };
        let clock = ManualClock::new(Timestamp(T0));
        let a = node(&pg, "node-a", &clock).await;
        let b = node(&pg, "node-b", &clock).await;
        let mut from_a = b.remote_changes();
        let mut own = a.remote_changes();
        for n in [&a, &b] {
            tokio::time::timeout(Duration::from_secs(10), n.listening())
                .await
                .expect("the node listens");
        }
        let t = a.create(new_task("acme")).await.expect("create").id;
        cancel(&a, "acme", &t).await.expect("cancel");
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match tokio::time::timeout(Duration::from_secs(10), from_a.recv()).await {
                Ok(Ok(RemoteChange::Task { id, kind })) if id == t => seen.push(kind),
                Ok(Ok(_)) => {}
                other => panic!("no announcement reached node B: {other:?}"),
            }
        }
        assert_eq!(seen, vec![ChangeKind::Created, ChangeKind::Cancelled]);
        // A node does not hear its own announcements back (only its resync).
        while let Ok(c) = own.try_recv() {
            assert_eq!(c, RemoteChange::Resync);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_live_cap_is_exact_under_concurrent_creations() {
        let Some((_pg, a, b)) = two_nodes().await else {
            return;
        };
        // 60 creations race from two nodes for 25 places: the fast path admits the first
        // ones, exact mode decides near the cap.
        let mut joins = Vec::new();
        for i in 0..60 {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            joins.push(tokio::spawn(async move {
                let mut n = new_task("acme");
                n.max_live_in_scope = Some(25);
                s.create(n).await
            }));
        }
        let mut ok = 0;
        for j in joins {
            match j.await.expect("join") {
                Ok(_) => ok += 1,
                Err(StoreError::LiveLimit { max: 25 }) => {}
                Err(e) => panic!("unexpected: {e}"),
            }
        }
        assert_eq!(ok, 25, "exactly the cap was admitted");
        // Finishing one frees one place.
        let c = a
            .claim_next(&ClaimRequest::new(30_000, "node-a"))
            .await
            .expect("claim")
            .claimed
            .expect("due");
        finish(&*a, &c.lease).await.expect("complete");
        let mut n = new_task("acme");
        n.max_live_in_scope = Some(25);
        assert!(b.create(n).await.is_ok());
        let mut n = new_task("acme");
        n.max_live_in_scope = Some(25);
        assert_eq!(
            b.create(n).await.err(),
            Some(StoreError::LiveLimit { max: 25 })
        );
    }

    /// The sum of a scope's live and stored count rows, read directly.
    async fn counted(pg: &Pg, tenant: &str) -> (i64, i64) {
        let row = session(&options(&pg.schema, "reader"))
            .await
            .query_one(
                "SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(stored), 0)::bigint
                 FROM live WHERE scope = $1",
                &[&Scope::new(tenant).as_str()],
            )
            .await
            .expect("counts");
        (row.get(0), row.get(1))
    }

    /// Node A on a fresh schema, its clock at `T0`, and one task of `acme` it created.
    async fn one_node() -> Option<(Pg, PgStore, ManualClock, TaskId)> {
        let pg = fresh()?;
        let clock = ManualClock::new(Timestamp(T0));
        let a = node(&pg, "node-a", &clock).await;
        let t = a.create(new_task("acme")).await.expect("create").id;
        Some((pg, a, clock, t))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_group_answers_each_write_its_own_and_writes_what_the_admitted_ones_did() {
        use crate::store::engine;
        use crate::store::postgres::write::{Admit, Fetch, WriteJob};
        let Some((pg, a, _clock, unclaimed)) = one_node().await else {
            return;
        };
        let capped = |mut n: NewTask| {
            n.max_live_in_scope = Some(10_000);
            n
        };
        let first = capped(new_task("acme"));
        let again = first.clone();
        let unknown = TaskId::generate();
        let req = ClaimRequest::new(30_000, "node-a");
        let (created, r1) = WriteJob::queued(Some(first.id), Some(first.scope.as_str().into()), {
            let first = first.clone();
            move |txn, ctx| engine::create(txn, ctx, first)
        });
        let (missing, r2) = WriteJob::queued(Some(unknown), None, {
            let req = req.clone();
            move |txn, ctx| engine::claim(txn, ctx, &unknown, &req)
        });
        let (claimed, r3) = WriteJob::queued(Some(unclaimed), None, {
            let req = req.clone();
            move |txn, ctx| engine::claim(txn, ctx, &unclaimed, &req)
        });
        // The same id again, in the same group: it sees the first creation.
        let (twice, r4) = WriteJob::queued(Some(again.id), Some(again.scope.as_str().into()), {
            move |txn, ctx| engine::create(txn, ctx, again)
        });
        let mut ids = vec![first.id, unknown, unclaimed];
        ids.sort_unstable();
        a.writer
            .transact(
                Fetch::Ids(&ids),
                Admit::Fast,
                vec![created, missing, claimed, twice],
            )
            .await;
        assert_eq!(r1.await.expect("answer").expect("created").id, first.id);
        assert_eq!(r2.await.expect("answer").err(), Some(StoreError::NotFound));
        let lease = r3.await.expect("answer").expect("claimed").lease;
        assert_eq!(
            r4.await.expect("answer").err(),
            Some(StoreError::AlreadyExists)
        );
        // What the admitted writes did is stored; the refused ones left nothing, and the
        // +1s written for two capped creations count the one that was made.
        assert!(a.renew(&lease, 30_000).await.is_ok(), "the claim committed");
        let access = a
            .authorize(
                &Principal::new("acme", "u"),
                Action::Read,
                &first.id.to_string(),
            )
            .await
            .expect("the created task is stored");
        assert_eq!(access.task_id, first.id);
        assert_eq!(counted(&pg, "acme").await, (2, 2));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn grouped_creations_and_completions_across_scopes_neither_deadlock_nor_pass_a_cap() {
        let Some((pg, a, b)) = two_nodes().await else {
            return;
        };
        // Tasks to finish in both tenants, claimed by the node that will finish them.
        let mut held = Vec::new();
        for (i, tenant) in ["acme", "beta"].iter().cycle().take(60).enumerate() {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let owner = if i % 2 == 0 { "node-a" } else { "node-b" };
            let id = s.create(new_task(tenant)).await.expect("create").id;
            let lease = s
                .claim(&id, &ClaimRequest::new(30_000, owner))
                .await
                .expect("claim")
                .lease;
            held.push((s, lease));
        }
        // Both nodes at once: creations capped at 600 in each tenant (700 tried, more than
        // the fast admission's margin, so both admission modes run), and the held tasks
        // finished, so groups admit in one scope while finishing in the other.
        let mut joins = Vec::new();
        for i in 0..1_400 {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let tenant = if (i / 2) % 2 == 0 { "acme" } else { "beta" };
            joins.push(tokio::spawn(async move {
                let mut n = new_task(tenant);
                n.max_live_in_scope = Some(630);
                s.create(n).await.map(|_| tenant)
            }));
        }
        let finishing: Vec<_> = held
            .into_iter()
            .map(|(s, lease)| tokio::spawn(async move { finish(&*s, &lease).await }))
            .collect();
        let mut admitted = std::collections::HashMap::new();
        for j in joins {
            match j.await.expect("join") {
                Ok(tenant) => *admitted.entry(tenant).or_insert(0) += 1,
                Err(StoreError::LiveLimit { max: 630 }) => {}
                Err(e) => panic!("a creation failed: {e}"),
            }
        }
        for f in finishing {
            f.await.expect("join").expect("finish");
        }
        // 30 tasks of each tenant were live and then finished while the 700 raced for
        // the 630 places: each tenant ends with between 600 and 630 created, and exactly
        // as many counted as are live.
        for tenant in ["acme", "beta"] {
            let n = admitted[tenant];
            assert!((600..=630).contains(&n), "{tenant}: {n} admitted");
            assert_eq!(counted(&pg, tenant).await, (n, n + 30), "{tenant}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_heartbeat_rewrites_only_the_lease_columns() {
        let Some((pg, a, clock, t)) = one_node().await else {
            return;
        };
        let c = a
            .claim(&t, &ClaimRequest::new(30_000, "node-a"))
            .await
            .expect("claim");
        let body = || async {
            let (client, conn) = tokio_postgres::connect(&support::url(), tokio_postgres::NoTls)
                .await
                .expect("connect");
            tokio::spawn(conn);
            let row = client
                .query_one(
                    &format!(
                        "SELECT body, claim_expires_at FROM {}.tasks WHERE id = $1",
                        pg.schema
                    ),
                    &[&t.as_bytes().as_slice()],
                )
                .await
                .expect("row");
            (row.get::<_, Vec<u8>>(0), row.get::<_, i64>(1))
        };
        let (before, until) = body().await;
        clock.advance(1_000);
        let renewed = a.renew(&c.lease, 30_000).await.expect("renew");
        let (after, until_after) = body().await;
        assert_eq!(
            before, after,
            "the task body is not rewritten by a heartbeat"
        );
        assert_eq!(until_after, until + 1_000);
        assert_eq!(renewed.expires_at(), Timestamp(until_after as u64));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn database_time_orders_tasks_when_no_clock_is_injected() {
        let Some(pg) = fresh() else { return };
        let s = PgStore::open(options(&pg.schema, "node-a"))
            .await
            .expect("open");
        let before = s.now().await.expect("now");
        let t = s.create(new_task("acme")).await.expect("create");
        let after = s.now().await.expect("now");
        assert!(before <= t.created_at && t.created_at <= after);
        // Database time, not an arbitrary value: within a day of this machine's clock.
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .as_millis() as u64;
        assert!(before.as_millis().abs_diff(wall) < 86_400_000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn schemas_are_migrated_explicitly_and_newer_ones_refused() {
        let Some(pg) = fresh() else { return };
        let mut o = options(&pg.schema, "node-a");
        o.migrate = false;
        let e = PgStore::open(o.clone()).await.expect_err("refused");
        assert!(
            e.to_string().contains("snodo migrate"),
            "an unmigrated database names the fix: {e}"
        );
        // Several nodes may migrate at once; one applies, the others find nothing to do.
        let (x, y) = tokio::join!(
            crate::store::migrate_postgres(&o),
            crate::store::migrate_postgres(&o)
        );
        let (x, y) = (x.expect("migrate"), y.expect("migrate"));
        assert_eq!(
            [x.len(), y.len()].iter().sum::<usize>(),
            POSTGRES_SCHEMA_VERSION as usize,
            "{x:?} {y:?}"
        );
        assert!(PgStore::open(o.clone()).await.is_ok());
        // A schema written by a newer build is refused, and left as it is.
        let (client, conn) = tokio_postgres::connect(&support::url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client
            .batch_execute(&format!(
                "INSERT INTO {}.schema_migrations (version) VALUES (99)",
                pg.schema
            ))
            .await
            .expect("bump");
        let e = PgStore::open(o.clone()).await.expect_err("refused");
        assert!(matches!(e, StoreError::IncompatibleSchema(_)), "{e}");
        let e = crate::store::migrate_postgres(&o)
            .await
            .expect_err("refused");
        assert!(matches!(e, StoreError::IncompatibleSchema(_)), "{e}");
        // Hostile schema names never reach SQL.
        let mut bad = o.clone();
        bad.schema = "x; DROP TABLE tasks".into();
        assert!(matches!(
            PgStore::open(bad).await,
            Err(StoreError::Invalid(_))
        ));
    }

    /// A session of its own on the store's schema, beside the store's pool.
    async fn session(o: &crate::store::PgOptions) -> tokio_postgres::Client {
        let (client, conn) = o
            .pg_config()
            .expect("config")
            .connect(tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        client
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_have_connections_that_a_flood_of_writes_cannot_take() {
        let Some(pg) = fresh() else { return };
        let clock = ManualClock::new(Timestamp(T0));
        let mut o = options(&pg.schema, "node-a");
        o.pool_size = 4;
        assert_eq!(o.read_connections(), 1);
        let store = Arc::new(
            PgStore::open_with_clock(o.clone(), Arc::new(clock.clone()))
                .await
                .expect("open"),
        );
        let (locked, other) = (new_task("a"), new_task("b"));
        let (locked_id, other_id) = (locked.id, other.id);
        store.create(locked).await.expect("create");
        store.create(other).await.expect("create");
        // Another session locks one task's row: the write group that reaches it waits,
        // holding its connection, and the writes after it wait for the group.
        let mut blocker = session(&o).await;
        let lock = blocker.transaction().await.expect("begin");
        lock.execute(
            "SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE",
            &[&locked_id.as_bytes().as_slice()],
        )
        .await
        .expect("lock the row");
        let writes: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { cancel(&*store, "a", &locked_id).await })
            })
            .collect();
        // A write connection waits on the lock.
        let (watcher, conn) = tokio_postgres::connect(&support::url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        crate::testing::eventually("the write connections waiting on the lock", || async {
            let row = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock' AND query LIKE '%FROM tasks WHERE id = ANY($2)%'",
                    &[],
                )
                .await
                .ok()?;
            (row.get::<_, i64>(0) >= 1).then_some(())
        })
        .await;
        // The other tenant's read is answered while the writes wait.
        let reader = Principal::new("b", "y");
        let access = store
            .authorize(&reader, Action::Read, &other_id.to_string())
            .await
            .expect("a read beside the waiting writes");
        assert_eq!(store.get(&access).await.expect("get").id, other_id);
        lock.rollback().await.expect("let the writes go");
        for w in writes {
            let _ = w.await.expect("write task");
        }
    }

    /// Migration 4 counts the tasks a version-3 database already holds, terminal ones
    /// included, per scope.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_stored_counts_are_built_by_the_upgrade() {
        let Some(pg) = fresh() else { return };
        let o = options(&pg.schema, "node-a");
        let store = PgStore::open(o.clone()).await.expect("open");
        let digest = crate::model::component_digest(b"pinned component");
        for i in 0..3 {
            let mut n = new_task("a");
            if i < 2 {
                n.work.component_digest = Some(digest.clone());
            }
            store.create(n).await.expect("create");
        }
        let done = store.create(new_task("b")).await.expect("create").id;
        let claimed = store
            .claim(&done, &ClaimRequest::new(30_000, "w"))
            .await
            .expect("claim");
        finish(&store, &claimed.lease).await.expect("finish");
        drop(store);
        // Back to version 3, tasks kept: what a database of the earlier build holds.
        let client = session(&o).await;
        client
            .batch_execute(
                "DROP TABLE tally;
                 DROP INDEX tasks_list_tenant, tasks_list_status;
                 ALTER TABLE tasks DROP COLUMN tenant, DROP COLUMN tool,
                     DROP COLUMN created_at, DROP COLUMN updated_at;
                 ALTER TABLE live DROP COLUMN stored, DROP COLUMN bytes;
                 DROP TABLE revoked, components, deployments, pinned, schedules, webhooks,
                     outbox_seq, outbox_events, audit;
                 DROP FUNCTION swap_schedule;
                 DROP FUNCTION swap_webhook;
                 DROP FUNCTION outbox_append;
                 DELETE FROM schema_migrations WHERE version IN (4, 5, 6, 7, 8, 9)",
            )
            .await
            .expect("to version 3");
        assert_eq!(
            crate::store::migrate_postgres(&o).await.expect("upgrade"),
            [4, 5, 6, 7, 8, 9]
        );
        let store = PgStore::open(o.clone()).await.expect("open");
        // The listing columns and the tallies, from the tasks (schema 5).
        let counts = store.count_tasks(None).await.expect("counts");
        assert_eq!(counts.total(), 4);
        assert_eq!(counts.by_status[&crate::model::TaskStatus::Completed], 1);
        let page = store
            .list_tasks(&crate::store::TaskQuery::new(
                crate::store::TaskFilter {
                    tenant: Some("b".into()),
                    ..Default::default()
                },
                10,
            ))
            .await
            .expect("list");
        assert_eq!(page.tasks.iter().map(|t| t.id).collect::<Vec<_>>(), [done]);
        let capped = |scope: &str, max: u64| {
            let mut n = new_task(scope);
            n.max_stored_in_scope = Some(max);
            n
        };
        assert_eq!(
            store.create(capped("a", 3)).await.err(),
            Some(StoreError::StoredLimit { max: 3 })
        );
        store.create(capped("a", 4)).await.expect("three stored");
        // The live tasks' pins, from their work descriptors.
        store
            .store_component(b"pinned component", None)
            .await
            .expect("store");
        let listed = store.components().await.expect("components");
        assert_eq!(
            listed
                .iter()
                .map(|c| (&c.digest, c.pinned))
                .collect::<Vec<_>>(),
            [(&digest, 2)]
        );
        assert_eq!(
            store.create(capped("b", 1)).await.err(),
            Some(StoreError::StoredLimit { max: 1 }),
            "a finished task is counted"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_server_key_survives_the_upgrade_and_a_task_reader_cannot_read_it() {
        let Some(pg) = fresh() else { return };
        let o = options(&pg.schema, "node-a");
        let mut client = session(&o).await;
        // A database at version 1, whose key sits in `meta`.
        crate::store::postgres::schema::migrate_on(&mut client, &pg.schema, 1)
            .await
            .expect("version 1");
        let key = [7u8; 32];
        client
            .execute(
                "INSERT INTO meta (key, value) VALUES ('server_key', $1)",
                &[&key.as_slice()],
            )
            .await
            .expect("a version-1 key");
        let applied = crate::store::migrate_postgres(&o).await.expect("upgrade");
        assert_eq!(applied, [2, 3, 4, 5, 6, 7, 8, 9]);
        let store = PgStore::open(o.clone()).await.expect("open");
        assert_eq!(
            store.server_key().await.expect("key"),
            key,
            "kept across the upgrade"
        );
        let left = client
            .query_one("SELECT count(*) FROM meta WHERE key = 'server_key'", &[])
            .await
            .expect("meta");
        assert_eq!(left.get::<_, i64>(0), 0, "no copy left in meta");

        // A role granted what reporting needs: the task tables, and nothing else.
        let schema = &pg.schema;
        let reader = format!("{schema}_reader");
        client
            .batch_execute(&format!(
                "CREATE ROLE {reader};
                 GRANT USAGE ON SCHEMA {schema} TO {reader};
                 GRANT SELECT ON {schema}.tasks, {schema}.live, {schema}.meta TO {reader};
                 SET ROLE {reader}"
            ))
            .await
            .expect("a reporting role");
        let tasks = client
            .query_one(&format!("SELECT count(*) FROM {schema}.tasks"), &[])
            .await;
        let secret = client
            .query_one(&format!("SELECT value FROM {schema}.server_key"), &[])
            .await;
        client
            .batch_execute(&format!(
                "RESET ROLE;
                 REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {reader};
                 REVOKE ALL ON SCHEMA {schema} FROM {reader};
                 DROP ROLE {reader}"
            ))
            .await
            .expect("drop the role");
        assert!(tasks.is_ok(), "the reader reads tasks: {tasks:?}");
        let e = secret.expect_err("the key is not the reader's");
        assert_eq!(
            e.as_db_error().map(|d| d.code().code()),
            Some("42501"),
            "{e}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_database_fails_requests_at_once() {
        if !support::available() {
            return;
        }
        // Nothing listens on port 1: connecting is refused at once.
        let mut o = crate::store::PgOptions::new("host=127.0.0.1 port=1 user=postgres", "n");
        o.connect_timeout = Duration::from_secs(2);
        let started = std::time::Instant::now();
        let e = PgStore::open(o).await.expect_err("refused");
        assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
