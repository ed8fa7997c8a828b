//! Benchmarks behind `snodo bench`: figures printed, never asserted.
//!
//! `store`: operations per second for create, claim and transition on each adapter, at
//! one caller and at many concurrent callers, as the median of several rounds on fresh
//! stores. The machine is shared and noisy: compare medians and ratios, not single runs.
//! `fairness` (fairness.rs), `gateway` (gateway.rs), `outbound` (outbound.rs), `listing` (listing.rs), `sleepers`
//! (sleepers.rs), `webhooks` (webhooks.rs) and `wasm` (wasm.rs) have files of their own.

mod fairness;
mod gateway;
mod listing;
mod outbound;
mod sleepers;
mod wasm;
mod webhooks;

pub(crate) use fairness::{FairnessFigure, FairnessOptions, fairness};
pub(crate) use gateway::{GatewayBenchOptions, GatewayFigure, gateway};
pub(crate) use listing::{ListingBenchOptions, ListingFigure, listing};
pub(crate) use outbound::{OutboundBenchOptions, OutboundFigure, outbound};
pub(crate) use sleepers::{SleepersOptions, sleepers};
pub(crate) use wasm::{WasmBenchOptions, WasmFigure, wasm};
pub(crate) use webhooks::{WebhooksOptions, webhooks};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use snodo::model::{EventKind, Scope, TaskEvent, TaskId, Work};
use snodo::store::{
    Authority, ClaimRequest, Lease, MemoryStore, NewTask, RedbStore, Store, StoreError,
};

/// Which adapters to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BenchBackend {
    /// The in-memory store.
    Memory,
    /// The redb store, on a fresh file per round.
    Redb,
    /// Both.
    All,
}

/// Parameters of the store benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreBenchOptions {
    /// Which store adapters to measure.
    #[arg(long, value_enum, default_value_t = BenchBackend::All)]
    pub backend: BenchBackend,
    /// Tasks per round.
    #[arg(long, default_value_t = 2_000, value_parser = at_least_one)]
    pub tasks: usize,
    /// Concurrent callers, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub concurrency: Vec<usize>,
    /// Rounds per figure (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    pub rounds: usize,
    /// Directory for the redb files (a fresh subdirectory, removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub dir: PathBuf,
}

/// A count of one or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("a count of at least 1".into()),
    }
}

/// One measured line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StoreFigure {
    /// `memory` or `redb`.
    pub backend: &'static str,
    /// `create`, `claim_next` or `transition`.
    pub operation: &'static str,
    /// Concurrent callers.
    pub concurrency: usize,
    /// Median operations per second over the rounds.
    pub median_ops_per_sec: f64,
    /// Every round's figure.
    pub rounds_ops_per_sec: Vec<f64>,
}

