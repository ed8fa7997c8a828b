//! A small OTLP trace receiver: accepts what an exporter sends over http/protobuf
//! (`POST /v1/traces`) and gRPC (`TraceService/Export`), on one port, decodes it and keeps
//! the spans. The test suite checks what Snodo exports with it; `snodo bench` uses it as
//! the collector when it measures tracing's cost.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use parking_lot::Mutex;
use prost::Message;
use snodo_core::ids::hex;

/// One received span, decoded into plain values.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The trace, as hex.
    pub trace_id: String,
    /// The span, as hex.
    pub span_id: String,
    /// The parent, as hex; empty for a root.
    pub parent_span_id: String,
    /// The name.
    pub name: String,
    /// The kind (OTLP's numbering: 1 internal, 2 server, 3 client).
    pub kind: i32,
    /// Start and end, ns since the epoch.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Events: name and attributes.
    pub events: Vec<(String, BTreeMap<String, String>)>,
    /// Links: trace, span (hex) and attributes.
    pub links: Vec<(String, String, BTreeMap<String, String>)>,
    /// Whether the status is an error.
    pub error: bool,
    /// The resource's attributes (service.name, service.instance.id).
    pub resource: BTreeMap<String, String>,
    /// Which protocol delivered it: `http` or `grpc`.
    pub via: &'static str,
}

impl ReceivedSpan {
    /// Every attribute value of the span, its events and its links.
    pub fn all_values(&self) -> impl Iterator<Item = &str> {
        self.attributes
            .values()
            .chain(self.events.iter().flat_map(|(_, a)| a.values()))
            .chain(self.links.iter().flat_map(|(_, _, a)| a.values()))
            .map(String::as_str)
    }
}

#[derive(Default)]
struct Shared {
    /// Whether spans are kept (else only counted).
    keep: bool,
    spans: Mutex<Vec<ReceivedSpan>>,
    received: std::sync::atomic::AtomicU64,
    arrived: tokio::sync::Notify,
}

/// A running receiver.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Listens on a free loopback port and keeps what it receives.
    pub async fn start() -> std::io::Result<Self> {
        Self::on(SocketAddr::from(([127, 0, 0, 1], 0)), true).await
    }

    /// Listens on `addr`; keeps the spans it receives when `keep`, else only counts them
    /// (a collector that costs as little as possible, for benchmarks).
    pub async fn on(addr: SocketAddr, keep: bool) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            keep,
            ..Shared::default()
        });
        let state = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(serve(req, &state).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The http/protobuf traces URL.
    pub fn http_endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// The gRPC endpoint.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared.spans.lock().clone()
    }

    /// How many spans arrived so far.
    pub fn count(&self) -> u64 {
        self.shared
            .received
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until the spans received satisfy `done`, or `within` has passed (then
    /// returns what arrived, for the caller's assertion to explain).
    pub async fn wait_for(
        &self,
        within: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            {
                let spans = self.shared.spans.lock();
                if done(&spans) {
                    return spans.clone();
                }
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.spans();
            }
        }
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn serve(req: Request<hyper::body::Incoming>, shared: &Shared) -> Response<Body> {
    let grpc = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    let path = req.uri().path().to_owned();
    let Ok(body) = req.into_body().collect().await else {
        return plain(StatusCode::BAD_REQUEST);
    };
    let body = body.to_bytes();
    if grpc {
        if path != "/opentelemetry.proto.collector.trace.v1.TraceService/Export" {
            return grpc_reply(12);
        }
        // One length-prefixed message, uncompressed.
        if body.len() < 5 || body[0] != 0 {
            return grpc_reply(3);
        }
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        let Some(message) = body.get(5..5 + len) else {
            return grpc_reply(3);
        };
        match ExportTraceServiceRequest::decode(message) {
            Ok(r) => {
                keep(shared, r, "grpc");
                grpc_reply(0)
            }
            Err(_) => grpc_reply(3),
        }
    } else {
        if path != "/v1/traces" {
            return plain(StatusCode::NOT_FOUND);
        }
        match ExportTraceServiceRequest::decode(body.as_ref()) {
            Ok(r) => {
                keep(shared, r, "http");
                // An empty ExportTraceServiceResponse.
                let mut response = Response::new(Full::new(Bytes::new()).boxed());
                response.headers_mut().insert(
                    "content-type",
                    hyper::header::HeaderValue::from_static("application/x-protobuf"),
                );
                response
            }
            Err(_) => plain(StatusCode::BAD_REQUEST),
        }
    }
}

fn plain(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::new()).boxed());
    *r.status_mut() = status;
    r
}

/// A gRPC reply: an empty message when `status` is 0, and the status in the trailers.
fn grpc_reply(status: u8) -> Response<Body> {
    let mut trailers = hyper::HeaderMap::new();
    trailers.insert(
        "grpc-status",
        hyper::header::HeaderValue::from_str(&status.to_string()).expect("digits"),
    );
    let mut frames = Vec::new();
    if status == 0 {
        frames.push(Ok(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))));
    }
    frames.push(Ok(Frame::trailers(trailers)));
    let mut r = Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
    r.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/grpc"),
    );
    r
}

fn text(v: &opentelemetry_proto::tonic::common::v1::AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn map(kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn keep(shared: &Shared, request: ExportTraceServiceRequest, via: &'static str) {
    if !shared.keep {
        let n: usize = request
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .map(|ss| ss.spans.len())
            .sum();
        shared
            .received
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    let mut spans = Vec::new();
    for rs in request.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| map(&r.attributes))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                spans.push(ReceivedSpan {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name.clone(),
                    kind: s.kind,
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attributes: map(&s.attributes),
                    events: s
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), map(&e.attributes)))
                        .collect(),
                    links: s
                        .links
                        .iter()
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id), map(&l.attributes)))
                        .collect(),
                    // STATUS_CODE_ERROR
                    error: s.status.as_ref().is_some_and(|st| st.code == 2),
                    resource: resource.clone(),
                    via,
                });
            }
        }
    }
    shared
        .received
        .fetch_add(spans.len() as u64, std::sync::atomic::Ordering::Relaxed);
    shared.spans.lock().extend(spans);
    shared.arrived.notify_waiters();
}
