//! `snodo bench sleepers`: many tasks sleeping in the store at once, then waking at a
//! steady rate.
//!
//! `tasks` tasks of the fixtures' `test_sleep` are created through a runner at
//! `create_rate` a second (`rate` unless given), each sleeping until its own instant: the
//! creation span plus `lead_s` after the first was created, one `1/rate` apart. So every
//! task is asleep at once, then they wake at `rate` a second. The figures: what the sleepers hold while all of them sleep (attempts
//! running, the store's bytes per task), and how late each woke: its wake claim after its
//! wake time by the store's clock (read from its history), and its completion after it.
//! Beside them, the mean time of each store operation the runner made and of a guest's run
//! (which holds the sleep's journal read and clock read), where a slow store shows first.
//! Figures are printed, never asserted: compare them across stores and commits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use snodo::model::{HistoryKind, Scope, Task, TaskId, TaskStatus};
use snodo::store::{NewTask, Store, StoreKind};

use super::RunnerFigure;

/// Parameters of the sleepers benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SleepersOptions {
    /// Which stores (memory, redb, sqlite, postgres), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "redb,postgres")]
    pub stores: Vec<StoreKind>,
    /// Tasks asleep at once.
    #[arg(long, default_value_t = 100_000)]
    pub tasks: usize,
    /// Tasks woken per second.
    #[arg(long, default_value_t = 1_000)]
    pub rate: u64,
    /// Tasks created (and parked) per second; `--rate` when not given. A store whose
    /// parks cannot keep up with the wake rate is measured waking at `--rate` all the same.
    #[arg(long)]
    pub create_rate: Option<u64>,
    /// Seconds between the last creation and the first wake.
    #[arg(long, default_value_t = 10.0)]
    pub lead_s: f64,
    /// The fixtures component (serves `test_sleep`).
    #[arg(long, default_value_os_t = crate::guests::guest("fixtures.wasm"))]
    pub fixtures: std::path::PathBuf,
    /// The PostgreSQL to use (a fresh schema, dropped afterwards).
    #[arg(long, default_value = crate::scratch::PG_URL)]
    pub pg_url: String,
}

/// Runs the benchmark on each store.
pub(crate) async fn sleepers(opts: &SleepersOptions) -> Result<Vec<RunnerFigure>, String> {
    let mut figures = Vec::new();
    for &kind in &opts.stores {
        let dir = crate::scratch::temp_dir("bench-sleepers")?;
        let file = dir.join(format!("tasks.{kind}"));
        let schema = format!("bench_sleepers_{}", std::process::id());
        let scratch = crate::scratch::ScratchStore::open(kind, &file, &opts.pg_url, schema).await?;
        let result = one_store(opts, kind, scratch.store.clone(), &file).await;
        let removed = scratch.remove().await;
        drop(scratch);
        let _ = std::fs::remove_dir_all(&dir);
        figures.extend(result?);
        removed?;
    }
    Ok(figures)
}

/// The tenant every sleeper belongs to.
const TENANT: &str = "bench-sleepers";

