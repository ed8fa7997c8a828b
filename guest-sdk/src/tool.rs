//! The [`Tool`] trait and its description, [`ToolSpec`].

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Context, Outcome, RpcError};

/// How a tool runs when called. The host's configuration may pin another mode.
///
/// ```
/// # use serde_json::json;
/// use snodo_guest::{Mode, ToolSpec};
/// // Long work: always a durable task.
/// let spec = ToolSpec::new(json!({"type": "object"})).mode(Mode::Required);
/// # let _ = spec;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Always synchronously, inside the request; never a task.
    Sync,
    /// As a task when the request declares the tasks extension, synchronously otherwise.
    Optional,
    /// Only as a task; a request without the tasks extension is refused before the tool
    /// runs.
    Required,
}

/// A tool's description: what `tools/list` shows and how the host should run it.
///
/// ```
/// use serde_json::json;
/// use snodo_guest::{Mode, ToolSpec};
///
/// let spec = ToolSpec::new(json!({"type": "object", "properties": {"path": {"type": "string"}}}))
///     .title("Export")
///     .description("Exports a report, asking for confirmation first")
///     .mode(Mode::Required);
/// # let _ = spec;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) input_schema: Value,
    pub(crate) output_schema: Option<Value>,
    pub(crate) mode: Mode,
    pub(crate) required_capabilities: Option<Value>,
    pub(crate) has_prepare: bool,
    pub(crate) has_mode_rule: bool,
}

impl ToolSpec {
    /// A synchronous tool taking arguments described by `input_schema` (a JSON Schema
    /// object).
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"}));
    /// # let _ = spec;
    /// ```
    pub fn new(input_schema: Value) -> Self {
        Self {
            title: None,
            description: None,
            input_schema,
            output_schema: None,
            mode: Mode::Sync,
            required_capabilities: None,
            has_prepare: false,
            has_mode_rule: false,
        }
    }

    /// A human-readable title.
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"})).title("Quick report");
    /// # let _ = spec;
    /// ```
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// What the tool does, for models and people.
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"})).description("Counts rows");
    /// # let _ = spec;
    /// ```
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// A JSON Schema object for the result's structured content.
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"}))
    ///     .output_schema(json!({"type": "object", "properties": {"rows": {"type": "integer"}}}));
    /// # let _ = spec;
    /// ```
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The suggested task policy.
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"})).mode(snodo_guest::Mode::Optional);
    /// # let _ = spec;
    /// ```
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Client capabilities the tool needs, e.g. `{"sampling": {}}`; requests without them
    /// are refused before the tool runs.
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"})).requires(json!({"sampling": {}}));
    /// # let _ = spec;
    /// ```
    pub fn requires(mut self, capabilities: Value) -> Self {
        self.required_capabilities = Some(capabilities);
        self
    }

    /// Declares that the tool implements [`Tool::prepare`].
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"})).with_prepare();
    /// # let _ = spec;
    /// ```
    pub fn with_prepare(mut self) -> Self {
        self.has_prepare = true;
        self
    }

    /// Declares that the tool implements [`Tool::choose_mode`].
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new(json!({"type": "object"})).with_mode_rule();
    /// # let _ = spec;
    /// ```
    pub fn with_mode_rule(mut self) -> Self {
        self.has_mode_rule = true;
        self
    }
}

/// One tool. Implement it on a unit struct and list the struct in [`crate::export_tools!`].
///
/// ```
/// use serde::Deserialize;
/// use serde_json::json;
/// use snodo_guest::{Context, Mode, Outcome, Tool, ToolResult, ToolSpec};
///
/// #[derive(Deserialize)]
/// struct Args { rows: u32 }
///
/// struct CountRows;
///
/// impl Tool for CountRows {
///     const NAME: &'static str = "count_rows";
///     type Args = Args;
///
///     fn spec() -> ToolSpec {
///         ToolSpec::new(json!({"type": "object", "properties": {"rows": {"type": "integer"}}}))
///             .mode(Mode::Optional)
///     }
///
///     fn run(cx: &Context, args: Args) -> Outcome {
///         for _ in 0..args.rows {
///             if cx.is_cancelled() {
///                 return ToolResult::error("cancelled").into();
///             }
///         }
///         ToolResult::text(format!("{} rows", args.rows)).into()
///     }
/// }
/// # snodo_guest::export_tools!(CountRows);
/// ```
pub trait Tool {
    /// The tool's name, unique within the component.
    const NAME: &'static str;

    /// The arguments, decoded from the call's JSON before [`Tool::run`] is called. A
    /// decoding failure ends the execution with JSON-RPC -32602: on a synchronous call that
    /// is the call's error; on a call that became a task, the task exists by then and fails
    /// with that error (give the tool a `prepare` phase to refuse bad arguments before a
    /// task is created). Use `serde_json::Value` to decode nothing.
    type Args: DeserializeOwned;

    /// The tool's description.
    fn spec() -> ToolSpec;

    /// Runs one execution.
    fn run(cx: &Context, args: Self::Args) -> Outcome;

    /// For tools whose spec says [`ToolSpec::with_mode_rule`]: whether this call of an
    /// optional tool runs as a task ([`Mode::Optional`] or [`Mode::Required`]) or
    /// synchronously ([`Mode::Sync`]). Called with the raw arguments.
    fn choose_mode(_args: &Value) -> Mode {
        Self::spec().mode
    }

    /// For tools whose spec says [`ToolSpec::with_prepare`]: runs inside the request,
    /// before a task is created, and may ask for input with [`Context::await_input`]; the
    /// answers travel through the request's own input round trips. Returns the arguments
    /// the task will run with.
    fn prepare(_cx: &Context, args: Value) -> Result<Value, RpcError> {
        Ok(args)
    }
}
