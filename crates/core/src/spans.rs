//! Spans: what Snodo records of a request and of a task's life for OpenTelemetry, as plain
//! data, the sampling rule, and the sink an exporter implements.
//!
//! Every layer builds [`SpanRecord`]s with explicit ids and times: a task's span is written
//! when the task ends, possibly on another node and after crashes, under the id chosen when
//! it was created ([`TaskSpan`]). Nothing here depends on an OpenTelemetry crate; the
//! exporter (`snodo-otel`) turns records into OTLP.
//!
//! A record carries identities, names, kinds, codes and times: never an argument, an
//! answer, a result, a status message or a secret.

use std::sync::Arc;
use std::time::SystemTime;

use crate::ids::SpanId;
use crate::model::TaskSpan;

/// A span's kind, as OpenTelemetry names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Serves a request (an MCP request).
    Server,
    /// Work inside the process (a task, an attempt, its steps).
    Internal,
    /// A request to another service (an outbound HTTP request, a store commit).
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Self::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Self::Int(n)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Self {
        Self::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Self::Int(n.into())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

/// Attributes: keys are the conventions' names, known when the code is written.
pub type Attributes = Vec<(&'static str, Value)>;

/// Something that happened at an instant of a span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    /// The event's name.
    pub name: &'static str,
    /// When.
    pub at: SystemTime,
    /// Its attributes.
    pub attributes: Attributes,
}

/// A link from a span to another span (in this trace or another).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanLink {
    /// The linked span's trace.
    pub trace_id: [u8; 16],
    /// The linked span.
    pub span_id: [u8; 8],
    /// Why it is linked.
    pub attributes: Attributes,
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    /// The trace.
    pub trace_id: [u8; 16],
    /// This span.
    pub span_id: [u8; 8],
    /// Its parent, when it has one.
    pub parent_span_id: Option<[u8; 8]>,
    /// Whether the parent is another process's span (the caller's).
    pub parent_remote: bool,
    /// The name.
    pub name: String,
    /// The kind.
    pub kind: SpanKind,
    /// When it started.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// Its attributes.
    pub attributes: Attributes,
    /// What happened during it.
    pub events: Vec<SpanEvent>,
    /// Spans it is linked to.
    pub links: Vec<SpanLink>,
    /// `Some` when it ended in error: the error's type (a code or a short name).
    pub error: Option<String>,
}

impl SpanRecord {
    /// A span named `name` in `trace_id`, under `parent`, starting at `start` and, until
    /// [`SpanRecord::end_at`] says otherwise, ending there too.
    pub fn new(
        trace_id: [u8; 16],
        parent: Option<[u8; 8]>,
        name: impl Into<String>,
        kind: SpanKind,
        start: SystemTime,
    ) -> Self {
        Self {
            trace_id,
            span_id: SpanId::random().to_bytes(),
            parent_span_id: parent,
            parent_remote: false,
            name: name.into(),
            kind,
            start,
            end: start,
            attributes: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
            error: None,
        }
    }

    /// Sets the end.
    pub fn end_at(mut self, end: SystemTime) -> Self {
        self.end = end;
        self
    }

    /// Adds an attribute.
    pub fn attr(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.attributes.push((key, value.into()));
        self
    }

    /// Adds an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.attributes.push((key, value.into()));
    }

    /// The value of attribute `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// Receives finished spans. Called inline on request and runner paths: queue, never block.
pub trait SpanSink: Send + Sync + 'static {
    /// One finished span.
    fn export(&self, span: SpanRecord);

    /// What the sink has done with the spans it received, for `/metrics`.
    fn counters(&self) -> Option<Arc<SpanCounters>> {
        None
    }
}

/// What an exporting sink did with spans (`snodo_spans_total` at `/metrics`).
#[derive(Debug, Default)]
pub struct SpanCounters {
    /// Sent to the collector.
    pub exported: std::sync::atomic::AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: std::sync::atomic::AtomicU64,
    /// Dropped because their export failed.
    pub failed: std::sync::atomic::AtomicU64,
}

/// Collects spans in memory (tests, and whoever wants to look at them).
#[derive(Default)]
pub struct CollectedSpans(pub parking_lot::Mutex<Vec<SpanRecord>>);

impl SpanSink for CollectedSpans {
    fn export(&self, span: SpanRecord) {
        self.0.lock().push(span);
    }
}

