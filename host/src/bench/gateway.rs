//! `snodo bench gateway`: what fronting an upstream MCP server's tool through the gateway
//! adds to a call, against calling the upstream directly.
//!
//! Everything runs in this process: a small 2026-07-28 upstream answering `tools/call`
//! after `--service-ms`, and a node serving it through the gateway component. Each figure
//! is the median over `--calls` calls, one at a time, each on a new connection (as the
//! host's sender opens one per request):
//! - direct: the `tools/call` POSTed to the upstream;
//! - fronted, synchronous (memory store): the same call to the node, which runs the
//!   gateway component in the request;
//! - fronted as a task (memory; redb, journal on and off): `tools/call` to the task's
//!   completion, seen by polling `tasks/get` every millisecond.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use snodo::model::TaskId;
use snodo::serve::ServeOptions;

/// Parameters of the gateway benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct GatewayBenchOptions {
    /// The gateway component.
    #[arg(long, default_value_os_t = crate::guests::guest("gateway.wasm"))]
    pub component: PathBuf,
    /// How long the upstream takes to answer a call, in milliseconds.
    #[arg(long, default_value_t = 5)]
    pub service_ms: u64,
    /// Calls per figure.
    #[arg(long, default_value_t = 200)]
    pub calls: usize,
}

/// One figure of the gateway benchmark.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GatewayFigure {
    /// What was measured.
    pub what: String,
    /// Median latency of a call, in microseconds.
    pub median_us: f64,
    /// 99th percentile, in microseconds.
    pub p99_us: f64,
    /// The median over the direct call's.
    pub ratio: f64,
}

