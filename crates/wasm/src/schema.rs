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
pub const MAX_PATTERN_BYTES: usize = 256 << 10;

/// The most regular expressions (`pattern` values and `patternProperties` keys) one
/// component's tool schemas may hold, all tools together: each is compiled at load and
/// kept for the component's life, so their number bounds the memory and time a load costs.
pub const MAX_SCHEMA_PATTERNS: usize = 256;

/// The largest size of one component's tool schemas, all tools together (as JSON text).
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;

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

/// How many regular expressions `schema` holds: `pattern` strings and `patternProperties`
/// keys, at any depth.
fn patterns_in(schema: &Value) -> usize {
    match schema {
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match (k.as_str(), v) {
                ("pattern", Value::String(_)) => 1,
                ("patternProperties", Value::Object(p)) => {
                    p.len() + p.values().map(patterns_in).sum::<usize>()
                }
                _ => patterns_in(v),
            })
            .sum(),
        Value::Array(items) => items.iter().map(patterns_in).sum(),
        _ => 0,
    }
}

/// Refuses a component whose tool schemas, all together, are past [`MAX_SCHEMA_BYTES`] or
/// hold more than [`MAX_SCHEMA_PATTERNS`] regular expressions, before any is compiled.
fn check_bounds(tools: &[ToolInfo]) -> Result<(), String> {
    let schemas = || {
        tools
            .iter()
            .flat_map(|t| std::iter::once(&t.input_schema).chain(t.output_schema.as_ref()))
    };
    let bytes: usize = schemas().map(|s| s.to_string().len()).sum();
    if bytes > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its tool schemas are {bytes} bytes together; at most {MAX_SCHEMA_BYTES} are \
             accepted (MAX_SCHEMA_BYTES)"
        ));
    }
    let patterns: usize = schemas().map(patterns_in).sum();
    if patterns > MAX_SCHEMA_PATTERNS {
        return Err(format!(
            "its tool schemas hold {patterns} regular expressions; at most \
             {MAX_SCHEMA_PATTERNS} are accepted (MAX_SCHEMA_PATTERNS)"
        ));
    }
    Ok(())
}

/// Every tool's schemas, by tool name; `Err` names the tool and the problem.
pub(crate) fn compile_all(tools: &[ToolInfo]) -> Result<HashMap<String, Schemas>, String> {
    check_bounds(tools)?;
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
            header_params: Vec::new(),
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
    fn a_component_past_the_schema_bounds_is_refused_naming_the_bound() {
        let with_patterns = |n: usize| {
            let props: serde_json::Map<String, Value> = (0..n)
                .map(|i| {
                    (
                        format!("p{i}"),
                        json!({"type": "string", "pattern": format!("^a{i}$")}),
                    )
                })
                .collect();
            tool(json!({"type": "object", "properties": props}), None)
        };
        assert!(compile_all(&[with_patterns(MAX_SCHEMA_PATTERNS)]).is_ok());
        let e = compile_all(&[with_patterns(MAX_SCHEMA_PATTERNS + 1)])
            .err()
            .expect("too many patterns");
        assert!(e.contains("MAX_SCHEMA_PATTERNS"), "{e}");
        let keyed = tool(
            json!({"type": "object", "patternProperties": {"^a": {}, "^b": {"pattern": "c"}}}),
            None,
        );
        assert_eq!(patterns_in(&keyed.input_schema), 3);
        let big = tool(
            json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)}),
            None,
        );
        let e = compile_all(&[big]).err().expect("too big");
        assert!(e.contains("MAX_SCHEMA_BYTES"), "{e}");
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
