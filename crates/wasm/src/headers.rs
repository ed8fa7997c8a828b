//! Tool parameters mirrored into HTTP headers (SEP-2243, `x-mcp-header`): which of a tool's
//! arguments a client must also send as `Mcp-Param-{Name}`, read once from its input schema
//! when the component is loaded, and the check of a call's headers against its arguments.
//!
//! A marking the specification does not allow (an empty or non-token name, a name used
//! twice, a non-primitive or `number` property, or a marking reached through anything but
//! `properties`) refuses the component at load, naming the tool: clients drop such a tool
//! from `tools/list`, so serving it would publish a tool nobody can call.

use serde_json::{Map, Value};

/// What a marked parameter holds, which decides how its header is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ParamKind {
    /// Compared as text, exactly.
    String,
    /// Compared as integers, exactly (the header in plain decimal digits).
    Integer,
    /// `true` or `false`.
    Boolean,
}

/// One parameter a client mirrors into a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderParam {
    /// The name after `Mcp-Param-`, as the tool declared it (compared case-insensitively).
    pub header: String,
    /// The property names from the arguments object down to the parameter.
    pub path: Vec<String>,
    /// Its type.
    pub kind: ParamKind,
}

/// The largest integer a marked parameter may hold (2^53 - 1): clients written in
/// JavaScript must be able to mirror it exactly.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

const MARK: &str = "x-mcp-header";

/// RFC 9110 `tchar`.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// The parameters `schema` (a tool's input schema) marks, or why its markings are invalid.
pub fn header_params(tool: &str, schema: &Value) -> Result<Vec<HeaderParam>, String> {
    let mut found = Vec::new();
    collect(schema, &mut Vec::new(), &mut found).map_err(|e| format!("tool {tool:?}: {e}"))?;
    let total = markings(schema);
    if total != found.len() {
        return Err(format!(
            "tool {tool:?}: {MARK} may only mark a property reached through `properties` from \
             the top of its inputSchema (not under items, anyOf, $defs, ...)"
        ));
    }
    for (i, p) in found.iter().enumerate() {
        if found[..i]
            .iter()
            .any(|q| q.header.eq_ignore_ascii_case(&p.header))
        {
            return Err(format!(
                "tool {tool:?}: {MARK} {:?} is used twice (names are compared without case)",
                p.header
            ));
        }
    }
    Ok(found)
}

fn collect(
    schema: &Value,
    path: &mut Vec<String>,
    found: &mut Vec<HeaderParam>,
) -> Result<(), String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (name, prop) in props {
        path.push(name.clone());
        if let Some(mark) = prop.get(MARK) {
            let at = path.join(".");
            let header = match mark.as_str() {
                Some(h) if !h.is_empty() && h.chars().all(is_tchar) => h.to_owned(),
                _ => {
                    return Err(format!(
                        "{MARK} of {at:?} must be a non-empty HTTP token (letters, digits and \
                         !#$%&'*+-.^_`|~)"
                    ));
                }
            };
            let kind = kind_of(prop).ok_or_else(|| {
                format!(
                    "{MARK} of {at:?} marks a property that is not a string, an integer or a \
                     boolean (a number is not allowed either)"
                )
            })?;
            found.push(HeaderParam {
                header,
                path: path.clone(),
                kind,
            });
        }
        collect(prop, path, found)?;
        path.pop();
    }
    Ok(())
}

/// The property's one primitive type (`null` beside it allowed).
fn kind_of(prop: &Value) -> Option<ParamKind> {
    let one = |t: &str| match t {
        "string" => Some(ParamKind::String),
        "integer" => Some(ParamKind::Integer),
        "boolean" => Some(ParamKind::Boolean),
        _ => None,
    };
    match prop.get("type")? {
        Value::String(t) => one(t),
        Value::Array(all) => {
            let mut kinds = all
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null");
            let kind = one(kinds.next()?)?;
            kinds.next().is_none().then_some(kind)
        }
        _ => None,
    }
}

