//! Per-request `_meta`: protocol version, client capabilities, progress token, log level
//! and trace context.

use serde_json::{Map, Value, json};
use snodo_core::model::IncomingTrace;

use super::{PROTOCOL_VERSION, RpcError, TASKS_EXTENSION, codes};

/// What a request's `_meta` declared.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RequestMeta {
    /// The protocol version.
    pub(crate) protocol_version: String,
    /// The client's capabilities for this request only.
    pub(crate) client_capabilities: Value,
    /// The progress token, if progress was asked for.
    pub(crate) progress_token: Option<Value>,
    /// The least severe level of log notifications the client asked for
    /// (`io.modelcontextprotocol/logLevel`); none are sent without it.
    pub(crate) log_level: Option<LogLevel>,
    /// The W3C trace context of `_meta`'s `traceparent`, `tracestate` and `baggage` (the
    /// keys MCP reserves for it); `None` without a valid `traceparent`.
    pub(crate) trace: Option<IncomingTrace>,
    /// The webhook endpoint the call asks to be told at (`io.snodo/webhook`): a URL one of
    /// its tenant's subscriptions has (docs/webhooks.md).
    pub(crate) webhook: Option<String>,
}

/// The `_meta` key a call names a webhook endpoint with.
pub(crate) const WEBHOOK_META: &str = "io.snodo/webhook";

/// The endpoint `_meta` asks for, if any: a string URL, or the error naming the key.
pub(crate) fn webhook_of(meta: Option<&Value>) -> Result<Option<String>, RpcError> {
    match meta.and_then(|m| m.get(WEBHOOK_META)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(u)) if !u.is_empty() && u.len() <= 2_048 => Ok(Some(u.clone())),
        Some(_) => Err(RpcError::invalid_params(format!(
            "_meta {WEBHOOK_META} must be the URL of a webhook subscription (at most 2048 bytes)"
        ))),
    }
}

/// The trace context `_meta` carries, if it holds a valid `traceparent`. An invalid one is
/// ignored, as W3C Trace Context says: the request goes on and its task starts a trace.
pub(crate) fn trace_of(meta: Option<&Value>) -> Option<IncomingTrace> {
    let meta = meta?.as_object()?;
    let text = |key: &str| meta.get(key).and_then(Value::as_str);
    IncomingTrace::from_values(text("traceparent"), text("tracestate"), text("baggage"))
}

/// A syslog severity, as MCP logging names them, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LogLevel {
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `notice`.
    Notice,
    /// `warning`.
    Warning,
    /// `error`.
    Error,
    /// `critical`.
    Critical,
    /// `alert`.
    Alert,
    /// `emergency`.
    Emergency,
}

impl LogLevel {
    const ALL: [(&'static str, LogLevel); 8] = [
        ("debug", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("notice", LogLevel::Notice),
        ("warning", LogLevel::Warning),
        ("error", LogLevel::Error),
        ("critical", LogLevel::Critical),
        ("alert", LogLevel::Alert),
        ("emergency", LogLevel::Emergency),
    ];

    /// The level MCP names `name`.
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
    }

    /// Its MCP name.
    pub(crate) fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, l)| *l == self)
            .map_or("info", |(n, _)| n)
    }
}

