//! `snodo bench fairness`: one tenant's latency while another floods the node.
//!
//! Each scenario starts a fresh `snodo serve` (this binary, a child process, memory store)
//! with four tenants. Tenant `b` is the victim: it calls the `greet` fixture synchronously
//! over a keep-alive connection, one call at a time, for the measuring window. Tenant `a`
//! attacks within its own default budgets (tenants `c`, `d` and `e` join it where a flood
//! needs several tenants), starting before the window opens. The figures are `b`'s p50 and
//! p99 beside the unloaded baseline, and how many of its calls failed. Figures are printed,
//! never asserted: the machine is shared and noisy, compare ratios.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use snodo::client::Connection;
use snodo::model::TaskId;

/// A flood, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Scenario {
    /// Nothing but the victim.
    Baseline,
    /// `a` runs CPU-bound tools synchronously on 16 connections (its sync budget).
    SyncCpu,
    /// `a` keeps 200 CPU-bound tasks queued (48 run at once, its task budget).
    TaskCpu,
    /// `a` and `c` hold sleeping tasks and sleeping synchronous calls, `d` and `e` sleeping
    /// synchronous calls: every default share filled with guests that wait in imports.
    Sleepers,
    /// `a` holds 1,000 tasks asleep in the store (`test_sleep` past the park threshold:
    /// durable sleeps, no guest and no slot each).
    DurableSleepers,
    /// `a` sends `completion/complete` on 64 connections.
    Completions,
    /// `a` sends large invalid arguments, and arguments built to make a backtracking regex
    /// engine take exponential time, on 2 connections.
    InvalidArguments,
    /// `a` keeps 2,000 connections from 8 addresses open and sends nothing on them.
    SilentSockets,
    /// `a` runs guests that grow their memory until a cap stops them, on 16 connections.
    MemoryBombs,
    /// `a` sends 46-byte arguments whose check against a schema with alternatives that
    /// recurse into the same children is exponential in their depth, on 3 connections.
    SchemaBranches,
    /// `a` keeps 1,280 connections from 5 addresses open, each trickling a request head a
    /// byte every 2 s.
    SlowHeads,
    /// `a` sends valid 3 MB arguments on 16 connections.
    LargeArguments,
}

impl Scenario {
    const ALL: [Scenario; 12] = [
        Scenario::Baseline,
        Scenario::SyncCpu,
        Scenario::TaskCpu,
        Scenario::Sleepers,
        Scenario::DurableSleepers,
        Scenario::Completions,
        Scenario::InvalidArguments,
        Scenario::SilentSockets,
        Scenario::MemoryBombs,
        Scenario::SchemaBranches,
        Scenario::SlowHeads,
        Scenario::LargeArguments,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::SyncCpu => "sync-cpu",
            Scenario::TaskCpu => "task-cpu",
            Scenario::Sleepers => "sleepers",
            Scenario::DurableSleepers => "durable-sleepers",
            Scenario::Completions => "completions",
            Scenario::InvalidArguments => "invalid-arguments",
            Scenario::SilentSockets => "silent-sockets",
            Scenario::MemoryBombs => "memory-bombs",
            Scenario::SchemaBranches => "schema-branches",
            Scenario::SlowHeads => "slow-heads",
            Scenario::LargeArguments => "large-arguments",
        }
    }
}

/// Parameters of the fairness benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct FairnessOptions {
    /// Scenarios to run (default: all, baseline first).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub scenarios: Vec<Scenario>,
    /// The measuring window of each scenario, in seconds.
    #[arg(long, default_value_t = 4.0)]
    pub seconds: f64,
    /// The fixtures component (serves `greet` and completions).
    #[arg(long, default_value_os_t = crate::guests::guest("fixtures.wasm"))]
    pub fixtures: PathBuf,
    /// The hostile component (serves `burn`, `hold`, `memory_bomb`, `backtrack`).
    #[arg(long, default_value_os_t = crate::guests::guest("hostile.wasm"))]
    pub hostile: PathBuf,
    /// A `[limits]` setting for the servers, as `KEY=VALUE` (repeatable), to compare a
    /// setting with the defaults, e.g. `--limit executing_per_tenant=64`.
    #[arg(long = "limit", value_parser = limit_setting)]
    pub limits: Vec<(String, u64)>,
}

fn limit_setting(s: &str) -> Result<(String, u64), String> {
    let (key, value) = s.split_once('=').ok_or("KEY=VALUE")?;
    let value = value
        .parse()
        .map_err(|_| format!("{value}: not a number"))?;
    Ok((key.trim().to_owned(), value))
}