/// Keywords whose value is a map from names to schemas (the names are not keywords).
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// How many markings `schema` holds anywhere.
fn markings(schema: &Value) -> usize {
    match schema {
        Value::Object(m) => {
            let here = usize::from(m.contains_key(MARK));
            here + m
                .iter()
                .map(|(k, v)| match (SCHEMA_MAPS.contains(&k.as_str()), v) {
                    (true, Value::Object(map)) => map.values().map(markings).sum(),
                    _ => markings(v),
                })
                .sum::<usize>()
        }
        Value::Array(all) => all.iter().map(markings).sum(),
        _ => 0,
    }
}

/// Why a call's `Mcp-Param-*` headers do not match its arguments.
pub fn check_headers(
    params: &[HeaderParam],
    arguments: &Map<String, Value>,
    header: impl Fn(&str) -> Option<Result<String, ()>>,
) -> Result<(), String> {
    for p in params {
        let name = format!("Mcp-Param-{}", p.header);
        let mut value = None;
        let mut at = Some(arguments);
        for (i, key) in p.path.iter().enumerate() {
            let v = at.and_then(|o| o.get(key));
            if i + 1 == p.path.len() {
                value = v.filter(|v| !v.is_null());
            } else {
                at = v.and_then(Value::as_object);
            }
        }
        let sent = match header(&p.header) {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(())) => {
                return Err(format!(
                    "the {name} header is not readable: plain values are visible ASCII, \
                     others =?base64?...?= of their UTF-8"
                ));
            }
        };
        let arg = p.path.join(".");
        match (value, sent) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!(
                    "the {name} header is required: the argument {arg:?} is in the body"
                ));
            }
            (None, Some(_)) => {
                return Err(format!(
                    "the {name} header was sent but the argument {arg:?} is not in the body"
                ));
            }
            (Some(v), Some(h)) => {
                if !matches(p.kind, v, &h) {
                    return Err(format!(
                        "the {name} header does not match the argument {arg:?}"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn matches(kind: ParamKind, body: &Value, header: &str) -> bool {
    match (kind, body) {
        (ParamKind::String, Value::String(s)) => s == header,
        (ParamKind::Boolean, Value::Bool(b)) => header == if *b { "true" } else { "false" },
        // Exactly, as integers: a header `42` matches 42 (or 42.0) in the body, and nothing
        // else does (no `+42`, `042`, `42.0` or a nearby value a float comparison would
        // let pass): what a proxy routed on is what the tool receives.
        (ParamKind::Integer, Value::Number(n)) => {
            let body = match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => i,
                (None, Some(f)) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER => f as i64,
                _ => return false,
            };
            let digits = header.strip_prefix('-').unwrap_or(header);
            let canonical = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            canonical
                && (body as f64).abs() <= MAX_SAFE_INTEGER
                && header.parse::<i64>() == Ok(body)
        }
        // A value of another type than the schema says: the schema check refuses the call;
        // its text must still match what was mirrored.
        (_, Value::Number(n)) => n.to_string() == header,
        (_, Value::Bool(b)) => header == if *b { "true" } else { "false" },
        (_, Value::String(s)) => s == header,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(props: Value) -> Value {
        json!({"type": "object", "properties": props})
    }

    #[test]
    fn markings_are_found_through_properties_only_and_checked() {
        let s = schema(json!({
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": ["integer", "null"], "x-mcp-header": "N"},
            "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}}},
            "plain": {"type": "string"},
        }));
        let found = header_params("t", &s).expect("valid");
        let mut names: Vec<_> = found
            .iter()
            .map(|p| (p.header.as_str(), p.path.join("."), p.kind))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                ("Dry-Run", "opts.dry".to_owned(), ParamKind::Boolean),
                ("N", "n".to_owned(), ParamKind::Integer),
                ("Region", "region".to_owned(), ParamKind::String),
            ]
        );
        let bad = [
            (
                schema(json!({"a": {"type": "string", "x-mcp-header": ""}})),
                "non-empty",
            ),
            (
                schema(json!({"a": {"type": "string", "x-mcp-header": "A B"}})),
                "token",
            ),
            (
                schema(json!({"a": {"type": "string", "x-mcp-header": "A\r\nX: y"}})),
                "token",
            ),
            (
                schema(json!({"a": {"type": "number", "x-mcp-header": "A"}})),
                "number",
            ),
            (
                schema(json!({"a": {"type": "object", "x-mcp-header": "A"}})),
                "number",
            ),
            (
                schema(json!({"a": {"type": ["string", "integer"], "x-mcp-header": "A"}})),
                "number",
            ),
            (
                schema(
                    json!({"a": {"type": "string", "x-mcp-header": "Dup"}, "b": {"type": "string", "x-mcp-header": "dup"}}),
                ),
                "twice",
            ),
            (
                schema(
                    json!({"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}),
                ),
                "properties",
            ),
            (
                json!({"type": "object", "anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
                "properties",
            ),
        ];
        for (s, why) in bad {
            let e = header_params("t", &s).expect_err(why);
            assert!(e.contains(why) && e.contains("\"t\""), "{why}: {e}");
        }
        // A property that happens to be named like the keyword is not a marking.
        let named = schema(json!({"x-mcp-header": {"type": "string"}}));
        assert_eq!(header_params("t", &named), Ok(vec![]));
    }

    #[test]
    fn headers_must_be_present_readable_and_equal_to_the_arguments() {
        let params = header_params(
            "t",
            &schema(json!({
                "region": {"type": "string", "x-mcp-header": "Region"},
                "n": {"type": "integer", "x-mcp-header": "N"},
                "dry": {"type": "boolean", "x-mcp-header": "Dry"},
            })),
        )
        .expect("valid");
        let args = |v: Value| v.as_object().cloned().expect("an object");
        let check = |a: Value, headers: &[(&str, Result<&str, ()>)]| {
            check_headers(&params, &args(a), |name| {
                headers
                    .iter()
                    .find(|(h, _)| h.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.map(str::to_owned))
            })
        };
        let all = json!({"region": "eu-west", "n": 42, "dry": true});
        assert_eq!(
            check(
                all.clone(),
                &[
                    ("region", Ok("eu-west")),
                    ("N", Ok("42")),
                    ("DRY", Ok("true"))
                ]
            ),
            Ok(())
        );
        assert_eq!(
            check(json!({}), &[]),
            Ok(()),
            "absent arguments need no header"
        );
        assert_eq!(
            check(json!({"region": null}), &[]),
            Ok(()),
            "null is absent"
        );
        let refused = [
            (
                all.clone(),
                vec![("N", Ok("42")), ("Dry", Ok("true"))],
                "required",
            ),
            (
                all.clone(),
                vec![
                    ("Region", Ok("us-east")),
                    ("N", Ok("42")),
                    ("Dry", Ok("true")),
                ],
                "does not match",
            ),
            (
                all.clone(),
                vec![
                    ("Region", Ok("eu-west")),
                    ("N", Ok("43")),
                    ("Dry", Ok("true")),
                ],
                "does not match",
            ),
            (
                all.clone(),
                vec![
                    ("Region", Ok("eu-west")),
                    ("N", Ok("forty-two")),
                    ("Dry", Ok("true")),
                ],
                "does not match",
            ),
            (
                all.clone(),
                vec![
                    ("Region", Ok("eu-west")),
                    ("N", Ok("42.0")),
                    ("Dry", Ok("true")),
                ],
                "does not match",
            ),
            (
                all.clone(),
                vec![
                    ("Region", Ok("eu-west")),
                    ("N", Ok("+42")),
                    ("Dry", Ok("true")),
                ],
                "does not match",
            ),
            (
                all.clone(),
                vec![
                    ("Region", Ok("eu-west")),
                    ("N", Ok("042")),
                    ("Dry", Ok("true")),
                ],
                "does not match",
            ),
            (
                all.clone(),
                vec![
                    ("Region", Ok("eu-west")),
                    ("N", Ok("42")),
                    ("Dry", Ok("True")),
                ],
                "does not match",
            ),
            (
                all.clone(),
                vec![("Region", Err(())), ("N", Ok("42")), ("Dry", Ok("true"))],
                "not readable",
            ),
            (
                json!({}),
                vec![("Region", Ok("eu-west"))],
                "not in the body",
            ),
        ];
        for (a, h, why) in refused {
            let e = check(a, &h).expect_err(why);
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
