//! `snodo stress`: seeded correctness workloads that count every invariant exactly.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use snodo::store::{PgOptions, Store, StoreConfig, StoreKind};
use snodo::stress::{CrashStore, StressOptions, StressReport};

/// Run a seeded correctness workload against a store and print every invariant with its
/// exact count and PASS/FAIL (exit code 1 when any fails). See docs/stress.md.
#[derive(Debug, clap::Args)]
pub(crate) struct StressArgs {
    /// `contention` (writers racing on shared tasks) or `runner` (mixed batches of real
    /// guests through a runner).
    #[arg(long, default_value = "contention")]
    mode: String,
    /// The store to run against.
    #[arg(long, value_enum, default_value_t = StoreKind::Memory)]
    store: StoreKind,
    /// Runner mode: the fixtures and examples components (default: the example guests).
    #[arg(long = "component")]
    components: Vec<PathBuf>,
    /// The redb or SQLite file (default: a fresh temporary file, removed after).
    #[arg(long)]
    path: Option<PathBuf>,
    /// PostgreSQL: the connection string (a fresh schema is made and dropped after).
    #[arg(long, default_value = super::PG_URL)]
    pg_url: String,
    #[command(flatten)]
    workload: StressOptions,
    /// Crash mode: `snodo serve` children on the store (redb, sqlite or postgres) are
    /// killed with SIGKILL `--rounds` times at seeded moments under a mixed workload of
    /// `--writers` clients, restarted, and every acknowledged reply is checked.
    #[arg(long)]
    kill: bool,
    /// Crash mode on PostgreSQL: how many nodes share the store (one is killed each
    /// round).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Chaos mode: the PostgreSQL scenarios (docs/postgres.md), each against a `snodo
    /// serve` node on a PostgreSQL server made for it (initdb with the installed
    /// binaries, on a free port), never the one `--pg-url` names.
    #[arg(long)]
    chaos: bool,
    /// Chaos mode: the length of each phase (before, during, after the fault).
    #[arg(long, default_value_t = 10_000)]
    phase_ms: u64,
    /// Chaos mode: clients in the steady load.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Chaos mode: creations in the burst scenario.
    #[arg(long, default_value_t = 50_000)]
    burst: usize,
    /// Chaos mode: how long the idle-in-transaction session pins xmin (the idle_xmin
    /// scenario's phases last at least this long; at most 600 s).
    #[arg(long, default_value_t = 60_000)]
    pin_ms: u64,
    /// Chaos mode: run only these scenarios (repeatable; default all).
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Chaos mode: every scenario, its figures and its verdict.
fn chaos(runtime: &tokio::runtime::Runtime, args: &StressArgs) -> ExitCode {
    let components = match &args.components[..] {
        [] => match super::default_components() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("snodo stress: {e}");
                return ExitCode::from(2);
            }
        },
        c => c.to_vec(),
    };
    let bin = match std::env::current_exe() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("snodo stress: where is snodo? {e}");
            return ExitCode::from(2);
        }
    };
    let opts = snodo::stress::ChaosOptions {
        phase: std::time::Duration::from_millis(args.phase_ms.max(100)),
        clients: args.clients,
        burst: args.burst,
        pin: std::time::Duration::from_millis(args.pin_ms),
        only: args.scenarios.clone(),
    };
    // The pin lasts the idle_xmin scenario's "during" phase, which it lengthens.
    let opts = snodo::stress::ChaosOptions {
        pin: opts.pin.min(std::time::Duration::from_secs(600)),
        ..opts
    };
    match runtime.block_on(snodo::stress::chaos(&bin, &components, &opts)) {
        Ok(reports) => {
            if args.json {
                super::print_json(&reports);
            } else {
                for r in &reports {
                    print!("{}", render(r));
                }
            }
            if reports.iter().all(|r| r.passed()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("snodo stress --chaos: {e}");
            ExitCode::from(2)
        }
    }
}

/// One chaos scenario as text.
fn render(r: &snodo::stress::ScenarioReport) -> String {
    let mut out = format!(
        "scenario {}: {} ({} tasks, {} ms)\n",
        r.scenario, r.fault, r.tasks, r.elapsed_ms
    );
    out.push_str("  phase    completed/s  created  claim p50 ms  claim p99 ms\n");
    for p in &r.phases {
        out.push_str(&format!(
            "  {:<7} {:>12.0} {:>8} {:>13} {:>13}\n",
            p.phase, p.completed_per_s, p.created, p.claim_p50_ms, p.claim_p99_ms
        ));
    }
    out.push_str(
        "  table              dead before  dead after  size before  size after (table+indexes)\n",
    );
    for after in &r.tables_after {
        let before = r.tables_before.iter().find(|b| b.table == after.table);
        let size = |t: &snodo::stress::TableFigure| t.table_bytes + t.index_bytes;
        out.push_str(&format!(
            "  {:<18} {:>11} {:>11} {:>12} {:>11}\n",
            after.table,
            before.map_or(0, |b| b.dead),
            after.dead,
            before.map_or(0, size),
            size(after)
        ));
    }
    out.push_str(&snodo::stress::render_invariants(&r.invariants, "  "));
    out.push('\n');
    out
}

