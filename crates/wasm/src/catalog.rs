//! What a 0.2.0 component serves besides tools: resources, resource templates, prompts and
//! completions, validated when it is loaded and turned into MCP JSON when it answers.
//!
//! Everything here comes from a guest and is untrusted: a malformed description refuses the
//! component at load; a malformed answer is an `invalid_outcome` naming the problem.

use serde_json::{Map, Value, json};

use super::bindings::catalog_types as wit;
use super::convert;

/// The most values a completion sends (MCP's limit).
const MAX_COMPLETION_VALUES: usize = 100;

/// A resource at a fixed URI.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceInfo {
    /// Its URI.
    pub uri: String,
    /// Its `resources/list` entry.
    pub listing: Value,
}

/// Resources under a URI template.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateInfo {
    /// The template.
    pub template: UriTemplate,
    /// Its `resources/templates/list` entry.
    pub listing: Value,
}

/// A prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptInfo {
    /// Its name, what `prompts/get` names.
    pub name: String,
    /// Its arguments: name and whether it is required.
    pub arguments: Vec<(String, bool)>,
    /// Its `prompts/list` entry.
    pub listing: Value,
}

/// What a component serves besides tools (empty for a 0.1.0 component).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ComponentCatalog {
    /// Resources at fixed URIs.
    pub resources: Vec<ResourceInfo>,
    /// Resource templates.
    pub templates: Vec<TemplateInfo>,
    /// Prompts.
    pub prompts: Vec<PromptInfo>,
    /// Whether the component answers completions.
    pub completions: bool,
}

impl ComponentCatalog {
    /// Whether `uri` is one of this component's resources (listed, or matching a template).
    pub fn serves_uri(&self, uri: &str) -> bool {
        self.resources.iter().any(|r| r.uri == uri)
            || self.templates.iter().any(|t| t.template.matches(uri))
    }

    /// The prompt named `name`.
    pub fn prompt(&self, name: &str) -> Option<&PromptInfo> {
        self.prompts.iter().find(|p| p.name == name)
    }
}

/// An RFC 6570 level-1 template: literal text and `{name}` variables, each matching one or
/// more characters other than `/`, `?` and `#`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Variable(String),
}

impl UriTemplate {
    /// Parses `text`; `Err` names what is malformed.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("template {text:?} has an unclosed '{{'"))?;
            let name = &rest[open + 1..open + close];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!(
                    "template {text:?} has a variable {name:?} (level 1 only: {{name}})"
                ));
            }
            if matches!(parts.last(), Some(Part::Variable(_))) {
                return Err(format!(
                    "template {text:?} has two variables with nothing between"
                ));
            }
            parts.push(Part::Variable(name.to_owned()));
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("template {text:?} has a stray '}}'"));
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self {
            text: text.to_owned(),
            parts,
        })
    }

    /// The template's text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The variables' values if `uri` matches.
    pub fn capture(&self, uri: &str) -> Option<Vec<(String, String)>> {
        let mut out = Vec::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(l) => rest = rest.strip_prefix(l.as_str())?,
                Part::Variable(name) => {
                    let segment_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => {
                            rest[..segment_end].find(next.as_str()).or_else(|| {
                                rest[segment_end..]
                                    .starts_with(next.as_str())
                                    .then_some(segment_end)
                            })?
                        }
                        _ => segment_end,
                    };
                    if end == 0 || !safe_segment(&rest[..end]) {
                        return None;
                    }
                    out.push((name.clone(), rest[..end].to_owned()));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(out)
    }

    /// Whether `uri` matches.
    pub fn matches(&self, uri: &str) -> bool {
        self.capture(uri).is_some()
    }
}

/// Whether a variable's value, percent-decoded, is one harmless path segment: well-formed
/// escapes, UTF-8, not `.` or `..`, no slash or backslash, no control characters. A guest that
/// joins the value to a path (or decodes it first) must not be walked out of its
/// directory by `%2e%2e` or `%2F`; the value itself reaches the guest as it was sent.
fn safe_segment(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => decoded.push(b),
                None => return false,
            }
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let Ok(text) = String::from_utf8(decoded) else {
        return false;
    };
    text != "."
        && text != ".."
        && !text.contains(['/', '\\'])
        && !text.chars().any(char::is_control)
}

/// A resource's or a template's listing: its address under `at.0`, its names and its MIME
/// type.
fn listing(
    at: (&str, &str),
    name: String,
    title: Option<String>,
    description: Option<String>,
    mime_type: Option<String>,
) -> Value {
    let mut m = Map::new();
    m.insert(at.0.into(), json!(at.1));
    described(&mut m, name, title, description);
    put(&mut m, "mimeType", mime_type);
    Value::Object(m)
}

/// The fields every listed resource, template and prompt has: a name, and an optional
/// title and description.
fn described(
    m: &mut Map<String, Value>,
    name: String,
    title: Option<String>,
    description: Option<String>,
) {
    m.insert("name".into(), json!(name));
    put(m, "title", title);
    put(m, "description", description);
}

fn put(m: &mut Map<String, Value>, key: &str, v: Option<String>) {
    if let Some(v) = v {
        m.insert(key.to_owned(), json!(v));
    }
}

