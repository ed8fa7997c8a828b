//! Chaos mode on PostgreSQL (`snodo stress --chaos`): what breaks job queues, against a
//! `snodo serve` node on a PostgreSQL server of its own.
//!
//! Each scenario runs a steady load (clients creating tasks that finish at once and polling
//! them to the end) in three phases: before, during and after a fault, and reports each
//! phase's completed tasks per second and claim latency (how long tasks waited to be
//! claimed, from their histories), with the tables' dead tuples and sizes before and after.
//! Then it checks, exactly, what a client was told: every acknowledged task exists, none
//! completes twice or changes its result, every task ends terminal (or, for the burst and
//! overload scenarios, terminal or due and claimable), and the node finishes new work after
//! the fault without a restart.
//!
//! The server is made for the run (`initdb` into a temporary directory with the installed
//! binaries, on a free port) and removed after: scenarios that restart it or pin its
//! vacuum never touch a shared server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};

use crate::model::{HistoryKind, TaskId, TaskStatus};
use crate::store::{PgOptions, Store, StoreConfig};

use super::crash::{Node, components_toml, rpc, start};
use super::{Invariant, Observed, Shared, check, observed, verdicts};

/// The scenarios, in the order they run.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "restart",
        "PostgreSQL restarted (immediate shutdown, as a crash)",
    ),
    (
        "terminate",
        "the node's backends terminated mid-transaction (pg_terminate_backend), repeatedly",
    ),
    (
        "pool",
        "a burst of concurrent clients many times the connection pool",
    ),
    (
        "idle_xmin",
        "an idle-in-transaction session pinning xmin for the whole phase",
    ),
    (
        "rr_readers",
        "long REPEATABLE READ readers scanning the tasks table",
    ),
    ("overload", "creations at 1.5x the measured capacity"),
    (
        "burst",
        "a burst of creations as fast as the node accepts them",
    ),
];

const CHAOS_INVARIANTS: &[(&str, &str)] = &[
    (
        "acknowledged_tasks_exist",
        "every task whose creation was acknowledged is in the store",
    ),
    (
        "completed_once",
        "a task completes once: one completion in its history, the result a client saw kept",
    ),
    (
        "terminal_or_recoverable",
        "every task ends terminal, or (burst, overload) due and claimable by a node",
    ),
    (
        "recovers_without_restart",
        "after the fault the same node completes new tasks",
    ),
];

/// How long each phase lasts, and how much load.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// Each phase's length.
    pub phase: Duration,
    /// Clients in the steady load.
    pub clients: usize,
    /// Creations in the burst scenario.
    pub burst: usize,
    /// How long the idle-in-transaction session holds xmin; the idle_xmin scenario's
    /// phases last at least this long.
    pub pin: Duration,
    /// The scenarios to run (names from [`SCENARIOS`]); empty runs all.
    pub only: Vec<String>,
}

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseFigure {
    /// `before`, `during` or `after`.
    pub phase: &'static str,
    /// Tasks seen completed in the phase, per second.
    pub completed_per_s: f64,
    /// Tasks created in the phase.
    pub created: u64,
    /// Claim latency of the tasks created in the phase (from their histories), median.
    pub claim_p50_ms: u64,
    /// Its 99th percentile.
    pub claim_p99_ms: u64,
}

/// A table's state.
#[derive(Debug, Clone, Serialize)]
pub struct TableFigure {
    /// The table.
    pub table: String,
    /// Live tuples.
    pub live: i64,
    /// Dead tuples.
    pub dead: i64,
    /// The table's size in bytes (heap).
    pub table_bytes: i64,
    /// Its indexes' size in bytes.
    pub index_bytes: i64,
}

/// One scenario's report.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// Its name.
    pub scenario: &'static str,
    /// What it does.
    pub fault: &'static str,
    /// The phases.
    pub phases: Vec<PhaseFigure>,
    /// Tables before the run.
    pub tables_before: Vec<TableFigure>,
    /// Tables after the run.
    pub tables_after: Vec<TableFigure>,
    /// Every invariant with its exact counts.
    pub invariants: Vec<Invariant>,
    /// Tasks the run created.
    pub tasks: u64,
    /// Wall time.
    pub elapsed_ms: u64,
}

