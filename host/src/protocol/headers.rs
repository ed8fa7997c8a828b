//! Streamable HTTP routing headers: `Mcp-Method` and `Mcp-Name`, and their base64 form.

use base64::Engine;
use serde_json::{Map, Value};

/// Decodes a header value, including the `=?base64?{...}?=` form for values that are not
/// header-safe. `None` if the form is malformed or not UTF-8.
pub fn decode_header_value(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(raw.to_owned()),
    }
}

/// Where a method's `Mcp-Name` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameSource<'a> {
    /// The method has no name: `Mcp-Name` is not checked.
    None,
    /// The header must equal this body value.
    Body(&'a str),
    /// The method has a name source, but the body lacks a string at this key.
    Missing(&'static str),
}

/// The body value `Mcp-Name` must equal for `method`.
pub fn name_source<'a>(method: &str, params: &'a Map<String, Value>) -> NameSource<'a> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return NameSource::None,
    };
    match params.get(key) {
        Some(Value::String(s)) => NameSource::Body(s),
        _ => NameSource::Missing(key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_form_is_decoded() {
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        assert_eq!(
            decode_header_value("=?base64?aMOpbGxv?=").as_deref(),
            Some("héllo")
        );
        assert_eq!(decode_header_value("=?base64?!!!?="), None);
        assert_eq!(decode_header_value("=?base64?/w==?="), None, "not UTF-8");
    }
}
