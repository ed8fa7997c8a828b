//! Crash mode (`snodo stress --kill`): `snodo serve` children on one store, a mixed workload
//! over HTTP, SIGKILL at seeded moments, restarts on the same data, and every acknowledged
//! reply checked against what the store holds at the end.
//!
//! The model keeps only what a client was told: a task id from an acknowledged creation, a
//! status and result seen by `tasks/get`, an answer and a cancel acknowledged (and, for a
//! cancel, seen to hold). At the end every node is stopped and the store itself is read
//! through the `Store` contract, so the verdict does not depend on the wire.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::model::{TaskId, TaskStatus};
use crate::store::Store;

use super::{Observed, Rng, Shared, StressOptions, StressReport, check, observed};

/// The lease the children use: a killed node's running tasks are due again this long after
/// its last heartbeat (a restarted single node releases them at once).
pub const CRASH_LEASE_MS: u64 = 3_000;

/// How long after the last restart every task must have finished: the lease, plus the
/// longest task the workload starts (2 s), plus a margin for a loaded 2-core machine.
pub const RECOVERY_BOUND_MS: u64 = CRASH_LEASE_MS + 2_000 + 15_000;

const CRASH_INVARIANTS: &[(&str, &str)] = &[
    (
        "acknowledged_tasks_exist",
        "every task whose creation was acknowledged is in the store",
    ),
    (
        "acknowledged_cancels_hold",
        "a task seen cancelled after an acknowledged cancel ends cancelled",
    ),
    (
        "terminal_state_never_changes",
        "a task seen in a terminal state ends in that state, across every crash",
    ),
    (
        "completed_results_survive",
        "a result seen by a client is the result the store keeps",
    ),
    (
        "answered_never_asked_again",
        "a task whose answer was acknowledged stored one question and never asked again",
    ),
    (
        "everything_finishes",
        "after the last restart every task reaches a terminal state",
    ),
    (
        "sleeps_never_early",
        "a task is never claimed before the wake time of a sleep it committed, across every crash",
    ),
    (
        "one_wake_time",
        "every sleep a task committed names the same wake time: a replay after a crash finds \
         the journaled sleep and never sleeps afresh",
    ),
    (
        "recovery_within_bound",
        "every task finished within the documented bound after the last restart",
    ),
    (
        "schedule_fires_once",
        "every firing of the nodes' schedule created one task, whichever node fired it and \
         however often nodes were killed",
    ),
    (
        "schedule_misses_none",
        "with missed = \"all\", every firing from the schedule's anchor to its next one has \
         its task, across every crash",
    ),
    (
        "terminal_transitions_delivered",
        "every task that ended reached the webhook receiver as its terminal event, at least \
         once and under one event id, across every crash (one try in seven refused)",
    ),
];

/// What crash mode checks of backups, on the file stores: backups are taken through the
/// node while the clients write, one of them with the kill at its heels.
const BACKUP_INVARIANTS: &[(&str, &str)] = &[
    (
        "backups_whole_or_absent",
        "a backup taken while clients wrote is, whether the kill cut it short or not, absent \
         from its path or whole (it reads back and counts); one reported done is whole",
    ),
    (
        "backups_restore",
        "each whole backup restores onto a stopped node, which starts on it and finishes every \
         task acknowledged before the backup began; those tasks are then judged by every \
         invariant above, against what clients were told before the backup",
    ),
];

/// The tenant the clients' calls run as (a loopback server's anonymous caller), whose
/// events the receiver is subscribed to.
const CLIENT_TENANT: &str = "local";
/// One request in this many the receiver refuses (503), so that retries happen.
const REFUSE_ONE_IN: u64 = 7;

/// The schedule every node declares: `greet` every second (the shortest interval), every
/// missed firing caught up, in a tenant of its own.
const SCHEDULE: &str = "stress";
const SCHEDULE_TENANT: &str = "stress-schedules";
const SCHEDULE_EVERY_MS: u64 = 1_000;

