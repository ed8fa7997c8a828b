//! `snodo bench webhooks`: how soon after a transition commits its event reaches a receiver,
//! and how many events a node delivers a second.
//!
//! For each store, one `snodo serve` child (this binary) whose `[webhooks]` subscribes a
//! receiver in this process ([`snodo::receiver`]) to its callers' tasks; `writers` clients
//! make `tasks` calls of the fixtures' `test_whoami` over HTTP, each a task that completes at
//! once and reports it. The figures: the time from the transition's commit (the payload's
//! `timestamp`) to the receiver taking the delivery, both on this machine's clock (p50, p99,
//! max); deliveries a second from the first commit to the last receipt; and deliveries that
//! arrived twice (none is the normal case; a retry after a lost answer is the other). Figures
//! are printed, never asserted.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;
use snodo::store::StoreKind;

use super::RunnerFigure;

/// Parameters of the webhooks benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WebhooksOptions {
    /// Which stores (redb, sqlite, postgres), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "redb,postgres")]
    pub stores: Vec<StoreKind>,
    /// Tasks made (each one event).
    #[arg(long, default_value_t = 5_000)]
    pub tasks: usize,
    /// Clients calling at once.
    #[arg(long, default_value_t = 32)]
    pub writers: usize,
    /// Tasks made a second while latency is measured (the backlog is made as fast as the
    /// writers go).
    #[arg(long, default_value_t = 500)]
    pub rate: u64,
    /// The fixtures component (serves `test_whoami`).
    #[arg(long, default_value_os_t = crate::guests::guest("fixtures.wasm"))]
    pub fixtures: std::path::PathBuf,
    /// The PostgreSQL to use (a fresh schema, dropped afterwards).
    #[arg(long, default_value = crate::scratch::PG_URL)]
    pub pg_url: String,
}

/// Runs the benchmark on each store.
pub(crate) async fn webhooks(opts: &WebhooksOptions) -> Result<Vec<RunnerFigure>, String> {
    let bin = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut figures = Vec::new();
    for &kind in &opts.stores {
        let dir = crate::scratch::temp_dir("bench-webhooks")?;
        let file = dir.join(format!("tasks.{kind}"));
        let schema = format!("bench_webhooks_{}", std::process::id());
        let (store_toml, scratch) = match kind {
            StoreKind::Postgres => {
                // Made here (and dropped after); the node finds it current.
                let scratch =
                    crate::scratch::ScratchStore::open(kind, &file, &opts.pg_url, schema.clone())
                        .await?;
                let toml = format!(
                    "kind = \"postgres\"\nurl = {:?}\nschema = {schema:?}\n",
                    opts.pg_url
                );
                (toml, Some(scratch))
            }
            StoreKind::Redb | StoreKind::Sqlite => (
                format!("kind = \"{kind}\"\npath = {:?}", file.display().to_string()),
                None,
            ),
            StoreKind::Memory => ("kind = \"memory\"".to_owned(), None),
        };
        let result = one_store(opts, &bin, kind, &dir, &store_toml).await;
        if let Some(s) = &scratch {
            s.remove().await?;
        }
        drop(scratch);
        let _ = std::fs::remove_dir_all(&dir);
        figures.extend(result?);
    }
    Ok(figures)
}

