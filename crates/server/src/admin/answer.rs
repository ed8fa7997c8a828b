//! What a task asked, read as a form: the fields of an elicitation's requested schema (the
//! flat subset MCP allows: strings, numbers, integers, booleans, single and multiple
//! choices, required fields), which the console renders and every operator's answer is
//! checked against before it is committed.

use serde_json::{Map, Value};

/// One field of a form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) title: String,
    pub(crate) description: Option<String>,
    pub(crate) required: bool,
    pub(crate) kind: Kind,
    pub(crate) default: Option<Value>,
}

/// What a field holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Text {
        min_len: Option<u64>,
        max_len: Option<u64>,
        format: Option<String>,
    },
    Number {
        integer: bool,
        min: Option<f64>,
        max: Option<f64>,
    },
    Boolean,
    /// One of these values (value, label).
    Choice(Vec<(String, String)>),
    /// Some of these values.
    Multi {
        options: Vec<(String, String)>,
        min: Option<u64>,
        max: Option<u64>,
    },
}

/// An elicitation form: its message and fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Form {
    pub(crate) message: String,
    pub(crate) fields: Vec<Field>,
}

/// The form `request` asks for, when it is a form-mode elicitation whose schema is of the
/// flat subset; `Err` says why a form cannot be shown.
pub(crate) fn form_of(request: &Value) -> Result<Form, String> {
    if request.get("method").and_then(Value::as_str) != Some("elicitation/create") {
        return Err("the question is not an elicitation".into());
    }
    let params = request.get("params").cloned().unwrap_or(Value::Null);
    if params.get("mode").and_then(Value::as_str) == Some("url") {
        return Err("the question asks the user to visit a URL".into());
    }
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let schema = params
        .get("requestedSchema")
        .cloned()
        .unwrap_or(Value::Null);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut fields = Vec::new();
    for (name, p) in props {
        fields.push(Field {
            name: name.clone(),
            title: p
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or(name)
                .to_owned(),
            description: p
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            required: required.contains(&name.as_str()),
            kind: kind_of(name, p)?,
            default: p.get("default").cloned(),
        });
    }
    Ok(Form { message, fields })
}

fn options(p: &Value) -> Option<Vec<(String, String)>> {
    if let Some(values) = p.get("enum").and_then(Value::as_array) {
        let names = p.get("enumNames").and_then(Value::as_array);
        return Some(
            values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    let v = v.as_str()?.to_owned();
                    let label = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map_or_else(|| v.clone(), str::to_owned);
                    Some((v, label))
                })
                .collect(),
        );
    }
    let one_of = p.get("oneOf").or_else(|| p.get("anyOf"))?.as_array()?;
    Some(
        one_of
            .iter()
            .filter_map(|o| {
                let v = o.get("const")?.as_str()?.to_owned();
                let label = o
                    .get("title")
                    .and_then(Value::as_str)
                    .map_or_else(|| v.clone(), str::to_owned);
                Some((v, label))
            })
            .collect(),
    )
}

fn kind_of(name: &str, p: &Value) -> Result<Kind, String> {
    let n = |k: &str| p.get(k).and_then(Value::as_u64);
    let f = |k: &str| p.get(k).and_then(Value::as_f64);
    match p.get("type").and_then(Value::as_str) {
        Some("string") => Ok(match options(p) {
            Some(opts) => Kind::Choice(opts),
            None => Kind::Text {
                min_len: n("minLength"),
                max_len: n("maxLength"),
                format: p.get("format").and_then(Value::as_str).map(str::to_owned),
            },
        }),
        Some(t @ ("number" | "integer")) => Ok(Kind::Number {
            integer: t == "integer",
            min: f("minimum"),
            max: f("maximum"),
        }),
        Some("boolean") => Ok(Kind::Boolean),
        Some("array") => {
            let items = p.get("items").cloned().unwrap_or(Value::Null);
            match options(&items) {
                Some(opts) => Ok(Kind::Multi {
                    options: opts,
                    min: n("minItems"),
                    max: n("maxItems"),
                }),
                None => Err(format!("the field {name:?} is a list without choices")),
            }
        }
        other => Err(format!(
            "the field {name:?} has a type a form cannot hold ({other:?})"
        )),
    }
}

/// Why an answer does not fit its question; its text follows "the answer to <key>".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum AnswerError {
    /// The answer is not a JSON object.
    #[error("must be a JSON object")]
    NotAnObject,
    /// An elicitation's answer without `accept`, `decline` or `cancel`.
    #[error("needs an action: accept, decline or cancel")]
    NoAction,
    /// A decline, a cancel or a URL question's answer with content.
    #[error("carries content this answer cannot have")]
    UnexpectedContent,
    /// `content` that is not an object.
    #[error("has content that is not an object")]
    ContentNotAnObject,
    /// A field the form does not have.
    #[error("has a field the question did not ask for: {0:?}")]
    UnaskedField(String),
    /// A required field left out.
    #[error("misses the required field {0:?}")]
    MissingField(String),
    /// A field whose value does not fit it.
    #[error("has {field:?} {why}")]
    BadValue {
        /// The field.
        field: String,
        /// What is wrong with its value.
        why: String,
    },
}

