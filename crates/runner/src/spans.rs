//! An attempt's spans: the attempt itself, under the task's span, and its steps (the claim,
//! the instantiation, the execution, each outbound request, each store commit), with its
//! events (input asked and answered, parked, retry scheduled, the guest's log lines).
//!
//! Collected while the attempt runs and exported when it ends, only for a task whose trace
//! is sampled ([`snodo_core::spans::Tracer::samples_task`]); an unsampled attempt holds no
//! collector and pays one branch per step.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use snodo_core::model::{TaskId, TaskSpan};
use snodo_core::spans::{
    Attributes, SpanEvent, SpanKind, SpanLink, SpanRecord, Tracer, attempt_span_id,
};

/// The most guest log lines one attempt keeps as span events; past it they are counted.
pub(crate) const MAX_LOG_EVENTS: usize = 32;
/// The longest log line kept in an event, in bytes (cut at a character boundary).
pub(crate) const MAX_LOG_EVENT_BYTES: usize = 256;

/// When a claim ran, for the attempt's `claim` step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimTime {
    /// The store operation (`claim`, `claim_next`, `create_claimed`).
    pub op: &'static str,
    /// When it was sent.
    pub start: SystemTime,
    /// How long it took.
    pub took: Duration,
}

impl ClaimTime {
    /// Times `fut`, a claim made with store operation `op`.
    pub(crate) async fn of<T>(op: &'static str, fut: impl Future<Output = T>) -> (T, Self) {
        let start = SystemTime::now();
        let began = std::time::Instant::now();
        let r = fut.await;
        (
            r,
            Self {
                op,
                start,
                took: began.elapsed(),
            },
        )
    }
}

/// One attempt's spans while it runs. Shared by the attempt and its IO.
pub(crate) struct AttemptSpans {
    tracer: Tracer,
    finished: bool,
    attempt: SpanRecord,
    steps: Vec<SpanRecord>,
    logs_dropped: u64,
    logs: usize,
}

/// An attempt's collector, when its trace is sampled.
pub(crate) type Spans = Option<Arc<Mutex<AttemptSpans>>>;

impl AttemptSpans {
    /// The collector of the attempt of claim `generation` of `task`, or `None` when the task
    /// has no trace or it is not sampled.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        tracer: &Tracer,
        task: &TaskId,
        span: Option<&TaskSpan>,
        tool: &str,
        generation: u64,
        attempt: u32,
        node: &str,
        claim: ClaimTime,
    ) -> Spans {
        let span = span.filter(|s| tracer.samples_task(s))?;
        let start = claim.start;
        let mut record = SpanRecord::new(
            span.trace_id,
            Some(span.span_id),
            format!("attempt {tool}"),
            SpanKind::Internal,
            start,
        )
        .attr("mcp.task.id", task.to_string())
        .attr("gen_ai.tool.name", tool)
        .attr("snodo.attempt", attempt)
        .attr("snodo.claim.generation", generation)
        .attr("snodo.node", node);
        record.span_id = attempt_span_id(&span.span_id, generation);
        // Every claim takes a new generation: the one before is the previous attempt's
        // (on whichever node ran it), whose id the same derivation gives.
        if generation > 1 {
            record.links.push(SpanLink {
                trace_id: span.trace_id,
                span_id: attempt_span_id(&span.span_id, generation - 1),
                attributes: vec![("snodo.link", "previous_attempt".into())],
            });
        }
        let mut spans = Self {
            tracer: tracer.clone(),
            finished: false,
            attempt: record,
            steps: Vec::new(),
            logs_dropped: 0,
            logs: 0,
        };
        spans.step(
            &format!("store {}", claim.op),
            SpanKind::Client,
            claim.start,
            claim.took,
            vec![("db.operation.name", claim.op.into())],
            None,
        );
        Some(Arc::new(Mutex::new(spans)))
    }

    /// Records a finished step under the attempt (or under `parent`).
    pub(crate) fn step(
        &mut self,
        name: &str,
        kind: SpanKind,
        start: SystemTime,
        took: Duration,
        attributes: Attributes,
        error: Option<String>,
    ) -> [u8; 8] {
        let mut s = SpanRecord::new(
            self.attempt.trace_id,
            Some(self.attempt.span_id),
            name,
            kind,
            start,
        )
        .end_at(start + took);
        s.attributes = attributes;
        s.error = error;
        let id = s.span_id;
        self.steps.push(s);
        id
    }

    /// Re-parents the steps recorded between `from` and `to` (indexes from
    /// [`AttemptSpans::mark`]) under `parent`: outbound requests happen inside the
    /// execution, whose span is only known once it ended.
    pub(crate) fn adopt(&mut self, from: usize, to: usize, parent: [u8; 8]) {
        let attempt = self.attempt.span_id;
        for s in &mut self.steps[from..to] {
            if s.parent_span_id == Some(attempt) {
                s.parent_span_id = Some(parent);
            }
        }
    }

    /// How many steps are recorded so far.
    pub(crate) fn mark(&self) -> usize {
        self.steps.len()
    }

    /// An event on the attempt, now.
    pub(crate) fn event(&mut self, name: &'static str, attributes: Attributes) {
        self.attempt.events.push(SpanEvent {
            name,
            at: SystemTime::now(),
            attributes,
        });
    }

    /// A guest log line, as an event (bounded by [`MAX_LOG_EVENTS`] and
    /// [`MAX_LOG_EVENT_BYTES`]); the line has had the tool's secrets replaced.
    pub(crate) fn log(&mut self, level: &'static str, message: &str) {
        if self.logs >= MAX_LOG_EVENTS {
            self.logs_dropped += 1;
            return;
        }
        self.logs += 1;
        let mut end = message.len().min(MAX_LOG_EVENT_BYTES);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        self.event(
            "log",
            vec![
                ("log.severity", level.into()),
                ("log.message", message[..end].into()),
            ],
        );
    }

    /// Ends the attempt with `outcome` (a [`crate::JobOutcome`] name) and exports it with
    /// its steps.
    pub(crate) fn finish(&mut self, outcome: &'static str, failed: bool) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let now = SystemTime::now();
        let mut attempt = std::mem::replace(
            &mut self.attempt,
            SpanRecord::new([0; 16], None, "", SpanKind::Internal, now),
        );
        attempt.end = now.max(attempt.start);
        attempt.set("snodo.outcome", outcome);
        if self.logs_dropped > 0 {
            attempt.set("snodo.log_events_dropped", self.logs_dropped);
        }
        if failed {
            attempt.error = Some(outcome.to_owned());
        }
        for s in self.steps.drain(..) {
            self.tracer.export(s);
        }
        self.tracer.export(attempt);
    }
}

