//! MCP 2026-07-28 over JSON-RPC: envelopes, per-request `_meta`, routing headers, error
//! codes and wire shapes. Pure functions of their inputs; no I/O.

mod envelope;
mod headers;
mod meta;
mod time;

pub use envelope::{Incoming, Request, parse};
pub use headers::{NameSource, decode_header_value, name_source};
pub use meta::{LogLevel, RequestMeta, declares_tasks};
pub use time::rfc3339;

use serde::Serialize;
use serde_json::{Value, json};

/// The protocol version served.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// The tasks extension's identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// JSON-RPC and MCP error codes.
pub mod codes {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown or removed method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad params (including unknown task ids).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// An HTTP header disagrees with the body.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request lacks a client capability the server needs.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// The protocol version is not supported.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
    /// A budget refused the request (JSON-RPC's implementation-defined server-error range,
    /// below the -32020..-32099 block MCP reserves).
    pub const LIMIT_REACHED: i64 = -32000;
}

/// A JSON-RPC error to send: the domain's error object, with the wire's constructors and
/// HTTP mapping below.
pub use crate::model::JsonRpcError as RpcError;

impl RpcError {
    /// -32602.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    /// -32020.
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(codes::HEADER_MISMATCH, message)
    }

    /// -32601.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    /// -32603.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }

    /// -32021 naming the capabilities required.
    pub fn missing_capability(required: Value) -> Self {
        Self::new(
            codes::MISSING_CAPABILITY,
            "Missing required client capability",
        )
        .with_data(json!({"requiredCapabilities": required}))
    }

    /// -32021 for the tasks extension.
    pub fn tasks_required() -> Self {
        Self::missing_capability(json!({"extensions": {TASKS_EXTENSION: {}}}))
    }

    /// -32000: a budget refused the request. `data` names the limit (its configuration key),
    /// the cap and whose cap it is, so a client can tell a full host from its own excess.
    pub fn limit_reached(refusal: &crate::budget::Refusal) -> Self {
        Self::new(codes::LIMIT_REACHED, format!("Limit reached: {refusal}")).with_data(json!({
            "kind": "limit",
            "limit": refusal.limit,
            "max": refusal.max,
            "scope": refusal.over.as_str(),
        }))
    }

    /// The HTTP status Streamable HTTP gives this error.
    pub fn http_status(&self) -> u16 {
        match self.code {
            codes::METHOD_NOT_FOUND => 404,
            codes::PARSE_ERROR
            | codes::INVALID_REQUEST
            | codes::INVALID_PARAMS
            | codes::HEADER_MISMATCH
            | codes::MISSING_CAPABILITY
            | codes::UNSUPPORTED_VERSION => 400,
            _ => 200,
        }
    }

    /// The error object.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            v["data"] = d.clone();
        }
        v
    }
}

/// The bytes of a JSON-RPC result response: the result is serialized in place, never built
/// into a JSON tree first.
pub fn result_bytes<T: Serialize + ?Sized>(id: &Value, result: &T) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a, T: ?Sized> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a T,
    }
    message_bytes(&Out {
        jsonrpc: "2.0",
        id,
        result,
    })
}

/// The bytes of a JSON-RPC error response.
pub fn error_bytes(id: &Value, error: &RpcError) -> Vec<u8> {
    #[derive(Serialize)]
    struct Out<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        error: &'a RpcError,
    }
    message_bytes(&Out {
        jsonrpc: "2.0",
        id,
        error,
    })
}

/// The bytes of a JSON-RPC message.
pub fn message_bytes<T: Serialize + ?Sized>(message: &T) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_else(|e| {
        // Only a map with non-string keys can fail to serialize, and no message has one.
        tracing::error!(error = %e, "a response could not be serialized");
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"the response could not be serialized"}}"#.to_vec()
    })
}

/// A JSON-RPC error response.
pub fn error_response(id: &Value, error: &RpcError) -> Value {
    message(("id", id.clone()), ("error", error.to_json()))
}

/// A result as every MCP result is: a JSON object. Results are built as objects, so marking
/// one never meets a value it cannot mark.
pub type ResultObject = serde_json::Map<String, Value>;

/// A 2026-07-28 result: `"resultType": "complete"` beside the result's own fields.
pub fn complete(mut result: ResultObject) -> Value {
    result.insert("resultType".into(), Value::from("complete"));
    Value::Object(result)
}

/// A 2026-07-28 list or read result: complete, and not to be cached (`ttlMs` 0), and only by
/// this principal (`cacheScope` private): components may answer differently per call.
pub fn complete_uncached(mut result: ResultObject) -> Value {
    result.insert("ttlMs".into(), Value::from(0));
    result.insert("cacheScope".into(), Value::from("private"));
    complete(result)
}

/// A JSON-RPC result response.
pub fn result_response(id: &Value, result: Value) -> Value {
    message(("id", id.clone()), ("result", result))
}

/// A JSON-RPC notification.
pub fn notification(method: &str, params: Value) -> Value {
    message(("method", Value::from(method)), ("params", params))
}

/// `{"jsonrpc": "2.0", a, b}`, moving the values in: `json!` would serialize each one
/// into a copy, and a result is the bulk of a response.
fn message(a: (&str, Value), b: (&str, Value)) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    m.insert(a.0.into(), a.1);
    m.insert(b.0.into(), b.1);
    Value::Object(m)
}
