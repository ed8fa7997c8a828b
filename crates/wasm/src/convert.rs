//! Turning what a guest returned into domain values, validating it on the way. A guest's
//! output is untrusted: anything malformed becomes an `invalid_outcome` failure naming the
//! problem, never a panic and never a malformed wire message.

use serde_json::{Map, Value, json};

use snodo_core::model::JsonRpcError;

use super::bindings::{outcomes, types};
use super::{AttemptError, GuestOutcome, TaskMode, ToolInfo};

/// MCP reserves -32020..=-32099 and defines only these three in it.
const SPEC_DEFINED_RESERVED: [i64; 3] = [-32020, -32021, -32022];

fn json_field(what: &str, text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("{what} is not valid JSON: {e}"))
}

pub(crate) fn rpc_error(e: types::RpcError) -> Result<JsonRpcError, String> {
    if e.message.is_empty() {
        return Err("an error has an empty message".into());
    }
    let data = e
        .data
        .as_deref()
        .map(|d| json_field("error data", d))
        .transpose()?;
    let reserved = (-32099..=-32020).contains(&e.code) && !SPEC_DEFINED_RESERVED.contains(&e.code);
    let protocol_owned = SPEC_DEFINED_RESERVED.contains(&e.code);
    if reserved || protocol_owned {
        // A tool cannot speak for the protocol: keep its message, not its code.
        let mut d = Map::new();
        d.insert("guestCode".into(), json!(e.code));
        if let Some(data) = data {
            d.insert("guestData".into(), data);
        }
        return Ok(JsonRpcError::new(-32603, e.message).with_data(Value::Object(d)));
    }
    Ok(JsonRpcError {
        code: e.code,
        message: e.message,
        data,
    })
}

fn media(kind: &str, m: types::Media) -> Result<Value, String> {
    if m.data.is_empty() || m.mime_type.is_empty() {
        return Err(format!("{kind} content needs data and a mime type"));
    }
    Ok(json!({"type": kind, "data": m.data, "mimeType": m.mime_type}))
}

pub(crate) fn content_block(b: types::ContentBlock) -> Result<Value, String> {
    Ok(match b {
        types::ContentBlock::Text(t) => json!({"type": "text", "text": t}),
        types::ContentBlock::Image(m) => media("image", m)?,
        types::ContentBlock::Audio(m) => media("audio", m)?,
        types::ContentBlock::EmbeddedResource(r) => {
            if r.uri.is_empty() {
                return Err("an embedded resource needs a uri".into());
            }
            let mut res = Map::new();
            res.insert("uri".into(), json!(r.uri));
            if let Some(m) = r.mime_type {
                res.insert("mimeType".into(), json!(m));
            }
            match (r.text, r.blob) {
                (Some(t), None) => res.insert("text".into(), json!(t)),
                (None, Some(b)) => res.insert("blob".into(), json!(b)),
                _ => return Err("an embedded resource needs exactly one of text and blob".into()),
            };
            json!({"type": "resource", "resource": res})
        }
        types::ContentBlock::ResourceLink(l) => {
            if l.uri.is_empty() || l.name.is_empty() {
                return Err("a resource link needs a uri and a name".into());
            }
            let mut v = json!({"type": "resource_link", "uri": l.uri, "name": l.name});
            if let Some(m) = l.mime_type {
                v["mimeType"] = json!(m);
            }
            if let Some(d) = l.description {
                v["description"] = json!(d);
            }
            v
        }
    })
}

/// The `CallToolResult` JSON for a guest's tool result.
pub(crate) fn tool_result(r: types::ToolResult) -> Result<Map<String, Value>, String> {
    let content = r
        .content
        .into_iter()
        .map(content_block)
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Map::new();
    out.insert("content".into(), Value::Array(content));
    if let Some(s) = r.structured_content {
        let v = json_field("structured content", &s)?;
        if !v.is_object() {
            return Err("structured content must be a JSON object".into());
        }
        out.insert("structuredContent".into(), v);
    }
    out.insert("isError".into(), json!(r.is_error));
    Ok(out)
}