impl RequestMeta {
    /// Reads and validates `params._meta`: -32602 for missing or malformed required
    /// fields, -32022 for an unsupported version.
    pub(crate) fn parse(params: &Map<String, Value>) -> Result<Self, RpcError> {
        let meta = match params.get("_meta") {
            Some(Value::Object(m)) => m,
            Some(_) => return Err(RpcError::invalid_params("params._meta must be an object")),
            None => {
                return Err(RpcError::invalid_params(
                    "params._meta is required (protocolVersion, clientCapabilities)",
                ));
            }
        };
        let required = |key: &str| {
            meta.get(key)
                .ok_or_else(|| RpcError::invalid_params(format!("_meta is missing {key}")))
        };
        let version = match required("io.modelcontextprotocol/protocolVersion")? {
            Value::String(v) => v.clone(),
            _ => {
                return Err(RpcError::invalid_params(
                    "_meta protocolVersion must be a string",
                ));
            }
        };
        let caps = match required("io.modelcontextprotocol/clientCapabilities")? {
            c @ Value::Object(_) => c.clone(),
            _ => {
                return Err(RpcError::invalid_params(
                    "_meta clientCapabilities must be an object",
                ));
            }
        };
        let progress_token = match meta.get("progressToken") {
            None | Some(Value::Null) => None,
            Some(t @ (Value::String(_) | Value::Number(_))) => Some(t.clone()),
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "progressToken must be a string or a number",
                ));
            }
        };
        let log_level = match meta.get("io.modelcontextprotocol/logLevel") {
            None | Some(Value::Null) => None,
            Some(l) => Some(l.as_str().and_then(LogLevel::parse).ok_or_else(|| {
                RpcError::invalid_params(
                    "_meta io.modelcontextprotocol/logLevel must be one of debug, info, notice, \
                     warning, error, critical, alert, emergency",
                )
            })?),
        };
        Ok(Self {
            protocol_version: version,
            client_capabilities: caps,
            progress_token,
            log_level,
            trace: trace_of(params.get("_meta")),
            webhook: webhook_of(params.get("_meta"))?,
        })
    }

    /// -32022 unless the version is the one served. Checked after the version header is
    /// compared with `_meta` (a mismatch between them is -32020 whatever the versions).
    pub(crate) fn check_version(&self) -> Result<(), RpcError> {
        if self.protocol_version != PROTOCOL_VERSION {
            return Err(RpcError::new(codes::UNSUPPORTED_VERSION, "Unsupported protocol version")
                .with_data(json!({"supported": [PROTOCOL_VERSION], "requested": self.protocol_version})));
        }
        Ok(())
    }

    /// Whether this request declares the tasks extension.
    pub(crate) fn declares_tasks(&self) -> bool {
        declares_tasks(&self.client_capabilities)
    }
}

/// Whether `capabilities` declare the tasks extension (any object under its key).
pub(crate) fn declares_tasks(capabilities: &Value) -> bool {
    snodo_core::model::ClientCapabilities::of(capabilities).declares_extension(TASKS_EXTENSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(meta: Value) -> Map<String, Value> {
        json!({"_meta": meta})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn meta_rules() {
        let ok = RequestMeta::parse(&params(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "progressToken": 5
        })))
        .unwrap();
        assert!(ok.declares_tasks());
        assert_eq!(ok.progress_token, Some(json!(5)));
        let missing = RequestMeta::parse(&params(
            json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
        ));
        assert_eq!(missing.unwrap_err().code, codes::INVALID_PARAMS);
        let old = RequestMeta::parse(&params(json!({
            "io.modelcontextprotocol/protocolVersion": "2025-11-25",
            "io.modelcontextprotocol/clientCapabilities": {}
        })))
        .unwrap()
        .check_version()
        .unwrap_err();
        assert_eq!(old.code, codes::UNSUPPORTED_VERSION);
        assert_eq!(old.data.unwrap()["requested"], "2025-11-25");
        assert_eq!(
            RequestMeta::parse(&Map::new()).unwrap_err().code,
            codes::INVALID_PARAMS
        );
    }

    #[test]
    fn levels_order_by_severity() {
        assert!(LogLevel::parse("error").unwrap() > LogLevel::parse("info").unwrap());
        assert_eq!(
            LogLevel::parse("warning").map(LogLevel::as_str),
            Some("warning")
        );
        assert_eq!(LogLevel::parse("loud"), None);
        assert_eq!(
            LogLevel::parse("stderr"),
            None,
            "captured output is not a level"
        );
    }

    #[test]
    fn the_legacy_tasks_capability_does_not_count() {
        assert!(!declares_tasks(&json!({"tasks": {"requests": {}}})));
        assert!(declares_tasks(
            &json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
        ));
    }
}