/// Checks `response` as an answer to `request`: for a form, `{"action": "accept",
/// "content": {…}}` whose content fits the fields (or a `decline` / `cancel` without
/// content); for any other question, a JSON object.
pub(crate) fn check(request: &Value, response: &Value) -> Result<(), AnswerError> {
    let Some(obj) = response.as_object() else {
        return Err(AnswerError::NotAnObject);
    };
    if request.get("method").and_then(Value::as_str) != Some("elicitation/create") {
        return Ok(());
    }
    let action = obj.get("action").and_then(Value::as_str);
    if !matches!(action, Some("accept" | "decline" | "cancel")) {
        return Err(AnswerError::NoAction);
    }
    if action != Some("accept") || request["params"]["mode"] == "url" {
        // A decline, a cancel and a URL question's answer carry no content.
        if obj.contains_key("content") {
            return Err(AnswerError::UnexpectedContent);
        }
        return Ok(());
    }
    let empty = Map::new();
    let content = match obj.get("content") {
        Some(Value::Object(c)) => c,
        None => &empty,
        Some(_) => return Err(AnswerError::ContentNotAnObject),
    };
    match form_of(request) {
        Ok(form) => check_content(&form.fields, content),
        // A schema past the flat subset is the tool's to check.
        Err(_) => Ok(()),
    }
}

fn check_content(fields: &[Field], content: &Map<String, Value>) -> Result<(), AnswerError> {
    for key in content.keys() {
        if !fields.iter().any(|f| f.name == *key) {
            return Err(AnswerError::UnaskedField(key.clone()));
        }
    }
    for f in fields {
        let Some(v) = content.get(&f.name) else {
            if f.required {
                return Err(AnswerError::MissingField(f.name.clone()));
            }
            continue;
        };
        check_value(f, v).map_err(|why| AnswerError::BadValue {
            field: f.name.clone(),
            why,
        })?;
    }
    Ok(())
}

fn check_value(f: &Field, v: &Value) -> Result<(), String> {
    match &f.kind {
        Kind::Text {
            min_len, max_len, ..
        } => {
            let s = v.as_str().ok_or("not a string")?;
            let n = s.chars().count() as u64;
            if min_len.is_some_and(|m| n < m) || max_len.is_some_and(|m| n > m) {
                return Err(format!(
                    "of {n} characters, outside {}..{}",
                    min_len.unwrap_or(0),
                    max_len.map_or_else(String::new, |m| m.to_string())
                ));
            }
            Ok(())
        }
        Kind::Number { integer, min, max } => {
            let x = v.as_f64().ok_or("not a number")?;
            if *integer && !(v.is_i64() || v.is_u64()) {
                return Err("not an integer".into());
            }
            if min.is_some_and(|m| x < m) || max.is_some_and(|m| x > m) {
                return Err(format!("{x} out of range"));
            }
            Ok(())
        }
        Kind::Boolean => v
            .as_bool()
            .map(|_| ())
            .ok_or_else(|| "not a boolean".into()),
        Kind::Choice(options) => {
            let s = v.as_str().ok_or("not a string")?;
            if options.iter().any(|(o, _)| o == s) {
                Ok(())
            } else {
                Err(format!("{s:?}, not one of the choices"))
            }
        }
        Kind::Multi { options, min, max } => {
            let items = v.as_array().ok_or("not a list")?;
            for item in items {
                let s = item.as_str().ok_or("holding a non-string")?;
                if !options.iter().any(|(o, _)| o == s) {
                    return Err(format!("holding {s:?}, not one of the choices"));
                }
            }
            let n = items.len() as u64;
            if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                return Err(format!("with {n} choices, outside the bounds"));
            }
            Ok(())
        }
    }
}