/// The victim's latency in one scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FairnessFigure {
    /// The scenario, and what the victim did if not `greet` on its keep-alive connection.
    pub scenario: String,
    /// Median latency in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency in milliseconds.
    pub p99_ms: f64,
    /// p99 over the baseline's p99 (1.0 for the baseline itself).
    pub p99_vs_baseline: f64,
    /// Calls the victim made.
    pub samples: usize,
    /// Calls that failed (an error reply, a refusal, a broken connection).
    pub errors: usize,
}

const TENANTS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn token(tenant: &str) -> String {
    format!("fairness-bench-tenant-{tenant}")
}

/// Runs the scenarios in order and reports the victim's figures.
pub(crate) async fn fairness(opts: &FairnessOptions) -> Result<Vec<FairnessFigure>, String> {
    let scenarios: Vec<Scenario> = if opts.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        opts.scenarios.clone()
    };
    let dir = std::env::temp_dir().join(format!("snodo-bench-fairness-{}", TaskId::generate()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = run_all(opts, &scenarios, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let mut figures = result?;
    let base = figures
        .iter()
        .find(|f| f.scenario == "baseline")
        .map(|f| f.p99_ms);
    for f in &mut figures {
        f.p99_vs_baseline = base.map_or(f64::NAN, |b| f.p99_ms / b);
    }
    Ok(figures)
}

async fn run_all(
    opts: &FairnessOptions,
    scenarios: &[Scenario],
    dir: &Path,
) -> Result<Vec<FairnessFigure>, String> {
    let window = Duration::from_secs_f64(opts.seconds.max(0.1));
    let mut figures = Vec::new();
    for &scenario in scenarios {
        let server = Server::start(opts, dir).await?;
        let mut victim = Connection::open(server.addr).await?;
        // One call before the flood: the connection is open and the guest's code is warm.
        greet(&mut victim).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let attack = tokio::spawn(flood(scenario, server.addr, stop.clone()));
        // The flood ramps up before the window opens.
        if scenario != Scenario::Baseline {
            tokio::time::sleep(Duration::from_millis(750)).await;
        }
        let (samples, errors) = measure(server.addr, &mut victim, window).await;
        figures.push(figure(scenario.name().into(), samples, errors));
        if matches!(scenario, Scenario::Sleepers | Scenario::DurableSleepers) {
            let (samples, errors) = task_latency(server.addr, window).await;
            figures.push(figure(
                format!("{}: a trivial task, created to completed", scenario.name()),
                samples,
                errors,
            ));
        }
        if matches!(scenario, Scenario::SilentSockets | Scenario::SlowHeads) {
            let (samples, errors) = fresh_connections(server.addr, window).await;
            figures.push(figure(
                format!("{}: greet on a new connection", scenario.name()),
                samples,
                errors,
            ));
        }
        stop.store(true, Ordering::Release);
        attack.abort();
        drop(server);
    }
    Ok(figures)
}

fn figure(scenario: String, mut samples: Vec<Duration>, errors: usize) -> FairnessFigure {
    samples.sort();
    let ms = |q: f64| {
        if samples.is_empty() {
            return f64::NAN;
        }
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i].as_secs_f64() * 1e3
    };
    FairnessFigure {
        scenario,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        p99_vs_baseline: f64::NAN,
        samples: samples.len(),
        errors,
    }
}

/// A `snodo serve` child with the five tenants' tokens, killed when dropped.
struct Server {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    async fn start(opts: &FairnessOptions, dir: &Path) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        // The file's relative paths would be read against its own directory.
        let absolute =
            |p: &Path| std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()));
        let (fixtures, hostile) = (absolute(&opts.fixtures)?, absolute(&opts.hostile)?);
        let mut config = format!(
            "listen = \"127.0.0.1:{port}\"\ncache_dir = {cache:?}\n[store]\nkind = \"memory\"\n\
             [[components]]\npath = {fixtures:?}\n[[components]]\npath = {hostile:?}\n",
            cache = dir.join("cache"),
            fixtures = fixtures,
            hostile = hostile,
        );
        if !opts.limits.is_empty() {
            config.push_str("[limits]\n");
            for (key, value) in &opts.limits {
                config.push_str(&format!("{key} = {value}\n"));
            }
        }
        for t in TENANTS {
            config.push_str(&format!(
                "[[auth.tokens]]\ntoken = {:?}\ntenant = {t:?}\nsubject = {t:?}\n",
                token(t)
            ));
        }
        let file = dir.join("snodo.toml");
        std::fs::write(&file, config).map_err(|e| format!("{}: {e}", file.display()))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = std::process::Command::new(exe)
            .args(["serve", "--config"])
            .arg(&file)
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start snodo serve: {e}"))?;
        let server = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        // Ready once /healthz answers (the first start compiles the components).
        let deadline = Instant::now() + Duration::from_secs(300);
        while Instant::now() < deadline {
            if let Ok(mut c) = Connection::open(server.addr).await
                && matches!(c.get("/healthz").await, Ok((200, _)))
            {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err("snodo serve did not become healthy within 300 s".into())
    }
}

