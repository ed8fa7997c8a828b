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

/// The body value `Mcp-Name` must equal for `method`, or `None` if the method has no name.
/// `Err` when the method has a name source but the body does not carry a string there.
pub fn name_source<'a>(
    method: &str,
    params: &'a Map<String, Value>,
) -> Result<Option<&'a str>, ()> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return Ok(None),
    };
    match params.get(key) {
        Some(Value::String(s)) => Ok(Some(s)),
        _ => Err(()),
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