/// Whether and where spans go: a sink and the sampling rule. Cloning shares the sink.
///
/// Sampling is decided from the trace id, so every node and every attempt of a task
/// decides the same for the same trace: with `follow_parent`, a trace whose caller sent a
/// `traceparent` is sampled exactly when the caller sampled it; otherwise (and for traces
/// Snodo begins) a trace is sampled when its id's low 8 bytes, as a number, fall under
/// `ratio` of their range (OpenTelemetry's `TraceIdRatioBased`).
#[derive(Clone)]
pub struct Tracer {
    sink: Option<Arc<dyn SpanSink>>,
    /// Sampled when the id's low 8 bytes are below this (`u64::MAX` samples everything).
    threshold: u64,
    follow_parent: bool,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("enabled", &self.sink.is_some())
            .field("threshold", &self.threshold)
            .field("follow_parent", &self.follow_parent)
            .finish()
    }
}

impl Default for Tracer {
    fn default() -> Self {
        Self::disabled()
    }
}

impl Tracer {
    /// Records nothing.
    pub fn disabled() -> Self {
        Self {
            sink: None,
            threshold: 0,
            follow_parent: true,
        }
    }

    /// Sends sampled spans to `sink`, sampling `ratio` (0 to 1) of the traces it decides.
    pub fn new(sink: Arc<dyn SpanSink>, ratio: f64, follow_parent: bool) -> Self {
        let ratio = ratio.clamp(0.0, 1.0);
        let threshold = if ratio >= 1.0 {
            u64::MAX
        } else {
            (ratio * u64::MAX as f64) as u64
        };
        Self {
            sink: Some(sink),
            threshold,
            follow_parent,
        }
    }

    /// Whether spans go anywhere.
    pub fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Whether the trace `trace_id` is recorded; `parent_sampled` is the caller's flag
    /// when the trace is the caller's.
    pub fn sampled(&self, trace_id: &[u8; 16], parent_sampled: Option<bool>) -> bool {
        if self.sink.is_none() {
            return false;
        }
        if let (true, Some(flag)) = (self.follow_parent, parent_sampled) {
            return flag;
        }
        if self.threshold == u64::MAX {
            return true;
        }
        let low = u64::from_be_bytes(trace_id[8..].try_into().expect("8 bytes"));
        low < self.threshold
    }

    /// Whether a task's spans are recorded.
    pub fn samples_task(&self, span: &TaskSpan) -> bool {
        self.sampled(&span.trace_id, span.parent.map(|_| span.sampled))
    }

    /// The sink's counters, when it keeps them.
    pub fn counters(&self) -> Option<Arc<SpanCounters>> {
        self.sink.as_ref().and_then(|s| s.counters())
    }

    /// Sends a finished span.
    pub fn export(&self, span: SpanRecord) {
        if let Some(sink) = &self.sink {
            sink.export(span);
        }
    }
}

/// The span id of a task's attempt under claim `generation`: derived from the task's span
/// and the generation, so the next attempt, on any node, can link to it without it being
/// stored anywhere.
pub fn attempt_span_id(task_span: &[u8; 8], generation: u64) -> [u8; 8] {
    // splitmix64's finalizer over the task span mixed with the generation: distinct
    // generations give distinct ids; zero (invalid) is mapped away.
    let mut z = u64::from_be_bytes(*task_span) ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    if z == 0 { 1 } else { z }.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[8..].copy_from_slice(&n.to_be_bytes());
        id[0] = 1;
        id
    }

    #[test]
    fn sampling_follows_the_callers_flag_and_else_the_trace_ids_ratio() {
        let sink: Arc<dyn SpanSink> = Arc::new(CollectedSpans::default());
        let all = Tracer::new(sink.clone(), 1.0, true);
        assert!(all.sampled(&ids(u64::MAX - 1), None));
        assert!(
            !all.sampled(&ids(1), Some(false)),
            "the caller did not sample"
        );
        let hundredth = Tracer::new(sink.clone(), 0.01, true);
        assert!(hundredth.sampled(&ids(1), None));
        assert!(!hundredth.sampled(&ids(u64::MAX / 2), None));
        assert!(hundredth.sampled(&ids(u64::MAX / 2), Some(true)));
        let own = Tracer::new(sink, 0.01, false);
        assert!(!own.sampled(&ids(u64::MAX / 2), Some(true)));
        let sampled = (0..10_000u64)
            .filter(|i| hundredth.sampled(&ids(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)), None))
            .count();
        assert!((50..200).contains(&sampled), "about 1 %: {sampled}");
        assert!(!Tracer::disabled().sampled(&ids(1), Some(true)));
    }

    #[test]
    fn attempt_span_ids_are_stable_and_distinct() {
        let task = [7u8; 8];
        assert_eq!(attempt_span_id(&task, 3), attempt_span_id(&task, 3));
        let mut seen = std::collections::HashSet::new();
        for g in 0..1000 {
            assert!(seen.insert(attempt_span_id(&task, g)));
            assert_ne!(attempt_span_id(&task, g), [0; 8]);
        }
    }
}