fn valid_uri(uri: &str) -> bool {
    // A scheme, then anything: what MCP clients and the suite send.
    uri.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

/// Validates a described catalog; `Err` names the first problem.
pub(crate) fn catalog(c: wit::Catalog) -> Result<ComponentCatalog, String> {
    let mut out = ComponentCatalog {
        completions: c.completions,
        ..ComponentCatalog::default()
    };
    for r in c.resources {
        if !valid_uri(&r.uri) {
            return Err(format!("resource {:?} has no URI scheme", r.uri));
        }
        if out.resources.iter().any(|x| x.uri == r.uri) {
            return Err(format!("resource {:?} is described twice", r.uri));
        }
        let listing = listing(("uri", &r.uri), r.name, r.title, r.description, r.mime_type);
        out.resources.push(ResourceInfo {
            uri: r.uri,
            listing,
        });
    }
    for t in c.resource_templates {
        let template = UriTemplate::parse(&t.uri_template)?;
        if !valid_uri(&t.uri_template) {
            return Err(format!("template {:?} has no URI scheme", t.uri_template));
        }
        let at = ("uriTemplate", t.uri_template.as_str());
        let listing = listing(at, t.name, t.title, t.description, t.mime_type);
        out.templates.push(TemplateInfo { template, listing });
    }
    for p in c.prompts {
        if p.name.is_empty() || out.prompts.iter().any(|x| x.name == p.name) {
            return Err(format!("prompt {:?} is unnamed or described twice", p.name));
        }
        let mut m = Map::new();
        described(&mut m, p.name.clone(), p.title, p.description);
        let args: Vec<Value> = p
            .arguments
            .iter()
            .map(|a| {
                let mut am = Map::new();
                am.insert("name".into(), json!(a.name));
                put(&mut am, "description", a.description.clone());
                am.insert("required".into(), json!(a.required));
                Value::Object(am)
            })
            .collect();
        m.insert("arguments".into(), Value::Array(args));
        out.prompts.push(PromptInfo {
            name: p.name,
            arguments: p
                .arguments
                .into_iter()
                .map(|a| (a.name, a.required))
                .collect(),
            listing: Value::Object(m),
        });
    }
    Ok(out)
}

/// `ReadResourceResult.contents` from what `read-resource` returned.
pub(crate) fn contents(read: Vec<wit::ResourceContents>) -> Result<Value, String> {
    let items = read
        .into_iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert("uri".into(), json!(c.uri));
            put(&mut m, "mimeType", c.mime_type);
            match (c.text, c.blob) {
                (Some(t), None) => m.insert("text".into(), json!(t)),
                (None, Some(b)) => m.insert("blob".into(), json!(b)),
                _ => {
                    return Err(format!(
                        "contents of {:?} need exactly one of text and blob",
                        m["uri"]
                    ));
                }
            };
            Ok(Value::Object(m))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if items.is_empty() {
        return Err("a resource read returned no contents".into());
    }
    Ok(Value::Array(items))
}

/// A `GetPromptResult` from what `get-prompt` returned.
pub(crate) fn prompt_result(r: wit::PromptResult) -> Result<Map<String, Value>, String> {
    let messages = r
        .messages
        .into_iter()
        .map(|m| {
            let role = match m.role {
                wit::Role::User => "user",
                wit::Role::Assistant => "assistant",
            };
            Ok(json!({"role": role, "content": convert::content_block(m.content)?}))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut out = Map::new();
    put(&mut out, "description", r.description);
    out.insert("messages".into(), Value::Array(messages));
    Ok(out)
}

/// A `CompleteResult.completion` from what `complete` returned (at most 100 values).
pub(crate) fn completion(c: wit::Completion) -> Value {
    let more = c.has_more || c.values.len() > MAX_COMPLETION_VALUES;
    let values: Vec<String> = c.values.into_iter().take(MAX_COMPLETION_VALUES).collect();
    let mut m = Map::new();
    if let Some(t) = c.total {
        m.insert("total".into(), json!(t));
    }
    m.insert("values".into(), json!(values));
    m.insert("hasMore".into(), json!(more));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_capture_one_segment_per_variable() {
        let t = UriTemplate::parse("test://template/{id}/data").expect("parses");
        assert_eq!(
            t.capture("test://template/123/data"),
            Some(vec![("id".into(), "123".into())])
        );
        assert!(!t.matches("test://template/1/2/data"), "one segment only");
        assert!(!t.matches("test://template//data"), "not empty");
        assert!(!t.matches("test://template/123/data/more"));
        let q = UriTemplate::parse("db://{table}?row={row}").expect("parses");
        assert_eq!(
            q.capture("db://users?row=7"),
            Some(vec![
                ("table".into(), "users".into()),
                ("row".into(), "7".into())
            ])
        );
        // Decoded before the one-segment rule: no way out of a directory, no control bytes.
        for walk in [
            "%2e%2e", "..", ".", "%2E", "a%2Fb", "a%5cb", "%0a", "%ff", "%zz", "%4",
        ] {
            let uri = format!("test://template/{walk}/data");
            assert!(!t.matches(&uri), "{uri}");
        }
        assert!(
            t.matches("test://template/a%20b.txt/data"),
            "ordinary escapes pass"
        );
        for bad in ["x://{", "x://{a b}", "x://{}", "x://}", "x://{a}{b}"] {
            assert!(UriTemplate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn contents_need_exactly_one_body() {
        let c = |text: Option<&str>, blob: Option<&str>| wit::ResourceContents {
            uri: "a://b".into(),
            mime_type: None,
            text: text.map(str::to_owned),
            blob: blob.map(str::to_owned),
        };
        assert_eq!(
            contents(vec![c(Some("hi"), None)]).expect("ok"),
            json!([{"uri": "a://b", "text": "hi"}])
        );
        assert!(contents(vec![c(Some("hi"), Some("aGk="))]).is_err());
        assert!(contents(vec![c(None, None)]).is_err());
        assert!(contents(vec![]).is_err());
    }

    #[test]
    fn completions_are_capped() {
        let c = completion(wit::Completion {
            values: (0..150).map(|i| i.to_string()).collect(),
            total: None,
            has_more: false,
        });
        assert_eq!(c["values"].as_array().map(Vec::len), Some(100));
        assert_eq!(c["hasMore"], true);
    }
}
