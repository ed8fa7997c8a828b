//! Tool schemas, compiled once when a component is loaded: a call's arguments are checked
//! against the tool's `inputSchema` before anything else is decided (a bad call is -32602
//! on the call, in every mode, before any task exists), and a structured result against
//! its `outputSchema` (a result that breaks the tool's own promise is an invalid outcome).
//!
//! Patterns (`pattern`, `patternProperties`) run on the `regex` crate's engine, which matches
//! in time linear in the input: a client's arguments are checked before any budget admits
//! the call, so a pattern that backtracks would let one small request hold a worker for
//! seconds. The price is that look-around and back-references are not supported: a schema
//! that uses them is refused at load, naming the tool and the pattern.

use std::collections::HashMap;

use jsonschema::{PatternOptions, Validator};
use serde_json::{Value, json};

use snodo_core::model::JsonRpcError;

use super::ToolInfo;

/// The largest compiled form of one pattern (the `regex` crate's size limit): a pattern
/// whose automaton would be larger is refused at load.
pub const MAX_PATTERN_BYTES: usize = 1 << 20;

/// How many schema violations an error lists.
const MAX_LISTED: usize = 5;

/// One tool's compiled schemas.
pub(crate) struct Schemas {
    input: Validator,
    output: Option<Validator>,
}

fn compile(tool: &str, which: &str, schema: &Value) -> Result<Validator, String> {
    // No retriever: a `$ref` must resolve inside the schema; a schema that reaches for the
    // network or the file system is refused at load, not fetched at call time.
    jsonschema::options()
        .with_pattern_options(PatternOptions::regex().size_limit(MAX_PATTERN_BYTES))
        .build(schema)
        .map_err(|e| format!("tool {tool:?}: its {which} is not a usable JSON Schema: {e}"))
}

/// Every tool's schemas, by tool name; `Err` names the tool and the problem.
pub(crate) fn compile_all(tools: &[ToolInfo]) -> Result<HashMap<String, Schemas>, String> {
    tools
        .iter()
        .map(|t| {
            let input = compile(&t.name, "inputSchema", &t.input_schema)?;
            let output = t
                .output_schema
                .as_ref()
                .map(|o| compile(&t.name, "outputSchema", o))
                .transpose()?;
            Ok((t.name.clone(), Schemas { input, output }))
        })
        .collect()
}

/// The violations of `schema` by `instance`, at most [`MAX_LISTED`], as `(path, message)`.
fn violations(schema: &Validator, instance: &Value) -> Vec<(String, String)> {
    schema
        .iter_errors(instance)
        .take(MAX_LISTED)
        .map(|e| (e.instance_path().to_string(), e.to_string()))
        .collect()
}

impl Schemas {
    /// -32602 naming what is wrong with `arguments`, if anything.
    pub(crate) fn check_arguments(
        &self,
        tool: &str,
        arguments: &Value,
    ) -> Result<(), JsonRpcError> {
        let found = violations(&self.input, arguments);
        let Some((path, first)) = found.first() else {
            return Ok(());
        };
        let at = if path.is_empty() {
            String::new()
        } else {
            format!(" at {path}")
        };
        Err(JsonRpcError::new(
            snodo_core::model::codes::INVALID_PARAMS,
            format!("invalid arguments for tool {tool}{at}: {first}"),
        )
        .with_data(json!({
            "tool": tool,
            "errors": found.iter().map(|(p, m)| json!({"path": p, "message": m})).collect::<Vec<_>>(),
        })))
    }