/// Refuses an outcome whose JSON is larger than `max` bytes: it would be stored and sent
/// (and every `tasks/get` would decode it) otherwise.
pub(crate) fn check_size(o: GuestOutcome, max: usize) -> Result<GuestOutcome, AttemptError> {
    match &o {
        GuestOutcome::Completed(v) => within_size(v, max)?,
        GuestOutcome::Failed { error: e, .. } | GuestOutcome::Retry { error: e, .. } => {
            within_size(e, max)?
        }
    }
    Ok(o)
}

/// Refuses a guest's output whose JSON would be larger than `max` bytes (the engine's
/// `max_result_bytes`), counted without building it.
pub(crate) fn within_size<T: serde::Serialize + ?Sized>(
    value: &T,
    max: usize,
) -> Result<(), AttemptError> {
    /// Counts what is written, and refuses to go past the limit (so a huge output stops
    /// being walked once it is known to be too big).
    struct Count {
        written: usize,
        max: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.written += b.len();
            if self.written > self.max {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count { written: 0, max };
    match serde_json::to_writer(&mut n, value) {
        Ok(()) => Ok(()),
        Err(_) => Err(AttemptError::Limit(super::Limit::ResultSize {
            bytes: max as u64,
        })),
    }
}

pub(crate) fn outcome(o: types::Outcome) -> Result<GuestOutcome, String> {
    Ok(match o {
        types::Outcome::Completed(r) => GuestOutcome::Completed(tool_result(r)?),
        types::Outcome::Failed(e) => GuestOutcome::Failed {
            error: rpc_error(e)?,
            status_message: None,
        },
        types::Outcome::Retry(r) => GuestOutcome::Retry {
            error: rpc_error(r.error)?,
            status_message: snodo_core::model::truncate_status_message(r.status_message),
        },
    })
}

/// A 0.3.0 outcome: a failure may carry the tool's own status message.
pub(crate) fn outcome_v3(o: outcomes::Outcome) -> Result<GuestOutcome, String> {
    Ok(match o {
        outcomes::Outcome::Completed(r) => GuestOutcome::Completed(tool_result(r)?),
        outcomes::Outcome::Failed(f) => GuestOutcome::Failed {
            error: rpc_error(f.error)?,
            status_message: f
                .status_message
                .map(snodo_core::model::truncate_status_message),
        },
        outcomes::Outcome::Retry(r) => GuestOutcome::Retry {
            error: rpc_error(r.error)?,
            status_message: snodo_core::model::truncate_status_message(r.status_message),
        },
    })
}

pub(crate) fn mode(m: types::TaskMode) -> TaskMode {
    match m {
        types::TaskMode::Sync => TaskMode::Sync,
        types::TaskMode::Optional => TaskMode::Optional,
        types::TaskMode::Required => TaskMode::Required,
    }
}

fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Validates what `describe` returned.
pub(crate) fn tools(described: Vec<types::Tool>) -> Result<Vec<ToolInfo>, String> {
    if described.is_empty() {
        return Err("describe() returned no tools".into());
    }
    let mut out: Vec<ToolInfo> = Vec::with_capacity(described.len());
    for t in described {
        if !valid_tool_name(&t.name) {
            return Err(format!(
                "tool name {:?} is invalid: use 1..=128 of A-Z a-z 0-9 _ - .",
                t.name
            ));
        }
        if out.iter().any(|o| o.name == t.name) {
            return Err(format!("tool {:?} is described twice", t.name));
        }
        let what = |field: &str| format!("tool {:?}: {field}", t.name);
        let input_schema = json_field(&what("inputSchema"), &t.input_schema)?;
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(format!(
                "{} must be a JSON Schema with \"type\": \"object\"",
                what("inputSchema")
            ));
        }
        // Optional JSON fields that must hold an object when present.
        let object = |field: &str, text: Option<&str>| match text {
            None => Ok(None),
            Some(text) => match json_field(&what(field), text)? {
                v @ Value::Object(_) => Ok(Some(v)),
                _ => Err(format!("{} must be a JSON object", what(field))),
            },
        };
        let header_params = crate::headers::header_params(&t.name, &input_schema)?;
        let output_schema = object("outputSchema", t.output_schema.as_deref())?;
        let required_capabilities =
            object("requiredCapabilities", t.required_capabilities.as_deref())?;
        // A phase the host would never run is a mistake to report, not to ignore: a mode
        // rule decides only for optional tools, and prepare runs only before a task.
        let m = mode(t.mode);
        if t.has_mode_rule && m != TaskMode::Optional {
            return Err(format!(
                "{} has a mode rule (choose_mode) but its mode is {}: a rule decides only for optional tools",
                what("mode"),
                m.as_str()
            ));
        }
        if t.has_prepare && m == TaskMode::Sync {
            return Err(format!(
                "{} has a prepare phase but is sync: prepare runs only before a task is created",
                what("mode")
            ));
        }
        out.push(ToolInfo {
            name: t.name,
            title: t.title,
            description: t.description,
            input_schema,
            output_schema,
            mode: m,
            required_capabilities,
            has_prepare: t.has_prepare,
            has_mode_rule: t.has_mode_rule,
            header_params,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: i64) -> types::RpcError {
        types::RpcError {
            code,
            message: "m".into(),
            data: None,
        }
    }

    #[test]
    fn phases_the_host_would_never_run_are_refused() {
        let t = |mode: types::TaskMode, has_mode_rule: bool, has_prepare: bool| types::Tool {
            name: "t".into(),
            title: None,
            description: None,
            input_schema: r#"{"type":"object"}"#.into(),
            output_schema: None,
            mode,
            required_capabilities: None,
            has_prepare,
            has_mode_rule,
        };
        use types::TaskMode::{Optional, Required, Sync};
        assert!(tools(vec![t(Optional, true, true)]).is_ok());
        assert!(tools(vec![t(Required, false, true)]).is_ok());
        let e = tools(vec![t(Sync, true, false)]).expect_err("a rule on a sync tool");
        assert!(e.contains("choose_mode") && e.contains("sync"), "{e}");
        assert!(tools(vec![t(Required, true, false)]).is_err());
        let e = tools(vec![t(Sync, false, true)]).expect_err("prepare on a sync tool");
        assert!(e.contains("prepare"), "{e}");
    }

    #[test]
    fn reserved_codes_are_not_passed_through() {
        for code in [-32042, -32099, -32020, -32021, -32022] {
            let e = rpc_error(err(code)).unwrap();
            assert_eq!(e.code, -32603, "{code}");
            assert_eq!(e.data.unwrap()["guestCode"], code);
        }
        assert_eq!(rpc_error(err(-32000)).unwrap().code, -32000);
        assert_eq!(rpc_error(err(-32602)).unwrap().code, -32602);
        assert!(
            rpc_error(types::RpcError {
                code: 1,
                message: String::new(),
                data: None
            })
            .is_err()
        );
    }

    #[test]
    fn results_become_call_tool_results() {
        let r = tool_result(types::ToolResult {
            content: vec![
                types::ContentBlock::Text("hi".into()),
                types::ContentBlock::EmbeddedResource(types::EmbeddedResource {
                    uri: "test://r".into(),
                    mime_type: Some("text/plain".into()),
                    text: Some("body".into()),
                    blob: None,
                }),
            ],
            structured_content: Some(r#"{"a":1}"#.into()),
            is_error: true,
        })
        .unwrap();
        assert_eq!(
            Value::Object(r),
            json!({"content": [{"type": "text", "text": "hi"},
                {"type": "resource", "resource": {"uri": "test://r", "mimeType": "text/plain", "text": "body"}}],
                "structuredContent": {"a": 1}, "isError": true})
        );
        let bad = tool_result(types::ToolResult {
            content: vec![],
            structured_content: Some("[1]".into()),
            is_error: false,
        });
        assert!(bad.is_err());
    }
}