/// How the children reach their store.
#[derive(Debug, Clone)]
pub enum CrashStore {
    /// A redb file.
    Redb(PathBuf),
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL schema (made by the first node, dropped by the caller).
    Postgres {
        /// The connection string.
        url: String,
        /// The schema.
        schema: String,
    },
}

/// One `snodo serve` child, killed when dropped.
pub struct Node {
    child: Child,
    /// Where it serves.
    pub addr: SocketAddr,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(
    dir: &Path,
    n: usize,
    store: &CrashStore,
    components: &[PathBuf],
    hooks: &crate::receiver::Receiver,
) -> PathBuf {
    let store_toml = match store {
        CrashStore::Redb(p) => format!("kind = \"redb\"\npath = {:?}", p.display().to_string()),
        CrashStore::Sqlite(p) => {
            format!("kind = \"sqlite\"\npath = {:?}", p.display().to_string())
        }
        CrashStore::Postgres { url, schema } => {
            format!("kind = \"postgres\"\nurl = {url:?}\nschema = {schema:?}\nmigrate = true")
        }
    };
    let mut text = format!(
        "listen = \"127.0.0.1:0\"\ncache_dir = {:?}\n\n[node]\nid = \"stress-node-{n}\"\n\n[store]\n{store_toml}\n\n[runner]\nlease_ms = {CRASH_LEASE_MS}\nheartbeat_ms = 500\npark_after_ms = 300\n\n[tools.flaky]\nretry = [100]\n",
        dir.join("cache").display().to_string()
    );
    text.push_str(&format!(
        "\n[[schedules]]\nname = \"{SCHEDULE}\"\ntool = \"greet\"\ntenant = \"{SCHEDULE_TENANT}\"\n\
         every_ms = {SCHEDULE_EVERY_MS}\nmissed = \"all\"\ncatch_up = 1000\n"
    ));
    text.push_str(&hooks.config_toml(CLIENT_TENANT));
    text.push_str(&components_toml(components));
    let path = dir.join(format!("node-{n}.toml"));
    let _ = std::fs::write(&path, text);
    path
}

/// `[[components]]` tables naming `components` by absolute path (relative paths in a
/// configuration resolve against its own directory, not the caller's).
pub(super) fn components_toml(components: &[PathBuf]) -> String {
    components
        .iter()
        .map(|c| {
            let c = std::path::absolute(c).unwrap_or_else(|_| c.clone());
            format!("\n[[components]]\npath = {:?}\n", c.display().to_string())
        })
        .collect()
}

/// Starts `snodo serve` (the binary `bin`) on `config` and waits until it serves.
pub fn start(bin: &Path, config: &Path) -> Result<Node, String> {
    let mut child = Command::new(bin)
        .args(["serve", "--log-json", "--config"])
        .arg(config)
        .env_remove("MCP_PORT")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    // The log is drained for the child's whole life, so it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(at) = line.find("serving MCP at http://") {
                let rest = &line[at + "serving MCP at http://".len()..];
                if let Some(addr) = rest.split("/mcp").next().and_then(|a| a.parse().ok()) {
                    let _: Result<(), _> = tx.send(addr);
                    sent = true;
                }
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(addr) => Ok(Node { child, addr }),
        Err(_) => {
            let _ = child.kill();
            let status = child.wait().ok();
            Err(format!(
                "snodo serve did not start (exit status {status:?}); run it with {} to see why",
                config.display()
            ))
        }
    }
}

/// One JSON-RPC call over a fresh connection; `None` when no complete reply arrived (the
/// node died, or refused the connection).
pub async fn rpc(addr: SocketAddr, method: &str, mut params: Value) -> Option<Value> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {"form": {}},
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    });
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    crate::client::call_once(addr, &message, Duration::from_secs(30))
        .await
        .map(|(_, reply)| reply)
}

/// What the clients were told, per task.
#[derive(Debug, Default, Clone)]
struct Told {
    tool: &'static str,
    /// Statuses and results seen by `tasks/get`, terminal ones only.
    terminal: Option<(String, Value)>,
    answered: bool,
    cancel_held: bool,
}

type Model = Arc<Mutex<BTreeMap<String, Told>>>;

