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
//!
//! Every check runs on a budget ([`CheckBudget`]: subschema visits and time). A schema whose
//! combinator branches reach the same `$ref` cycle (`oneOf: [A, B]` where both recurse into
//! the same children, the shape schemars emits for recursive untagged enums) makes the
//! number of visits, and the errors collected, exponential in the depth of the instance: a
//! 46-byte argument nested 19 deep is half a million visits and gigabytes of errors. The
//! budget stops such a check wherever it is, so those schemas stay loadable and a check
//! costs at most its budget: each compiled subschema carries a metering keyword
//! ([`STEP_KEYWORD`], added to the compiled copy only, never to what `tools/list` shows)
//! that counts one visit and, past the budget, unwinds out of the validator
//! ([`std::panic::resume_unwind`], which runs no panic hook) to [`within`], which turns it
//! into [`Exhausted`]. The validator holds no lock and no state across calls that an unwind
//! could leave half-written: it is `&self`, and each check's context is dropped on the way
//! out.

use std::cell::Cell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::{Duration, Instant};

use jsonschema::{Keyword, PatternOptions, ValidationError, Validator};
use serde_json::{Map, Value, json};

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

/// The most subschema visits one check may make ([`CheckBudget::FULL`]): far above what
/// any argument within the request size limits costs against a schema without branches
/// that recurse into the same children (one visit per instance value and subschema that
/// applies to it), and a few hundred milliseconds of one core at most.
pub const MAX_VALIDATION_STEPS: u64 = 4_000_000;

/// The longest one check may take ([`CheckBudget::FULL`]), whatever its visits cost.
pub const MAX_VALIDATION_MS: u64 = 250;

/// The keyword, added to every subschema of the compiled copy of a schema, that counts one
/// visit against the running check's budget. Schemas that use it themselves keep their
/// meaning: it is replaced, and an unknown keyword is an annotation anyway.
pub(crate) const STEP_KEYWORD: &str = "x-snodo-step";

/// What one schema check may spend: subschema visits and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckBudget {
    /// Subschema visits.
    pub steps: u64,
    /// Time, from the check's start.
    pub time: Duration,
}

impl CheckBudget {
    /// A check that may run where it is asked for, on an async worker: tens of
    /// microseconds. Nearly every call's arguments fit in it; one that does not is checked
    /// again on the [full budget](Self::FULL), in the caller's CPU share.
    pub const INLINE: CheckBudget = CheckBudget {
        steps: 20_000,
        time: Duration::from_millis(2),
    };

    /// The most any check may spend ([`MAX_VALIDATION_STEPS`], [`MAX_VALIDATION_MS`]).
    pub const FULL: CheckBudget = CheckBudget {
        steps: MAX_VALIDATION_STEPS,
        time: Duration::from_millis(MAX_VALIDATION_MS),
    };
}

/// A check stopped by its budget, and which part of it ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// The visits ran out.
    Steps(u64),
    /// The time ran out.
    Time(Duration),
}

impl Exhausted {
    /// The limit's name, as errors and configuration name it.
    pub fn limit(self) -> &'static str {
        match self {
            Exhausted::Steps(_) => "MAX_VALIDATION_STEPS",
            Exhausted::Time(_) => "MAX_VALIDATION_MS",
        }
    }

    fn describe(self) -> String {
        match self {
            Exhausted::Steps(n) => format!("{n} subschema visits"),
            Exhausted::Time(t) => format!("{} ms", t.as_millis()),
        }
    }
}

/// The budget left to the check running on this thread, if one is.
#[derive(Clone, Copy)]
struct Left {
    steps: u64,
    budget: CheckBudget,
    deadline: Instant,
}

thread_local! {
    static LEFT: Cell<Option<Left>> = const { Cell::new(None) };
}

/// How many visits pass between two looks at the clock.
const CLOCK_EVERY: u64 = 1 << 10;

/// Counts one visit; unwinds to [`within`] when the budget has run out.
fn step() {
    LEFT.with(|cell| {
        let Some(mut left) = cell.get() else {
            return;
        };
        if left.steps == 0 {
            resume_unwind(Box::new(Exhausted::Steps(left.budget.steps)));
        }
        left.steps -= 1;
        if left.steps % CLOCK_EVERY == 0 && Instant::now() >= left.deadline {
            resume_unwind(Box::new(Exhausted::Time(left.budget.time)));
        }
        cell.set(Some(left));
    });
}

