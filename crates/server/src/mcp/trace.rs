//! Request spans, per the OpenTelemetry semantic conventions for MCP, extended to the
//! tasks extension's methods, `server/discover` and `subscriptions/listen`
//! (docs/observability.md, "Spans").
//!
//! One SERVER span per request: named `{mcp.method.name} {target}` (the tool or prompt
//! served, when there is one), a child of the caller's `traceparent` (from `_meta`, else
//! the HTTP headers). A request about a task (`tasks/get`, `tasks/update`,
//! `tasks/cancel`, and the `tools/call` that created it) names the task and links to the
//! task's own span. Attributes are names, ids and codes: never arguments, answers or
//! results.

use std::time::SystemTime;

use parking_lot::Mutex;
use serde_json::Value;
use snodo_core::ids::TraceId;
use snodo_core::model::{IncomingTrace, TaskSpan};
use snodo_core::spans::{SpanKind, SpanLink, SpanRecord, Tracer};

use super::{Outcome, RoutingHeaders};
use crate::protocol;

/// What a handler learned that the request's span shows: the task it is about.
pub(crate) struct TraceNotes {
    /// The request span's trace and id: a task the request creates without a caller's
    /// trace continues this one, as the request span's child.
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
    task: Mutex<Option<(String, Option<TaskSpan>)>>,
}

impl TraceNotes {
    /// The context a task created by the request keeps when its caller sent no trace.
    pub(crate) fn task_context(&self) -> snodo_core::model::TraceContext {
        let parent = snodo_core::model::TraceParent {
            trace_id: self.trace_id,
            parent_id: self.span_id,
            flags: 1,
        };
        IncomingTrace {
            parent,
            tracestate: None,
            baggage: None,
        }
        .for_task()
    }

    /// The request is about task `id`, whose span is `span` (when it keeps a trace).
    pub(crate) fn task(&self, id: String, span: Option<&TaskSpan>) {
        *self.task.lock() = Some((id, span.cloned()));
    }
}

/// A request's span while it is served.
pub(crate) struct RequestSpan {
    record: SpanRecord,
    pub(crate) notes: TraceNotes,
}

/// The caller's trace for a request: its `_meta` keys, else its HTTP headers.
pub(crate) fn incoming(
    params: &serde_json::Map<String, Value>,
    headers: &RoutingHeaders,
) -> Option<IncomingTrace> {
    let meta = params.get("_meta");
    let key = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
    // As `RequestMeta` reads it: `_meta`'s keys when they parse, else the headers.
    key("traceparent")
        .and_then(|tp| IncomingTrace::from_values(Some(tp), key("tracestate"), key("baggage")))
        .or_else(|| headers.trace.clone())
}

/// The longest client-given string an attribute keeps, in bytes (cut at a character).
const MAX_ATTRIBUTE_BYTES: usize = 256;

fn bounded(s: &str) -> String {
    let mut end = s.len().min(MAX_ATTRIBUTE_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// A URI without its query, fragment and user info: they carry tokens.
fn without_secrets(uri: &str) -> String {
    let uri = uri.split(['?', '#']).next().unwrap_or_default();
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority.rsplit('@').next().unwrap_or(authority);
    format!("{scheme}://{host}{path}")
}

impl RequestSpan {
    /// The span of `req` (its method's label `method`, the catalog's `tool` for a
    /// `tools/call`), or `None` when its trace is not sampled.
    pub(crate) fn start(
        tracer: &Tracer,
        req: &protocol::Request,
        headers: &RoutingHeaders,
        method: &'static str,
        tool: Option<&str>,
    ) -> Option<Self> {
        if !tracer.enabled() {
            return None;
        }
        let caller = incoming(&req.params, headers);
        let trace_id = caller
            .as_ref()
            .map_or_else(|| TraceId::random().to_bytes(), |c| c.parent.trace_id);
        if !tracer.sampled(&trace_id, caller.as_ref().map(|c| c.parent.sampled())) {
            return None;
        }
        let name = |key: &str| req.params.get(key).and_then(Value::as_str);
        let prompt = (method == "prompts/get").then(|| name("name")).flatten();
        let target = tool.or(prompt);
        let span_name = match target {
            Some(t) => format!("{method} {t}"),
            None => method.to_owned(),
        };
        let mut r = SpanRecord::new(
            trace_id,
            caller.as_ref().map(|c| c.parent.parent_id),
            span_name,
            SpanKind::Server,
            SystemTime::now(),
        )
        .attr("mcp.method.name", method)
        .attr("network.protocol.name", "http")
        .attr("network.transport", "tcp");
        r.parent_remote = caller.is_some();
        match &req.id {
            Value::String(s) => r.set("jsonrpc.request.id", bounded(s)),
            Value::Number(n) => r.set("jsonrpc.request.id", n.to_string()),
            _ => {}
        }
        if let Some(version) = headers
            .protocol_version
            .as_ref()
            .and_then(|v| v.as_ref().ok())
        {
            r.set("mcp.protocol.version", version.as_str());
        }
        if let Some(tool) = tool {
            r.set("gen_ai.tool.name", tool);
            r.set("gen_ai.operation.name", "execute_tool");
        }
        if let Some(prompt) = prompt {
            r.set("gen_ai.prompt.name", bounded(prompt));
        }
        if method == "resources/read"
            && let Some(uri) = name("uri")
        {
            r.set("mcp.resource.uri", bounded(&without_secrets(uri)));
        }
        Some(Self {
            notes: TraceNotes {
                trace_id: r.trace_id,
                span_id: r.span_id,
                task: Mutex::default(),
            },
            record: r,
        })
    }

    /// Ends the span with the request's `outcome` and sends it.
    pub(crate) fn finish(self, tracer: &Tracer, outcome: Outcome) {
        let mut r = self.record;
        r.end = SystemTime::now();
        if let Some((id, span)) = self.notes.task.into_inner() {
            r.set("mcp.task.id", id);
            if let Some(span) = span {
                r.links.push(SpanLink {
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                    attributes: vec![("snodo.link", "task".into())],
                });
            }
        }
        match outcome {
            Outcome::Ok => {}
            Outcome::Error(code) => {
                r.set("error.type", code.to_string());
                r.set("rpc.response.status_code", code.to_string());
                r.error = Some(code.to_string());
            }
            Outcome::ToolError => {
                r.set("error.type", "tool_error");
                r.error = Some("tool_error".into());
            }
        }
        tracer.export(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_lose_their_secrets_and_strings_their_excess() {
        assert_eq!(
            without_secrets("https://user:pw@host.example/a/b?token=x#f"),
            "https://host.example/a/b"
        );
        assert_eq!(without_secrets("file:///notes.txt?x"), "file:///notes.txt");
        assert_eq!(without_secrets("note://a/@b"), "note://a/@b");
        assert_eq!(without_secrets("urn:x?y"), "urn:x");
        let long = "é".repeat(300);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_ATTRIBUTE_BYTES && long.starts_with(&cut));
    }
}