async fn one_store(
    opts: &WebhooksOptions,
    bin: &std::path::Path,
    kind: StoreKind,
    dir: &std::path::Path,
    store_toml: &str,
) -> Result<Vec<RunnerFigure>, String> {
    let hooks = snodo::receiver::Receiver::start(0, 0)
        .await
        .map_err(|e| format!("the receiver: {e}"))?;
    let fixtures = std::path::absolute(&opts.fixtures).map_err(|e| e.to_string())?;
    let config = dir.join("node.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\ncache_dir = {:?}\n\n[store]\n{store_toml}\n\n\
         [limits]\ntask_creates_per_second = 100000\ntask_create_burst = 100000\n{}\n\
         [[components]]\npath = {:?}\n",
        dir.join("cache").display().to_string(),
        hooks.config_toml("local"),
        fixtures.display().to_string(),
    );
    std::fs::write(&config, text).map_err(|e| e.to_string())?;
    let node = snodo::stress::start_node(bin, &config)?;
    let addr = node.addr;

    let n = opts.tasks.max(1);
    let label = |what: &str| format!("{kind}, {n} tasks: {what}");
    let figure = |what: &str, value: f64, unit: &'static str| RunnerFigure {
        what: label(what),
        value,
        unit,
    };
    let mut out = Vec::new();

    // Latency: a quarter of the tasks made at a steady `rate`, each event timed from its
    // commit to its receipt.
    let latency_n = (n / 4).max(1);
    let made = make(addr, latency_n, opts.writers, Some(opts.rate)).await?;
    let taken = arrived(&hooks, &made).await;
    let late: Vec<u64> = taken
        .iter()
        .filter_map(|t| Some(t.at_ms.saturating_sub(millis_of(&t.committed)?)))
        .collect();
    let (p50, p99, max) = super::sleepers::percentiles(late);
    out.push(figure("commit to receipt p50", p50, "ms"));
    out.push(figure("commit to receipt p99", p99, "ms"));
    out.push(figure("commit to receipt max", max, "ms"));

    // Throughput: deliveries paused while every task is made, then resumed: the backlog
    // drained, from the resume to the last receipt.
    let mut admin = snodo::client::Connection::open(addr).await?;
    let pause = admin
        .post("/admin/v1/webhooks/receiver/pause", &json!({}))
        .await?;
    if pause.0 != 200 {
        return Err(format!("pausing the subscription: {pause:?}"));
    }
    let made = make(addr, n, opts.writers, None).await?;
    let resumed = snodo::model::wall_millis();
    admin
        .post("/admin/v1/webhooks/receiver/resume", &json!({}))
        .await?;
    let taken = arrived(&hooks, &made).await;
    let last = taken.iter().map(|t| t.at_ms).max().unwrap_or(resumed);
    let drained_s = last.saturating_sub(resumed) as f64 / 1_000.0;
    out.push(figure("events delivered", taken.len() as f64, "events"));
    out.push(figure(
        "backlog drained, deliveries per second",
        taken.len() as f64 / drained_s.max(0.001),
        "events/s",
    ));
    drop(node);
    let seen = hooks.seen.lock();
    let distinct: BTreeSet<&str> = seen.taken.iter().map(|t| t.id.as_str()).collect();
    out.push(figure(
        "delivered twice",
        (seen.taken.len() - distinct.len()) as f64,
        "events",
    ));
    Ok(out)
}

/// Makes `n` tasks of `test_whoami` at `addr` with `writers` clients at once, `rate` a
/// second at most when given: their ids.
async fn make(
    addr: std::net::SocketAddr,
    n: usize,
    writers: usize,
    rate: Option<u64>,
) -> Result<BTreeSet<String>, String> {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..writers.max(1) {
        let next = next.clone();
        set.spawn(async move {
            let mut made = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                if let Some(rate) = rate {
                    let at = started + Duration::from_micros(i as u64 * 1_000_000 / rate.max(1));
                    tokio::time::sleep_until(at.into()).await;
                }
                let reply = snodo::stress::rpc(
                    addr,
                    "tools/call",
                    json!({"name": "test_whoami", "arguments": {}}),
                )
                .await;
                if let Some(id) = reply.as_ref().and_then(|r| r["result"]["taskId"].as_str()) {
                    made.push(id.to_owned());
                }
            }
            made
        });
    }
    let mut made = BTreeSet::new();
    while let Some(ids) = set.join_next().await {
        made.extend(ids.map_err(|e| e.to_string())?);
    }
    Ok(made)
}

/// Waits until the receiver has taken an event of every task in `made` (or two minutes
/// pass): the first delivery of each.
async fn arrived(
    hooks: &snodo::receiver::Receiver,
    made: &BTreeSet<String>,
) -> Vec<snodo::receiver::Taken> {
    let patience = Instant::now() + Duration::from_secs(120);
    loop {
        let firsts: Vec<snodo::receiver::Taken> = {
            let seen = hooks.seen.lock();
            let mut got = BTreeSet::new();
            seen.taken
                .iter()
                .filter(|t| made.contains(&t.task) && got.insert(t.task.clone()))
                .cloned()
                .collect()
        };
        if firsts.len() == made.len() || Instant::now() > patience {
            return firsts;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Milliseconds since the epoch of an RFC 3339 instant as the payload writes it
/// (`2026-12-07T00:00:00.123Z`).
fn millis_of(text: &str) -> Option<u64> {
    let t: jiff::Timestamp = text.parse().ok()?;
    u64::try_from(t.as_millisecond()).ok()
}
