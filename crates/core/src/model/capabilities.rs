//! The client capabilities a request declared, read in one place: what a tool requires,
//! which extensions are declared, and whether an input request may be sent to the client.

use serde_json::Value;

/// A view of a declared capability set (`_meta["io.modelcontextprotocol/clientCapabilities"]`,
/// or the copy a task keeps of its creating request's).
#[derive(Debug, Clone, Copy)]
pub struct ClientCapabilities<'a>(&'a Value);

impl<'a> ClientCapabilities<'a> {
    /// The capabilities in `declared` (anything but an object declares nothing).
    pub fn of(declared: &'a Value) -> Self {
        Self(declared)
    }

    /// Whether the extension `name` is declared (any object under its key).
    pub fn declares_extension(&self, name: &str) -> bool {
        self.0
            .get("extensions")
            .and_then(|e| e.get(name))
            .is_some_and(Value::is_object)
    }

    /// Whether every top-level capability `required` names is declared (and, for
    /// `extensions`, every named extension).
    pub fn covers(&self, required: &Value) -> bool {
        let Some(required) = required.as_object() else {
            return true;
        };
        required
            .iter()
            .all(|(k, v)| match (k.as_str(), self.0.get(k)) {
                (_, None) => false,
                ("extensions", Some(have)) => v
                    .as_object()
                    .is_none_or(|exts| exts.keys().all(|e| have.get(e).is_some())),
                _ => true,
            })
    }

    /// Whether the client can answer `request` (an MCP input request: `{"method", "params"}`),
    /// or the capability it lacks, as a dotted path. An elicitation capability of `{}` means
    /// form mode only (the MCP compatibility rule); URL mode needs `elicitation.url`.
    pub fn can_answer(&self, request: &Value) -> Result<(), &'static str> {
        let url = request.pointer("/params/mode").and_then(Value::as_str) == Some("url");
        // The capability, the member of it the request needs (if any), and their path.
        let (cap, sub, path) = match request.get("method").and_then(Value::as_str) {
            Some("sampling/createMessage") => ("sampling", None, "sampling"),
            Some("roots/list") => ("roots", None, "roots"),
            _ if url => ("elicitation", Some("url"), "elicitation.url"),
            _ => ("elicitation", None, "elicitation"),
        };
        let ok = match (self.0.get(cap), sub) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(d), Some(sub)) => d.get(sub).is_some(),
        };
        if ok { Ok(()) } else { Err(path) }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn one_reading_of_declared_capabilities() {
        let v = json!({"sampling": {}, "elicitation": {}, "extensions": {"x/tasks": {}}});
        let caps = ClientCapabilities::of(&v);
        assert!(caps.covers(&json!({"sampling": {}})));
        assert!(!caps.covers(&json!({"roots": {}})));
        assert!(caps.covers(&json!({"extensions": {"x/tasks": {}}})));
        assert!(
            !ClientCapabilities::of(&json!({})).covers(&json!({"extensions": {"x/tasks": {}}}))
        );
        assert!(caps.declares_extension("x/tasks"));
        assert!(!ClientCapabilities::of(&json!({"tasks": {}})).declares_extension("x/tasks"));
        let form = json!({"method": "elicitation/create", "params": {"mode": "form"}});
        let url = json!({"method": "elicitation/create", "params": {"mode": "url"}});
        assert_eq!(caps.can_answer(&form), Ok(()));
        assert_eq!(caps.can_answer(&url), Err("elicitation.url"));
        assert_eq!(
            caps.can_answer(&json!({"method": "roots/list"})),
            Err("roots")
        );
        assert_eq!(
            caps.can_answer(&json!({"method": "sampling/createMessage"})),
            Ok(())
        );
    }
}