/// A request of `method` with `params` and 2026-07-28's `_meta`, declaring the tasks
/// extension when `tasks` is set.
fn rpc(method: &str, mut params: Value, tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// `tools/call` of `tool`: synchronous, or a task when `task` is set.
fn tool_call(tool: &str, arguments: Value, task: bool) -> Value {
    rpc(
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
        task,
    )
}

fn ok(status: u16, reply: &Value) -> bool {
    status == 200 && reply.get("result").is_some()
}

async fn greet(conn: &mut Connection) -> Result<(), String> {
    let (status, reply) = conn
        .call(
            &tool_call("greet", json!({"name": "b"}), false),
            Some(&token("b")),
        )
        .await?;
    if ok(status, &reply) {
        Ok(())
    } else {
        Err(format!("greet failed: {status} {reply}"))
    }
}

/// The victim's `greet` calls for `window`: latencies, and how many failed.
async fn measure(
    addr: SocketAddr,
    conn: &mut Connection,
    window: Duration,
) -> (Vec<Duration>, usize) {
    let (mut samples, mut errors) = (Vec::new(), 0);
    let end = Instant::now() + window;
    while Instant::now() < end {
        let started = Instant::now();
        match greet(conn).await {
            Ok(()) => samples.push(started.elapsed()),
            Err(_) => {
                errors += 1;
                // The connection may be broken: the next call goes on a new one.
                if let Ok(c) = Connection::open(addr).await {
                    *conn = c;
                }
            }
        }
    }
    (samples, errors)
}

/// The victim creates a trivial task and polls it until it completed, again and again, at
/// most 40 a second: within the creation rate of a node serving several tenants.
async fn task_latency(addr: SocketAddr, window: Duration) -> (Vec<Duration>, usize) {
    let (mut samples, mut errors) = (Vec::new(), 0);
    let Ok(mut conn) = Connection::open(addr).await else {
        return (samples, 1);
    };
    let b = token("b");
    let end = Instant::now() + window;
    let mut pace = tokio::time::interval(Duration::from_millis(25));
    while Instant::now() < end {
        pace.tick().await;
        let started = Instant::now();
        let created = conn
            .call(&tool_call("burn", json!({"ms": 0}), true), Some(&b))
            .await;
        let Some(id) = created
            .ok()
            .and_then(|(_, v)| v["result"]["taskId"].as_str().map(str::to_owned))
        else {
            errors += 1;
            continue;
        };
        let get = rpc("tasks/get", json!({"taskId": id}), true);
        let done = loop {
            match conn.call(&get, Some(&b)).await {
                Ok((_, v)) => match v["result"]["status"].as_str() {
                    Some("completed") => break true,
                    Some("working" | "input_required") => {}
                    _ => break false,
                },
                Err(_) => break false,
            }
            if Instant::now() > end + Duration::from_secs(60) {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        if done {
            samples.push(started.elapsed());
        } else {
            errors += 1;
        }
    }
    (samples, errors)
}

/// The victim's `greet` on a new connection each time.
async fn fresh_connections(addr: SocketAddr, window: Duration) -> (Vec<Duration>, usize) {
    let (mut samples, mut errors) = (Vec::new(), 0);
    let end = Instant::now() + window;
    while Instant::now() < end {
        let started = Instant::now();
        let call = async {
            let mut c = Connection::open(addr).await?;
            greet(&mut c).await
        };
        match tokio::time::timeout(Duration::from_secs(30), call).await {
            Ok(Ok(())) => samples.push(started.elapsed()),
            _ => errors += 1,
        }
    }
    (samples, errors)
}

/// Runs `scenario`'s attackers until `stop`.
async fn flood(scenario: Scenario, addr: SocketAddr, stop: Arc<AtomicBool>) {
    let mut loops = tokio::task::JoinSet::new();
    let mut each = |n: usize, tenant: &'static str, message: Value| {
        for _ in 0..n {
            let (message, stop) = (message.clone(), stop.clone());
            loops.spawn(call_loop(addr, tenant, message, stop));
        }
    };
    match scenario {
        Scenario::Baseline => {}
        Scenario::SyncCpu => each(16, "a", tool_call("burn", json!({"ms": 200}), false)),
        Scenario::TaskCpu => {
            create_tasks(addr, "a", "burn", json!({"ms": 1_000}), 200).await;
        }
        Scenario::Sleepers => {
            let hold = |task| tool_call("hold", json!({"ms": 120_000}), task);
            create_tasks(addr, "a", "hold", json!({"ms": 120_000}), 48).await;
            create_tasks(addr, "c", "hold", json!({"ms": 120_000}), 16).await;
            for tenant in ["a", "c", "d", "e"] {
                each(16, tenant, hold(false));
            }
        }
        Scenario::DurableSleepers => {
            create_tasks(addr, "a", "test_sleep", json!({"ms": 120_000}), 1_000).await;
        }
        Scenario::Completions => each(
            64,
            "a",
            rpc(
                "completion/complete",
                json!({"ref": {"type": "ref/resource", "uri": "test://template/{id}/data"},
                       "argument": {"name": "id", "value": "1"}}),
                false,
            ),
        ),
        Scenario::InvalidArguments => {
            // 1.8 MB of numbers where `greet` takes a string.
            let numbers: Vec<u32> = (0..300_000).collect();
            each(1, "a", tool_call("greet", json!({"name": numbers}), false));
            // Distinct strings of `a`s ending in `b`: exponential for `^(a+)+$` on a
            // backtracking engine.
            let items: Vec<String> = (0..400)
                .map(|i| format!("{}b", "a".repeat(4_000 + i)))
                .collect();
            each(
                1,
                "a",
                tool_call("backtrack", json!({"items": items}), false),
            );
        }
        Scenario::SilentSockets => {
            // 2,000 open at any time, renewed 250 every 250 ms, so the server never runs
            // out of fresh silent sockets to hold its slots with.
            let mut held = std::collections::VecDeque::new();
            let mut i = 0u32;
            while !stop.load(Ordering::Acquire) {
                for _ in 0..250 {
                    let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i % 8) as u8));
                    i = i.wrapping_add(1);
                    if let Ok(s) = silent(source, addr).await {
                        held.push_back(s);
                    }
                }
                while held.len() > 2_000 {
                    held.pop_front();
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Scenario::MemoryBombs => each(16, "a", tool_call("memory_bomb", json!({}), false)),
        Scenario::SchemaBranches => {
            let deep = (0..19).fold(json!("x"), |inner, _| json!([inner]));
            each(3, "a", tool_call("branches", json!({"v": deep}), false));
        }
        Scenario::LargeArguments => {
            // 3 MB of short strings the schema accepts: parsing, not checking, is the cost.
            let items = vec!["aaaa"; 375_000];
            each(
                16,
                "a",
                tool_call("backtrack", json!({"items": items}), false),
            );
        }
        Scenario::SlowHeads => {
            let mut held = Vec::new();
            for i in 0..1_280u32 {
                let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + (i % 5) as u8));
                if let Ok(s) = silent(source, addr).await {
                    held.push(s);
                }
            }
            while !stop.load(Ordering::Acquire) {
                for s in &mut held {
                    let _ = tokio::io::AsyncWriteExt::write_all(s, b"G").await;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    while loops.join_next().await.is_some() {}
}

/// A connection from `source` that never sends a byte.
async fn silent(source: IpAddr, to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(to).await
}

/// Sends `message` as `tenant` again and again until `stop`, on one connection (a new one
/// when the server closed it).
async fn call_loop(addr: SocketAddr, tenant: &'static str, message: Value, stop: Arc<AtomicBool>) {
    let token = token(tenant);
    // Serialized once: a flood of large messages must cost the server, not this process
    // (which also measures the victim).
    let body = hyper::body::Bytes::from(serde_json::to_vec(&message).unwrap_or_default());
    while !stop.load(Ordering::Acquire) {
        let Ok(mut conn) = Connection::open(addr).await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while !stop.load(Ordering::Acquire) {
            let request =
                snodo::client::mcp_request_of(&message, body.clone(), Some(&token), false);
            if conn.exchange(request).await.is_err() {
                break;
            }
        }
    }
}

/// `tenant` creates `n` tasks of `tool` (refusals past its budgets are simply dropped).
async fn create_tasks(addr: SocketAddr, tenant: &str, tool: &str, arguments: Value, n: usize) {
    let Ok(mut conn) = Connection::open(addr).await else {
        return;
    };
    let message = tool_call(tool, arguments, true);
    for _ in 0..n {
        if conn.call(&message, Some(&token(tenant))).await.is_err() {
            return;
        }
    }
}
