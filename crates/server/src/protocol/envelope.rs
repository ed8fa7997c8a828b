//! The JSON-RPC envelope: strict parsing of one request or notification.
//!
//! Strict means: valid UTF-8 JSON, a single object (batches were removed from MCP), no
//! duplicate keys at any depth (a proxy and this server must never read different
//! values), `"jsonrpc": "2.0"`, a string `method`, an id that is a string or an integer,
//! and `params`, when present, an object.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::{RpcError, codes};

/// A request: it gets a response with its id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    /// The id, echoed in the response.
    pub(crate) id: Value,
    /// The method.
    pub(crate) method: String,
    /// The params (empty when absent).
    pub(crate) params: Map<String, Value>,
    /// The size of the message it was parsed from: what walking its parameters may cost.
    pub(crate) bytes: usize,
}

/// What a POST carried.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Incoming {
    /// A request.
    Request(Request),
    /// A notification (no id): acknowledged with 202 and no body.
    Notification {
        /// The method.
        method: String,
    },
    /// A response from the client: on 2026-07-28 unsolicited (ignored); on 2025-11-25 the
    /// answer to a request the server sent on a call's event stream.
    Response {
        /// The id of the server's request it answers (`Null` if it had none).
        id: Value,
        /// `Ok(result)` or `Err(error object)`.
        outcome: Result<Value, Value>,
    },
}

struct Strict;

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictSeed)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            let v = map.next_value_seed(StrictSeed)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

struct StrictSeed;

impl<'de> de::DeserializeSeed<'de> for StrictSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(Strict)
    }
}

fn strict_json(body: &[u8]) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = de.deserialize_any(Strict).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

/// Parses a POST body. On failure, returns the request id if one could be read (so the
/// error echoes it) and the error.
pub(crate) fn parse(body: &[u8]) -> Result<Incoming, (Value, RpcError)> {
    let value = strict_json(body).map_err(|e| {
        (
            Value::Null,
            RpcError::new(codes::PARSE_ERROR, format!("Parse error: {e}")),
        )
    })?;
    let Value::Object(mut obj) = value else {
        let what = if value.is_array() {
            "batches are not supported: send one JSON-RPC message per request"
        } else {
            "a JSON-RPC message is a JSON object"
        };
        return Err((Value::Null, RpcError::new(codes::INVALID_REQUEST, what)));
    };
    let id = obj.remove("id");
    let echo = id
        .clone()
        .filter(|i| i.is_string() || i.is_i64() || i.is_u64())
        .unwrap_or(Value::Null);
    let invalid = |m: &str| (echo.clone(), RpcError::new(codes::INVALID_REQUEST, m));
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("\"jsonrpc\" must be \"2.0\""));
    }
    let Some(method) = obj.remove("method") else {
        if let Some(result) = obj.remove("result") {
            return Ok(Incoming::Response {
                id: id.unwrap_or(Value::Null),
                outcome: Ok(result),
            });
        }
        if let Some(error) = obj.remove("error") {
            return Ok(Incoming::Response {
                id: id.unwrap_or(Value::Null),
                outcome: Err(error),
            });
        }
        return Err(invalid("a request needs a \"method\""));
    };
    let Value::String(method) = method else {
        return Err(invalid("\"method\" must be a string"));
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err((
                echo,
                RpcError::new(codes::INVALID_PARAMS, "\"params\" must be an object"),
            ));
        }
    };
    match id {
        None => Ok(Incoming::Notification { method }),
        Some(id @ (Value::String(_) | Value::Number(_)))
            if id.is_string() || id.is_i64() || id.is_u64() =>
        {
            Ok(Incoming::Request(Request {
                id,
                method,
                params,
                bytes: body.len(),
            }))
        }
        Some(_) => Err(invalid("\"id\" must be a string or an integer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> (Value, i64) {
        let (id, e) = parse(body.as_bytes()).expect_err("error");
        (id, e.code)
    }

    #[test]
    fn parses_requests_and_notifications() {
        let r =
            parse(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"a":1}}"#).unwrap();
        assert!(
            matches!(r, Incoming::Request(Request { ref method, .. }) if method == "tools/list")
        );
        let n = parse(br#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#).unwrap();
        assert!(matches!(n, Incoming::Notification { .. }));
    }

    #[test]
    fn rejects_hostile_envelopes() {
        assert_eq!(err("{"), (Value::Null, codes::PARSE_ERROR));
        // Nesting is bounded by the parser (128 levels): a deep body is refused before any
        // schema or handler walks it.
        let deep = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{}1{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(parse(deep(100).as_bytes()).is_ok());
        assert_eq!(err(&deep(200)).1, codes::PARSE_ERROR);
        assert_eq!(err("[]"), (Value::Null, codes::INVALID_REQUEST));
        assert_eq!(
            err(r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#).1,
            codes::INVALID_REQUEST
        );
        assert_eq!(err("42").1, codes::INVALID_REQUEST);
        assert_eq!(
            err(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#),
            (Value::from(1), codes::INVALID_REQUEST)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":5}"#).1,
            codes::INVALID_REQUEST
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#),
            (Value::Null, codes::INVALID_REQUEST)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#).1,
            codes::INVALID_REQUEST
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            (Value::from(1), codes::INVALID_PARAMS)
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#).1,
            codes::PARSE_ERROR
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"b":1,"b":2}}}"#).1,
            codes::PARSE_ERROR
        );
        assert_eq!(
            err(r#"{"jsonrpc":"2.0","id":1,"method":"x"} trailing"#).1,
            codes::PARSE_ERROR
        );
        assert_eq!(
            parse(b"\xff\xfe").expect_err("bytes").1.code,
            codes::PARSE_ERROR
        );
    }
}
