//! `snodo bench wasm`: per component, the cold compile, the load from the disk cache (what a
//! restart pays), the warm call (instantiate, execute, drop) with both allocators, and the
//! memory one live instance holds while it waits for input. Several components side by
//! side compare tools written in Rust, Python and JavaScript on the same machine and run.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{Value, json};

use snodo::model::TaskId;
use snodo::wasm::{CancelToken, InputAnswers, InputFailure, InputRequests, Progress};

use super::{load, resident_bytes};

/// Parameters of the wasm benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WasmBenchOptions {
    /// A component to measure, as PATH or LABEL=PATH (repeatable; e.g.
    /// rust=target/guests/wasm32-wasip2/release/fixtures.wasm).
    #[arg(long = "component", required = true)]
    pub components: Vec<String>,
    /// A tool every component serves that does almost nothing (called with `{}`).
    #[arg(long, default_value = "greet")]
    pub tool: String,
    /// A tool every component serves that asks a question (`{"filename": ...}`), for the
    /// memory of live instances; empty to skip.
    #[arg(long, default_value = "confirm_delete")]
    pub asking_tool: String,
    /// Warm executions per allocator.
    #[arg(long, default_value_t = 2_000)]
    pub iterations: usize,
    /// Cold compilations.
    #[arg(long, default_value_t = 3)]
    pub compiles: usize,
    /// Live instances held at once for the memory figure.
    #[arg(long, default_value_t = 50)]
    pub live: usize,
}

/// One figure: a latency (median and p99 in microseconds) or a size.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WasmFigure {
    /// The component's label.
    pub component: String,
    /// What was measured.
    pub what: String,
    /// The median (latencies) or the value (sizes).
    pub median: f64,
    /// The 99th percentile, for latencies.
    pub p99: Option<f64>,
    /// `us`, `ms` or `MiB`.
    pub unit: &'static str,
    /// Samples taken.
    pub samples: usize,
}

/// A latency figure in `unit` (`us` or `ms`), from the same percentiles as the other
/// benchmarks' figures.
fn latency(component: &str, what: &str, samples: Vec<Duration>, unit: &'static str) -> WasmFigure {
    let f = super::figure(what, samples);
    let scale = if unit == "ms" { 1e-3 } else { 1.0 };
    WasmFigure {
        component: component.to_owned(),
        what: f.what,
        median: f.median_us * scale,
        p99: Some(f.p99_us * scale),
        unit,
        samples: f.samples,
    }
}

/// `LABEL=PATH` or `PATH` (labelled by its directory and file name).
fn labelled(spec: &str) -> (String, PathBuf) {
    if let Some((label, path)) = spec.split_once('=') {
        return (label.to_owned(), PathBuf::from(path));
    }
    let path = PathBuf::from(spec);
    let parent = path
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| format!("{}/", n.to_string_lossy()))
        .unwrap_or_default();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (format!("{parent}{name}"), path)
}

/// Runs the benchmark for every component, one after the other.
pub(crate) async fn wasm(opts: &WasmBenchOptions) -> Result<Vec<WasmFigure>, String> {
    let mut figures = Vec::new();
    for spec in &opts.components {
        let (label, path) = labelled(spec);
        one(opts, &label, &path, &mut figures).await?;
    }
    Ok(figures)
}

async fn one(
    opts: &WasmBenchOptions,
    label: &str,
    path: &std::path::Path,
    figures: &mut Vec<WasmFigure>,
) -> Result<(), String> {
    use snodo::wasm::{Allocation, EngineConfig, WasmEngine};

    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    figures.push(WasmFigure {
        component: label.to_owned(),
        what: "component size".into(),
        median: bytes.len() as f64 / (1024.0 * 1024.0),
        p99: None,
        unit: "MiB",
        samples: 1,
    });

    let engine = WasmEngine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
    figures.push(latency(
        label,
        "cold compile (Component::new)",
        compile_times(&engine, &bytes, opts.compiles).await?,
        "ms",
    ));
    figures.push(latency(
        label,
        "load on restart (disk cache hit)",
        restart_loads(&engine, label, path, opts.compiles).await?,
        "ms",
    ));

    for (name, allocation) in [
        ("pooling", Allocation::Pooling),
        ("on-demand", Allocation::OnDemand),
    ] {
        let engine = WasmEngine::new(EngineConfig {
            allocation,
            ..EngineConfig::default()
        })
        .map_err(|e| e.to_string())?;
        let (instantiate, total) = warm_calls(opts, label, path, engine).await?;
        figures.push(latency(
            label,
            &format!("{name}: instantiate"),
            instantiate,
            "us",
        ));
        figures.push(latency(
            label,
            &format!("{name}: warm call (instantiate + execute + drop)"),
            total,
            "us",
        ));
    }

    if !opts.asking_tool.is_empty() && opts.live > 0 {
        live_memory(opts, label, path, figures).await?;
    }
    Ok(())
}

