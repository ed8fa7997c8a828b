//! Resources and prompts: the [`Resource`] and [`Prompt`] traits, beside [`crate::Tool`],
//! exported with [`crate::export!`].

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::{Content, Context, RpcError};

/// A resource the component serves: one fixed URI, or every URI matching a template.
///
/// A `URI` containing `{name}` is a template (RFC 6570 level 1: each variable is one path
/// segment or query value); the host matches a read against it and hands the variables
/// over. Reads run like synchronous tool calls: a fresh instance each, and they may ask
/// for input with [`Context::await_input`].
///
/// ```
/// use snodo_guest::{Context, Contents, Resource, ResourceSpec, RpcError, Vars};
///
/// struct Motd;
///
/// impl Resource for Motd {
///     const URI: &'static str = "motd://today";
///
///     fn spec() -> ResourceSpec {
///         ResourceSpec::new("Message of the day").mime_type("text/plain")
///     }
///
///     fn read(_cx: &Context, uri: &str, _vars: &Vars) -> Result<Vec<Contents>, RpcError> {
///         Ok(vec![Contents::text(uri, "Ship it.")])
///     }
/// }
/// ```
pub trait Resource {
    /// The URI, or a URI template with `{name}` variables.
    const URI: &'static str;

    /// How `resources/list` (or `resources/templates/list`) shows it.
    fn spec() -> ResourceSpec;

    /// Reads it. `uri` is what the client asked for; `vars` holds the template's
    /// variables (empty for a fixed URI). An error is sent to the client as is.
    fn read(cx: &Context, uri: &str, vars: &Vars) -> Result<Vec<Contents>, RpcError>;

    /// Suggests values for the template variable `variable`, given the `value` typed so
    /// far. None by default.
    fn complete(variable: &str, value: &str) -> Vec<String> {
        let _ = (variable, value);
        Vec::new()
    }
}

/// A template's variables, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vars(pub(crate) Vec<(String, String)>);

impl Vars {
    /// The value of the variable `name`.
    ///
    /// ```
    /// let vars = snodo_guest::Vars::default();
    /// assert_eq!(vars.get("id"), None);
    /// ```
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How a resource is listed.
///
/// ```
/// let spec = snodo_guest::ResourceSpec::new("Report")
///     .description("The latest report")
///     .mime_type("application/json");
/// # let _ = spec;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSpec {
    pub(crate) name: String,
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) mime_type: Option<String>,
}

impl ResourceSpec {
    /// A resource called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
        }
    }

    /// Its MIME type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }
}

text_builders!(ResourceSpec, "new(\"Report\")");

/// What a resource read returns: text or base64 bytes, for one URI.
///
/// ```
/// use snodo_guest::Contents;
/// let text = Contents::text("notes://1", "hello").with_mime_type("text/plain");
/// let png = Contents::blob("img://dot", "iVBORw0KGgo=").with_mime_type("image/png");
/// # let _ = (text, png);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Contents {
    pub(crate) uri: String,
    pub(crate) mime_type: Option<String>,
    pub(crate) body: Body,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Body {
    Text(String),
    Blob(String),
}

impl Contents {
    /// Text contents.
    pub fn text(uri: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            mime_type: None,
            body: Body::Text(text.into()),
        }
    }

    /// Binary contents, base64-encoded.
    pub fn blob(uri: impl Into<String>, base64: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            mime_type: None,
            body: Body::Blob(base64.into()),
        }
    }

    /// With a MIME type.
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }
}

/// A prompt the component serves: a named template of messages, rendered with typed
/// arguments. Renders run like synchronous tool calls and may ask for input.
///
/// ```
/// use serde::Deserialize;
/// use snodo_guest::{Context, Prompt, PromptResult, PromptSpec, RpcError};
///
/// struct Review;
///
/// #[derive(Deserialize)]
/// struct ReviewArgs {
///     language: String,
/// }
///
/// impl Prompt for Review {
///     const NAME: &'static str = "review";
///     type Args = ReviewArgs;
///
///     fn spec() -> PromptSpec {
///         PromptSpec::new().description("Asks for a code review").argument("language", "The code's language", true)
///     }
///
///     fn get(_cx: &Context, args: ReviewArgs) -> Result<PromptResult, RpcError> {
///         Ok(PromptResult::user(format!("Review this {} code.", args.language)))
///     }
///
///     fn complete(_argument: &str, value: &str, _context: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
///         ["rust", "python", "go"].iter().filter(|l| l.starts_with(value)).map(|l| l.to_string()).collect()
///     }
/// }
/// ```
pub trait Prompt {
    /// The prompt's name, unique within the component.
    const NAME: &'static str;

    /// The arguments, decoded from the request's (a JSON object of strings). Bad arguments
    /// are refused with -32602 before `get` runs.
    type Args: DeserializeOwned;

    /// How `prompts/list` shows it.
    fn spec() -> PromptSpec;

    /// Renders it.
    fn get(cx: &Context, args: Self::Args) -> Result<PromptResult, RpcError>;

    /// Suggests values for `argument`, given the `value` typed so far and the arguments
    /// already chosen. None by default.
    fn complete(argument: &str, value: &str, context: &Map<String, Value>) -> Vec<String> {
        let _ = (argument, value, context);
        Vec::new()
    }
}

/// How a prompt is listed: its description and arguments.
///
/// ```
/// let spec = snodo_guest::PromptSpec::new()
///     .title("Summarise")
///     .argument("text", "What to summarise", true)
///     .argument("style", "bullet or prose", false);
/// # let _ = spec;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptSpec {
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) arguments: Vec<(String, Option<String>, bool)>,
}

impl PromptSpec {
    /// A prompt without arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An argument: its name, what it means, and whether it is required.
    pub fn argument(mut self, name: &str, description: &str, required: bool) -> Self {
        self.arguments
            .push((name.to_owned(), Some(description.to_owned()), required));
        self
    }
}

text_builders!(PromptSpec, "new()");

/// Who a prompt message speaks as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user.
    User,
    /// The assistant.
    Assistant,
}

/// A rendered prompt: messages, and optionally a description.
///
/// ```
/// use snodo_guest::{Content, PromptResult, Role};
/// let p = PromptResult::user("Describe this image:")
///     .with(Role::User, Content::Image { data: "iVBORw0KGgo=".into(), mime_type: "image/png".into() });
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptResult {
    pub(crate) description: Option<String>,
    pub(crate) messages: Vec<(Role, Content)>,
}

impl PromptResult {
    /// One user message of text.
    pub fn user(text: impl Into<String>) -> Self {
        Self::default().with(Role::User, Content::Text(text.into()))
    }

    /// With one more message.
    pub fn with(mut self, role: Role, content: Content) -> Self {
        self.messages.push((role, content));
        self
    }

    /// With a description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}