/// One client's loop until `until`: create (at most `creates` tasks), read, answer,
/// cancel, chosen by `rng`. The cap keeps the backlog a restart inherits bounded, so the
/// recovery bound measures recovery, not a queue.
async fn client(
    nodes: Vec<SocketAddr>,
    model: Model,
    mut rng: Rng,
    until: Instant,
    creates: usize,
) {
    let mut created = 0;
    while Instant::now() < until {
        let addr = nodes[rng.below(nodes.len() as u64) as usize];
        let known: Vec<String> = model.lock().keys().cloned().collect();
        let pick = |rng: &mut Rng| {
            known
                .get(rng.below(known.len().max(1) as u64) as usize)
                .cloned()
        };
        match rng.below(10) {
            0..=3 if created < creates => {
                created += 1;
                let (tool, args) = match rng.below(4) {
                    0 => (
                        "slow_compute",
                        json!({"seconds": 1.0 + rng.below(10) as f64 / 10.0}),
                    ),
                    1 => ("confirm_delete", json!({"filename": "f"})),
                    // Past runner.sleep_park_after_ms (1 s by default): parked, then woken.
                    2 => ("test_sleep", json!({"ms": 1_100 + rng.below(900)})),
                    _ => ("flaky", json!({"succeed_on_attempt": 2})),
                };
                let reply = rpc(addr, "tools/call", json!({"name": tool, "arguments": args})).await;
                if let Some(id) = reply.as_ref().and_then(|r| r["result"]["taskId"].as_str()) {
                    model.lock().insert(
                        id.to_owned(),
                        Told {
                            tool,
                            ..Told::default()
                        },
                    );
                }
            }
            0..=6 => {
                if let Some(id) = pick(&mut rng) {
                    observe(addr, &model, &id).await;
                }
            }
            7..=8 => {
                let Some(id) = pick(&mut rng) else { continue };
                let asks = model
                    .lock()
                    .get(&id)
                    .is_some_and(|t| t.tool == "confirm_delete");
                if asks {
                    answer(addr, &model, &id).await;
                }
            }
            _ => {
                let Some(id) = pick(&mut rng) else { continue };
                // Sleepers are left to wake, so every run judges wakes across its kills
                // (a cancel ending a sleep is the runner's tests' to prove).
                let sleeps = model
                    .lock()
                    .get(&id)
                    .is_some_and(|t| t.tool == "test_sleep");
                if sleeps {
                    continue;
                }
                let acked = rpc(addr, "tasks/cancel", json!({"taskId": id}))
                    .await
                    .is_some_and(|r| r.get("result").is_some());
                if acked
                    && observe(addr, &model, &id).await.as_deref() == Some("cancelled")
                    && let Some(t) = model.lock().get_mut(&id)
                {
                    t.cancel_held = true;
                }
            }
        }
    }
}

