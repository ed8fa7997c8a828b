//! `snodo stress` in contention mode: every store available here passes every invariant,
//! a store that lies fails the invariant it breaks, and the command reports as documented.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use snodo::model::EventKind;
use snodo::store::{
    Authority, Committed, Effect, Layer, Layered, Lease, MemoryStore, PgOptions, PgStore,
    RedbStore, SqliteStore, Store, StoreError, StoreResult, Transition, drop_postgres_schema,
};
use snodo::stress::{StressOptions, StressReport, contention, runner_batches};

use crate::common;

use common::process::{run_ok, snodo};

fn small() -> StressOptions {
    StressOptions {
        writers: 4,
        tasks: 4,
        ops: 4,
        rounds: 2,
        seed: 7,
    }
}

fn assert_all_pass(report: &StressReport) {
    for i in &report.invariants {
        assert!(
            i.verdict == "PASS" && i.checked > 0,
            "{}: {}\n{}",
            report.store,
            i.name,
            report.render()
        );
    }
    assert!(report.passed());
}

fn verdict<'a>(report: &'a StressReport, name: &str) -> &'a snodo::stress::Invariant {
    report
        .invariants
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no invariant {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_here_passes_every_contention_invariant() {
    let dir = tempfile::tempdir().expect("tmp");
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::new());
    assert_all_pass(&contention(memory, "memory", &small()).await);
    let redb: Arc<dyn Store> = Arc::new(RedbStore::open(dir.path().join("s.redb")).expect("redb"));
    assert_all_pass(&contention(redb, "redb", &small()).await);
    let sqlite: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("s.sqlite")).expect("sqlite"));
    assert_all_pass(&contention(sqlite, "sqlite", &small()).await);

    if !common::postgres_reachable("contention stress on postgres") {
        return;
    }
    let pg = postgres("stress-test");
    let store: Arc<dyn Store> = Arc::new(PgStore::open(pg.clone()).await.expect("pg"));
    let report = contention(store, "postgres", &small()).await;
    drop_postgres_schema(&pg).await.expect("drop");
    assert_all_pass(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_batches_hold_every_invariant_on_every_store_here() {
    let components = [
        std::path::PathBuf::from(snodo_test_guests::FIXTURES),
        std::path::PathBuf::from(snodo_test_guests::EXAMPLES),
    ];
    // Each kind of task once a batch, two batches.
    let opts = StressOptions {
        tasks: 8,
        rounds: 2,
        ..small()
    };
    let dir = tempfile::tempdir().expect("tmp");
    let stores: Vec<(&str, Arc<dyn Store>)> = vec![
        ("memory", Arc::new(MemoryStore::new())),
        (
            "redb",
            Arc::new(RedbStore::open(dir.path().join("r.redb")).expect("redb")),
        ),
        (
            "sqlite",
            Arc::new(SqliteStore::open(dir.path().join("r.sqlite")).expect("sqlite")),
        ),
    ];
    for (name, store) in stores {
        let report = runner_batches(store, name, &components, &opts)
            .await
            .expect("runs");
        assert_all_pass(&report);
        assert_eq!(verdict(&report, "every_task_terminal").checked, 16);
    }
    if !common::postgres_reachable("runner-batch stress on postgres") {
        return;
    }
    let pg = postgres("stress-runner");
    let store: Arc<dyn Store> = Arc::new(PgStore::open(pg.clone()).await.expect("pg"));
    let report = runner_batches(store, "postgres", &components, &opts).await;
    drop_postgres_schema(&pg).await.expect("drop");
    assert_all_pass(&report.expect("runs"));
}

/// The machine's PostgreSQL as node `node`, in a schema of its own named after the node and
/// this process.
fn postgres(node: &str) -> PgOptions {
    let mut pg = PgOptions::new("host=127.0.0.1 port=5432 user=postgres dbname=test", node);
    pg.schema = format!("snodo_{}_{}", node.replace('-', "_"), std::process::id());
    pg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_makes_the_same_workload() {
    let run = || async {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        contention(store, "memory", &small()).await
    };
    let (a, b) = (run().await, run().await);
    // The counts that do not depend on the interleaving are equal.
    for name in [
        "event_id_replays_its_revision",
        "event_id_reuse_refused",
        "stale_lease_never_commits",
        "one_terminal_state",
    ] {
        assert_eq!(
            verdict(&a, name).checked,
            verdict(&b, name).checked,
            "{name}"
        );
    }
    assert_eq!(
        verdict(&a, "event_id_replays_its_revision").checked,
        2 * 4 * 4
    );
}

/// What a lying store gets wrong.
#[derive(Clone, Copy)]
enum Fault {
    /// Acknowledges every third status message without committing it.
    LosesAcknowledgedWrites,
    /// Reports a commit under a lease it refused as stale.
    CommitsStaleGenerations,
}

/// A layer that breaks one promise of the store beneath it.
struct Lying {
    fault: Fault,
    n: AtomicU64,
}

impl Lying {
    async fn fake(&self, inner: &dyn Store, lease: &Lease) -> StoreResult<Committed> {
        let (task, _) = inner
            .inspect(lease.task_id())
            .await?
            .ok_or(StoreError::NotFound)?;
        Ok(Committed {
            revision: task.revision + 1,
            task,
            replayed: false,
            effect: Effect::Applied,
        })
    }
}

#[async_trait]
impl Layer for Lying {
    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        let status = matches!(t.event.kind, EventKind::StatusMessage { .. });
        match (self.fault, t.by) {
            (Fault::LosesAcknowledgedWrites, Authority::Worker(lease))
                if status && t.expected_revision.is_some() =>
            {
                if self.n.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
                    return self.fake(inner, lease).await;
                }
                t.apply(inner).await
            }
            (Fault::CommitsStaleGenerations, Authority::Worker(lease)) => {
                match t.apply(inner).await {
                    Err(StoreError::LeaseLost) => self.fake(inner, lease).await,
                    other => other,
                }
            }
            _ => t.apply(inner).await,
        }
    }
}

