//! The [`Tool`] trait, its description ([`ToolSpec`]), and the two optional phases a tool
//! can add by implementing them: [`ChooseMode`] and [`Prepare`].

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Context, Outcome, RpcError};

/// How a tool runs when called. The host's configuration may pin another mode.
///
/// ```
/// use snodo_guest::{Mode, ToolSpec};
/// // Long work: always a durable task.
/// let spec = ToolSpec::new().mode(Mode::Required);
/// # let _ = spec;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Always synchronously, inside the request; never a task.
    Sync,
    /// As a task when the request declares the tasks extension, synchronously otherwise
    /// (or as [`ChooseMode`] decides per call).
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
/// let spec = ToolSpec::with_input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}}))
///     .title("Export")
///     .description("Exports a report, asking for confirmation first")
///     .mode(Mode::Required);
/// # let _ = spec;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub(crate) title: Option<String>,
    pub(crate) description: Option<String>,
    /// `None`: derived from the tool's `Args`.
    pub(crate) input_schema: Option<Value>,
    pub(crate) refine_input: Vec<fn(&mut Value)>,
    /// (property path, header name) of arguments mirrored into `Mcp-Param-*` headers.
    pub(crate) header_params: Vec<(String, String)>,
    pub(crate) output_schema: Option<Value>,
    pub(crate) mode: Mode,
    pub(crate) required_capabilities: Option<Value>,
}

impl Default for ToolSpec {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolSpec {
    /// A synchronous tool whose input schema is derived from its `Args` type (with
    /// `#[derive(JsonSchema)]`; doc comments become descriptions).
    ///
    /// ```
    /// let spec = snodo_guest::ToolSpec::new();
    /// # let _ = spec;
    /// ```
    pub fn new() -> Self {
        Self {
            title: None,
            description: None,
            input_schema: None,
            refine_input: Vec::new(),
            header_params: Vec::new(),
            output_schema: None,
            mode: Mode::Sync,
            required_capabilities: None,
        }
    }

    /// A synchronous tool taking arguments described by `input_schema`, written by hand
    /// (for `Args` types without a derivable schema, such as `serde_json::Value`).
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::with_input_schema(json!({"type": "object"}));
    /// # let _ = spec;
    /// ```
    pub fn with_input_schema(input_schema: Value) -> Self {
        Self {
            input_schema: Some(input_schema),
            ..Self::new()
        }
    }

    /// Adjusts the input schema (derived or given) before it is published: constraints a
    /// type cannot say, such as a minimum or a pattern.
    ///
    /// ```
    /// let spec = snodo_guest::ToolSpec::new().refine_input(|schema| {
    ///     schema["properties"]["rows"]["maximum"] = 1_000_000.into();
    /// });
    /// # let _ = spec;
    /// ```
    pub fn refine_input(mut self, refine: fn(&mut Value)) -> Self {
        self.refine_input.push(refine);
        self
    }

    /// Marks the argument `property` (a string, integer or boolean; `a.b` for a property
    /// of an object argument) for mirroring into the HTTP header `Mcp-Param-{header}`
    /// (`x-mcp-header`, SEP-2243): clients send its value in that header too, so gateways
    /// and load balancers can route on it without reading the body, and the host refuses a
    /// call whose header does not match the argument. The host checks the marking when it
    /// loads the component: a header name that is not an HTTP token, a name used twice or
    /// a property of another type refuses the component, naming the tool.
    ///
    /// ```
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Args { region: String, rows: u32 }
    /// let spec = snodo_guest::ToolSpec::new().header_param("region", "Region");
    /// # let _ = spec;
    /// ```
    ///
    /// A derived schema can carry the marking itself, with
    /// `#[schemars(extend("x-mcp-header" = "Region"))]` on the field.
    pub fn header_param(mut self, property: &str, header: &str) -> Self {
        self.header_params
            .push((property.to_owned(), header.to_owned()));
        self
    }

    /// The output schema derived from `T`, the type of the result's structured content
    /// (see [`crate::ToolResult::structured_from`]).
    ///
    /// ```
    /// #[derive(serde::Serialize, schemars::JsonSchema)]
    /// struct Sum { rows: u64, sum: u64 }
    /// let spec = snodo_guest::ToolSpec::new().output::<Sum>();
    /// # let _ = spec;
    /// ```
    pub fn output<T: JsonSchema + Serialize>(mut self) -> Self {
        self.output_schema = Some(crate::schema::of::<T>());
        self
    }

    /// A JSON Schema object for the result's structured content.
    ///
    /// ```
    /// # use serde_json::json;
    /// let spec = snodo_guest::ToolSpec::new()
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
    /// let spec = snodo_guest::ToolSpec::new().mode(snodo_guest::Mode::Optional);
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
    /// let spec = snodo_guest::ToolSpec::new().requires(json!({"sampling": {}}));
    /// # let _ = spec;
    /// ```
    pub fn requires(mut self, capabilities: Value) -> Self {
        self.required_capabilities = Some(capabilities);
        self
    }
}

text_builders!(ToolSpec, "new()");

/// One tool. Implement it on a unit struct and list the struct in [`crate::export_tools!`].
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
/// use snodo_guest::{Context, Mode, Outcome, Tool, ToolResult, ToolSpec};
///
/// /// What to count.
/// #[derive(Deserialize, JsonSchema)]
/// struct Args {
///     /// How many rows.
///     rows: u32,
/// }
///
/// struct CountRows;
///
/// impl Tool for CountRows {
///     const NAME: &'static str = "count_rows";
///     type Args = Args;
///
///     fn spec() -> ToolSpec {
///         ToolSpec::new().mode(Mode::Optional)
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