/// Answers `confirm_delete`'s question and notes an acknowledged answer.
async fn answer(addr: SocketAddr, model: &Model, id: &str) {
    let reply = rpc(
        addr,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
            "confirm": {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    if reply.is_some_and(|r| r.get("result").is_some())
        && let Some(t) = model.lock().get_mut(id)
    {
        t.answered = true;
    }
}

/// Reads a task and keeps what a terminal reply said; returns the status seen.
async fn observe(addr: SocketAddr, model: &Model, id: &str) -> Option<String> {
    let reply = rpc(addr, "tasks/get", json!({"taskId": id})).await?;
    let r = &reply["result"];
    let status = r["status"].as_str()?.to_owned();
    if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
        let mut m = model.lock();
        if let Some(t) = m.get_mut(id) {
            let seen = (status.clone(), super::as_kept(&r["result"]));
            match &t.terminal {
                // A different terminal state seen later is a violation the end check reports.
                Some(first) if *first != seen => {}
                _ => t.terminal = Some(seen),
            }
        }
    }
    Some(status)
}

/// Runs crash mode: `nodes` children (more than one only on PostgreSQL), `opts.rounds`
/// kills at seeded moments, `opts.writers` concurrent clients; then a last restart, every
/// question answered, everything awaited, every node stopped, and the store read by
/// `open` (a function that opens the same store in this process).
pub async fn crash<F, Fut>(
    bin: &Path,
    store: CrashStore,
    nodes: usize,
    components: &[PathBuf],
    opts: &StressOptions,
    name: &str,
    open: F,
) -> Result<StressReport, String>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Arc<dyn Store>, String>>,
{
    let began = Instant::now();
    let nodes = nodes.max(1);
    let dir = std::env::temp_dir().join(format!(
        "snodo-stress-kill-{}-{}",
        std::process::id(),
        TaskId::generate()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let hooks = crate::receiver::Receiver::start(REFUSE_ONE_IN, opts.seed)
        .await
        .map_err(|e| format!("the webhook receiver: {e}"))?;
    let configs: Vec<PathBuf> = (0..nodes)
        .map(|n| config(&dir, n, &store, components, &hooks))
        .collect();
    let mut running: Vec<Node> = Vec::new();
    for c in &configs {
        running.push(start(bin, c)?);
    }
    let model: Model = Arc::default();
    let mut rng = Rng(opts.seed);
    let o: Shared = Arc::default();
    // Backups through the node go beside its store file (`admin.backup_dir`'s default).
    let beside_store = match &store {
        CrashStore::Redb(p) | CrashStore::Sqlite(p) => p.parent().map(Path::to_path_buf),
        CrashStore::Postgres { .. } => None,
    };
    let file_store = beside_store.is_some();
    let mut backups: Vec<Taken> = Vec::new();
    for round in 0..opts.rounds.max(1) {
        // The first round also takes backups through the node (a file store's only).
        let taking = beside_store
            .as_deref()
            .filter(|_| round == 0)
            .map(|at| Backups {
                bin,
                config: &configs[0],
                dir: at,
                taken: &mut backups,
            });
        kill_round(bin, &configs, &mut running, &model, &mut rng, opts, taking).await?;
    }

    // The end: answer every question, await every task, then stop.
    let restarted = Instant::now();
    let addrs: Vec<SocketAddr> = running.iter().map(|n| n.addr).collect();
    cancel_one(addrs[0], &model).await;
    let finished = await_all(&addrs, &model, restarted).await;
    await_deliveries(&hooks, &finished).await;
    drop(running);
    let store = open().await?;
    let model = std::mem::take(&mut *model.lock());
    let mut slowest = Duration::ZERO;
    let delivered = hooks.seen.lock().ids();
    // Why an event that never arrived did not: a dead letter names its last error.
    let dead: HashMap<String, String> = match store.webhook("receiver").await {
        Ok(Some(row)) => row
            .dead
            .iter()
            .map(|d| {
                let why = format!("a dead letter after {} tries: {}", d.attempts, d.error);
                (d.event.task_id.clone(), why)
            })
            .collect(),
        _ => HashMap::new(),
    };
    for (id, told) in &model {
        judge(&*store, &o, id, told, finished.get(id), &mut slowest).await;
        judge_delivery(&*store, &o, id, &delivered, &dead).await;
    }
    judge_schedule(&*store, &o).await;
    drop(store);
    for (n, taken) in backups.iter().enumerate() {
        judge_backup(bin, &configs[0], &dir, n, taken, &o).await;
        let _ = std::fs::remove_file(&taken.path);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut o: Observed = observed(o);
    o.timings.insert(
        "last restart to all finished",
        vec![slowest.as_micros() as u64],
    );
    let invariants: Vec<(&'static str, &'static str)> = CRASH_INVARIANTS
        .iter()
        .chain(if file_store { BACKUP_INVARIANTS } else { &[] })
        .copied()
        .collect();
    Ok(StressReport::judged(
        name,
        "kill",
        opts.seed,
        o,
        &invariants,
        began,
    ))
}

/// Where a round takes its backups, and the list it adds them to.
struct Backups<'a> {
    bin: &'a Path,
    /// The node's configuration (`snodo backup` finds the node through it).
    config: &'a Path,
    dir: &'a Path,
    taken: &'a mut Vec<Taken>,
}

/// A backup asked for during a round.
struct Taken {
    /// Where it was asked to be written.
    path: PathBuf,
    /// What the clients had been told when it began.
    before: BTreeMap<String, Told>,
    /// Whether `snodo backup` reported success.
    done: bool,
}

impl Backups<'_> {
    /// `snodo backup` of the node at `addr`, to a new file in the run's directory, with a
    /// snapshot of what the clients had been told when it began.
    fn start(&mut self, addr: SocketAddr, model: &Model) -> Result<(Child, usize), String> {
        let path = self.dir.join(format!(
            "stress-backup-{}-{}.store",
            std::process::id(),
            self.taken.len()
        ));
        let before = model.lock().clone();
        let child = Command::new(self.bin)
            .args(["backup", "--config"])
            .arg(self.config)
            .arg("--to")
            .arg(&path)
            .env("SNODO_URL", format!("http://{addr}"))
            .env_remove("SNODO_ADMIN_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run snodo backup: {e}"))?;
        self.taken.push(Taken {
            path,
            before,
            done: false,
        });
        Ok((child, self.taken.len() - 1))
    }

    /// Waits for the backup `n` started as `child` to end, noting whether it reported done.
    async fn finish(&mut self, mut child: Child, n: usize) {
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        self.taken[n].done = status.is_some_and(|s| s.success());
    }
}

/// Judges backup `n`: whole or absent; a whole one restored onto a new store, a node started
/// on it and every task acknowledged before the backup awaited, then judged as the main
/// store is.
async fn judge_backup(bin: &Path, config: &Path, dir: &Path, n: usize, taken: &Taken, o: &Shared) {
    let exists = taken.path.exists();
    let whole = exists && crate::store::backup::verify(&taken.path).is_ok();
    check(
        o,
        "backups_whole_or_absent",
        whole || (!exists && !taken.done),
        || match (exists, taken.done) {
            (true, _) => format!("backup {n} is at its path and does not read back whole"),
            _ => format!("backup {n} was reported done and is not at its path"),
        },
    );
    if !whole {
        return;
    }
    let restored = match restore_and_await(bin, config, dir, n, taken).await {
        Ok(r) => r,
        Err(e) => {
            check(o, "backups_restore", false, || format!("backup {n}: {e}"));
            return;
        }
    };
    let (store, model, finished) = restored;
    check(
        o,
        "backups_restore",
        taken.before.keys().all(|id| finished.contains_key(id)),
        || {
            let left = taken.before.len() - finished.len().min(taken.before.len());
            format!("backup {n}: {left} task(s) acknowledged before it did not finish")
        },
    );
    let mut slowest = Duration::ZERO;
    for (id, told) in &model {
        judge(&*store, o, id, told, finished.get(id), &mut slowest).await;
    }
}

/// Restores backup `n` onto a new store file, serves it with the node's configuration, and
/// awaits (answering questions) every task acknowledged before the backup: the store, the
/// model as it then stands, and when each task was seen finished.
async fn restore_and_await(
    bin: &Path,
    config: &Path,
    dir: &Path,
    n: usize,
    taken: &Taken,
) -> Result<
    (
        Arc<dyn Store>,
        BTreeMap<String, Told>,
        HashMap<String, Duration>,
    ),
    String,
> {
    let text = std::fs::read_to_string(config).map_err(|e| e.to_string())?;
    let (kind, store_path) = if text.contains("kind = \"sqlite\"") {
        (
            crate::store::FileKind::Sqlite,
            dir.join(format!("restored-{n}.sqlite")),
        )
    } else {
        (
            crate::store::FileKind::Redb,
            dir.join(format!("restored-{n}.redb")),
        )
    };
    crate::store::backup::restore(&taken.path, &store_path, kind).map_err(|e| e.to_string())?;
    // The node's configuration, on the restored file.
    let restored_config = dir.join(format!("restored-{n}.toml"));
    let path_line = text
        .lines()
        .find(|l| l.starts_with("path = ") && !l.contains(".wasm"))
        .ok_or("the node's configuration names no store path")?;
    let text = text.replacen(
        path_line,
        &format!("path = {:?}", store_path.display().to_string()),
        1,
    );
    std::fs::write(&restored_config, text).map_err(|e| e.to_string())?;
    let node = start(bin, &restored_config)?;
    let model: Model = Arc::new(Mutex::new(taken.before.clone()));
    let finished = await_all(&[node.addr], &model, Instant::now()).await;
    drop(node);
    let store = match kind {
        crate::store::FileKind::Redb => crate::store::StoreConfig::Redb(store_path),
        crate::store::FileKind::Sqlite => crate::store::StoreConfig::Sqlite(store_path),
    }
    .open()
    .await
    .map_err(|e| e.to_string())?
    .store;
    let model = std::mem::take(&mut *model.lock());
    Ok((store, model, finished))
}

/// One round: `opts.writers` clients in flight until a seeded moment, then one node
/// killed, the clients stopped, and the node started again on its configuration.
async fn kill_round(
    bin: &Path,
    configs: &[PathBuf],
    running: &mut [Node],
    model: &Model,
    rng: &mut Rng,
    opts: &StressOptions,
    backups: Option<Backups<'_>>,
) -> Result<(), String> {
    let addrs: Vec<SocketAddr> = running.iter().map(|n| n.addr).collect();
    // The kill comes at a seeded moment, with the clients in full flight.
    let began = Instant::now();
    let until = began + Duration::from_millis(200 + rng.below(1_300));
    let mut clients = Vec::new();
    for _ in 0..opts.writers.max(1) {
        clients.push(tokio::spawn(client(
            addrs.clone(),
            model.clone(),
            Rng(rng.next()),
            until + Duration::from_secs(60),
            opts.tasks,
        )));
    }
    // Backups through node 0 while the clients write: one awaited halfway to the kill,
    // and one started just before it, which the kill may cut short.
    let mut cut_short = None;
    let mut backups = backups;
    if let Some(b) = backups.as_mut() {
        tokio::time::sleep_until((began + (until - began) / 2).into()).await;
        let (child, n) = b.start(addrs[0], model)?;
        b.finish(child, n).await;
        let lead = Duration::from_millis(rng.below(30));
        tokio::time::sleep_until((until.checked_sub(lead).unwrap_or(until)).into()).await;
        cut_short = Some(b.start(addrs[0], model)?);
    }
    tokio::time::sleep_until(until.into()).await;
    // With backups, node 0 (the one backing up) is the one killed.
    let victim = if cut_short.is_some() {
        0
    } else {
        rng.below(running.len() as u64) as usize
    };
    let _ = running[victim].child.kill();
    let _ = running[victim].child.wait();
    if let (Some(b), Some((child, n))) = (backups.as_mut(), cut_short) {
        b.finish(child, n).await;
    }
    for c in &clients {
        c.abort();
    }
    for c in clients {
        let _ = c.await;
    }
    running[victim] = start(bin, &configs[victim])?;
    Ok(())
}

/// Starts a long task at `addr` and cancels it, noting a cancel seen to hold.
async fn cancel_one(addr: SocketAddr, model: &Model) {
    // One cancel that certainly lands on a running task, so the invariant is exercised
    // however the seeded rounds went.
    if let Some(id) = rpc(
        addr,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 30}}),
    )
    .await
    .and_then(|r| r["result"]["taskId"].as_str().map(str::to_owned))
    {
        model.lock().insert(
            id.clone(),
            Told {
                tool: "slow_compute",
                ..Told::default()
            },
        );
        let acked = rpc(addr, "tasks/cancel", json!({"taskId": id}))
            .await
            .is_some_and(|r| r.get("result").is_some());
        if acked
            && observe(addr, model, &id).await.as_deref() == Some("cancelled")
            && let Some(t) = model.lock().get_mut(&id)
        {
            t.cancel_held = true;
        }
    }
}