/// Runs the store benchmark.
pub(crate) async fn store(opts: &StoreBenchOptions) -> Result<Vec<StoreFigure>, StoreError> {
    let backends: &[&'static str] = match opts.backend {
        BenchBackend::Memory => &["memory"],
        BenchBackend::Redb => &["redb"],
        BenchBackend::All => &["memory", "redb"],
    };
    let root = opts.dir.join(format!("snodo-bench-{}", TaskId::generate()));
    std::fs::create_dir_all(&root)
        .map_err(|e| StoreError::Unavailable(format!("{}: {e}", root.display()).into()))?;
    let mut figures = Vec::new();
    for &backend in backends {
        for &conc in &opts.concurrency {
            let mut per_op: [Vec<f64>; 3] = Default::default();
            for round in 0..opts.rounds {
                let store: Arc<dyn Store> = match backend {
                    "memory" => Arc::new(MemoryStore::new()),
                    _ => {
                        let path = root.join(format!("c{conc}-r{round}.redb"));
                        Arc::new(RedbStore::open(path)?)
                    }
                };
                let rates = one_round(store, opts.tasks, conc.max(1)).await?;
                for (i, r) in rates.into_iter().enumerate() {
                    per_op[i].push(r);
                }
            }
            for (i, operation) in ["create", "claim_next", "transition"]
                .into_iter()
                .enumerate()
            {
                figures.push(StoreFigure {
                    backend,
                    operation,
                    concurrency: conc,
                    median_ops_per_sec: median(&per_op[i]),
                    rounds_ops_per_sec: per_op[i].clone(),
                });
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(figures)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Creates `tasks` tasks, claims them all with `claim_next`, completes them all; each
/// phase split over `conc` concurrent callers. Returns the three rates.
async fn one_round(
    store: Arc<dyn Store>,
    tasks: usize,
    conc: usize,
) -> Result<[f64; 3], StoreError> {
    let per = tasks.div_ceil(conc);

    let started = Instant::now();
    let mut joins = Vec::new();
    for _ in 0..conc {
        let store = store.clone();
        joins.push(tokio::spawn(async move {
            for _ in 0..per {
                let id = TaskId::generate();
                let work = Work::new("bench/op", json!({"n": 1}), id.to_string());
                store
                    .create(NewTask::new(id, Scope::new("bench"), work))
                    .await?;
            }
            Ok::<_, StoreError>(())
        }));
    }
    join_all(joins).await?;
    let created = per * conc;
    let create_rate = rate(created, started);

    let started = Instant::now();
    let mut joins = Vec::new();
    for _ in 0..conc {
        let store = store.clone();
        joins.push(tokio::spawn(async move {
            let mut leases = Vec::new();
            let req = ClaimRequest::new(60_000, "bench");
            while let Some(c) = store.claim_next(&req).await?.claimed {
                leases.push(c.lease);
            }
            Ok::<_, StoreError>(leases)
        }));
    }
    let leases: Vec<Lease> = join_all(joins).await?.into_iter().flatten().collect();
    let claim_rate = rate(leases.len(), started);

    let started = Instant::now();
    let chunks: Vec<Vec<Lease>> = leases.chunks(per.max(1)).map(<[Lease]>::to_vec).collect();
    let completed: usize = chunks.iter().map(Vec::len).sum();
    let mut joins = Vec::new();
    for chunk in chunks {
        let store = store.clone();
        joins.push(tokio::spawn(async move {
            for lease in chunk {
                let kind = EventKind::Completed {
                    result: json!({"content": [{"type": "text", "text": "ok"}]}),
                };
                store
                    .transition(Authority::Worker(&lease), TaskEvent::random(kind), None)
                    .await?;
            }
            Ok::<_, StoreError>(())
        }));
    }
    join_all(joins).await?;
    let transition_rate = rate(completed, started);
    Ok([create_rate, claim_rate, transition_rate])
}

async fn join_all<T>(
    joins: Vec<tokio::task::JoinHandle<Result<T, StoreError>>>,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::with_capacity(joins.len());
    for j in joins {
        out.push(
            j.await
                .map_err(|e| StoreError::Unavailable(format!("bench worker: {e}").into()))??,
        );
    }
    Ok(out)
}

fn rate(n: usize, since: Instant) -> f64 {
    let secs = since.elapsed().as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// One measured latency figure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LatencyFigure {
    /// What was measured.
    pub what: String,
    /// Median in microseconds.
    pub median_us: f64,
    /// 99th percentile in microseconds.
    pub p99_us: f64,
    /// Samples taken.
    pub samples: usize,
}

fn figure(what: impl Into<String>, mut samples: Vec<std::time::Duration>) -> LatencyFigure {
    samples.sort();
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let n = samples.len();
    LatencyFigure {
        what: what.into(),
        median_us: if n == 0 { 0.0 } else { us(samples[n / 2]) },
        p99_us: if n == 0 {
            0.0
        } else {
            us(samples[(n * 99 / 100).min(n - 1)])
        },
        samples: n,
    }
}

/// Parameters of the runner benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunnerBenchOptions {
    /// The fixtures component (provides `confirm_delete` and `slow_compute`).
    #[arg(long, default_value_os_t = crate::guests::guest("fixtures.wasm"))]
    pub fixtures: PathBuf,
    /// The hostile component (provides `ignore_cancel`).
    #[arg(long, default_value_os_t = crate::guests::guest("hostile.wasm"))]
    pub hostile: PathBuf,
    /// Parked-task counts to measure resident memory at.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    pub parked: Vec<usize>,
    /// Live-guest counts to measure resident memory at, for comparison.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub live: Vec<usize>,
    /// Cancellations to time.
    #[arg(long, default_value_t = 20)]
    pub cancels: usize,
    /// The cancel grace period in ms.
    #[arg(long, default_value_t = 100)]
    pub grace_ms: u64,
    /// Store for the memory figures: `memory`, `redb` or `sqlite` (a temporary file), or
    /// `postgres` (a fresh schema at --pg-url, dropped after).
    #[arg(long, value_enum, default_value_t = snodo::store::StoreKind::Memory)]
    pub store: snodo::store::StoreKind,
    /// PostgreSQL: the connection string.
    #[arg(long, default_value = crate::scratch::PG_URL)]
    pub pg_url: String,
}

/// One runner figure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunnerFigure {
    /// What was measured.
    pub what: String,
    /// The figure.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
}

/// Loads the component at `path`, its error as text.
async fn load(
    loader: &snodo::wasm::ComponentLoader,
    path: &std::path::Path,
) -> Result<Arc<snodo::wasm::Component>, String> {
    loader.load(path).await.map_err(|e| e.to_string())
}

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
        })
        .map_or(0, |kb| kb * 1024)
}

