//! Snodo's OpenTelemetry exporter: the spans the host records ([`SpanRecord`]s) sent to an
//! OTLP collector over http/protobuf or gRPC (`[telemetry.otlp]`, docs/observability.md).
//!
//! Spans are queued by [`OtlpSink`] (never blocking the request or runner path that ended
//! them: past [`OtlpConfig::max_queue`] a span is dropped and counted) and exported in
//! batches by one task on the host's runtime, every [`OtlpConfig::interval`] or as soon as
//! a batch fills. An export that fails is counted and logged, and its batch dropped:
//! tracing never holds a task back. [`Exporter::shutdown`] sends what is queued.
//!
//! The crate is apart from the rest of the host so that the exporter's dependencies
//! (opentelemetry-otlp, tonic, reqwest) are built once, by the binary and the tests that use
//! them.

pub mod receiver;
mod section;

pub use section::OtlpSection;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry::trace::{
    Event, Link, SpanContext, SpanKind as OtelKind, Status, TraceFlags, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, SpanId, TraceId};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use snodo_core::spans::{SpanCounters, SpanKind, SpanRecord, SpanSink, Value};
use tokio::sync::{mpsc, oneshot};

/// How spans reach the collector, written `http/protobuf` or `grpc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies (`POST {endpoint}`, e.g. `http://collector:4318/v1/traces`).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC (`http://collector:4317`).
    #[serde(rename = "grpc")]
    Grpc,
}

impl std::str::FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "grpc" => Ok(Self::Grpc),
            other => Err(format!("{other:?} is not \"http/protobuf\" or \"grpc\"")),
        }
    }
}

/// The exporter's settings (`[telemetry.otlp]`).
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// Where spans go: the traces URL for http/protobuf, the collector's address for gRPC.
    pub endpoint: String,
    /// How.
    pub protocol: Protocol,
    /// Headers (http) or metadata (gRPC) sent with every export, e.g. an API key.
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// How often queued spans are sent.
    pub interval: Duration,
    /// Most spans waiting to be sent; past it new spans are dropped (and counted).
    pub max_queue: usize,
    /// Most spans in one export.
    pub max_batch: usize,
    /// `service.name` of the resource.
    pub service_name: String,
    /// `service.instance.id` of the resource: this node.
    pub node: String,
}

impl OtlpConfig {
    /// Defaults for `endpoint`: http/protobuf, a 10 s timeout, sent every second, 8,192
    /// spans queued at most, 512 per export, service `snodo`.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol: Protocol::HttpProtobuf,
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            interval: Duration::from_secs(1),
            max_queue: 8_192,
            max_batch: 512,
            service_name: "snodo".into(),
            node: String::new(),
        }
    }
}

/// The sink the host's [`snodo_core::spans::Tracer`] sends spans to.
pub struct OtlpSink {
    tx: mpsc::Sender<SpanRecord>,
    counters: Arc<SpanCounters>,
}

