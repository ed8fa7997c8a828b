//! MCP 2026-07-28 over JSON-RPC: envelopes, per-request `_meta`, routing headers, error
//! codes, refusals and wire shapes. Pure functions of their inputs; no I/O.

mod envelope;
mod headers;
mod meta;
pub(crate) mod refusal;
mod time;

pub(crate) use envelope::{Incoming, Request, parse};
pub(crate) use headers::{NameSource, decode_header_value, name_source};
pub(crate) use meta::{LogLevel, RequestMeta, trace_of, webhook_of};
pub use time::rfc3339;

use serde::Serialize;
use serde_json::Value;

/// The protocol version served.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// The tasks extension's identifier.
pub(crate) use snodo_core::model::TASKS_EXTENSION;
/// JSON-RPC and MCP error codes.
pub(crate) use snodo_core::model::codes;

/// A JSON-RPC error to send: the domain's error object, with its constructors.
pub(crate) use snodo_core::model::JsonRpcError as RpcError;

/// The HTTP status Streamable HTTP gives `error`.
pub(crate) fn http_status(error: &RpcError) -> u16 {
    match error.code {
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

/// The bytes of a JSON-RPC result response: the result is serialized in place, never built
/// into a JSON tree first.
pub(crate) fn result_bytes<T: Serialize + ?Sized>(id: &Value, result: &T) -> Vec<u8> {
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
pub(crate) fn error_bytes(id: &Value, error: &RpcError) -> Vec<u8> {
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
pub(crate) fn message_bytes<T: Serialize + ?Sized>(message: &T) -> Vec<u8> {
    serde_json::to_vec(message).unwrap_or_else(|e| {
        // Only a map with non-string keys can fail to serialize, and no message has one.
        tracing::error!(error = %e, "a response could not be serialized");
        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"the response could not be serialized"}}"#.to_vec()
    })
}

/// A JSON-RPC error response.
pub(crate) fn error_response(id: &Value, error: &RpcError) -> Value {
    message(("id", id.clone()), ("error", error.to_json()))
}

/// A result as every MCP result is: a JSON object. Results are built as objects, so marking
/// one never meets a value it cannot mark.
pub(crate) type ResultObject = serde_json::Map<String, Value>;

/// A 2026-07-28 result: `"resultType": "complete"` beside the result's own fields.
pub(crate) fn complete(mut result: ResultObject) -> Value {
    result.insert("resultType".into(), Value::from("complete"));
    Value::Object(result)
}

/// A 2026-07-28 list or read result: complete, and not to be cached (`ttlMs` 0), and only by
/// this principal (`cacheScope` private): components may answer differently per call.
pub(crate) fn complete_uncached(mut result: ResultObject) -> Value {
    result.insert("ttlMs".into(), Value::from(0));
    result.insert("cacheScope".into(), Value::from("private"));
    complete(result)
}

/// A JSON-RPC result response.
pub(crate) fn result_response(id: &Value, result: Value) -> Value {
    message(("id", id.clone()), ("result", result))
}

/// A JSON-RPC notification.
pub(crate) fn notification(method: &str, params: Value) -> Value {
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