/// Runs `check` with `budget`; `Err` when it ran out first. Budgets do not nest: a check
/// inside another's would spend its own.
pub(crate) fn within<R>(budget: CheckBudget, check: impl FnOnce() -> R) -> Result<R, Exhausted> {
    let left = Left {
        steps: budget.steps,
        budget,
        deadline: Instant::now() + budget.time,
    };
    let outer = LEFT.with(|cell| cell.replace(Some(left)));
    let ran = catch_unwind(AssertUnwindSafe(check));
    LEFT.with(|cell| cell.set(outer));
    ran.or_else(|payload| match payload.downcast::<Exhausted>() {
        Ok(exhausted) => Err(*exhausted),
        Err(other) => resume_unwind(other),
    })
}

// The budget leaves the validator by unwinding: a build that aborts on panic would end the
// process at the first check that runs out.
#[cfg(panic = "abort")]
compile_error!("schema checks need panic = \"unwind\": their budget unwinds out of the validator");

/// The metering keyword's validator: every visit is valid, and counted.
struct Step;

impl<'i> Keyword<'i> for Step {
    fn validate(&self, _instance: &'i Value) -> Result<(), ValidationError<'i>> {
        step();
        Ok(())
    }

    fn is_valid(&self, _instance: &'i Value) -> bool {
        step();
        true
    }
}

/// Keywords whose value is one subschema.
const SCHEMA_VALUED: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "contains",
    "contentSchema",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
];

/// Keywords whose value is a list of subschemas.
const LIST_VALUED: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value maps names to subschemas.
const MAP_VALUED: &[&str] = &[
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
    "patternProperties",
    "properties",
];