impl ScenarioReport {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.invariants.iter().all(|i| i.verdict == "PASS")
    }
}

/// A PostgreSQL server of the run's own: initdb into a temporary directory, on a free
/// port, stopped and removed when dropped.
pub struct PgInstance {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Run the server's commands as this user (a root caller cannot run PostgreSQL).
    as_user: Option<String>,
}

impl Drop for PgInstance {
    fn drop(&mut self) {
        let _ = self.ctl(&["stop", "-m", "immediate", "-w"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where the server binaries are: `SNODO_PG_BIN`, `pg_config --bindir`, the PATH, or
/// Debian's `/usr/lib/postgresql/*/bin`.
fn pg_bin() -> Option<PathBuf> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Ok(d) = std::env::var("SNODO_PG_BIN") {
        return Some(PathBuf::from(d)).filter(|d| has(d));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has(&d) {
            return Some(d);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if has(&d) {
                return Some(d);
            }
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| has(d))
        .collect();
    versions.sort();
    versions.pop()
}

impl PgInstance {
    /// Makes and starts a server, or says why it cannot.
    pub fn start() -> Result<Self, String> {
        let bin = pg_bin().ok_or(
            "no PostgreSQL server binaries (initdb, pg_ctl) found: set SNODO_PG_BIN, or install them",
        )?;
        // This process's effective user owns its /proc entry.
        let root = std::os::unix::fs::MetadataExt::uid(
            &std::fs::metadata("/proc/self").map_err(|e| format!("/proc/self: {e}"))?,
        ) == 0;
        let as_user = root.then(|| "postgres".to_owned());
        let dir = std::env::temp_dir().join(format!("snodo-chaos-pg-{}", TaskId::generate()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if root {
            // initdb refuses to run as root: the data directory belongs to `postgres`.
            let out = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .output()
                .map_err(|e| format!("chown: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "running as root, the server needs the user `postgres`: chown said {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let me = Self {
            bin,
            dir,
            port,
            as_user,
        };
        let data = me.data();
        me.run(
            "initdb",
            &["-D", &data, "-U", "postgres", "-A", "trust", "--no-sync"],
        )?;
        // The settings a node relies on (docs/postgres.md): autovacuum on and prompt.
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\nmax_connections = 200\nfsync = on\nautovacuum = on\nautovacuum_naptime = 1\nlog_min_messages = fatal\n",
            me.dir.display()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(me.dir.join("data").join("postgresql.conf"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, conf.as_bytes()))
            .map_err(|e| format!("postgresql.conf: {e}"))?;
        me.ctl(&["start", "-w", "-t", "60", "-l", &me.log()])?;
        Ok(me)
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn log(&self) -> String {
        self.dir.join("server.log").display().to_string()
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(program);
        let mut cmd = match &self.as_user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out = cmd
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn ctl(&self, args: &[&str]) -> Result<(), String> {
        let data = self.data();
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all)
    }

    /// Restarts the server as after a crash: an immediate shutdown, then a start.
    pub fn restart(&self) -> Result<(), String> {
        self.ctl(&[
            "restart",
            "-m",
            "immediate",
            "-w",
            "-t",
            "60",
            "-l",
            &self.log(),
        ])
    }

    /// The connection string.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// A connection for the scenario's own sessions (named `snodo-chaos`, which the
    /// terminate scenario spares).
    pub async fn connect(&self) -> Result<tokio_postgres::Client, String> {
        let url = format!("{} application_name=snodo-chaos", self.url());
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        tokio::spawn(conn);
        Ok(client)
    }
}

/// What the load saw of one task.
#[derive(Debug, Clone)]
struct Seen {
    created_at: Instant,
    result: Option<Value>,
}

#[derive(Default)]
struct Load {
    tasks: Mutex<Vec<(String, Seen)>>,
    completed_at: Mutex<Vec<Instant>>,
    stop: AtomicBool,
    created: AtomicU64,
}

/// One client: create a task that finishes at once, poll it to the end, again; until told
/// to stop. With `fire_and_forget`, only creates (the overload and burst arrivals).
async fn client(addr: SocketAddr, load: Arc<Load>, fire_and_forget: bool) {
    while !load.stop.load(Ordering::Relaxed) {
        let Some(reply) = rpc(
            addr,
            "tools/call",
            json!({"name": "flaky", "arguments": {"succeed_on_attempt": 1}}),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Some(id) = reply["result"]["taskId"].as_str().map(str::to_owned) else {
            // Refused (a limit, the store unavailable): nothing was acknowledged.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let created_at = Instant::now();
        load.created.fetch_add(1, Ordering::Relaxed);
        let index = {
            let mut t = load.tasks.lock();
            t.push((
                id.clone(),
                Seen {
                    created_at,
                    result: None,
                },
            ));
            t.len() - 1
        };
        if fire_and_forget {
            continue;
        }
        poll(addr, &load, index, &id).await;
    }
}

/// Polls task `id` until it is terminal or the load stops; notes its completion.
async fn poll(addr: SocketAddr, load: &Load, index: usize, id: &str) {
    loop {
        if let Some(r) = rpc(addr, "tasks/get", json!({"taskId": id})).await {
            match r["result"]["status"].as_str() {
                Some("completed") => {
                    load.completed_at.lock().push(Instant::now());
                    load.tasks.lock()[index].1.result =
                        Some(super::as_kept(&r["result"]["result"]));
                    return;
                }
                Some("failed" | "cancelled") => return,
                _ => {}
            }
        }
        if load.stop.load(Ordering::Relaxed) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn table_figures(pg: &tokio_postgres::Client) -> Vec<TableFigure> {
    let rows = pg
        .query(
            "SELECT relname::text, n_live_tup, n_dead_tup, pg_table_size(relid), pg_indexes_size(relid) \
             FROM pg_stat_user_tables WHERE schemaname = 'snodo' ORDER BY relname",
            &[],
        )
        .await
        .unwrap_or_default();
    rows.iter()
        .map(|r| TableFigure {
            table: r.get(0),
            live: r.get(1),
            dead: r.get(2),
            table_bytes: r.get(3),
            index_bytes: r.get(4),
        })
        .collect()
}

fn node_config(dir: &Path, url: &str, components: &[PathBuf]) -> PathBuf {
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\ncache_dir = {:?}\n\n[node]\nid = \"chaos-node\"\n\n[store]\nkind = \"postgres\"\nurl = {url:?}\nschema = \"snodo\"\nmigrate = true\n\n[runner]\nlease_ms = 3000\nheartbeat_ms = 500\n\n[limits]\nlive_tasks_per_tenant = 1000000\nstored_tasks_per_tenant = 10000000\ntask_creates_per_second = 1000000\ntask_create_burst = 1000000\n",
        dir.join("cache").display().to_string()
    );
    text.push_str(&components_toml(components));
    let path = dir.join("node.toml");
    let _ = std::fs::write(&path, text);
    path
}

/// Runs the scenarios, each on a server of its own.
pub async fn chaos(
    bin: &Path,
    components: &[PathBuf],
    opts: &ChaosOptions,
) -> Result<Vec<ScenarioReport>, String> {
    let mut reports = Vec::new();
    for (name, fault) in SCENARIOS {
        if !opts.only.is_empty() && !opts.only.iter().any(|o| o == name) {
            continue;
        }
        reports.push(scenario(bin, components, opts, name, fault).await?);
    }
    if reports.is_empty() {
        return Err(format!(
            "--scenario: none of {:?} is a scenario ({})",
            opts.only,
            SCENARIOS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(reports)
}

/// Runs scenario `name` on a server of its own: the load before, during and after its
/// fault, then the verdict.
async fn scenario(
    bin: &Path,
    components: &[PathBuf],
    opts: &ChaosOptions,
    name: &'static str,
    fault: &'static str,
) -> Result<ScenarioReport, String> {
    let began = Instant::now();
    // The pin lasts the whole "during" phase: a longer pin lengthens this scenario's
    // phases, and no other's.
    let phase = if name == "idle_xmin" {
        opts.phase.max(opts.pin)
    } else {
        opts.phase
    };
    let pg = PgInstance::start()?;
    let dir = pg.dir.join("node");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let node: Node = start(bin, &node_config(&dir, &pg.url(), components))?;
    let admin = pg.connect().await?;
    let load = Arc::new(Load::default());
    let steady: Vec<_> = (0..opts.clients.max(1))
        .map(|_| tokio::spawn(client(node.addr, load.clone(), false)))
        .collect();

    // Before.
    let clock = EpochClock::now();
    let t0 = Instant::now();
    let tables_before = table_figures(&admin).await;
    tokio::time::sleep(phase).await;
    let t1 = Instant::now();
    let capacity = load.completed_at.lock().len() as f64 / (t1 - t0).as_secs_f64();

    // During.
    let extra = Arc::new(Load::default());
    let t2 = t1 + phase;
    let fault_at = Fault {
        pg: &pg,
        addr: node.addr,
        extra: &extra,
        until: t2,
        capacity,
    };
    let (helpers, lenient) = inject(name, opts, &fault_at).await?;
    tokio::time::sleep_until(t2.into()).await;
    extra.stop.store(true, Ordering::Relaxed);
    stop_helpers(helpers, phase * 4).await;

    // After.
    let t2 = t2.max(Instant::now());
    tokio::time::sleep(phase).await;
    let t3 = Instant::now();
    stop_clients(&load, steady).await;

    let o: Shared = Arc::default();
    let store = judge_store(&pg).await?;
    let mut all: Vec<(String, Seen)> = std::mem::take(&mut *load.tasks.lock());
    // The steady load's tasks first: only the fault's own arrivals (the burst, the
    // overload) may be left waiting.
    let steady_count = all.len();
    all.extend(std::mem::take(&mut *extra.tasks.lock()));
    // The node finishes what it was given, the backlog of the overload and the burst
    // included, within the settle bound; what is left then is judged as it stands.
    settle(&*store, &all, SETTLE_BOUND).await;
    let fresh = Load::default();
    recovers(&o, node.addr, &fresh).await;
    let extra_count = all.len() - steady_count;
    all.extend(std::mem::take(&mut *fresh.tasks.lock()));
    // The admin session may not have survived the fault (a restart ends it).
    let tables_after = table_figures(&pg.connect().await?).await;
    drop(node);
    let may_wait = |i: usize| lenient && i >= steady_count && i < steady_count + extra_count;
    let judged = judge_all(&*store, &o, &all, may_wait).await?;
    let phases = vec![
        judged.phase(clock, &all, "before", t0, t1),
        judged.phase(clock, &all, "during", t1, t2),
        judged.phase(clock, &all, "after", t2, t3),
    ];
    let mut o: Observed = observed(o);
    let invariants = verdicts(&mut o, CHAOS_INVARIANTS);
    Ok(ScenarioReport {
        scenario: name,
        fault,
        phases,
        tables_before,
        tables_after,
        invariants,
        tasks: all.len() as u64,
        elapsed_ms: began.elapsed().as_millis() as u64,
    })
}

/// Ties the two clocks of a run: phases are instants here, and store times (ms since the
/// epoch) in the histories.
#[derive(Clone, Copy)]
struct EpochClock {
    base: Instant,
    base_ms: u64,
}

impl EpochClock {
    fn now() -> Self {
        let base = Instant::now();
        let base_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self { base, base_ms }
    }

    /// The store time of instant `t`.
    fn ms(self, t: Instant) -> u64 {
        let since = |a: Instant, b: Instant| a.saturating_duration_since(b).as_millis() as u64;
        self.base_ms + since(t, self.base) - since(self.base, t)
    }
}

/// Where a scenario's fault is made, and on what.
struct Fault<'a> {
    pg: &'a PgInstance,
    /// The node.
    addr: SocketAddr,
    /// The load the fault's own clients add.
    extra: &'a Arc<Load>,
    /// The end of the "during" phase.
    until: Instant,
    /// Tasks per second the node completed before the fault.
    capacity: f64,
}

/// Makes scenario `name`'s fault: what it left running through the phase, and whether the
/// fault's own arrivals may be left waiting (burst, overload).
async fn inject(
    name: &str,
    opts: &ChaosOptions,
    at: &Fault<'_>,
) -> Result<(Vec<tokio::task::JoinHandle<()>>, bool), String> {
    let mut helpers = Vec::new();
    match name {
        "restart" => tokio::task::block_in_place(|| at.pg.restart())?,
        "terminate" => helpers.push(tokio::spawn(terminate_backends(at.pg.url(), at.until))),
        "pool" => {
            for _ in 0..opts.clients.max(1) * 8 {
                helpers.push(tokio::spawn(client(at.addr, at.extra.clone(), false)));
            }
        }
        "idle_xmin" => helpers.push(tokio::spawn(pin_xmin(at.pg.connect().await?, opts.pin))),
        "rr_readers" => {
            for _ in 0..4 {
                helpers.push(tokio::spawn(rr_reader(at.pg.connect().await?, at.until)));
            }
        }
        "overload" => {
            // Open-loop arrivals at 1.5x what the node completed before.
            let rate = (at.capacity * 1.5).max(10.0);
            let arrivals = overload(at.addr, at.extra.clone(), rate, at.until);
            return Ok((vec![tokio::spawn(arrivals)], true));
        }
        "burst" => {
            let arrivals = burst(at.addr, at.extra.clone(), opts.burst);
            return Ok((vec![tokio::spawn(arrivals)], true));
        }
        other => return Err(format!("unknown scenario {other}")),
    }
    Ok((helpers, false))
}

/// Terminates the node's backends every 300 ms until `until`.
async fn terminate_backends(url: String, until: Instant) {
    let Ok((c, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await else {
        return;
    };
    tokio::spawn(conn);
    while Instant::now() < until {
        let _ = c
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' \
                 AND datname = 'postgres' AND application_name <> 'snodo-chaos'",
                &[],
            )
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Holds a snapshot for `hold`: vacuum cannot remove what died after it.
async fn pin_xmin(c: tokio_postgres::Client, hold: Duration) {
    let _ = c
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM snodo.tasks")
        .await;
    tokio::time::sleep(hold).await;
    let _ = c.batch_execute("ROLLBACK").await;
}

/// A long REPEATABLE READ reader of the tasks table, one transaction a second, until
/// `until`.
async fn rr_reader(c: tokio_postgres::Client, until: Instant) {
    while Instant::now() < until {
        let _ = c
            .batch_execute(
                "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*), max(updated_at) FROM snodo.tasks",
            )
            .await;
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let _ = c.batch_execute("COMMIT").await;
    }
}

/// Creations at `rate` per second until `stop_at`, each sent without waiting for the
/// previous ones (open loop).
async fn overload(addr: SocketAddr, load: Arc<Load>, rate: f64, stop_at: Instant) {
    let gap = Duration::from_secs_f64(1.0 / rate);
    let mut next = Instant::now();
    let mut inflight = tokio::task::JoinSet::new();
    while Instant::now() < stop_at {
        let load = load.clone();
        inflight.spawn(async move { create_once(addr, &load).await });
        next += gap;
        tokio::time::sleep_until(next.into()).await;
        while inflight.try_join_next().is_some() {}
    }
    while inflight.join_next().await.is_some() {}
}

/// `n` creations, as fast as 64 clients get them accepted.
async fn burst(addr: SocketAddr, load: Arc<Load>, n: usize) {
    let mut set = tokio::task::JoinSet::new();
    let next = Arc::new(AtomicU64::new(0));
    for _ in 0..64 {
        let (load, next) = (load.clone(), next.clone());
        set.spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n as u64 {
                create_once(addr, &load).await;
            }
        });
    }
    while set.join_next().await.is_some() {}
}

/// Stops the steady load and waits for its clients, at most a minute each.
async fn stop_clients(load: &Load, clients: Vec<tokio::task::JoinHandle<()>>) {
    load.stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(60), c).await;
    }
}

/// Waits for the fault's helpers, at most `bound` each.
async fn stop_helpers(helpers: Vec<tokio::task::JoinHandle<()>>, bound: Duration) {
    for mut h in helpers {
        // A helper still running (a burst not yet sent) is stopped: what it sends later
        // would run into the after phase and miss the verdict.
        if tokio::time::timeout(bound, &mut h).await.is_err() {
            h.abort();
            let _ = h.await;
        }
    }
}

/// The store, opened apart from the node: the verdict reads the store itself.
async fn judge_store(pg: &PgInstance) -> Result<Arc<dyn Store>, String> {
    let mut pgo = PgOptions::new(pg.url(), "chaos-judge".to_owned());
    pgo.schema = "snodo".into();
    pgo.migrate = false;
    Ok(StoreConfig::Postgres(pgo)
        .open()
        .await
        .map_err(|e| e.to_string())?
        .store)
}

/// Checks that the node finishes new work after the fault (and its backlog), with no
/// restart: three new tasks completed within 60 s, noted in `fresh`.
async fn recovers(o: &Shared, addr: SocketAddr, fresh: &Load) {
    let recovered = tokio::time::timeout(Duration::from_secs(60), async {
        let mut created = 0;
        while created < 3 {
            if let Some(id) = create_once(addr, fresh).await {
                created += 1;
                let index = fresh.tasks.lock().len() - 1;
                poll(addr, fresh, index, &id).await;
            } else {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    })
    .await
    .is_ok()
        && fresh.completed_at.lock().len() == 3;
    check(o, "recovers_without_restart", recovered, || {
        "the node did not complete three new tasks within 60 s, once the work it had was done"
            .into()
    });
}

/// What the stored histories say of the run's tasks.
struct Judged {
    /// Each claimed task's creation and its claim wait in ms.
    waits: Vec<(Instant, u64)>,
    /// The store time of each completion.
    done_at: Vec<u64>,
}

/// Judges every task of `all` against the store (task `i` may be left waiting when
/// `may_wait(i)`).
async fn judge_all(
    store: &dyn Store,
    o: &Shared,
    all: &[(String, Seen)],
    may_wait: impl Fn(usize) -> bool,
) -> Result<Judged, String> {
    let mut judged = Judged {
        waits: Vec::new(),
        done_at: Vec::new(),
    };
    let judged_at = store.now().await.map_err(|e| e.to_string())?;
    for (i, (id, seen)) in all.iter().enumerate() {
        let (wait, done) = judge(store, o, id, seen, may_wait(i), judged_at).await;
        if let Some(w) = wait {
            judged.waits.push((seen.created_at, w));
        }
        judged.done_at.extend(done);
    }
    Ok(judged)
}

impl Judged {
    /// The figures of the phase from `from` to `to`.
    fn phase(
        &self,
        clock: EpochClock,
        all: &[(String, Seen)],
        phase: &'static str,
        from: Instant,
        to: Instant,
    ) -> PhaseFigure {
        let (lo, hi) = (clock.ms(from), clock.ms(to));
        let done = self
            .done_at
            .iter()
            .filter(|t| **t >= lo && **t < hi)
            .count();
        let mut w: Vec<u64> = self
            .waits
            .iter()
            .filter(|(c, _)| *c >= from && *c < to)
            .map(|(_, w)| *w)
            .collect();
        w.sort_unstable();
        let pct = |p: f64| {
            w.get(((w.len() as f64 * p).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0)
        };
        PhaseFigure {
            phase,
            completed_per_s: done as f64 / (to - from).as_secs_f64().max(1e-3),
            created: all
                .iter()
                .filter(|(_, s)| s.created_at >= from && s.created_at < to)
                .count() as u64,
            claim_p50_ms: pct(0.5),
            claim_p99_ms: pct(0.99),
        }
    }
}

/// How long the node gets, after the last phase, to finish every task it acknowledged: the
/// lease (3 s), a recovery, and the backlog of a burst on a loaded 2-core machine.
const SETTLE_BOUND: Duration = Duration::from_secs(60);

/// Waits until every task in `tasks` is terminal in `store`, or `bound` has passed.
async fn settle(store: &dyn Store, tasks: &[(String, Seen)], bound: Duration) {
    let deadline = Instant::now() + bound;
    let mut open: Vec<TaskId> = tasks
        .iter()
        .filter_map(|(id, _)| TaskId::parse(id))
        .collect();
    while !open.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for id in open {
            let terminal = matches!(
                store.inspect(&id).await,
                Ok(Some((t, _))) if t.status.is_terminal()
            );
            if !terminal {
                still.push(id);
            }
        }
        open = still;
        if !open.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Creates one task (no polling); its id when acknowledged.
async fn create_once(addr: SocketAddr, load: &Load) -> Option<String> {
    let reply = rpc(
        addr,
        "tools/call",
        json!({"name": "flaky", "arguments": {"succeed_on_attempt": 1}}),
    )
    .await?;
    let id = reply["result"]["taskId"].as_str()?.to_owned();
    load.created.fetch_add(1, Ordering::Relaxed);
    load.tasks.lock().push((
        id.clone(),
        Seen {
            created_at: Instant::now(),
            result: None,
        },
    ));
    Some(id)
}

/// Checks one acknowledged task against the store; its claim latency in ms when claimed,
/// and the store time of its completion.
async fn judge(
    store: &dyn Store,
    o: &Shared,
    id: &str,
    seen: &Seen,
    lenient: bool,
    now: crate::model::Timestamp,
) -> (Option<u64>, Option<u64>) {
    let Some(task_id) = TaskId::parse(id) else {
        return (None, None);
    };
    let stored = store.inspect(&task_id).await.ok().flatten().map(|(t, _)| t);
    check(o, "acknowledged_tasks_exist", stored.is_some(), || {
        format!("task {id} was acknowledged and is gone")
    });
    let Some(t) = stored else {
        return (None, None);
    };
    let completions = t
        .history
        .entries
        .iter()
        .filter(|e| matches!(e.kind, HistoryKind::Completed))
        .count();
    let kept = t.outcome.as_ref().and_then(|o| match o {
        crate::model::Outcome::Result(v) => Some(v.clone()),
        crate::model::Outcome::Error(_) => None,
    });
    let once = completions <= 1
        && (t.status != TaskStatus::Completed || completions == 1)
        && seen
            .result
            .as_ref()
            .is_none_or(|r| t.status == TaskStatus::Completed && kept.as_ref() == Some(r));
    check(o, "completed_once", once, || {
        format!(
            "task {id}: {completions} completions, status {}, seen {:?}",
            t.status.as_str(),
            seen.result
        )
    });
    // Waiting its turn: due, and no live claim holds it.
    let recoverable = lenient
        && t.status == TaskStatus::Working
        && t.claim.as_ref().is_none_or(|c| c.expires_at <= now);
    check(
        o,
        "terminal_or_recoverable",
        t.status.is_terminal() || recoverable,
        || format!("task {id} ended {}", t.status.as_str()),
    );
    let wait = t.history.entries.iter().find_map(|e| match e.kind {
        HistoryKind::Claimed { waited_ms, .. } => Some(waited_ms),
        _ => None,
    });
    let done = t
        .history
        .entries
        .iter()
        .find(|e| matches!(e.kind, HistoryKind::Completed))
        .map(|e| e.at.as_millis());
    (wait, done)
}