/// Runs `f` on the collector when there is one.
pub(crate) fn with(spans: &Spans, f: impl FnOnce(&mut AttemptSpans)) {
    if let Some(s) = spans {
        f(&mut s.lock());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snodo_core::spans::{CollectedSpans, SpanSink};

    #[test]
    fn an_attempt_exports_once_with_its_steps_bounded_logs_and_a_link_to_the_one_before() {
        let sink = Arc::new(CollectedSpans::default());
        let tracer = Tracer::new(sink.clone() as Arc<dyn SpanSink>, 1.0, true);
        let span = TaskSpan {
            trace_id: [3; 16],
            span_id: [4; 8],
            parent: None,
            sampled: true,
            tool: "t".into(),
        };
        let claim = ClaimTime {
            op: "claim",
            start: SystemTime::now(),
            took: Duration::from_millis(1),
        };
        let id = TaskId::generate();
        let spans =
            AttemptSpans::start(&tracer, &id, Some(&span), "t", 2, 2, "n", claim).expect("sampled");
        with(&Some(spans.clone()), |s| {
            for i in 0..MAX_LOG_EVENTS + 5 {
                s.log("info", &format!("{i}{}", "é".repeat(300)));
            }
            s.finish("completed", false);
            s.finish("completed", false);
        });
        let got = sink.0.lock();
        assert_eq!(got.len(), 2, "the claim step and the attempt, once");
        let attempt = got.iter().find(|s| s.name == "attempt t").expect("attempt");
        assert_eq!(attempt.parent_span_id, Some([4; 8]));
        assert_eq!(attempt.span_id, attempt_span_id(&[4; 8], 2));
        assert_eq!(attempt.links[0].span_id, attempt_span_id(&[4; 8], 1));
        assert_eq!(attempt.events.len(), MAX_LOG_EVENTS);
        assert_eq!(attempt.get("snodo.log_events_dropped"), Some(&5u64.into()));
        let Some(snodo_core::spans::Value::Str(line)) = attempt.events[0]
            .attributes
            .iter()
            .find(|(k, _)| *k == "log.message")
            .map(|(_, v)| v.clone())
        else {
            panic!("a log line");
        };
        assert!(line.len() <= MAX_LOG_EVENT_BYTES && line.starts_with('0'));
        let claim = got.iter().find(|s| s.name == "store claim").expect("claim");
        assert_eq!(claim.parent_span_id, Some(attempt.span_id));
        // An unsampled trace holds no collector.
        let none = Tracer::new(sink.clone() as Arc<dyn SpanSink>, 0.0, true);
        let claim = ClaimTime {
            op: "claim",
            start: SystemTime::now(),
            took: Duration::ZERO,
        };
        drop(got);
        assert!(AttemptSpans::start(&none, &id, Some(&span), "t", 1, 1, "n", claim).is_none());
    }
}