/// `schema` with [`STEP_KEYWORD`] in every subschema it holds, at the positions the
/// JSON Schema drafts give subschemas (values of other keywords, such as `const` or
/// `enum`, are data and stay as they are).
fn metered(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = Map::with_capacity(map.len() + 1);
    out.insert(STEP_KEYWORD.to_owned(), Value::Bool(true));
    for (key, value) in map {
        let key_str = key.as_str();
        let value = match value {
            Value::Object(_) if SCHEMA_VALUED.contains(&key_str) => metered(value),
            Value::Array(items) if LIST_VALUED.contains(&key_str) => {
                Value::Array(items.iter().map(metered).collect())
            }
            Value::Object(named) if MAP_VALUED.contains(&key_str) => Value::Object(
                named
                    .iter()
                    .map(|(name, sub)| (name.clone(), metered(sub)))
                    .collect(),
            ),
            _ if key_str == STEP_KEYWORD => continue,
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// One tool's compiled schemas.
pub(crate) struct Schemas {
    input: Validator,
    output: Option<Validator>,
}

fn compile(tool: &str, which: &str, schema: &Value) -> Result<Validator, String> {
    // The metered copy keeps every path of the schema the tool wrote (it only adds a
    // keyword to each subschema), so an error's location is one the tool author knows.
    // No retriever: a `$ref` must resolve inside the schema; a schema that reaches for the
    // network or the file system is refused at load, not fetched at call time.
    jsonschema::options()
        .with_pattern_options(PatternOptions::regex().size_limit(MAX_PATTERN_BYTES))
        .with_keyword(STEP_KEYWORD, |_, _, _| Ok(Box::new(Step)))
        .build(&metered(schema))
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

/// The violations of `schema` by `instance`, at most [`MAX_LISTED`], as `(path, message)`,
/// within `budget`. A valid instance costs one pass: the full walk that collects errors,
/// which visits every branch of every combinator, runs only for an invalid one.
fn violations(
    schema: &Validator,
    instance: &Value,
    budget: CheckBudget,
) -> Result<Vec<(String, String)>, Exhausted> {
    within(budget, || {
        if schema.is_valid(instance) {
            return Vec::new();
        }
        schema
            .iter_errors(instance)
            .take(MAX_LISTED)
            .map(|e| (e.instance_path().to_string(), e.to_string()))
            .collect()
    })
}

/// Why a call's arguments were not accepted.
#[derive(Debug, Clone)]
pub enum ArgumentsRefused {
    /// They do not match the tool's `inputSchema`: -32602 naming where and how.
    Invalid(JsonRpcError),
    /// Checking them ran out of its budget before it could tell.
    Exhausted(Exhausted),
}

impl ArgumentsRefused {
    /// The refusal as the call's -32602. A check stopped by its budget names the limit:
    /// the arguments are refused, not assumed valid.
    pub fn into_rpc_error(self, tool: &str) -> JsonRpcError {
        match self {
            ArgumentsRefused::Invalid(e) => e,
            ArgumentsRefused::Exhausted(ran_out) => JsonRpcError::new(
                snodo_core::model::codes::INVALID_PARAMS,
                format!(
                    "invalid arguments for tool {tool}: checking them against its inputSchema \
                     did not finish within {} ({}); arguments nested this deep need a \
                     schema whose alternatives do not recurse into the same children",
                    ran_out.describe(),
                    ran_out.limit()
                ),
            )
            .with_data(json!({"tool": tool, "limit": ran_out.limit()})),
        }
    }
}

impl Schemas {
    /// Whether `arguments` match the tool's input schema, checked within `budget`.
    pub(crate) fn check_arguments(
        &self,
        tool: &str,
        arguments: &Value,
        budget: CheckBudget,
    ) -> Result<(), ArgumentsRefused> {
        let found =
            violations(&self.input, arguments, budget).map_err(ArgumentsRefused::Exhausted)?;
        let Some((path, first)) = found.first() else {
            return Ok(());
        };
        let at = if path.is_empty() {
            String::new()
        } else {
            format!(" at {path}")
        };
        Err(ArgumentsRefused::Invalid(
            JsonRpcError::new(
                snodo_core::model::codes::INVALID_PARAMS,
                format!("invalid arguments for tool {tool}{at}: {first}"),
            )
            .with_data(json!({
                "tool": tool,
                "errors": found.iter().map(|(p, m)| json!({"path": p, "message": m})).collect::<Vec<_>>(),
            })),
        ))
    }

    /// What is wrong with a completed `CallToolResult` against the output schema: a result
    /// that is not an error must carry `structuredContent` matching it. The check has the
    /// [full budget](CheckBudget::FULL); a result it cannot finish checking breaks the
    /// promise too.
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
        match violations(output, structured, CheckBudget::FULL) {
            Ok(found) => match found.first() {
                None => Ok(()),
                Some((path, m)) => Err(format!(
                    "structuredContent does not match the tool's outputSchema at {}: {m}",
                    if path.is_empty() { "/" } else { path }
                )),
            },
            Err(ran_out) => Err(format!(
                "structuredContent could not be checked against the tool's outputSchema \
                 within {} ({})",
                ran_out.describe(),
                ran_out.limit()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskMode;

    impl Schemas {
        /// The call's error, as the full budget decides it.
        fn checked(&self, arguments: &Value) -> Result<(), JsonRpcError> {
            self.check_arguments("t", arguments, CheckBudget::FULL)
                .map_err(|r| r.into_rpc_error("t"))
        }
    }

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
        assert!(s.checked(&json!({"rows": 3})).is_ok());
        let e = s.checked(&json!({"rows": -1})).expect_err("minimum");
        assert_eq!(e.code, -32602);
        assert!(e.message.contains("/rows"), "{}", e.message);
        assert_eq!(e.data.as_ref().expect("data")["errors"][0]["path"], "/rows");
        let e = s.checked(&json!({})).expect_err("required");
        assert!(e.message.contains("rows"), "{}", e.message);
        let many: serde_json::Map<String, Value> =
            (0..20).map(|i| (format!("x{i}"), json!(i))).collect();
        let e = s.checked(&Value::Object(many)).expect_err("extra");
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
            .checked(&json!({"s": evil}))
            .expect_err("no match");
        assert!(e.message.contains("does not match"), "{}", e.message);
        assert!(schemas["t"].checked(&json!({"s": "aaa"})).is_ok());
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

    /// Two `anyOf` branches that both take an array and recurse into the same `$ref`: the
    /// shape schemars emits for a recursive untagged enum. Collecting the errors of a value
    /// that fails at the bottom visits both branches at every level, 2^depth in all; a
    /// 46-byte argument nested 19 deep took seconds and gigabytes before checks had a budget.
    fn branching() -> Schemas {
        let schema = json!({
            "type": "object",
            "properties": {"v": {"$ref": "#/$defs/node"}},
            "$defs": {"node": {"anyOf": [
                {"type": "array", "items": {"$ref": "#/$defs/node"}, "minItems": 1},
                {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 4},
                {"type": "integer"}
            ]}}
        });
        compile_all(&[tool(schema, None)])
            .expect("recursive alternatives load")
            .remove("t")
            .expect("the tool")
    }

    /// `{"v": [[...[leaf]...]]}`, `depth` arrays deep.
    fn nested(depth: usize, leaf: Value) -> Value {
        json!({"v": (0..depth).fold(leaf, |inner, _| json!([inner]))})
    }

    #[test]
    fn a_check_whose_branches_multiply_stops_at_its_budget_and_names_it() {
        let s = branching();
        let deep = nested(19, json!("x"));
        assert!(deep.to_string().len() <= 48, "{deep}");
        let e = s.checked(&deep).expect_err("refused");
        assert_eq!(e.code, -32602);
        let limit = e.data.as_ref().expect("data")["limit"].clone();
        assert!(
            limit == "MAX_VALIDATION_STEPS" || limit == "MAX_VALIDATION_MS",
            "{e:?}"
        );
        assert!(
            e.message.contains(limit.as_str().unwrap_or("?")),
            "{}",
            e.message
        );
        // A small budget runs out on steps, at once.
        assert!(matches!(
            s.check_arguments(
                "t",
                &deep,
                CheckBudget {
                    steps: 1_000,
                    time: Duration::from_secs(60)
                }
            ),
            Err(ArgumentsRefused::Exhausted(Exhausted::Steps(1_000)))
        ));
        // A shallow bad value is reported as usual, with its path.
        let e = s.checked(&nested(3, json!("x"))).expect_err("invalid");
        assert!(e.data.expect("data")["errors"].is_array());
        // A deep valid value takes the first branch at every level: the inline budget is
        // plenty.
        assert!(
            s.check_arguments("t", &nested(19, json!(7)), CheckBudget::INLINE)
                .is_ok()
        );
        // Budgets do not leak past their check.
        assert!(LEFT.with(Cell::get).is_none());
    }

    #[test]
    fn metering_keeps_data_and_meaning() {
        let schema = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "a": {"const": {"k": 1}},
                "b": {"enum": [{"k": 2}]},
                "c": {"type": "array", "items": {"type": "integer"}, "prefixItems": [{"type": "string"}]}
            }
        });
        let m = metered(&schema);
        assert_eq!(m[STEP_KEYWORD], true);
        assert_eq!(m["properties"]["a"][STEP_KEYWORD], true);
        assert_eq!(
            m["properties"]["a"]["const"],
            json!({"k": 1}),
            "data is data"
        );
        assert_eq!(m["properties"]["b"]["enum"], json!([{"k": 2}]));
        assert_eq!(m["properties"]["c"]["items"][STEP_KEYWORD], true);
        // Drafts before 2020-12 give `items` a list of schemas.
        let listed = metered(&json!({"items": [{"type": "string"}]}));
        assert_eq!(listed["items"][0][STEP_KEYWORD], true);
        assert_eq!(m["properties"]["c"]["prefixItems"][0][STEP_KEYWORD], true);
        assert!(
            m["properties"].get(STEP_KEYWORD).is_none(),
            "no new property"
        );
        let s = &compile_all(&[tool(schema, None)]).expect("compiles")["t"];
        assert!(s.checked(&json!({"a": {"k": 1}})).is_ok());
        assert!(
            s.checked(&json!({"a": {"k": 1, STEP_KEYWORD: true}}))
                .is_err()
        );
        assert!(
            s.checked(&json!({STEP_KEYWORD: true})).is_err(),
            "still additional"
        );
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