/// Runs the runner benchmark: resident memory of parked (released) tasks and of live
/// suspended guests, and the time from a cancel to a stopped guest.
pub(crate) async fn runner(opts: &RunnerBenchOptions) -> Result<Vec<RunnerFigure>, String> {
    let mut figures = Vec::new();
    let sizes: Vec<(usize, bool)> = opts
        .parked
        .iter()
        .map(|n| (*n, false))
        .chain(opts.live.iter().map(|n| (*n, true)))
        .collect();
    for (n, live) in sizes {
        waiting_memory(opts, n, live, &mut figures).await?;
    }

    // Cancel to stopped guest, for a guest that ignores its token and one that honours it.
    cancel_to_stop(opts, &mut figures).await?;
    Ok(figures)
}

/// Measures the memory `n` tasks waiting for input add (live suspended guests when
/// `live`, else parked ones with their guests released) on a fresh store, and pushes the
/// figures onto `figures`.
async fn waiting_memory(
    opts: &RunnerBenchOptions,
    n: usize,
    live: bool,
    figures: &mut Vec<RunnerFigure>,
) -> Result<(), String> {
    use snodo::runner::Catalog;
    use snodo::wasm::{ComponentLoader, EngineConfig, WasmEngine};

    let engine = WasmEngine::new(EngineConfig {
        max_instances: if live { n as u32 + 16 } else { 64 },
        max_memory_bytes: 16 << 20,
        // Every live guest may hold its whole allowance at once.
        max_total_memory_bytes: (n + 16) * (16 << 20),
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let fixtures = load(
        &ComponentLoader::new(engine, None).map_err(|e| e.to_string())?,
        &opts.fixtures,
    )
    .await?;
    let registry = Catalog::new()
        .with_component(&fixtures)
        .map_err(|e| e.to_string())?;
    let dir = crate::scratch::temp_dir("bench-runner")?;
    let schema = format!("snodo_bench_runner_{}_{n}", std::process::id());
    let opened = crate::scratch::ScratchStore::open(
        opts.store,
        &dir.join(format!("tasks.{}", opts.store)),
        &opts.pg_url,
        schema,
    )
    .await?;
    let store = opened.store.clone();
    let runner = waiting_runner(store.clone(), registry, n, live);
    let before = resident_bytes();
    let heap = crate::heap::counting();
    create_questions(&store, n).await?;
    runner.wake();
    wait_until_waiting(&runner, n, live).await?;
    let after = resident_bytes();
    let heap_per = heap.live() as f64 / n as f64;
    drop(heap);
    let per = after.saturating_sub(before) as f64 / n as f64;
    let label = if live {
        format!("live suspended guests, {} store", opts.store)
    } else {
        format!("parked tasks (guest released), {} store", opts.store)
    };
    figures.push(RunnerFigure {
        what: format!("{n} {label}: resident memory added"),
        value: after.saturating_sub(before) as f64 / (1024.0 * 1024.0),
        unit: "MiB",
    });
    figures.push(RunnerFigure {
        what: format!("{n} {label}: per task"),
        value: per / 1024.0,
        unit: "KiB",
    });
    figures.push(RunnerFigure {
        what: format!("{n} {label}: heap bytes per task"),
        value: heap_per / 1024.0,
        unit: "KiB",
    });
    runner.shutdown().await;
    opened.remove().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A runner over `store` for `n` tasks that wait for input: their guests kept live when
/// `live`, else parked at once.
fn waiting_runner(
    store: Arc<dyn Store>,
    registry: snodo::runner::Catalog,
    n: usize,
    live: bool,
) -> snodo::runner::Runner {
    use snodo::runner::{Runner, RunnerOptions};
    use std::time::Duration;

    Runner::start(
        store,
        Arc::new(registry),
        RunnerOptions {
            park_after: if live {
                Duration::from_secs(3_600)
            } else {
                Duration::from_millis(1)
            },
            // One tenant holds every task here: its share is the whole runner.
            max_concurrent: if live { n + 8 } else { 64 },
            max_running_per_tenant: if live { n + 8 } else { 64 },
            poll_interval: Duration::from_millis(5),
            reap_interval: None,
            ..RunnerOptions::default()
        },
        Arc::new(snodo::runner::NoInstrumentation),
    )
}

/// Creates `n` tasks whose guest asks a question and waits for the answer.
async fn create_questions(store: &Arc<dyn Store>, n: usize) -> Result<(), String> {
    for i in 0..n {
        let id = TaskId::generate();
        let mut new = NewTask::new(
            id,
            Scope::new("bench"),
            snodo::runner::tool_call_work(
                &id,
                "confirm_delete",
                json!({"filename": format!("f{i}")}),
            ),
        );
        new.client_capabilities = json!({"elicitation": {}});
        store.create(new).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Waits until `n` tasks wait for input on `runner` (live guests when `live`, else
/// parked ones); an error when an attempt ended otherwise or it takes too long.
async fn wait_until_waiting(
    runner: &snodo::runner::Runner,
    n: usize,
    live: bool,
) -> Result<(), String> {
    use std::time::Duration;

    // Bench code may poll: it measures, it does not assert.
    let started = Instant::now();
    loop {
        let done = if live {
            runner.waiters().len() >= n
        } else {
            runner.settled_parked(n as u64)
        };
        if done {
            break;
        }
        // Every attempt here either waits for its answer or parks; one that ended
        // otherwise was refused something (a budget, a limit) and would be waited
        // for in vain.
        let stats = runner.stats();
        let finished = stats.finished.load(std::sync::atomic::Ordering::Relaxed);
        let parked = stats
            .parked_released
            .load(std::sync::atomic::Ordering::Relaxed);
        if finished > parked {
            return Err(format!(
                "{} of {n} attempts ended instead of waiting for input",
                finished - parked
            ));
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(format!("{n} tasks did not park in time"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Measures the time from a cancel to a stopped guest, for a guest that ignores its
/// token and one that honours it, and pushes the figures onto `figures`.
async fn cancel_to_stop(
    opts: &RunnerBenchOptions,
    figures: &mut Vec<RunnerFigure>,
) -> Result<(), String> {
    use snodo::runner::Catalog;
    use snodo::wasm::{ComponentLoader, EngineConfig, WasmEngine};

    let engine = WasmEngine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
    let loader = ComponentLoader::new(engine, None).map_err(|e| e.to_string())?;
    let fixtures = load(&loader, &opts.fixtures).await?;
    let hostile = load(&loader, &opts.hostile).await?;
    let registry = Catalog::new()
        .with_component(&fixtures)
        .and_then(|c| c.with_component(&hostile))
        .map_err(|e| e.to_string())?;
    for (tool, args) in [
        ("ignore_cancel", json!({})),
        ("slow_compute", json!({"seconds": 600})),
    ] {
        let samples = cancel_samples(opts, &registry, tool, &args).await?;
        let f = figure(
            format!(
                "cancel to stopped guest: {tool} (grace {} ms)",
                opts.grace_ms
            ),
            samples,
        );
        figures.push(RunnerFigure {
            what: format!("{} median", f.what),
            value: f.median_us / 1000.0,
            unit: "ms",
        });
        figures.push(RunnerFigure {
            what: format!("{} p99", f.what),
            value: f.p99_us / 1000.0,
            unit: "ms",
        });
    }
    Ok(())
}

/// Runs `tool` with `args` on a fresh runner, `opts.cancels` times, cancelling each task
/// once its job starts: the times from each cancel to its job's stop.
async fn cancel_samples(
    opts: &RunnerBenchOptions,
    registry: &snodo::runner::Catalog,
    tool: &str,
    args: &serde_json::Value,
) -> Result<Vec<std::time::Duration>, String> {
    use snodo::runner::{Runner, RunnerEvent, RunnerOptions, tool_call_work};
    use std::time::Duration;

    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let runner = Runner::start(
        store.clone(),
        Arc::new(registry.clone()),
        RunnerOptions {
            recover: false,
            cancel_grace: Duration::from_millis(opts.grace_ms),
            reap_interval: None,
            ..RunnerOptions::default()
        },
        Arc::new(snodo::runner::EventChannel(tx)),
    );
    let mut samples = Vec::new();
    let canceller = snodo::model::Principal::new("bench", "b");
    for _ in 0..opts.cancels.max(1) {
        let id = TaskId::generate();
        store
            .create(NewTask::new(
                id,
                Scope::new("bench"),
                tool_call_work(&id, tool, args.clone()),
            ))
            .await
            .map_err(|e| e.to_string())?;
        runner.submit(&id).await.map_err(|e| e.to_string())?;
        while let Some(e) = rx.recv().await {
            if matches!(e, RunnerEvent::JobStarted { task, .. } if task == id) {
                break;
            }
        }
        let access = store
            .authorize(&canceller, snodo::store::Action::Cancel, &id.to_string())
            .await
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        store
            .cancel(&access, None)
            .await
            .map_err(|e| e.to_string())?;
        runner.cancel(&id);
        while let Some(e) = rx.recv().await {
            if matches!(e, RunnerEvent::JobStopped { task, .. } if task == id) {
                break;
            }
        }
        samples.push(started.elapsed());
    }
    runner.shutdown().await;
    Ok(samples)
}

/// A local HTTP/1 server whose every request is answered by `answer`, each connection on
/// a task of its own, for as long as the process runs: the far end of a benchmark.
pub(crate) async fn local_http<F, Fut>(answer: F) -> Result<std::net::SocketAddr, String>
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<http_body_util::Full<hyper::body::Bytes>>>
        + Send
        + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let answer = answer.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// Parameters of the MCP latency benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct McpBenchOptions {
    /// Components to serve (must include `flaky`, from the examples component).
    #[arg(long = "component", default_values_os_t = [crate::guests::guest("examples.wasm")])]
    pub components: Vec<PathBuf>,
    /// `redb` (in a temporary directory) or `memory`.
    #[arg(long, value_enum, default_value_t = snodo::store::StoreKind::Redb)]
    pub store: snodo::store::StoreKind,
    /// Concurrent keep-alive clients.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Requests per phase, split over the clients.
    #[arg(long, default_value_t = 4_000)]
    pub requests: usize,
}

/// Runs the MCP benchmark: `tools/call` → `CreateTaskResult` and `tasks/get` latency over
/// real loopback HTTP, against a server in this process.
pub(crate) async fn mcp(opts: &McpBenchOptions) -> Result<Vec<LatencyFigure>, String> {
    use snodo::serve::ServeOptions;
    use snodo::store::{StoreConfig, StoreKind};
    let dir = std::env::temp_dir().join(format!("snodo-bench-mcp-{}", TaskId::generate()));
    let mut serve_opts = ServeOptions::new(dir.clone(), opts.components.clone());
    serve_opts.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    match opts.store {
        StoreKind::Memory => serve_opts.store = StoreConfig::Memory,
        StoreKind::Redb => {}
        other => return Err(format!("--store {other}: use redb or memory")),
    }
    let server = snodo::serve::spawn(serve_opts)
        .await
        .map_err(|e| format!("the server did not start: {e}"))?;
    let addr = server.addr;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let per = opts.requests.div_ceil(opts.clients.max(1));
    let mut joins = Vec::new();
    for c in 0..opts.clients.max(1) {
        let meta = meta.clone();
        joins.push(tokio::spawn(async move {
            let mut conn = snodo::client::Connection::open(addr).await?;
            let mut create = Vec::with_capacity(per);
            let mut get = Vec::with_capacity(per);
            let mut ids = Vec::with_capacity(per);
            for i in 0..per {
                let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                    "name": "flaky", "arguments": {"succeed_on_attempt": 1}, "_meta": meta}});
                let started = Instant::now();
                let (_, v) = conn.call(&call, None).await?;
                create.push(started.elapsed());
                let id = v["result"]["taskId"]
                    .as_str()
                    .ok_or_else(|| format!("client {c}: no task created: {v}"))?
                    .to_owned();
                ids.push(id);
            }
            for (i, id) in ids.iter().enumerate() {
                let get_task = json!({"jsonrpc": "2.0", "id": i, "method": "tasks/get", "params": {
                    "taskId": id, "_meta": meta}});
                let started = Instant::now();
                let (_, v) = conn.call(&get_task, None).await?;
                get.push(started.elapsed());
                if v["result"]["taskId"] != json!(id) {
                    return Err(format!("client {c}: tasks/get failed: {v}"));
                }
            }
            Ok::<_, String>((create, get))
        }));
    }
    let mut create = Vec::new();
    let mut get = Vec::new();
    let started = Instant::now();
    for j in joins {
        let (c, g) = j.await.map_err(|e| e.to_string())??;
        create.extend(c);
        get.extend(g);
    }
    let elapsed = started.elapsed();
    let _ = server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let label = format!("{} store, {} clients", opts.store, opts.clients);
    let figures = vec![
        figure(format!("tools/call -> CreateTaskResult ({label})"), create),
        figure(format!("tasks/get ({label})"), get),
        figure(format!("both phases, wall clock ({label})"), vec![elapsed]),
    ];
    Ok(figures)
}