/// The figures of one store.
async fn one_store(
    opts: &SleepersOptions,
    kind: StoreKind,
    store: Arc<dyn Store>,
    file: &std::path::Path,
) -> Result<Vec<RunnerFigure>, String> {
    use snodo::runner::{Catalog, Runner, RunnerOptions};
    use snodo::wasm::{ComponentLoader, EngineConfig, WasmEngine};

    let n = opts.tasks.max(1);
    let rate = opts.rate.max(1);
    let create_rate = opts.create_rate.unwrap_or(rate).max(1);
    let engine = WasmEngine::new(EngineConfig::default()).map_err(|e| e.to_string())?;
    let loader = ComponentLoader::new(engine, None).map_err(|e| e.to_string())?;
    let fixtures = super::load(&loader, &opts.fixtures).await?;
    let catalog = Catalog::new()
        .with_component(&fixtures)
        .map_err(|e| e.to_string())?;
    let timings = Arc::new(Timings::default());
    let runner = Runner::start(
        store.clone(),
        Arc::new(catalog),
        RunnerOptions {
            reap_interval: None,
            // One tenant holds every sleeper here: its share is the whole runner.
            max_running_per_tenant: RunnerOptions::default().max_concurrent,
            // What `snodo serve` takes on each store.
            claim_batch: (kind == StoreKind::Postgres).then_some(snodo::runner::CLAIM_BATCH_SHARED),
            ..RunnerOptions::default()
        },
        timings.clone(),
    );
    let file_before = file_bytes(file);

    // Create at `create_rate`, each sleeping until its own instant, `1/rate` apart.
    let span_ms = n as u64 * 1_000 / create_rate;
    let first_wake =
        snodo::model::wall_millis() + span_ms + (opts.lead_s.max(0.0) * 1_000.0) as u64;
    let started = Instant::now();
    let failed = Arc::new(AtomicUsize::new(0));
    let mut ids = Vec::with_capacity(n);
    let mut creating = tokio::task::JoinSet::new();
    for i in 0..n {
        let at = started + Duration::from_micros(i as u64 * 1_000_000 / create_rate);
        tokio::time::sleep_until(at.into()).await;
        let id = TaskId::generate();
        ids.push(id);
        let until = first_wake + i as u64 * 1_000 / rate;
        let work = snodo::runner::tool_call_work(&id, "test_sleep", json!({"until_ms": until}));
        let (runner, failed) = (runner.clone(), failed.clone());
        creating.spawn(async move {
            if runner
                .create(NewTask::new(id, Scope::new(TENANT), work))
                .await
                .is_err()
            {
                failed.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Keep the join set small: collect what has finished.
        while creating.try_join_next().is_some() {}
    }
    while creating.join_next().await.is_some() {}
    let created_s = started.elapsed().as_secs_f64();

    // All asleep: every task parked (or the first wake has come).
    let asleep = async {
        while (runner.stats().slept.load(Ordering::Relaxed) as usize) < n
            && snodo::model::wall_millis() < first_wake
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    asleep.await;
    let slept = runner.stats().slept.load(Ordering::Relaxed) as usize;
    let running = runner.active();
    let stored = stored_bytes(&*store, &ids).await?;
    let file_after = file_bytes(file);

    // Every task wakes and completes.
    let wakes_ms = n as u64 * 1_000 / rate;
    let deadline = Instant::now()
        + Duration::from_millis(
            first_wake.saturating_sub(snodo::model::wall_millis()) + wakes_ms + 120_000,
        );
    loop {
        let counts = store
            .count_tasks(Some(TENANT))
            .await
            .map_err(|e| e.to_string())?;
        let done = counts
            .by_status
            .get(&TaskStatus::Completed)
            .copied()
            .unwrap_or(0)
            + counts
                .by_status
                .get(&TaskStatus::Failed)
                .copied()
                .unwrap_or(0);
        if done as usize >= n - failed.load(Ordering::Relaxed) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    runner.shutdown().await;
    let (claim_late, done_late, completed) = lateness(&*store, &ids).await?;

    let name = format!("{kind}");
    let mut figures = vec![
        figure(&name, n, "created (s)", created_s, "s"),
        figure(
            &name,
            n,
            "creations refused",
            failed.load(Ordering::Relaxed) as f64,
            "tasks",
        ),
        figure(
            &name,
            n,
            "parked before the first wake",
            slept as f64,
            "tasks",
        ),
        figure(
            &name,
            n,
            "attempts running while all sleep",
            running as f64,
            "attempts",
        ),
        figure(
            &name,
            n,
            "stored per sleeping task (record and journal)",
            stored,
            "bytes",
        ),
        figure(&name, n, "completed", completed as f64, "tasks"),
    ];
    for (what, (count, total)) in timings.means() {
        let mean = total.as_secs_f64() * 1_000.0 / count.max(1) as f64;
        figures.push(figure(
            &name,
            n,
            &format!("{what}: mean of {count}"),
            mean,
            "ms",
        ));
    }
    if let (Some(before), Some(after)) = (file_before, file_after) {
        let per = after.saturating_sub(before) as f64 / n as f64;
        figures.push(figure(
            &name,
            n,
            "file growth per sleeping task",
            per,
            "bytes",
        ));
    }
    for (what, series) in [
        ("wake claim after its time", claim_late),
        ("completed after its time", done_late),
    ] {
        let (p50, p99, max) = percentiles(series);
        figures.push(figure(&name, n, &format!("{what}, p50"), p50, "ms"));
        figures.push(figure(&name, n, &format!("{what}, p99"), p99, "ms"));
        figures.push(figure(&name, n, &format!("{what}, max"), max, "ms"));
    }
    Ok(figures)
}

/// How many of each store operation the runner made, and of guest runs, and the time they
/// took together.
#[derive(Default)]
struct Timings {
    by_op: parking_lot::Mutex<std::collections::BTreeMap<String, (u64, Duration)>>,
}

impl Timings {
    fn add(&self, what: String, took: Duration) {
        let mut by_op = self.by_op.lock();
        let (count, total) = by_op.entry(what).or_default();
        *count += 1;
        *total += took;
    }

    fn means(&self) -> Vec<(String, (u64, Duration))> {
        self.by_op
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

impl snodo::runner::Instrumentation for Timings {
    fn event(&self, event: &snodo::runner::RunnerEvent) {
        use snodo::runner::RunnerEvent;
        match event {
            RunnerEvent::StoreOp { op, elapsed, .. } => self.add(format!("store {op}"), *elapsed),
            RunnerEvent::GuestRan { run, .. } => self.add("guest run".into(), *run),
            _ => {}
        }
    }
}

fn figure(store: &str, n: usize, what: &str, value: f64, unit: &'static str) -> RunnerFigure {
    RunnerFigure {
        what: format!("{store}, {n} sleepers: {what}"),
        value,
        unit,
    }
}

/// The mean of what the store counts for each task (its record and journal,
/// [`Task::stored_bytes`]) over up to 1,000 tasks spread over `ids`.
async fn stored_bytes(store: &dyn Store, ids: &[TaskId]) -> Result<f64, String> {
    let step = (ids.len() / 1_000).max(1);
    let (mut sum, mut seen) = (0u64, 0u64);
    for id in ids.iter().step_by(step) {
        if let Some((t, _)) = store.inspect(id).await.map_err(|e| e.to_string())? {
            sum += t.stored_bytes;
            seen += 1;
        }
    }
    Ok(sum as f64 / seen.max(1) as f64)
}

/// For each completed task: how long after its wake time it was claimed to wake, and how
/// long after it it completed (ms, store clock); and how many completed.
async fn lateness(
    store: &dyn Store,
    ids: &[TaskId],
) -> Result<(Vec<u64>, Vec<u64>, usize), String> {
    let (mut claims, mut done) = (Vec::new(), Vec::new());
    for id in ids {
        let Some((t, _)) = store.inspect(id).await.map_err(|e| e.to_string())? else {
            continue;
        };
        if t.status != TaskStatus::Completed {
            continue;
        }
        if let Some((until, claimed)) = wake_of(&t) {
            claims.push(claimed.saturating_sub(until));
            done.push(t.last_updated_at.as_millis().saturating_sub(until));
        }
    }
    let completed = done.len();
    Ok((claims, done, completed))
}

/// A task's last sleep and the claim that woke it (ms, store clock), from its history.
fn wake_of(t: &Task) -> Option<(u64, u64)> {
    let mut found = None;
    let mut until = None;
    for e in &t.history.entries {
        match &e.kind {
            HistoryKind::Sleeping { until: u } => until = Some(u.as_millis()),
            HistoryKind::Claimed { .. } => {
                if let Some(u) = until.take() {
                    found = Some((u, e.at.as_millis()));
                }
            }
            _ => {}
        }
    }
    found
}

/// p50, p99 and the maximum of `series` (ms), 0 when it is empty.
pub(super) fn percentiles(mut series: Vec<u64>) -> (f64, f64, f64) {
    if series.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    series.sort_unstable();
    let at = |q: f64| series[((series.len() - 1) as f64 * q).round() as usize] as f64;
    (at(0.5), at(0.99), at(1.0))
}

/// The size of a store file, if there is one.
fn file_bytes(path: &std::path::Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}
