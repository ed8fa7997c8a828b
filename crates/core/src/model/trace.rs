//! W3C Trace Context for tasks: the caller's `traceparent`, `tracestate` and `baggage`
//! (from the request's `_meta` or its HTTP headers), kept with the task's work so every
//! attempt, on any node and after any crash or park, continues the caller's trace.
//!
//! Parsing follows W3C Trace Context level 1: a value that does not parse is ignored, never
//! an error (the request goes on, its task starts a trace of its own). `tracestate` and
//! `baggage` are carried as opaque strings within the sizes the W3C recommendations allow,
//! and dropped beyond them.

use serde::{Deserialize, Serialize};

use crate::ids::{SpanId, TraceId, hex, unhex_array};

/// The longest `tracestate` kept: 32 members of up to 256 characters would be more, but
/// the W3C recommendation lets a carrier truncate at 512.
pub const MAX_TRACESTATE_BYTES: usize = 512;
/// The longest `baggage` kept (the W3C Baggage limit for the whole header).
pub const MAX_BAGGAGE_BYTES: usize = 8192;

/// A task's place in a distributed trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceContext {
    /// The trace, 32 lowercase hex digits, never all zero.
    pub trace_id: String,
    /// The caller's span (the `parent-id` of its `traceparent`), 16 lowercase hex digits;
    /// `None` when the task began the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// The task's own span, chosen when the task is created: every attempt's span is its
    /// child, whichever node runs it.
    pub task_span_id: String,
    /// Whether the caller sampled the trace (the `sampled` flag).
    pub sampled: bool,
    /// The caller's `tracestate`, passed on unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// The caller's `baggage`, passed on unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baggage: Option<String>,
}

/// What a task's spans need, kept on the task itself (its record and its view) so that a
/// terminal commit, an attempt or a `tasks/get` on any node names the task's span without
/// reading its work: the trace, the task's span, the caller's span and its `sampled` flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TaskSpanForm", into = "TaskSpanForm")]
pub struct TaskSpan {
    /// The trace.
    pub trace_id: [u8; 16],
    /// The task's own span.
    pub span_id: [u8; 8],
    /// The caller's span, when the caller sent a `traceparent`.
    pub parent: Option<[u8; 8]>,
    /// Whether the caller sampled the trace.
    pub sampled: bool,
    /// The tool the task runs (its spans are named after it).
    pub tool: String,
}

/// [`TaskSpan`] as stored: hex ids.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskSpanForm {
    trace_id: String,
    span_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    sampled: bool,
    #[serde(default)]
    tool: String,
}

impl TryFrom<TaskSpanForm> for TaskSpan {
    type Error = String;
    fn try_from(f: TaskSpanForm) -> Result<Self, String> {
        let bad = || "span ids must be lowercase hex".to_owned();
        Ok(Self {
            trace_id: unhex_array::<16>(&f.trace_id).ok_or_else(bad)?,
            span_id: unhex_array::<8>(&f.span_id).ok_or_else(bad)?,
            parent: match f.parent {
                Some(p) => Some(unhex_array::<8>(&p).ok_or_else(bad)?),
                None => None,
            },
            sampled: f.sampled,
            tool: f.tool,
        })
    }
}

impl From<TaskSpan> for TaskSpanForm {
    fn from(s: TaskSpan) -> Self {
        Self {
            trace_id: hex(&s.trace_id),
            span_id: hex(&s.span_id),
            parent: s.parent.map(|p| hex(&p)),
            sampled: s.sampled,
            tool: s.tool,
        }
    }
}

/// A parsed `traceparent`: the trace, the caller's span and its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// 16 bytes, not all zero.
    pub trace_id: [u8; 16],
    /// 8 bytes, not all zero.
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value. Version `00` must be exactly 55 characters; a later
    /// version may append fields after a `-`, which are ignored; version `ff` is invalid.
    pub fn parse(value: &str) -> Option<Self> {
        let v = value.trim_matches([' ', '\t']);
        let bytes = v.as_bytes();
        if bytes.len() < 55 || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let version = unhex_array::<1>(&v[0..2])?[0];
        if version == 0xff || (version == 0 && bytes.len() != 55) {
            return None;
        }
        if bytes.len() > 55 && bytes[55] != b'-' {
            return None;
        }
        let trace_id = unhex_array::<16>(&v[3..35])?;
        let parent_id = unhex_array::<8>(&v[36..52])?;
        let flags = unhex_array::<1>(&v[53..55])?[0];
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the caller sampled the trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// What a request carried: a `traceparent`, and the `tracestate` and `baggage` that go with
/// it (kept only when the `traceparent` parses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingTrace {
    /// The caller's trace and span.
    pub parent: TraceParent,
    /// Its `tracestate`, when present and within [`MAX_TRACESTATE_BYTES`].
    pub tracestate: Option<String>,
    /// Its `baggage`, when present and within [`MAX_BAGGAGE_BYTES`].
    pub baggage: Option<String>,
}

impl IncomingTrace {
    /// The trace a request carried in the three values, or `None` when its `traceparent`
    /// is absent or invalid.
    pub fn from_values(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        baggage: Option<&str>,
    ) -> Option<Self> {
        let parent = TraceParent::parse(traceparent?)?;
        Some(Self {
            parent,
            tracestate: bounded(tracestate, MAX_TRACESTATE_BYTES),
            baggage: bounded(baggage, MAX_BAGGAGE_BYTES),
        })
    }