fn lying(fault: Fault) -> Arc<dyn Store> {
    Arc::new(Layered::over(
        Arc::new(MemoryStore::new()),
        Lying {
            fault,
            n: AtomicU64::new(0),
        },
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_loses_acknowledged_writes_fails_that_invariant() {
    let report = contention(lying(Fault::LosesAcknowledgedWrites), "lossy", &small()).await;
    let lost = verdict(&report, "acknowledged_writes_present");
    assert_eq!(lost.verdict, "FAIL", "{}", report.render());
    assert!(lost.violations > 0 && !lost.examples.is_empty());
    assert!(!report.passed());
    // What it does not break still passes.
    assert_eq!(
        verdict(&report, "stale_lease_never_commits").verdict,
        "PASS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_commits_a_stale_generation_fails_that_invariant() {
    let report = contention(lying(Fault::CommitsStaleGenerations), "stale", &small()).await;
    let stale = verdict(&report, "stale_lease_never_commits");
    assert_eq!(stale.verdict, "FAIL", "{}", report.render());
    // Every stale commit attempt (one per task and round) was caught.
    assert_eq!(stale.violations, 2 * 4);
    assert!(!report.passed());
}

#[test]
fn the_command_prints_every_invariant_and_exits_by_the_verdict() {
    let out = run_ok(&mut snodo(&[
        "stress",
        "--store",
        "sqlite",
        "--writers",
        "3",
        "--tasks",
        "3",
        "--ops",
        "3",
        "--rounds",
        "1",
        "--json",
    ]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let invariants = report["invariants"].as_array().expect("invariants");
    assert_eq!(invariants.len(), 8, "{report}");
    assert!(
        invariants.iter().all(|i| i["verdict"] == "PASS"),
        "{report}"
    );
    assert!(report["timings"].as_array().is_some_and(|t| !t.is_empty()));
    let out = snodo(&["stress", "--store", "mongo"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--store"));
}

/// `snodo stress --kill` on a store: the JSON report, every invariant PASS.
fn kill_mode(args: &[&str], invariants: usize) -> serde_json::Value {
    let out = snodo(&[
        "stress",
        "--kill",
        "--rounds",
        "2",
        "--writers",
        "2",
        "--json",
    ])
    .args(["--component", snodo_test_guests::FIXTURES])
    .args(["--component", snodo_test_guests::EXAMPLES])
    .args(args)
    .output()
    .expect("run snodo stress --kill");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no JSON report: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{report}");
    let all = report["invariants"].as_array().expect("invariants");
    assert_eq!(all.len(), invariants, "{report}");
    for i in all {
        assert!(
            i["verdict"] == "PASS" && i["checked"].as_u64() > Some(0),
            "{report}"
        );
    }
    report
}

#[test]
fn killed_servers_keep_every_acknowledged_reply_on_the_file_stores() {
    for store in ["redb", "sqlite"] {
        // The crash invariants, and the backups' two on a file store.
        let report = kill_mode(&["--store", store], 14);
        assert_eq!(report["mode"], "kill");
    }
    let out = snodo(&["stress", "--kill", "--store", "memory"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(2),
        "a volatile store cannot be crash-tested"
    );
}

#[test]
fn a_killed_node_of_two_loses_nothing_on_postgres() {
    if !common::postgres_reachable("crash stress on postgres") {
        return;
    }
    kill_mode(&["--store", "postgres", "--nodes", "2"], 12);
}

/// The PostgreSQL scenarios that the README's test command runs, short: the server crashing
/// (restart), the node's connections killed mid-transaction (terminate) and more clients
/// than the pool (pool) cover a lost server, lost sessions and saturation. The other
/// scenarios (long readers and held snapshots, overload, bursts) measure degradation more
/// than they find lost writes; `snodo stress --chaos` runs all of them.
const CHAOS_IN_TESTS: [&str; 3] = ["restart", "terminate", "pool"];

/// `snodo stress --chaos`, short: the [`CHAOS_IN_TESTS`] scenarios against a node on a server
/// made for each, with every invariant checked and every phase measured. Needs the
/// PostgreSQL server binaries (initdb, pg_ctl); CI has them.
#[test]
fn chaos_scenarios_hold_on_a_postgres_of_their_own() {
    let installed = [
        "/usr/lib/postgresql",
        "/usr/local/bin/initdb",
        "/usr/bin/initdb",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
        || std::env::var_os("SNODO_PG_BIN").is_some();
    if !installed {
        assert!(
            std::env::var("CI").is_err(),
            "CI must run the chaos scenarios: install PostgreSQL's server binaries"
        );
        eprintln!("SKIPPED: no PostgreSQL server binaries; the chaos scenarios did not run");
        return;
    }
    let mut args = vec!["stress", "--chaos"];
    for name in CHAOS_IN_TESTS {
        args.extend(["--scenario", name]);
    }
    args.extend([
        "--phase-ms",
        "1500",
        "--pin-ms",
        "1500",
        "--clients",
        "8",
        "--burst",
        "1000",
        "--component",
        snodo_test_guests::EXAMPLES,
        "--json",
    ]);
    let out = run_ok(&mut snodo(&args));
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let reports = reports.as_array().expect("one report per scenario");
    let names: Vec<&str> = reports
        .iter()
        .map(|r| r["scenario"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names, CHAOS_IN_TESTS,
        "the scenarios asked for, in their order"
    );
    for name in CHAOS_IN_TESTS {
        assert!(
            snodo::stress::SCENARIOS.iter().any(|(n, _)| *n == name),
            "{name} is a scenario of `snodo stress --chaos`"
        );
    }
    for r in reports {
        for i in r["invariants"].as_array().expect("invariants") {
            assert!(
                i["verdict"] == "PASS" && i["checked"].as_u64() > Some(0),
                "{}: {i}",
                r["scenario"]
            );
        }
        let phases = r["phases"].as_array().expect("phases");
        assert_eq!(phases.len(), 3);
        assert!(
            phases[0]["completed_per_s"].as_f64() > Some(0.0)
                && phases[2]["completed_per_s"].as_f64() > Some(0.0),
            "work completes before and after the fault: {r}"
        );
        assert!(
            r["tables_after"]
                .as_array()
                .expect("tables")
                .iter()
                .any(|t| t["table"] == "tasks"),
            "{r}"
        );
    }
}
