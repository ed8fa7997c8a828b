//! `snodo bench outbound`: what a guest's HTTP request costs beside the same request made
//! natively in the host, and what the journal adds per request on redb and PostgreSQL.
//!
//! Everything runs in this process: a local HTTP server answering `GET /template`, a
//! native hyper client, and the `outbound` example guest (`fetch`, built with wstd). Each
//! figure is the median over rounds of the mean per request within a round; CPU is this
//! process's user and system time per request (the local server's share is the same in
//! every row, so differences between rows are the host's and the guest's).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use snodo::model::{Scope, TaskId};
use snodo::store::{ClaimRequest, NewTask, Store};
use snodo::wasm::outbound::{AllowList, HttpGrant, OutboundLimits};
use snodo::wasm::{Component, ComponentLoader, EngineConfig, Execution, WasiGrants, WasmEngine};

/// Parameters of the outbound benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OutboundBenchOptions {
    /// The outbound example component (target/guests/wasm32-wasip2/release/outbound.wasm).
    #[arg(long)]
    pub component: PathBuf,
    /// Requests per round (at most 60: one attempt's journal holds the round).
    #[arg(long, default_value_t = 50)]
    pub requests: u32,
    /// Rounds per figure.
    #[arg(long, default_value_t = 40)]
    pub rounds: usize,
    /// PostgreSQL for the journal's figure there (skipped, and said so, when it does not
    /// answer).
    #[arg(
        long,
        default_value = "host=127.0.0.1 port=5432 user=postgres dbname=test"
    )]
    pub postgres: String,
}

/// One figure of the outbound benchmark.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OutboundFigure {
    /// What was measured.
    pub what: String,
    /// Median over rounds of the mean latency per request, in microseconds.
    pub median_us: f64,
    /// This process's CPU time per request, in microseconds (all rounds together).
    pub cpu_us: f64,
    /// Requests measured.
    pub requests: u64,
}

/// Process CPU time so far (user + system), from /proc/self/stat.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    let total = ticks(11) + ticks(12);
    // Linux reports them in USER_HZ, 100 on every architecture it runs on here.
    Duration::from_millis(total * 10)
}

/// Runs `round` `rounds` times; each returns how many requests it made.
async fn measure<F, Fut>(what: &str, rounds: usize, mut round: F) -> Result<OutboundFigure, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u32, String>>,
{
    // One round to warm up (connections, caches, the guest's code).
    round().await?;
    let cpu = cpu_time();
    let mut means = Vec::with_capacity(rounds);
    let mut total = 0u64;
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let n = round().await?.max(1);
        means.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(n));
        total += u64::from(n);
    }
    let cpu = cpu_time().saturating_sub(cpu);
    means.sort_by(f64::total_cmp);
    Ok(OutboundFigure {
        what: what.to_owned(),
        median_us: means[means.len() / 2],
        cpu_us: cpu.as_secs_f64() * 1e6 / total.max(1) as f64,
        requests: total,
    })
}

/// A local server answering every request with `template-1`.
async fn local_server() -> Result<std::net::SocketAddr, String> {
    super::local_http(|_req| async {
        hyper::Response::new(http_body_util::Full::new(hyper::body::Bytes::from_static(
            b"template-1",
        )))
    })
    .await
}

/// One native GET on a new connection, as the host's sender makes it.
async fn native_get(addr: std::net::SocketAddr) -> Result<(), String> {
    let (status, body) = snodo::client::Connection::open(addr)
        .await?
        .get("/template")
        .await?;
    if (status, body.as_str()) != (200, "template-1") {
        return Err("the native GET read the wrong answer".into());
    }
    Ok(())
}

/// Runs `fetch` once with `args`, journaled through `io` when given.
async fn fetch(
    component: &Component,
    grant: &Arc<HttpGrant>,
    args: Value,
    task: Option<(TaskId, Arc<dyn snodo::wasm::ExecutionIo>)>,
) -> Result<(), String> {
    let io: Arc<dyn snodo::wasm::ExecutionIo> = match &task {
        Some((_, io)) => io.clone(),
        None => Arc::new(snodo::mcp::SyncIo::new(Default::default(), json!({}))),
    };
    let mut exec = Execution::new("fetch", args, io);
    if let Some((id, _)) = task {
        exec.task_id = Some(id.to_string());
    }
    exec.grants = WasiGrants {
        http: Some(grant.clone()),
        ..WasiGrants::default()
    };
    let report = component.execute(exec).await;
    match report.outcome {
        Ok(snodo::wasm::GuestOutcome::Completed(r)) if r.get("isError") != Some(&json!(true)) => {
            Ok(())
        }
        other => Err(format!("fetch failed: {other:?}")),
    }
}

/// Creates and claims a task of `fetch` on `store`, and the IO of its attempt.
async fn attempt(
    store: &Arc<dyn Store>,
    args: &Value,
) -> Result<(TaskId, snodo::store::Lease), String> {
    let id = TaskId::generate();
    let work = snodo::model::Work::new(
        "snodo/tool-call",
        json!({"tool": "fetch", "arguments": args}),
        id.to_string(),
    );
    store
        .create(NewTask::new(id, Scope::new("bench"), work))
        .await
        .map_err(|e| e.to_string())?;
    let claimed = store
        .claim(&id, &ClaimRequest::new(60_000, "bench"))
        .await
        .map_err(|e| e.to_string())?;
    Ok((id, claimed.lease))
}