/// The time of `compiles` (at least one) cold compilations of `bytes`.
async fn compile_times(
    engine: &snodo::wasm::WasmEngine,
    bytes: &[u8],
    compiles: usize,
) -> Result<Vec<Duration>, String> {
    let mut times = Vec::new();
    for _ in 0..compiles.max(1) {
        let e = engine.wasmtime().clone();
        let b = bytes.to_vec();
        let t = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            wasmtime::component::Component::new(&e, &b).map(|_| started.elapsed())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{e:#}"))?;
        times.push(t);
    }
    Ok(times)
}

/// The time of `loads` (at least one) loads of the component at `path` from a disk cache
/// that holds it, as a restart finds the compiled code in the data directory's cache.
async fn restart_loads(
    engine: &snodo::wasm::WasmEngine,
    label: &str,
    path: &std::path::Path,
    loads: usize,
) -> Result<Vec<Duration>, String> {
    use snodo::wasm::ComponentLoader;

    let cache = std::env::temp_dir().join(format!("snodo-bench-cache-{}", TaskId::generate()));
    let warm_loader =
        ComponentLoader::new(engine.clone(), Some(cache.clone())).map_err(|e| e.to_string())?;
    load(&warm_loader, path).await?;
    let mut times = Vec::new();
    for _ in 0..loads.max(1) {
        let loader =
            ComponentLoader::new(engine.clone(), Some(cache.clone())).map_err(|e| e.to_string())?;
        let c = load(&loader, path).await?;
        if !c.info().cache_hit {
            return Err(format!("{label}: the disk cache was not used"));
        }
        times.push(c.info().prepare_time);
    }
    let _ = std::fs::remove_dir_all(&cache);
    Ok(times)
}

/// The instantiation time and the whole time of `opts.iterations` warm calls of
/// `opts.tool` on `engine`, after a hundred unmeasured ones.
async fn warm_calls(
    opts: &WasmBenchOptions,
    label: &str,
    path: &std::path::Path,
    engine: snodo::wasm::WasmEngine,
) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    use snodo::mcp::SyncIo;
    use snodo::wasm::{ComponentLoader, Execution};

    let component = load(
        &ComponentLoader::new(engine, None).map_err(|e| e.to_string())?,
        path,
    )
    .await?;
    let io: Arc<dyn snodo::wasm::ExecutionIo> =
        Arc::new(SyncIo::new(Default::default(), json!({})));
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
            return Err(format!("{label}: {} failed: {e}", opts.tool));
        }
    }
    Ok((instantiate, total))
}

/// IO that holds every question until released, counting the guests waiting on it.
struct Hold {
    waiting: AtomicUsize,
    release: tokio::sync::Notify,
    released: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl snodo::wasm::ExecutionIo for Hold {
    async fn await_inputs(&self, _requests: InputRequests, _cancel: &CancelToken) -> InputAnswers {
        let released = self.release.notified();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        if !self.released.load(Ordering::SeqCst) {
            released.await;
        }
        Err(InputFailure::Cancelled)
    }

    async fn set_status(&self, _message: String) -> Result<(), snodo::wasm::IoError> {
        Ok(())
    }

    async fn progress(&self, _progress: Progress) {}
}

/// The resident memory `opts.live` instances of the asking tool add while all of them
/// wait for their answer (the host keeps a waiting guest's whole instance).
async fn live_memory(
    opts: &WasmBenchOptions,
    label: &str,
    path: &std::path::Path,
    figures: &mut Vec<WasmFigure>,
) -> Result<(), String> {
    use snodo::wasm::{ComponentLoader, EngineConfig, Execution, WasmEngine};

    let n = opts.live;
    let engine = WasmEngine::new(EngineConfig {
        max_instances: n as u32 + 16,
        max_total_memory_bytes: (n + 16) * (256 << 20),
        executing: n + 16,
        executing_per_tenant: n + 16,
        ..EngineConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let component = load(
        &ComponentLoader::new(engine, None).map_err(|e| e.to_string())?,
        path,
    )
    .await?;
    let hold = Arc::new(Hold {
        waiting: AtomicUsize::new(0),
        release: tokio::sync::Notify::new(),
        released: false.into(),
    });
    let before = resident_bytes();
    let mut running = Vec::with_capacity(n);
    for i in 0..n {
        let component = component.clone();
        let io: Arc<dyn snodo::wasm::ExecutionIo> = hold.clone();
        let tool = opts.asking_tool.clone();
        let args: Value = json!({"filename": format!("f{i}")});
        running.push(tokio::spawn(async move {
            component.execute(Execution::new(&tool, args, io)).await
        }));
    }
    // Bench code may poll: it measures, it does not assert.
    let started = Instant::now();
    while hold.waiting.load(Ordering::SeqCst) < n {
        if running.iter().any(|h| h.is_finished()) {
            return Err(format!(
                "{label}: {} ended instead of asking",
                opts.asking_tool
            ));
        }
        if started.elapsed() > Duration::from_secs(300) {
            return Err(format!("{label}: {n} instances did not all ask in time"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let after = resident_bytes();
    hold.released.store(true, Ordering::SeqCst);
    hold.release.notify_waiters();
    for h in running {
        let _ = h.await;
    }
    figures.push(WasmFigure {
        component: label.to_owned(),
        what: format!("resident memory per live instance waiting for input ({n} held)"),
        median: after.saturating_sub(before) as f64 / n as f64 / (1024.0 * 1024.0),
        p99: None,
        unit: "MiB",
        samples: n,
    });
    Ok(())
}