/// The upstream: `server/discover`, `tools/list` with one tool (`echo`), and `tools/call`
/// answered after `service`.
async fn upstream(service: Duration) -> Result<std::net::SocketAddr, String> {
    use http_body_util::BodyExt;
    super::local_http(
        move |req: hyper::Request<hyper::body::Incoming>| async move {
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            let message: Value = body
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(Value::Null);
            let result = match message["method"].as_str() {
                Some("server/discover") => json!({
                "resultType": "complete", "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "public"}),
                Some("tools/list") => json!({"resultType": "complete", "tools": [{
                "name": "echo",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}),
                _ => {
                    // A zero service time answers at once (a zero sleep still waits a tick).
                    if !service.is_zero() {
                        tokio::time::sleep(service).await;
                    }
                    json!({"resultType": "complete", "content": [
                    {"type": "text", "text": message["params"]["arguments"]["text"]}]})
                }
            };
            let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": result});
            let mut response = hyper::Response::new(http_body_util::Full::new(
                hyper::body::Bytes::from(reply.to_string()),
            ));
            response.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("application/json"),
            );
            response
        },
    )
    .await
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
}

fn call(tool: &str, i: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": tool, "arguments": {"text": format!("call {i}")}, "_meta": meta()}})
}

/// One call on a new connection: its reply's `result`.
async fn once(addr: std::net::SocketAddr, message: &Value) -> Result<Value, String> {
    let mut c = snodo::client::Connection::open(addr).await?;
    let (status, v) = c.call(message, None).await?;
    match v.get("result") {
        Some(r) if status == 200 => Ok(r.clone()),
        _ => Err(format!("HTTP {status}: {v}")),
    }
}

/// A task's call to its completion, polling every millisecond.
async fn to_completion(addr: std::net::SocketAddr, message: &Value) -> Result<(), String> {
    let created = once(addr, message).await?;
    let id = created["taskId"]
        .as_str()
        .ok_or_else(|| format!("no task: {created}"))?
        .to_owned();
    let mut c = snodo::client::Connection::open(addr).await?;
    let get = json!({"jsonrpc": "2.0", "id": 0, "method": "tasks/get", "params": {"taskId": id, "_meta": meta()}});
    loop {
        let (_, v) = c.call(&get, None).await?;
        match v["result"]["status"].as_str() {
            Some("completed") => return Ok(()),
            Some("working") => tokio::time::sleep(Duration::from_millis(1)).await,
            _ => return Err(format!("the task did not complete: {v}")),
        }
    }
}

/// A node serving the upstream at `up` through the gateway, on `store`.
async fn node(
    opts: &GatewayBenchOptions,
    up: std::net::SocketAddr,
    dir: &std::path::Path,
    memory: bool,
    journal: bool,
    mode: snodo::wasm::TaskMode,
) -> Result<snodo::serve::Running, String> {
    let mut o = ServeOptions::new(dir.to_path_buf(), Vec::new());
    o.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    if memory {
        o.store = snodo::store::StoreConfig::Memory;
    }
    let section: snodo::gateway::UpstreamSection = serde_json::from_value(json!({
        "name": "up", "url": format!("http://{up}/mcp"), "protocol": "2026-07-28"}))
    .map_err(|e| e.to_string())?;
    o.upstreams =
        vec![snodo::gateway::Upstream::new(section, |_| None).map_err(|e| e.to_string())?];
    o.gateway.component = Some(opts.component.clone());
    let mut grant = snodo::wasm::outbound::HttpGrant::new(Default::default());
    grant.journal = journal;
    o.tool_settings.insert(
        "up_echo".into(),
        snodo::serve::ToolSettings {
            mode: Some(mode),
            grants: Some(snodo::wasm::WasiGrants {
                http: Some(std::sync::Arc::new(grant)),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    snodo::serve::spawn(o)
        .await
        .map_err(|e| format!("the node did not start: {e}"))
}

fn figure(what: &str, mut samples: Vec<Duration>, direct: f64) -> GatewayFigure {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let median = us(samples[samples.len() / 2]);
    let p99 = us(samples[(samples.len() * 99 / 100).min(samples.len() - 1)]);
    GatewayFigure {
        what: what.to_owned(),
        median_us: median,
        p99_us: p99,
        ratio: if direct > 0.0 { median / direct } else { 0.0 },
    }
}

/// Runs the gateway benchmark.
pub(crate) async fn gateway(opts: &GatewayBenchOptions) -> Result<Vec<GatewayFigure>, String> {
    if opts.calls == 0 {
        return Err("--calls must be at least 1".into());
    }
    let up = upstream(Duration::from_millis(opts.service_ms)).await?;
    let mut figures = Vec::new();
    let mut samples = Vec::with_capacity(opts.calls);
    for i in 0..=opts.calls {
        let started = Instant::now();
        once(up, &call("echo", i)).await?;
        // The first call warms up.
        if i > 0 {
            samples.push(started.elapsed());
        }
    }
    let direct = figure("direct: tools/call to the upstream", samples, 0.0);
    let base = direct.median_us;
    figures.push(GatewayFigure {
        ratio: 1.0,
        ..direct
    });

    let cases = [
        (
            "fronted, synchronous (memory store)",
            true,
            true,
            snodo::wasm::TaskMode::Sync,
        ),
        (
            "fronted task to completion (memory store)",
            true,
            true,
            snodo::wasm::TaskMode::Required,
        ),
        (
            "fronted task to completion (redb, journal on)",
            false,
            true,
            snodo::wasm::TaskMode::Required,
        ),
        (
            "fronted task to completion (redb, journal off)",
            false,
            false,
            snodo::wasm::TaskMode::Required,
        ),
    ];
    for (what, memory, journal, mode) in cases {
        let dir = std::env::temp_dir().join(format!("snodo-bench-gateway-{}", TaskId::generate()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let server = node(opts, up, &dir, memory, journal, mode).await?;
        let mut samples = Vec::with_capacity(opts.calls);
        let mut run = async || {
            for i in 0..=opts.calls {
                let started = Instant::now();
                if mode == snodo::wasm::TaskMode::Sync {
                    once(server.addr, &call("up_echo", i)).await?;
                } else {
                    to_completion(server.addr, &call("up_echo", i)).await?;
                }
                if i > 0 {
                    samples.push(started.elapsed());
                }
            }
            Ok::<_, String>(())
        };
        let ran = run().await;
        let _ = server.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
        ran?;
        figures.push(figure(what, samples, base));
    }
    Ok(figures)
}
