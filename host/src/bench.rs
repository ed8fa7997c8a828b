//! Benchmarks behind `snodo bench`: figures printed, never asserted.
//!
//! `store`: operations per second for create, claim and transition on each adapter, at
//! one caller and at many concurrent callers, as the median of several rounds on fresh
//! stores. The machine is shared and noisy: compare medians and ratios, not single runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use crate::model::{EventKind, Scope, TaskEvent, TaskId, Work};
use crate::store::{
    Authority, ClaimRequest, Lease, MemoryStore, NewTask, RedbStore, Store, StoreError,
};

/// Which adapters to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchBackend {
    /// The in-memory store.
    Memory,
    /// The redb store, on a fresh file per round.
    Redb,
    /// Both.
    All,
}

/// Parameters of the store benchmark.
#[derive(Debug, Clone)]
pub struct StoreBenchOptions {
    /// Adapters to measure.
    pub backend: BenchBackend,
    /// Tasks per round.
    pub tasks: usize,
    /// Concurrent callers to measure at (each a separate run).
    pub concurrency: Vec<usize>,
    /// Rounds per figure; the median is reported.
    pub rounds: usize,
    /// Where redb files go (a fresh subdirectory is made and removed).
    pub dir: PathBuf,
}

/// One measured line.
#[derive(Debug, Clone, Serialize)]
pub struct StoreFigure {
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
pub async fn store(opts: &StoreBenchOptions) -> Result<Vec<StoreFigure>, StoreError> {
    let backends: &[&'static str] = match opts.backend {
        BenchBackend::Memory => &["memory"],
        BenchBackend::Redb => &["redb"],
        BenchBackend::All => &["memory", "redb"],
    };
    let root = opts.dir.join(format!("snodo-bench-{}", TaskId::generate()));
    std::fs::create_dir_all(&root)
        .map_err(|e| StoreError::unavailable(format!("{}: {e}", root.display())))?;
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
            while let Some(c) = store.claim_next(&req).await? {
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
                .map_err(|e| StoreError::unavailable(format!("bench worker: {e}")))??,
        );
    }
    Ok(out)
}

fn rate(n: usize, since: Instant) -> f64 {
    let secs = since.elapsed().as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// Parameters of the wasm benchmark.
#[derive(Debug, Clone)]
pub struct WasmBenchOptions {
    /// The component to measure.
    pub component: PathBuf,
    /// A tool of it that does (nearly) nothing.
    pub tool: String,
    /// Warm executions per allocator.
    pub iterations: usize,
    /// Cold compilations.
    pub compiles: usize,
}

/// One measured wasm figure.
#[derive(Debug, Clone, Serialize)]
pub struct WasmFigure {
    /// What was measured.
    pub what: String,
    /// Median in microseconds.
    pub median_us: f64,
    /// 99th percentile in microseconds.
    pub p99_us: f64,
    /// Samples taken.
    pub samples: usize,
}

fn figure(what: impl Into<String>, mut samples: Vec<std::time::Duration>) -> WasmFigure {
    samples.sort();
    let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
    let n = samples.len();
    WasmFigure {
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

/// Runs the wasm benchmark: cold compile, cache load, and warm instantiate + trivial
/// execute + drop with both allocators.
pub async fn wasm(opts: &WasmBenchOptions) -> Result<Vec<WasmFigure>, String> {
    use crate::wasm::{Allocation, ComponentLoader, EngineConfig, Execution, SyncIo, WasmEngine};

    let bytes =
        std::fs::read(&opts.component).map_err(|e| format!("{}: {e}", opts.component.display()))?;
    let mut figures = Vec::new();

    let engine = WasmEngine::new(EngineConfig::default())?;
    let mut compiles = Vec::new();
    for _ in 0..opts.compiles.max(1) {
        let e = engine.engine.clone();
        let b = bytes.clone();
        let t = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            wasmtime::component::Component::new(&e, &b).map(|_| started.elapsed())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e:#}"))?;
        compiles.push(t);
    }
    figures.push(figure("cold compile (Component::new)", compiles));

    let cache = std::env::temp_dir().join(format!("snodo-bench-cache-{}", TaskId::generate()));
    let warm_loader = ComponentLoader::new(engine.clone(), Some(cache.clone()))?;
    warm_loader
        .load(&opts.component)
        .await
        .map_err(|e| e.to_string())?;
    let mut loads = Vec::new();
    for _ in 0..opts.compiles.max(1) {
        let loader = ComponentLoader::new(engine.clone(), Some(cache.clone()))?;
        let c = loader
            .load(&opts.component)
            .await
            .map_err(|e| e.to_string())?;
        if !c.info().cache_hit {
            return Err("the disk cache was not used".into());
        }
        loads.push(c.info().prepare_time);
    }
    figures.push(figure("load from disk cache (deserialize)", loads));
    let _ = std::fs::remove_dir_all(&cache);

    for (name, allocation) in [
        ("pooling", Allocation::Pooling),
        ("on-demand", Allocation::OnDemand),
    ] {
        let engine = WasmEngine::new(EngineConfig {
            allocation,
            ..EngineConfig::default()
        })?;
        let loader = ComponentLoader::new(engine, None)?;
        let component = loader
            .load(&opts.component)
            .await
            .map_err(|e| e.to_string())?;
        let io: Arc<dyn crate::wasm::ExecutionIo> =
            Arc::new(SyncIo::new(Default::default(), json!({}), None));
        for _ in 0..opts.iterations.min(100) {
            let _ = component
                .execute(Execution::new(&opts.tool, json!({}), io.clone()))
                .await;
        }
        let mut total = Vec::with_capacity(opts.iterations);
        let mut instantiate = Vec::with_capacity(opts.iterations);
        for _ in 0..opts.iterations.max(1) {
            let started = Instant::now();
            let report = component
                .execute(Execution::new(&opts.tool, json!({}), io.clone()))
                .await;
            total.push(started.elapsed());
            instantiate.push(report.instantiate);
            if let Err(e) = report.outcome {
                return Err(format!("{} failed: {e}", opts.tool));
            }
        }
        figures.push(figure(format!("{name}: instantiate"), instantiate));
        figures.push(figure(
            format!("{name}: instantiate + execute + drop"),
            total,
        ));
    }
    Ok(figures)
}