fn task_io(
    store: &Arc<dyn Store>,
    lease: &snodo::store::Lease,
) -> Arc<dyn snodo::wasm::ExecutionIo> {
    Arc::new(snodo::runner::TaskIo::new(
        store.clone(),
        lease.clone(),
        json!({}),
        Arc::new(snodo::runner::InputWaiters::new()),
    ))
}

/// The journaled figures on `store`: recording each response, and answering a replay.
async fn journaled(
    figures: &mut Vec<OutboundFigure>,
    name: &str,
    store: Arc<dyn Store>,
    component: &Component,
    grant: &Arc<HttpGrant>,
    args: &Value,
    opts: &OutboundBenchOptions,
) -> Result<(), String> {
    // The same attempts twice: recording every response, then answered from the journal.
    let leases = std::cell::RefCell::new(Vec::new());
    let run = |lease: (TaskId, snodo::store::Lease)| {
        let store = store.clone();
        async move {
            let io = task_io(&store, &lease.1);
            fetch(component, grant, args.clone(), Some((lease.0, io))).await?;
            Ok::<_, String>(lease)
        }
    };
    let recorded = measure(
        &format!("guest GET, journaled on {name} (recorded)"),
        opts.rounds,
        || async {
            let lease = run(attempt(&store, args).await?).await?;
            leases.borrow_mut().push(lease);
            Ok(opts.requests)
        },
    )
    .await?;
    figures.push(recorded);
    let mut next = leases.into_inner().into_iter();
    let replayed = measure(
        &format!("guest GET, replayed from the journal on {name}"),
        opts.rounds,
        || {
            let lease = next
                .next()
                .ok_or_else(|| "no recorded attempt left".to_owned());
            async {
                run(lease?).await?;
                Ok(opts.requests)
            }
        },
    )
    .await?;
    figures.push(replayed);
    Ok(())
}

/// Runs the outbound benchmark.
pub(crate) async fn outbound(opts: &OutboundBenchOptions) -> Result<Vec<OutboundFigure>, String> {
    if !(1..=60).contains(&opts.requests) {
        return Err("--requests must be 1..=60".into());
    }
    let addr = local_server().await?;
    let engine = WasmEngine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
    let component = ComponentLoader::new(engine, None)
        .map_err(|e| e.to_string())?
        .load(&opts.component)
        .await
        .map_err(|e| e.to_string())?;
    let allowed = AllowList::parse(&[format!("http://{addr}")]).map_err(|e| e.to_string())?;
    let mut grant = HttpGrant::new(allowed);
    grant.limits = OutboundLimits {
        max_requests: 64,
        ..OutboundLimits::default()
    };
    let grant = Arc::new(grant);
    let url = format!("http://{addr}/template");
    let args = json!({"url": url, "repeat": opts.requests});
    let mut figures = Vec::new();

    figures.push(
        measure("native hyper GET (new connection)", opts.rounds, || async {
            for _ in 0..opts.requests {
                native_get(addr).await?;
            }
            Ok(opts.requests)
        })
        .await?,
    );
    figures.push(
        measure(
            "guest GET (wstd, in one execution)",
            opts.rounds,
            || async {
                fetch(&component, &grant, args.clone(), None).await?;
                Ok(opts.requests)
            },
        )
        .await?,
    );
    figures.push(
        measure(
            "guest call: instantiate + one GET + drop",
            opts.rounds,
            || async {
                for _ in 0..opts.requests {
                    fetch(&component, &grant, json!({"url": url}), None).await?;
                }
                Ok(opts.requests)
            },
        )
        .await?,
    );

    let dir = std::env::temp_dir().join(format!("snodo-bench-outbound-{}", TaskId::generate()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let redb: Arc<dyn Store> =
        Arc::new(snodo::store::RedbStore::open(dir.join("tasks.redb")).map_err(|e| e.to_string())?);
    let result = journaled(&mut figures, "redb", redb, &component, &grant, &args, opts).await;
    let _ = std::fs::remove_dir_all(&dir);
    result?;

    let up = std::net::TcpStream::connect_timeout(
        &"127.0.0.1:5432".parse().map_err(|e| format!("{e}"))?,
        Duration::from_secs(2),
    )
    .is_ok();
    if !up {
        eprintln!("PostgreSQL does not answer at 127.0.0.1:5432: no journal figure for it");
        return Ok(figures);
    }
    let mut pg = snodo::store::PgOptions::new(opts.postgres.clone(), "bench-outbound");
    pg.schema = format!("snodo_bench_outbound_{}", std::process::id());
    pg.migrate = true;
    let store: Arc<dyn Store> = Arc::new(
        snodo::store::PgStore::open(pg.clone())
            .await
            .map_err(|e| e.to_string())?,
    );
    let result = journaled(
        &mut figures,
        "postgres",
        store,
        &component,
        &grant,
        &args,
        opts,
    )
    .await;
    let _ = snodo::store::drop_postgres_schema(&pg).await;
    result?;
    Ok(figures)
}