/// Polls every known task over `addrs`, answering questions, until all are terminal or the
/// patience runs out; when each was first seen terminal, after `restarted`.
async fn await_all(
    addrs: &[SocketAddr],
    model: &Model,
    restarted: Instant,
) -> HashMap<String, Duration> {
    let ids: Vec<(String, &'static str)> = model
        .lock()
        .iter()
        .map(|(k, t)| (k.clone(), t.tool))
        .collect();
    let mut finished: HashMap<String, Duration> = HashMap::new();
    let patience = Duration::from_millis(RECOVERY_BOUND_MS * 3);
    while finished.len() < ids.len() && restarted.elapsed() < patience {
        for (i, (id, tool)) in ids.iter().enumerate() {
            if finished.contains_key(id) {
                continue;
            }
            let addr = addrs[i % addrs.len()];
            match observe(addr, model, id).await.as_deref() {
                Some("completed" | "failed" | "cancelled") => {
                    finished.insert(id.clone(), restarted.elapsed());
                }
                Some("input_required") if *tool == "confirm_delete" => {
                    answer(addr, model, id).await;
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    finished
}

/// Waits until the receiver has taken a terminal event for every task in `finished`, or
/// the patience (the retry list's whole span and its answer timeouts, and a lease) runs
/// out.
async fn await_deliveries(hooks: &crate::receiver::Receiver, finished: &HashMap<String, Duration>) {
    let patience = Instant::now() + Duration::from_secs(60);
    while Instant::now() < patience {
        let taken: std::collections::HashSet<String> = hooks
            .seen
            .lock()
            .taken
            .iter()
            .filter(|t| t.kind != "task.input_required")
            .map(|t| t.task.clone())
            .collect();
        if finished.keys().all(|id| taken.contains(id)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks that task `id`, if it ended and its tenant is the receiver's, reached the
/// receiver as its terminal event under one id.
async fn judge_delivery(
    store: &dyn Store,
    o: &Shared,
    id: &str,
    delivered: &BTreeMap<(String, String), std::collections::BTreeSet<String>>,
    dead: &HashMap<String, String>,
) {
    let Some(task_id) = TaskId::parse(id) else {
        return;
    };
    let Some((t, _)) = store.inspect(&task_id).await.ok().flatten() else {
        return;
    };
    if !t.status.is_terminal() || t.scope.tenant() != CLIENT_TENANT {
        return;
    }
    let kind = format!("task.{}", t.status.as_str());
    let ids = delivered.get(&(id.to_owned(), kind.clone()));
    check(
        o,
        "terminal_transitions_delivered",
        !t.notify.is_empty() && ids.is_some_and(|ids| ids.len() == 1),
        || match ids {
            None if t.notify.is_empty() => format!("task {id} names no subscription"),
            None => format!(
                "task {id} ended {} and its {kind} never arrived ({})",
                t.status.as_str(),
                dead.get(id).map_or("not a dead letter", String::as_str)
            ),
            Some(ids) => format!(
                "task {id}'s {kind} arrived under {} ids: {ids:?}",
                ids.len()
            ),
        },
    );
}

/// Checks task `id` in `store` against what its clients were `told` and when it was
/// `finished`; raises `slowest` to that time.
async fn judge(
    store: &dyn Store,
    o: &Shared,
    id: &str,
    told: &Told,
    finished: Option<&Duration>,
    slowest: &mut Duration,
) {
    let Some(task_id) = TaskId::parse(id) else {
        return;
    };
    let stored = store.inspect(&task_id).await.ok().flatten().map(|(t, _)| t);
    check(o, "acknowledged_tasks_exist", stored.is_some(), || {
        format!("task {id} was acknowledged and is gone")
    });
    let Some(t) = stored else { return };
    let status = t.status.as_str();
    check(o, "everything_finishes", t.status.is_terminal(), || {
        format!("task {id} ({}) ended {status}", told.tool)
    });
    if let Some(at) = finished {
        *slowest = (*slowest).max(*at);
        check(
            o,
            "recovery_within_bound",
            at.as_millis() as u64 <= RECOVERY_BOUND_MS,
            || {
                format!(
                    "task {id} finished {} ms after the last restart",
                    at.as_millis()
                )
            },
        );
    }
    if told.cancel_held {
        check(
            o,
            "acknowledged_cancels_hold",
            t.status == TaskStatus::Cancelled,
            || format!("task {id} was seen cancelled, ends {status}"),
        );
    }
    if let Some((seen, result)) = &told.terminal {
        check(o, "terminal_state_never_changes", seen == status, || {
            format!("task {id} was seen {seen}, ends {status}")
        });
        if seen == "completed" {
            let kept = t.outcome.as_ref().and_then(|o| match o {
                crate::model::Outcome::Result(v) => Some(v.clone()),
                crate::model::Outcome::Error(_) => None,
            });
            check(
                o,
                "completed_results_survive",
                kept.as_ref() == Some(result),
                || format!("task {id}: seen {result}, kept {kept:?}"),
            );
        }
    }
    if told.answered {
        check(o, "answered_never_asked_again", t.inputs.len() <= 1, || {
            format!("task {id} stored {} questions", t.inputs.len())
        });
    }
    judge_sleeps(o, id, &t);
}

/// Checks the sleeps task `id` committed against the claims after them, from its history
/// (store time): none before the wake time, and one wake time however often it was
/// replayed.
fn judge_sleeps(o: &Shared, id: &str, t: &crate::model::Task) {
    use crate::model::HistoryKind;
    let mut wake: Option<u64> = None;
    let mut wakes = Vec::new();
    for e in &t.history.entries {
        match &e.kind {
            HistoryKind::Sleeping { until } => {
                let until = until.as_millis();
                wakes.push(until);
                wake.get_or_insert(until);
            }
            HistoryKind::Claimed { .. } => {
                if let Some(until) = wake {
                    let at = e.at.as_millis();
                    check(o, "sleeps_never_early", at >= until, || {
                        format!("task {id} was claimed at {at}, its sleep ends at {until}")
                    });
                }
            }
            _ => {}
        }
    }
    if let Some(first) = wake {
        check(
            o,
            "one_wake_time",
            wakes.iter().all(|w| *w == first),
            || format!("task {id} committed sleeps until {wakes:?}"),
        );
    }
}

/// Checks the nodes' schedule against the tasks in `store`: each firing (the time its
/// task's id is stamped with) has one task, the row counts them, and none from the anchor
/// to the next firing is missing.
async fn judge_schedule(store: &dyn Store, o: &Shared) {
    use crate::store::{TaskFilter, TaskQuery};
    let Some(row) = store.schedule(SCHEDULE).await.ok().flatten() else {
        check(o, "schedule_fires_once", false, || {
            "the nodes' schedule is not in the store".to_owned()
        });
        return;
    };
    let mut by_time: BTreeMap<u64, usize> = BTreeMap::new();
    let filter = TaskFilter {
        tenant: Some(SCHEDULE_TENANT.to_owned()),
        ..TaskFilter::default()
    };
    let mut query = TaskQuery::new(filter, 500);
    loop {
        let Ok(page) = store.list_tasks(&query).await else {
            check(o, "schedule_fires_once", false, || {
                "the schedule's tasks could not be listed".to_owned()
            });
            return;
        };
        for t in &page.tasks {
            let mut prefix = [0u8; 8];
            prefix[2..].copy_from_slice(&t.id.as_bytes()[..6]);
            *by_time.entry(u64::from_be_bytes(prefix)).or_default() += 1;
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    let twice: Vec<u64> = by_time
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(t, _)| *t)
        .collect();
    check(
        o,
        "schedule_fires_once",
        twice.is_empty() && by_time.len() as u64 == row.fired,
        || {
            format!(
                "{} firings have tasks, the row counts {}, firings with two tasks: {twice:?}",
                by_time.len(),
                row.fired
            )
        },
    );
    let anchor = row.anchor.as_millis();
    let end = row.next_at.map_or(anchor, |t| t.as_millis());
    let missing: Vec<u64> = (1..)
        .map(|k| anchor + k * SCHEDULE_EVERY_MS)
        .take_while(|t| *t < end)
        .filter(|t| !by_time.contains_key(t))
        .collect();
    check(
        o,
        "schedule_misses_none",
        missing.is_empty() && row.skipped == 0,
        || {
            format!(
                "firings without a task: {missing:?}; the row skipped {} ({:?})",
                row.skipped, row.last_error
            )
        },
    );
}