    /// What is wrong with a completed `CallToolResult` against the output schema: a result
    /// that is not an error must carry `structuredContent` matching it.
    pub(crate) fn check_result(
        &self,
        result: &serde_json::Map<String, Value>,
    ) -> Result<(), String> {
        let Some(output) = &self.output else {
            return Ok(());
        };
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return Ok(());
        }
        let Some(structured) = result.get("structuredContent") else {
            return Err(
                "the tool declares an outputSchema but returned no structuredContent".into(),
            );
        };
        if output.is_valid(structured) {
            return Ok(());
        }
        match violations(output, structured).first() {
            None => Ok(()),
            Some((path, m)) => Err(format!(
                "structuredContent does not match the tool's outputSchema at {}: {m}",
                if path.is_empty() { "/" } else { path }
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskMode;

    fn tool(input: Value, output: Option<Value>) -> ToolInfo {
        ToolInfo {
            name: "t".into(),
            title: None,
            description: None,
            input_schema: input,
            output_schema: output,
            mode: TaskMode::Sync,
            required_capabilities: None,
            has_prepare: false,
            has_mode_rule: false,
        }
    }

    #[test]
    fn arguments_are_checked_with_paths_and_a_bounded_list() {
        let schemas = compile_all(&[tool(
            json!({"type": "object", "properties": {"rows": {"type": "integer", "minimum": 0}},
                   "required": ["rows"], "additionalProperties": false}),
            None,
        )])
        .expect("compiles");
        let s = &schemas["t"];
        assert!(s.check_arguments("t", &json!({"rows": 3})).is_ok());
        let e = s
            .check_arguments("t", &json!({"rows": -1}))
            .expect_err("minimum");
        assert_eq!(e.code, -32602);
        assert!(e.message.contains("/rows"), "{}", e.message);
        assert_eq!(e.data.as_ref().expect("data")["errors"][0]["path"], "/rows");
        let e = s.check_arguments("t", &json!({})).expect_err("required");
        assert!(e.message.contains("rows"), "{}", e.message);
        let many: serde_json::Map<String, Value> =
            (0..20).map(|i| (format!("x{i}"), json!(i))).collect();
        let e = s
            .check_arguments("t", &Value::Object(many))
            .expect_err("extra");
        assert!(
            e.data.expect("data")["errors"]
                .as_array()
                .expect("list")
                .len()
                <= MAX_LISTED
        );
    }

    #[test]
    fn results_must_keep_the_output_promise() {
        let schemas = compile_all(&[tool(
            json!({"type": "object"}),
            Some(json!({"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]})),
        )])
        .expect("compiles");
        let s = &schemas["t"];
        let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(
            s.check_result(&obj(
                json!({"content": [], "structuredContent": {"sum": 1}})
            ))
            .is_ok()
        );
        assert!(
            s.check_result(&obj(
                json!({"content": [], "structuredContent": {"sum": "1"}})
            ))
            .is_err()
        );
        assert!(s.check_result(&obj(json!({"content": []}))).is_err());
        assert!(
            s.check_result(&obj(json!({"content": [], "isError": true})))
                .is_ok()
        );
    }

    /// `^(a+)+$` against a long run of `a` ending in `b` is the textbook catastrophic
    /// backtrack: a backtracking engine gives up at its limit (and that is an error, not a
    /// mismatch); the linear engine answers that the string does not match.
    #[test]
    fn patterns_match_in_linear_time_and_look_around_is_refused() {
        let schemas = compile_all(&[tool(
            json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}),
            None,
        )])
        .expect("compiles");
        let evil = format!("{}b", "a".repeat(4_096));
        let e = schemas["t"]
            .check_arguments("t", &json!({"s": evil}))
            .expect_err("no match");
        assert!(e.message.contains("does not match"), "{}", e.message);
        assert!(
            schemas["t"]
                .check_arguments("t", &json!({"s": "aaa"}))
                .is_ok()
        );
        let lookahead = tool(
            json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(?:(?=a)a+)+$"}}}),
            None,
        );
        let e = compile_all(&[lookahead]).err().expect("refused");
        assert!(e.contains("inputSchema"), "{e}");
    }

    #[test]
    fn unusable_schemas_are_refused_at_load() {
        let bad = tool(
            json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}),
            None,
        );
        let e = compile_all(&[bad]).err().expect("refused");
        assert!(e.contains("inputSchema"), "{e}");
        let bad = tool(json!({"type": 12}), None);
        assert!(compile_all(&[bad]).is_err());
    }
}
