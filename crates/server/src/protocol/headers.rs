//! Streamable HTTP routing headers: `Mcp-Method` and `Mcp-Name`, and their base64 form.

use base64::Engine;
use serde_json::{Map, Value};

/// Decodes a header value, including the `=?base64?{...}?=` form for values that are not
/// header-safe. `None` if the form is malformed or not UTF-8.
pub(crate) fn decode_header_value(raw: &str) -> Option<String> {
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
pub(crate) enum NameSource<'a> {
    /// The method has no name: `Mcp-Name` is not checked.
    None,
    /// The header must equal this body value when present. `required`: whether a request
    /// without the header is refused (`tools/call`, `prompts/get`, `resources/read`). On
    /// `tasks/*` an absent header is accepted: the spec makes sending it a client MUST, real
    /// task clients omit it, and the official suite checks only `tools/call` (decision 21).
    Body {
        /// The body's value.
        value: &'a str,
        /// Whether the header must be present.
        required: bool,
    },
    /// The method has a name source, but the body lacks a string at this key.
    Missing(&'static str),
}

/// The body value `Mcp-Name` must equal for `method`.
pub(crate) fn name_source<'a>(method: &str, params: &'a Map<String, Value>) -> NameSource<'a> {
    let (key, required) = match method {
        "tools/call" | "prompts/get" => ("name", true),
        "resources/read" => ("uri", true),
        "tasks/get" | "tasks/update" | "tasks/cancel" => ("taskId", false),
        _ => return NameSource::None,
    };
    match params.get(key) {
        Some(Value::String(value)) => NameSource::Body { value, required },
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
