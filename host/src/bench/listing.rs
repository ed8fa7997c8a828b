//! `snodo bench listing`: the operators' queries on a store holding many tasks: the first
//! page of a listing (by tenant; by tenant and a rare status; by tenant and tool; across
//! tenants) and the counts, each as p50 and p99 over many repetitions.
//!
//! The store is filled through the store's own API (so every index and tally is what a
//! serving node writes): `tasks` tasks over ten tenants and five tools, most left working,
//! 5% completed and 0.1% waiting for input.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;

use snodo::model::{EventId, EventKind, Scope, TaskEvent, TaskId, TaskStatus, Work};
use snodo::store::{Authority, ClaimRequest, NewTask, Store, StoreKind, TaskFilter, TaskQuery};

/// Parameters of the listing benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ListingBenchOptions {
    /// Which stores (redb, sqlite, postgres), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "redb,sqlite,postgres")]
    pub stores: Vec<StoreKind>,
    /// Tasks stored before measuring.
    #[arg(long, default_value_t = 1_000_000)]
    pub tasks: usize,
    /// Repetitions of each query.
    #[arg(long, default_value_t = 200)]
    pub repeat: usize,
    /// Concurrent creators while filling.
    #[arg(long, default_value_t = 64)]
    pub fill_concurrency: usize,
    /// The PostgreSQL to use (a fresh schema, dropped afterwards).
    #[arg(long, default_value = crate::scratch::PG_URL)]
    pub pg_url: String,
}

/// One measured query.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ListingFigure {
    /// The store.
    pub store: String,
    /// Tasks stored.
    pub tasks: usize,
    /// What was asked.
    pub query: &'static str,
    /// Rows the answer held (its first repetition).
    pub rows: usize,
    /// Median, in ms.
    pub p50_ms: f64,
    /// 99th percentile, in ms.
    pub p99_ms: f64,
    /// How long filling took, in s (the same for every query of a store).
    pub fill_s: f64,
}

const TENANTS: usize = 10;
const TOOLS: usize = 5;

/// Runs the benchmark on each store.
pub(crate) async fn listing(opts: &ListingBenchOptions) -> Result<Vec<ListingFigure>, String> {
    let mut figures = Vec::new();
    for &kind in &opts.stores {
        let dir = crate::scratch::temp_dir("bench-listing")?;
        let file = dir.join(match kind {
            StoreKind::Sqlite => "tasks.sqlite",
            _ => "tasks.redb",
        });
        let schema = format!("bench_listing_{}", std::process::id());
        let scratch = crate::scratch::ScratchStore::open(kind, &file, &opts.pg_url, schema).await?;
        let store = scratch.store.clone();
        let result = async {
            let started = Instant::now();
            fill(&store, opts.tasks, opts.fill_concurrency).await?;
            let fill_s = started.elapsed().as_secs_f64();
            let mut out = Vec::new();
            for (query, run) in queries() {
                let (rows, p50_ms, p99_ms) = measure(&store, run, opts.repeat).await?;
                out.push(ListingFigure {
                    store: format!("{kind:?}").to_lowercase(),
                    tasks: opts.tasks,
                    query,
                    rows,
                    p50_ms,
                    p99_ms,
                    fill_s,
                });
            }
            Ok::<_, String>(out)
        }
        .await;
        let removed = scratch.remove().await;
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
        figures.extend(result?);
        removed?;
    }
    Ok(figures)
}

/// A query of the benchmark.
#[derive(Clone, Copy)]
enum Ask {
    Page(fn() -> TaskFilter),
    Counts(Option<&'static str>),
}

fn queries() -> Vec<(&'static str, Ask)> {
    let tenant = || TaskFilter {
        tenant: Some("t3".into()),
        ..Default::default()
    };
    vec![
        ("first page: tenant", Ask::Page(tenant)),
        (
            "first page: tenant, waiting for input",
            Ask::Page(|| TaskFilter {
                tenant: Some("t3".into()),
                status: Some(TaskStatus::InputRequired),
                ..Default::default()
            }),
        ),
        (
            "first page: tenant, completed",
            Ask::Page(|| TaskFilter {
                tenant: Some("t3".into()),
                status: Some(TaskStatus::Completed),
                ..Default::default()
            }),
        ),
        (
            "first page: tenant, tool",
            Ask::Page(|| TaskFilter {
                tenant: Some("t3".into()),
                tool: Some("tool2".into()),
                ..Default::default()
            }),
        ),
        ("first page: every tenant", Ask::Page(TaskFilter::default)),
        ("counts: tenant", Ask::Counts(Some("t3"))),
        ("counts: every tenant", Ask::Counts(None)),
    ]
}

async fn measure(
    store: &Arc<dyn Store>,
    ask: Ask,
    repeat: usize,
) -> Result<(usize, f64, f64), String> {
    let mut times = Vec::with_capacity(repeat);
    let mut rows = 0;
    for i in 0..repeat.max(1) {
        let started = Instant::now();
        let n = match ask {
            Ask::Page(filter) => store
                .list_tasks(&TaskQuery::new(filter(), 50))
                .await
                .map_err(|e| e.to_string())?
                .tasks
                .len(),
            Ask::Counts(tenant) => {
                let c = store.count_tasks(tenant).await.map_err(|e| e.to_string())?;
                c.total() as usize
            }
        };
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
        if i == 0 {
            rows = n;
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    Ok((rows, at(0.5), at(0.99)))
}

/// Creates `n` tasks over [`TENANTS`] tenants and [`TOOLS`] tools with `conc` callers; one
/// in twenty is then completed and one in a thousand asks a question.
async fn fill(store: &Arc<dyn Store>, n: usize, conc: usize) -> Result<(), String> {
    let conc = conc.max(1);
    let mut joins = Vec::new();
    for worker in 0..conc {
        let store = store.clone();
        joins.push(tokio::spawn(async move {
            let mut i = worker;
            let claim = ClaimRequest::new(600_000, "bench");
            while i < n {
                let id = TaskId::generate();
                let work = Work::new(
                    "snodo/tool-call",
                    json!({"tool": format!("tool{}", (i / TENANTS) % TOOLS), "arguments": {"n": i}}),
                    id.to_string(),
                );
                let new = NewTask::new(id, Scope::new(format!("t{}", i % TENANTS)), work);
                // Runs of 50 consecutive tasks (every tenant and tool) share a fate.
                let run = i / 50;
                let completes = run % 20 == 0;
                if completes || run % 1_000 == 1 {
                    let claimed = store.create_claimed(new, &claim).await?;
                    let lease = claimed.lease;
                    let kind = if completes {
                        EventKind::Completed {
                            result: json!({"content": [{"type": "text", "text": "ok"}]}),
                        }
                    } else {
                        EventKind::InputRequested {
                            key: "confirm".into(),
                            request: json!({"method": "elicitation/create", "params": {"message": "go?"}}),
                        }
                    };
                    store
                        .transition(
                            Authority::Worker(&lease),
                            TaskEvent::new(EventId::random(), kind),
                            None,
                        )
                        .await?;
                } else {
                    store.create(new).await?;
                }
                i += conc;
            }
            Ok::<_, snodo::store::StoreError>(())
        }));
    }
    for j in joins {
        j.await
            .map_err(|e| format!("a filler panicked: {e}"))?
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