/// Runs the workload and prints its verdict.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: StressArgs) -> ExitCode {
    if args.chaos {
        return chaos(runtime, &args);
    }
    let mode = if args.kill {
        "kill".to_owned()
    } else {
        args.mode.clone()
    };
    let components = if mode != "contention" && args.components.is_empty() {
        match super::default_components() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("snodo stress: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        args.components.clone()
    };
    let run = Workload {
        mode: &mode,
        components: &components,
        opts: &args.workload,
        nodes: args.nodes,
    };
    match runtime.block_on(stress(args.store, args.path.clone(), &args.pg_url, &run)) {
        Ok(report) => {
            if args.json {
                super::print_json(&report);
            } else {
                print!("{}", report.render());
            }
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("snodo stress: {e}");
            ExitCode::from(2)
        }
    }
}

/// Which workload `snodo stress` runs.
struct Workload<'a> {
    mode: &'a str,
    components: &'a [PathBuf],
    opts: &'a StressOptions,
    nodes: usize,
}

impl Workload<'_> {
    async fn run(&self, store: Arc<dyn Store>, name: &str) -> Result<StressReport, String> {
        match self.mode {
            "contention" => Ok(snodo::stress::contention(store, name, self.opts).await),
            "runner" => {
                snodo::stress::runner_batches(store, name, self.components, self.opts).await
            }
            other => Err(format!("--mode {other:?}: use contention or runner")),
        }
    }
}

/// Opens the store `kind` names (fresh unless a file is given), runs the workload on it,
/// and removes what it made.
async fn stress(
    kind: StoreKind,
    path: Option<PathBuf>,
    pg_url: &str,
    run: &Workload<'_>,
) -> Result<StressReport, String> {
    let scratch = crate::scratch::temp_dir("stress")?;
    let file = |name: &str| path.clone().unwrap_or_else(|| scratch.join(name));
    if run.mode == "kill" {
        let report = crash(kind, &file, pg_url, run).await;
        let _ = std::fs::remove_dir_all(&scratch);
        return report;
    }
    let file = match kind {
        StoreKind::Sqlite => file("stress.sqlite"),
        _ => file("stress.redb"),
    };
    let schema = format!("snodo_stress_{}", std::process::id());
    let opened = crate::scratch::ScratchStore::open(kind, &file, pg_url, schema).await?;
    let report = run.run(opened.store.clone(), kind.as_str()).await;
    opened.remove().await?;
    let report = report?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(report)
}

/// Crash mode: `snodo serve` children killed under load, then the store read back.
async fn crash(
    kind: StoreKind,
    file: &dyn Fn(&str) -> PathBuf,
    pg_url: &str,
    run: &Workload<'_>,
) -> Result<StressReport, String> {
    let bin = std::env::current_exe().map_err(|e| format!("where is snodo? {e}"))?;
    if run.nodes > 1 && kind != StoreKind::Postgres {
        return Err("--nodes: only a PostgreSQL store is shared by several nodes".into());
    }
    let (crash_store, reader) = match kind {
        StoreKind::Redb => {
            let path = file("stress.redb");
            (CrashStore::Redb(path.clone()), StoreConfig::Redb(path))
        }
        StoreKind::Sqlite => {
            let path = file("stress.sqlite");
            (CrashStore::Sqlite(path.clone()), StoreConfig::Sqlite(path))
        }
        StoreKind::Postgres => {
            let mut pg = PgOptions::new(pg_url, snodo::serve::default_node_id());
            pg.schema = format!("snodo_stress_kill_{}", std::process::id());
            pg.migrate = false;
            let store = CrashStore::Postgres {
                url: pg_url.to_owned(),
                schema: pg.schema.clone(),
            };
            (store, StoreConfig::Postgres(pg))
        }
        StoreKind::Memory => {
            return Err(
                "--kill --store memory: crash mode needs a durable store: redb, sqlite or postgres"
                    .into(),
            );
        }
    };
    // The verdict reads, in this process, the store the children used, once they are gone.
    let open = || async {
        reader
            .open()
            .await
            .map(|o| o.store)
            .map_err(|e| e.to_string())
    };
    let report = snodo::stress::crash(
        &bin,
        crash_store,
        run.nodes,
        run.components,
        run.opts,
        kind.as_str(),
        open,
    )
    .await;
    if let StoreConfig::Postgres(pg) = &reader {
        snodo::store::drop_postgres_schema(pg)
            .await
            .map_err(|e| e.to_string())?;
    }
    report
}