impl SpanSink for OtlpSink {
    fn export(&self, span: SpanRecord) {
        if self.tx.try_send(span).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counters(&self) -> Option<Arc<SpanCounters>> {
        Some(self.counters.clone())
    }
}

/// The export task; [`Exporter::shutdown`] flushes and ends it.
pub struct Exporter {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Exporter {
    /// Sends what is queued (within the export timeout) and stops.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// Builds the exporter and starts its task on the current tokio runtime.
pub fn start(config: &OtlpConfig) -> Result<(Arc<OtlpSink>, Exporter), String> {
    let mut exporter = build(config)?;
    exporter.set_resource(
        &opentelemetry_sdk::Resource::builder_empty()
            .with_service_name(config.service_name.clone())
            .with_attributes([
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                KeyValue::new("service.instance.id", config.node.clone()),
            ])
            .build(),
    );
    let (tx, rx) = mpsc::channel(config.max_queue.max(1));
    let counters = Arc::new(SpanCounters::default());
    let (stop_tx, stop_rx) = oneshot::channel();
    let task = tokio::spawn(run(exporter, rx, stop_rx, counters.clone(), config.clone()));
    Ok((
        Arc::new(OtlpSink { tx, counters }),
        Exporter {
            stop: Some(stop_tx),
            task: Some(task),
        },
    ))
}

fn build(config: &OtlpConfig) -> Result<opentelemetry_otlp::SpanExporter, String> {
    // The http/protobuf exporter's reqwest client takes rustls's process-wide provider:
    // ring, as the rest of the process's TLS. The first install stays; a second is refused,
    // harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let built = match config.protocol {
        Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(config.endpoint.clone())
            .with_timeout(config.timeout)
            .with_headers(config.headers.iter().cloned().collect())
            .build(),
        Protocol::Grpc => {
            let mut metadata = tonic::metadata::MetadataMap::new();
            for (k, v) in &config.headers {
                let key =
                    tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                        .map_err(|_| {
                            format!("telemetry.otlp.headers: `{k}` is not a gRPC metadata key")
                        })?;
                let value = v.parse().map_err(|_| {
                    format!("telemetry.otlp.headers: the value of `{k}` is not valid")
                })?;
                metadata.insert(key, value);
            }
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(config.endpoint.clone())
                .with_timeout(config.timeout)
                .with_metadata(metadata)
                .build()
        }
    };
    built.map_err(|e| format!("telemetry.otlp: the exporter could not be built: {e}"))
}

async fn run(
    exporter: opentelemetry_otlp::SpanExporter,
    mut rx: mpsc::Receiver<SpanRecord>,
    mut stop: oneshot::Receiver<()>,
    counters: Arc<SpanCounters>,
    config: OtlpConfig,
) {
    let scope = InstrumentationScope::builder("snodo")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let max_batch = config.max_batch.max(1);
    let mut batch: Vec<SpanRecord> = Vec::with_capacity(max_batch);
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = false;
    let mut flush_by: Option<tokio::time::Instant> = None;
    // Warn once per run of failures, not once per batch.
    let mut failing = false;
    loop {
        tokio::select! {
            received = rx.recv(), if !stopping => match received {
                Some(span) => {
                    batch.push(span);
                    if batch.len() < max_batch {
                        continue;
                    }
                }
                None => stopping = true,
            },
            _ = tick.tick() => {}
            _ = &mut stop, if !stopping => {
                stopping = true;
                flush_by = Some(tokio::time::Instant::now() + config.timeout);
                while let Ok(span) = rx.try_recv() {
                    batch.push(span);
                }
            }
        }
        // Shutdown sends what is queued within one export timeout in all, not one per
        // batch: a collector that is down must not hold the process for minutes.
        if flush_by.is_some_and(|by| tokio::time::Instant::now() >= by) {
            counters
                .failed
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            return;
        }
        while !batch.is_empty() {
            let take = batch.len().min(max_batch);
            let spans: Vec<SpanData> = batch.drain(..take).map(|r| data(r, &scope)).collect();
            let n = spans.len() as u64;
            let within = flush_by.map_or(config.timeout, |by| {
                by.saturating_duration_since(tokio::time::Instant::now())
            });
            match tokio::time::timeout(within, exporter.export(spans)).await {
                Ok(Ok(())) => {
                    counters.exported.fetch_add(n, Ordering::Relaxed);
                    if std::mem::take(&mut failing) {
                        tracing::info!("telemetry.otlp: spans are exported again");
                    }
                }
                Ok(Err(e)) => {
                    counters.failed.fetch_add(n, Ordering::Relaxed);
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(error = %e, endpoint = %config.endpoint, "telemetry.otlp: spans could not be exported; they are dropped");
                    }
                }
                Err(_) => {
                    counters.failed.fetch_add(n, Ordering::Relaxed);
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(endpoint = %config.endpoint, timeout_ms = config.timeout.as_millis() as u64, "telemetry.otlp: an export timed out; its spans are dropped");
                    }
                }
            }
            if !stopping || flush_by.is_some_and(|by| tokio::time::Instant::now() >= by) {
                break;
            }
        }
        if stopping && batch.is_empty() {
            return;
        }
    }
}

fn value(v: Value) -> opentelemetry::Value {
    match v {
        Value::Str(s) => s.into(),
        Value::Int(n) => n.into(),
        Value::Bool(b) => b.into(),
    }
}

fn attributes(a: Vec<(&'static str, Value)>) -> Vec<KeyValue> {
    a.into_iter()
        .map(|(k, v)| KeyValue::new(k, value(v)))
        .collect()
}

fn context(trace_id: [u8; 16], span_id: [u8; 8]) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(trace_id),
        SpanId::from_bytes(span_id),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    )
}

/// A record as the SDK's span data.
fn data(r: SpanRecord, scope: &InstrumentationScope) -> SpanData {
    let mut events = SpanEvents::default();
    events.events = r
        .events
        .into_iter()
        .map(|e| Event::new(e.name, e.at, attributes(e.attributes), 0))
        .collect();
    let mut links = SpanLinks::default();
    links.links = r
        .links
        .into_iter()
        .map(|l| Link::new(context(l.trace_id, l.span_id), attributes(l.attributes), 0))
        .collect();
    SpanData {
        span_context: context(r.trace_id, r.span_id),
        parent_span_id: r.parent_span_id.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: r.parent_remote,
        span_kind: match r.kind {
            SpanKind::Server => OtelKind::Server,
            SpanKind::Internal => OtelKind::Internal,
            SpanKind::Client => OtelKind::Client,
        },
        name: r.name.into(),
        start_time: r.start,
        end_time: r.end.max(r.start),
        attributes: attributes(r.attributes),
        dropped_attributes_count: 0,
        events,
        links,
        status: match r.error {
            Some(e) => Status::error(e),
            None => Status::Unset,
        },
        instrumentation_scope: scope.clone(),
    }
}