/// The content of a form posted from the console: each field's text turned into its JSON
/// value (an unchecked checkbox is `false`; an empty optional field is left out). The
/// result is then checked like any answer.
pub(crate) fn content_of_form(
    fields: &[Field],
    posted: &[(String, String)],
) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for f in fields {
        let key = format!("field.{}", f.name);
        let values: Vec<&str> = posted
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
            .collect();
        let first = values.first().copied().unwrap_or_default();
        let value = match &f.kind {
            Kind::Boolean => Some(Value::Bool(first == "true" || first == "on")),
            Kind::Multi { .. } => Some(Value::Array(
                values
                    .iter()
                    .filter(|v| !v.is_empty())
                    .map(|v| Value::String((*v).to_owned()))
                    .collect(),
            )),
            _ if first.is_empty() => None,
            Kind::Number { integer: true, .. } => {
                Some(Value::from(first.trim().parse::<i64>().map_err(|_| {
                    format!("{:?} must be a whole number", f.title)
                })?))
            }
            Kind::Number { .. } => {
                let x: f64 = first
                    .trim()
                    .parse()
                    .map_err(|_| format!("{:?} must be a number", f.title))?;
                Some(
                    serde_json::Number::from_f64(x)
                        .map(Value::Number)
                        .ok_or_else(|| format!("{:?} must be a finite number", f.title))?,
                )
            }
            Kind::Text { .. } | Kind::Choice(_) => Some(Value::String(first.to_owned())),
        };
        if let Some(v) = value {
            out.insert(f.name.clone(), v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn question() -> Value {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": "Ship it?",
        "requestedSchema": {"type": "object", "required": ["name", "count"], "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 5},
            "count": {"type": "integer", "minimum": 1, "maximum": 9},
            "ratio": {"type": "number"},
            "ok": {"type": "boolean"},
            "colour": {"type": "string", "enum": ["red", "blue"], "enumNames": ["Red", "Blue"]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 1}
        }}}})
    }

    #[test]
    fn a_form_reads_every_kind_of_field() {
        let form = form_of(&question()).expect("a form");
        assert_eq!(form.message, "Ship it?");
        let by = |n: &str| form.fields.iter().find(|f| f.name == n).expect(n).clone();
        assert!(by("name").required && by("count").required && !by("ok").required);
        assert_eq!(by("name").title, "Name");
        assert_eq!(
            by("colour").kind,
            Kind::Choice(vec![
                ("red".into(), "Red".into()),
                ("blue".into(), "Blue".into())
            ])
        );
        assert!(matches!(
            by("count").kind,
            Kind::Number { integer: true, .. }
        ));
        assert!(form_of(&json!({"method": "sampling/createMessage"})).is_err());
    }

    #[test]
    fn answers_are_checked_against_the_question() {
        let q = question();
        let ok = json!({"action": "accept", "content": {"name": "ada", "count": 3, "ok": true,
            "colour": "red", "tags": ["a"], "ratio": 0.5}});
        assert_eq!(check(&q, &ok), Ok(()));
        assert_eq!(check(&q, &json!({"action": "decline"})), Ok(()));
        assert_eq!(
            check(&q, &json!({"action": "decline", "content": {}})),
            Err(AnswerError::UnexpectedContent)
        );
        let url = json!({"method": "elicitation/create", "params": {"mode": "url",
            "message": "Sign in", "url": "https://example.com", "elicitationId": "e1"}});
        assert_eq!(check(&url, &json!({"action": "accept"})), Ok(()));
        assert_eq!(
            check(&url, &json!({"action": "accept", "content": {"x": 1}})),
            Err(AnswerError::UnexpectedContent)
        );
        assert_eq!(
            check(&url, &json!({"action": "maybe"})),
            Err(AnswerError::NoAction)
        );
        let nested = json!({"method": "elicitation/create", "params": {"message": "m",
            "requestedSchema": {"type": "object", "properties": {"o": {"type": "object"}}}}});
        assert!(form_of(&nested).is_err(), "no form for a nested object");
        assert_eq!(
            check(&nested, &json!({})),
            Err(AnswerError::NoAction),
            "an action is still needed"
        );
        assert_eq!(
            check(
                &json!({"method": "sampling/createMessage"}),
                &json!({"role": "assistant"})
            ),
            Ok(())
        );
        for (bad, why) in [
            (json!("yes"), "must be a JSON object"),
            (json!({"action": "maybe"}), "needs an action"),
            (
                json!({"action": "accept", "content": {"count": 3}}),
                "misses the required field \"name\"",
            ),
            (
                json!({"action": "accept", "content": {"name": "a", "count": 3}}),
                "of 1 characters",
            ),
            (
                json!({"action": "accept", "content": {"name": "ada", "count": 2.5}}),
                "not an integer",
            ),
            (
                json!({"action": "accept", "content": {"name": "ada", "count": 10}}),
                "out of range",
            ),
            (
                json!({"action": "accept", "content": {"name": "ada", "count": 1, "colour": "green"}}),
                "not one of the choices",
            ),
            (
                json!({"action": "accept", "content": {"name": "ada", "count": 1, "tags": ["a", "b"]}}),
                "outside the bounds",
            ),
            (
                json!({"action": "accept", "content": {"name": "ada", "count": 1, "extra": 1}}),
                "did not ask for",
            ),
            (
                json!({"action": "accept", "content": {"name": "ada", "count": 1, "ok": "yes"}}),
                "not a boolean",
            ),
        ] {
            let err = check(&q, &bad).expect_err(&bad.to_string());
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_posted_form_becomes_typed_content() {
        let form = form_of(&question()).expect("a form");
        let posted: Vec<(String, String)> = [
            ("field.name", "ada"),
            ("field.count", "4"),
            ("field.ratio", ""),
            ("field.colour", "blue"),
            ("field.tags", "b"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let content = content_of_form(&form.fields, &posted).expect("content");
        assert_eq!(
            Value::Object(content),
            json!({"name": "ada", "count": 4, "ok": false, "colour": "blue", "tags": ["b"]})
        );
        let bad = vec![("field.count".to_owned(), "four".to_owned())];
        assert!(content_of_form(&form.fields, &bad).is_err());
    }
}
