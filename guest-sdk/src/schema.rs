//! JSON Schemas derived from Rust types (schemars, JSON Schema 2020-12, MCP's default).

use schemars::JsonSchema;
use serde_json::Value;

/// The schema of `T`, as published in `tools/list`.
pub(crate) fn of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Bool(true))
}