    /// The arguments. Their JSON Schema is the tool's `inputSchema` (unless the spec gives
    /// one), and the host checks every call against it before anything else: a bad call is
    /// -32602 on the call, in every mode, and no task is created. Use `serde_json::Value`
    /// with [`ToolSpec::with_input_schema`] to decode nothing.
    type Args: DeserializeOwned + JsonSchema;

    /// The tool's description.
    fn spec() -> ToolSpec;

    /// Runs one execution.
    fn run(cx: &Context, args: Self::Args) -> Outcome;
}

/// A per-call rule for an [`Mode::Optional`] tool: whether this call runs as a task or
/// synchronously. Implementing it is all it takes: the export macro finds it, and the host
/// refuses a component whose tool has a rule but is not optional.
///
/// ```
/// # use schemars::JsonSchema;
/// # use serde::Deserialize;
/// # use snodo_guest::*;
/// # #[derive(Deserialize, JsonSchema)] struct Args { rows: u64 }
/// # struct Report;
/// # impl Tool for Report {
/// #     const NAME: &'static str = "report";
/// #     type Args = Args;
/// #     fn spec() -> ToolSpec { ToolSpec::new().mode(Mode::Optional) }
/// #     fn run(_: &Context, a: Args) -> Outcome { ToolResult::text(a.rows.to_string()).into() }
/// # }
/// impl ChooseMode for Report {
///     fn choose_mode(args: &Args, call: &ModeCall) -> ModeChoice {
///         if args.rows <= 100_000 {
///             return Mode::Sync.into();
///         }
///         // A batch account's large reports are kept a week and polled slowly.
///         if call.caller.subject.starts_with("batch-") {
///             return ModeChoice::from(Mode::Optional).ttl_ms(7 * 86_400_000).poll_interval_ms(30_000);
///         }
///         Mode::Optional.into()
///     }
/// }
/// # snodo_guest::export_tools!(Report);
/// ```
pub trait ChooseMode: Tool {
    /// [`Mode::Sync`] to answer on the call; [`Mode::Optional`] or [`Mode::Required`] to
    /// become a task (when the client supports tasks), with the task's TTL and poll
    /// interval if the rule sets them. `call` says who calls and what its client can do.
    fn choose_mode(args: &Self::Args, call: &crate::ModeCall) -> crate::ModeChoice;
}

/// An input phase that runs inside the request, before a task is created: it may ask for
/// input with [`Context::await_input`] (answered through the request's own round trips)
/// and returns the arguments the task will run with. Implementing it is all it takes; the
/// host refuses a component whose synchronous tool has one (it could never run).
///
/// ```
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # use snodo_guest::*;
/// #[derive(Deserialize, Serialize, JsonSchema)]
/// struct Args { path: String, #[serde(default)] confirmed: bool }
/// # struct Delete;
/// # impl Tool for Delete {
/// #     const NAME: &'static str = "delete";
/// #     type Args = Args;
/// #     fn spec() -> ToolSpec { ToolSpec::new().mode(Mode::Required) }
/// #     fn run(_: &Context, a: Args) -> Outcome { ToolResult::text(a.path).into() }
/// # }
/// impl Prepare for Delete {
///     fn prepare(cx: &Context, mut args: Args) -> Result<Args, RpcError> {
///         let form = Form::new(format!("Delete {}?", args.path)).boolean("ok", "Delete");
///         let answer = cx.elicit("confirm", form).map_err(|e| RpcError::internal(e.to_string()))?;
///         args.confirmed = answer.bool("ok") == Some(true);
///         Ok(args)
///     }
/// }
/// # snodo_guest::export_tools!(Delete);
/// ```
pub trait Prepare: Tool<Args: Serialize> {
    /// Returns the arguments the task runs with, or the call's error.
    fn prepare(cx: &Context, args: Self::Args) -> Result<Self::Args, RpcError>;
}

/// A component whose tools are named by the host rather than built in: every call, of
/// whatever tool, reaches [`Dispatch::dispatch`] with the name it was called by and its
/// arguments as given. The gateway serves an upstream MCP server's tools this way: the
/// host lists them, serves each under its own name and settings, and tells the component
/// which upstream tool a name stands for through the tool's grants (its environment).
///
/// A component describes at least one tool: the type's own [`Tool`] (its name and spec)
/// is what it describes; a host that serves it under other names ignores that
/// description. Export it with [`export_dispatch!`](crate::export_dispatch).
///
/// ```
/// use serde_json::{Value, json};
/// use snodo_guest::{Context, Dispatch, Outcome, Tool, ToolResult, ToolSpec};
///
/// struct Echo;
///
/// impl Tool for Echo {
///     const NAME: &'static str = "echo";
///     type Args = Value;
///     fn spec() -> ToolSpec {
///         ToolSpec::with_input_schema(json!({"type": "object"}))
///     }
///     fn run(cx: &Context, args: Value) -> Outcome {
///         Self::dispatch(cx, Self::NAME, args)
///     }
/// }
///
/// impl Dispatch for Echo {
///     fn dispatch(_cx: &Context, tool: &str, args: Value) -> Outcome {
///         ToolResult::text(format!("{tool}: {args}")).into()
///     }
/// }
///
/// snodo_guest::export_dispatch!(Echo);
/// ```
pub trait Dispatch: Tool<Args = Value> {
    /// Runs `tool` with `arguments`: the result, a protocol error, or a retry.
    fn dispatch(cx: &Context, tool: &str, arguments: Value) -> Outcome;
}