    /// The context a task created by this request keeps: the caller's trace, with a new
    /// span for the task.
    pub fn for_task(&self) -> TraceContext {
        TraceContext {
            trace_id: hex(&self.parent.trace_id),
            parent_span_id: Some(hex(&self.parent.parent_id)),
            task_span_id: SpanId::random().to_string(),
            sampled: self.parent.sampled(),
            tracestate: self.tracestate.clone(),
            baggage: self.baggage.clone(),
        }
    }
}

impl TraceContext {
    /// A trace the task begins itself (its caller sent none).
    pub fn root(sampled: bool) -> Self {
        Self {
            trace_id: TraceId::random().to_string(),
            parent_span_id: None,
            task_span_id: SpanId::random().to_string(),
            sampled,
            tracestate: None,
            baggage: None,
        }
    }

    /// The `traceparent` naming the task's own span: what a child of the task (an attempt,
    /// an outbound request) carries as its parent.
    pub fn task_traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id,
            self.task_span_id,
            u8::from(self.sampled)
        )
    }

    /// What the spans of a task running `tool` need; `None` only for a context that does
    /// not validate.
    pub fn task_span(&self, tool: &str) -> Option<TaskSpan> {
        Some(TaskSpan {
            trace_id: unhex_array::<16>(&self.trace_id)?,
            span_id: unhex_array::<8>(&self.task_span_id)?,
            parent: match &self.parent_span_id {
                Some(p) => Some(unhex_array::<8>(p)?),
                None => None,
            },
            sampled: self.sampled,
            tool: tool.to_owned(),
        })
    }

    /// Checks the stored form: ids of the right length in lowercase hex, not all zero, and
    /// the carried strings within their bounds.
    pub fn validate(&self) -> Result<(), String> {
        let id_ok = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && s.bytes().any(|b| b != b'0')
        };
        if !id_ok(&self.trace_id, 32) {
            return Err("trace.traceId must be 32 lowercase hex digits, not all zero".into());
        }
        if !id_ok(&self.task_span_id, 16)
            || self
                .parent_span_id
                .as_deref()
                .is_some_and(|p| !id_ok(p, 16))
        {
            return Err("trace span ids must be 16 lowercase hex digits, not all zero".into());
        }
        if self
            .tracestate
            .as_ref()
            .is_some_and(|s| s.len() > MAX_TRACESTATE_BYTES)
            || self
                .baggage
                .as_ref()
                .is_some_and(|s| s.len() > MAX_BAGGAGE_BYTES)
        {
            return Err("trace.tracestate or trace.baggage is over its bound".into());
        }
        Ok(())
    }
}

fn bounded(value: Option<&str>, max: usize) -> Option<String> {
    let v = value?.trim_matches([' ', '\t']);
    // Printable ASCII only (both formats are): anything else is not passed on.
    (!v.is_empty() && v.len() <= max && v.bytes().all(|b| (0x20..0x7f).contains(&b)))
        .then(|| v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_parses_and_continues_into_the_task() {
        let t = IncomingTrace::from_values(Some(VALID), Some("rojo=00f067aa0ba902b7"), Some("k=v"))
            .expect("valid");
        assert!(t.parent.sampled());
        let cx = t.for_task();
        assert_eq!(cx.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(cx.parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
        assert_ne!(
            cx.task_span_id, "00f067aa0ba902b7",
            "the task has a span of its own"
        );
        assert_eq!(cx.tracestate.as_deref(), Some("rojo=00f067aa0ba902b7"));
        assert_eq!(cx.baggage.as_deref(), Some("k=v"));
        cx.validate().expect("stored form is valid");
        let child = TraceParent::parse(&cx.task_traceparent()).expect("round trip");
        assert_eq!(hex(&child.trace_id), cx.trace_id);
        assert_eq!(hex(&child.parent_id), cx.task_span_id);
        // Stored and read back unchanged.
        let json = serde_json::to_string(&cx).expect("json");
        assert_eq!(
            serde_json::from_str::<TraceContext>(&json).expect("back"),
            cx
        );
    }

    #[test]
    fn invalid_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(TraceParent::parse(bad).is_none(), "{bad:?}");
        }
        // A later version may carry more fields; they are ignored.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        let p = TraceParent::parse(later).expect("later version");
        assert!(!p.sampled());
        // Without a valid traceparent the rest is not kept either.
        assert!(IncomingTrace::from_values(None, Some("a=b"), Some("k=v")).is_none());
    }

    #[test]
    fn oversized_or_unprintable_state_and_baggage_are_dropped() {
        let long = "a=".to_owned() + &"x".repeat(MAX_TRACESTATE_BYTES);
        let t =
            IncomingTrace::from_values(Some(VALID), Some(&long), Some("k=\u{7}v")).expect("valid");
        assert_eq!(t.tracestate, None);
        assert_eq!(t.baggage, None);
        let root = TraceContext::root(false);
        root.validate().expect("a root context is valid");
        assert_eq!(root.parent_span_id, None);
        let mut broken = root.clone();
        broken.trace_id = "0".repeat(32);
        assert!(broken.validate().is_err());
    }
}
