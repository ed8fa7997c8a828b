//! Conversions between the SDK's types and the generated bindings, used by
//! [`crate::export_tools!`]. Not a stable interface.

use serde_json::Value;

use crate::bindings::exports::snodo::tasks0_4_0::modes;
use crate::bindings::snodo::tasks0_1_0::types;
use crate::bindings::snodo::tasks0_3_0::outcomes;
use crate::{
    Caller, ChooseMode, Content, Context, Dispatch, Mode, ModeCall, ModeChoice, Outcome, Prepare,
    RpcError, Tool, ToolResult,
};

fn mode(m: Mode) -> types::TaskMode {
    match m {
        Mode::Sync => types::TaskMode::Sync,
        Mode::Optional => types::TaskMode::Optional,
        Mode::Required => types::TaskMode::Required,
    }
}

fn rpc_error(e: RpcError) -> types::RpcError {
    types::RpcError {
        code: e.code,
        message: e.message,
        data: e.data.map(|d| d.to_string()),
    }
}

fn content(c: Content) -> types::ContentBlock {
    match c {
        Content::Text(t) => types::ContentBlock::Text(t),
        Content::Image { data, mime_type } => {
            types::ContentBlock::Image(types::Media { data, mime_type })
        }
        Content::Audio { data, mime_type } => {
            types::ContentBlock::Audio(types::Media { data, mime_type })
        }
        Content::Resource {
            uri,
            mime_type,
            text,
        } => types::ContentBlock::EmbeddedResource(types::EmbeddedResource {
            uri,
            mime_type,
            text: Some(text),
            blob: None,
        }),
        Content::ResourceBlob {
            uri,
            mime_type,
            blob,
        } => types::ContentBlock::EmbeddedResource(types::EmbeddedResource {
            uri,
            mime_type,
            text: None,
            blob: Some(blob),
        }),
        Content::ResourceLink { uri, name } => {
            types::ContentBlock::ResourceLink(types::ResourceLink {
                uri,
                name,
                mime_type: None,
                description: None,
            })
        }
    }
}

fn result(r: ToolResult) -> types::ToolResult {
    types::ToolResult {
        content: r.content.into_iter().map(content).collect(),
        structured_content: r.structured_content.map(|v| v.to_string()),
        is_error: r.is_error,
    }
}

/// `describe` for one tool. Whether it has a mode rule or a prepare phase is found by the
/// export macro (it knows which traits the tool implements), never declared twice.
pub fn describe<T: Tool>(has_mode_rule: bool, has_prepare: bool) -> types::Tool {
    let spec = T::spec();
    let mut input = spec
        .input_schema
        .unwrap_or_else(crate::schema::of::<T::Args>);
    for refine in &spec.refine_input {
        refine(&mut input);
    }
    for (property, header) in &spec.header_params {
        let mut at = &mut input;
        for name in property.split('.') {
            at = &mut at["properties"][name];
        }
        at["x-mcp-header"] = Value::String(header.clone());
    }
    types::Tool {
        name: T::NAME.to_owned(),
        title: spec.title,
        description: spec.description,
        input_schema: input.to_string(),
        output_schema: spec.output_schema.map(|s| s.to_string()),
        mode: mode(spec.mode),
        required_capabilities: spec.required_capabilities.map(|c| c.to_string()),
        has_prepare,
        has_mode_rule,
    }
}

/// The error for a call naming a tool this component does not have.
pub fn unknown_tool(name: &str) -> types::RpcError {
    rpc_error(RpcError::invalid_params(format!("unknown tool: {name}")))
}

fn parse_arguments(arguments: &str) -> Result<Value, RpcError> {
    serde_json::from_str(arguments)
        .map_err(|e| RpcError::invalid_params(format!("arguments are not JSON: {e}")))
}

fn typed_arguments<T: Tool>(arguments: &str) -> Result<T::Args, RpcError> {
    parse_arguments(arguments).and_then(|v| {
        serde_json::from_value::<T::Args>(v).map_err(|e| {
            RpcError::invalid_params(format!("invalid arguments for {}: {e}", T::NAME))
        })
    })
}

fn request_context() -> Context {
    Context {
        task_id: None,
        idempotency_key: String::new(),
        attempt: 0,
    }
}

/// Which optional phases a tool implements, found by method resolution on a concrete type
/// (autoref specialisation): `(&Hooks::<T>::new()).has_mode_rule()` resolves to the
/// `Has…` impl when `T` implements the trait, and to the `Lacks…` impl otherwise.
pub struct Hooks<T>(std::marker::PhantomData<T>);

impl<T> Hooks<T> {
    /// The probe for `T`.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

/// `T` implements [`ChooseMode`].
pub trait HasChooseMode {
    /// Yes.
    fn has_mode_rule(&self) -> bool;
    /// `tools.choose-mode` (0.1.0) through the tool's rule, the caller read from the host.
    fn choose_mode(&self, arguments: &str) -> types::TaskMode;
    /// `modes.choose` (0.4.0) through the tool's rule.
    fn choose(&self, call: modes::Call) -> modes::Choice;
}

impl<T: ChooseMode> HasChooseMode for Hooks<T> {
    fn has_mode_rule(&self) -> bool {
        true
    }
    fn choose_mode(&self, arguments: &str) -> types::TaskMode {
        let call = ModeCall {
            caller: Caller::current(),
            client_capabilities: crate::caller::client_capabilities(),
        };
        match typed_arguments::<T>(arguments) {
            Ok(args) => mode(T::choose_mode(&args, &call).mode),
            Err(_) => mode(T::spec().mode),
        }
    }
    fn choose(&self, call: modes::Call) -> modes::Choice {
        let facts = ModeCall {
            caller: Caller::from_wit(call.caller),
            client_capabilities: serde_json::from_str(&call.client_capabilities)
                .unwrap_or_else(|_| Value::Object(Default::default())),
        };
        match typed_arguments::<T>(&call.arguments) {
            Ok(args) => choice(T::choose_mode(&args, &facts)),
            Err(_) => choice(T::spec().mode.into()),
        }
    }
}

/// `T` does not implement [`ChooseMode`].
pub trait LacksChooseMode {
    /// No.
    fn has_mode_rule(&self) -> bool;
    /// The spec's mode.
    fn choose_mode(&self, arguments: &str) -> types::TaskMode;
    /// The spec's mode.
    fn choose(&self, call: modes::Call) -> modes::Choice;
}

impl<T: Tool> LacksChooseMode for &Hooks<T> {
    fn has_mode_rule(&self) -> bool {
        false
    }
    fn choose_mode(&self, _arguments: &str) -> types::TaskMode {
        mode(T::spec().mode)
    }
    fn choose(&self, _call: modes::Call) -> modes::Choice {
        choice(T::spec().mode.into())
    }
}

/// A rule's decision on the wire.
pub fn choice(c: ModeChoice) -> modes::Choice {
    modes::Choice {
        mode: mode(c.mode),
        ttl_ms: c.ttl_ms,
        poll_interval_ms: c.poll_interval_ms,
    }
}

/// `modes.choose` for a tool this component does not have: synchronous, which the host
/// never asks for (it calls rules only for the tools the component described).
pub fn unknown_choice() -> modes::Choice {
    choice(Mode::Sync.into())
}

/// `T` implements [`Prepare`].
pub trait HasPrepare {
    /// Yes.
    fn has_prepare(&self) -> bool;
    /// `prepare` through the tool's phase.
    fn prepare(&self, arguments: &str) -> Result<String, types::RpcError>;
}

impl<T: Prepare> HasPrepare for Hooks<T> {
    fn has_prepare(&self) -> bool {
        true
    }
    fn prepare(&self, arguments: &str) -> Result<String, types::RpcError> {
        let args = typed_arguments::<T>(arguments).map_err(rpc_error)?;
        let prepared = T::prepare(&request_context(), args).map_err(rpc_error)?;
        serde_json::to_string(&prepared)
            .map_err(|e| rpc_error(RpcError::internal(format!("prepared arguments: {e}"))))
    }
}

/// `T` does not implement [`Prepare`].
pub trait LacksPrepare {
    /// No.
    fn has_prepare(&self) -> bool;
    /// The arguments unchanged.
    fn prepare(&self, arguments: &str) -> Result<String, types::RpcError>;
}

impl<T: Tool> LacksPrepare for &Hooks<T> {
    fn has_prepare(&self) -> bool {
        false
    }
    fn prepare(&self, arguments: &str) -> Result<String, types::RpcError> {
        Ok(arguments.to_owned())
    }
}

/// The context and the arguments (as written) of `work`.
fn context_of(work: types::Work) -> (Context, String) {
    let cx = Context {
        task_id: work.task_id,
        idempotency_key: work.idempotency_key,
        attempt: work.attempt,
    };
    (cx, work.arguments)
}

/// Runs one tool on `work`.
fn run<T: Tool>(work: types::Work) -> Outcome {
    let (cx, arguments) = context_of(work);
    match typed_arguments::<T>(&arguments) {
        Ok(args) => T::run(&cx, args),
        Err(e) => Outcome::Failed(e),
    }
}

/// Runs `work`, whatever tool it names, through `D`.
fn dispatch<D: Dispatch>(work: types::Work) -> Outcome {
    let tool = work.tool.clone();
    let (cx, arguments) = context_of(work);
    match parse_arguments(&arguments) {
        Ok(args) => D::dispatch(&cx, &tool, args),
        Err(e) => Outcome::Failed(e),
    }
}

/// `tools.execute` (0.1.0) for one tool: what a host that does not know 0.3.0 calls. A
/// failure's status message has no place in it.
pub fn execute<T: Tool>(work: types::Work) -> types::Outcome {
    outcome_v1(run::<T>(work))
}

/// `execution.execute` (0.3.0) for one tool.
pub fn execute_v3<T: Tool>(work: types::Work) -> outcomes::Outcome {
    outcome_v3(run::<T>(work))
}

/// `tools.execute` (0.1.0) of a dispatching component.
pub fn dispatch_v1<D: Dispatch>(work: types::Work) -> types::Outcome {
    outcome_v1(dispatch::<D>(work))
}

/// `execution.execute` (0.3.0) of a dispatching component.
pub fn dispatch_v3<D: Dispatch>(work: types::Work) -> outcomes::Outcome {
    outcome_v3(dispatch::<D>(work))
}

fn outcome_v1(outcome: Outcome) -> types::Outcome {
    match outcome {
        Outcome::Completed(r) => types::Outcome::Completed(result(r)),
        Outcome::Failed(e) | Outcome::FailedWithStatus { error: e, .. } => {
            types::Outcome::Failed(rpc_error(e))
        }
        Outcome::Retry {
            error,
            status_message,
        } => types::Outcome::Retry(types::RetryRequest {
            error: rpc_error(error),
            status_message,
        }),
    }
}

fn outcome_v3(outcome: Outcome) -> outcomes::Outcome {
    match outcome {
        Outcome::Completed(r) => outcomes::Outcome::Completed(result(r)),
        Outcome::Failed(e) => outcomes::Outcome::Failed(outcomes::Failure {
            error: rpc_error(e),
            status_message: None,
        }),
        Outcome::FailedWithStatus {
            error,
            status_message,
        } => outcomes::Outcome::Failed(outcomes::Failure {
            error: rpc_error(error),
            status_message: Some(status_message),
        }),
        Outcome::Retry {
            error,
            status_message,
        } => outcomes::Outcome::Retry(types::RetryRequest {
            error: rpc_error(error),
            status_message,
        }),
    }
}

// ---- the catalog (resources, prompts, completions) ----

use crate::bindings::snodo::tasks0_2_0::catalog_types as ct;
use crate::catalog::Body;
use crate::{Contents, Prompt, Resource, Role, Vars};

/// A catalog with nothing in it yet.
pub fn empty_catalog() -> ct::Catalog {
    ct::Catalog {
        resources: Vec::new(),
        resource_templates: Vec::new(),
        prompts: Vec::new(),
        completions: false,
    }
}

/// Adds one resource (or template) to `c`.
pub fn add_resource<R: Resource>(c: &mut ct::Catalog) {
    let spec = R::spec();
    if R::URI.contains('{') {
        c.resource_templates.push(ct::ResourceTemplate {
            uri_template: R::URI.to_owned(),
            name: spec.name,
            title: spec.title,
            description: spec.description,
            mime_type: spec.mime_type,
        });
        c.completions = true;
    } else {
        c.resources.push(ct::Resource {
            uri: R::URI.to_owned(),
            name: spec.name,
            title: spec.title,
            description: spec.description,
            mime_type: spec.mime_type,
        });
    }
}

/// Adds one prompt to `c`.
pub fn add_prompt<P: Prompt>(c: &mut ct::Catalog) {
    let spec = P::spec();
    c.prompts.push(ct::Prompt {
        name: P::NAME.to_owned(),
        title: spec.title,
        description: spec.description,
        arguments: spec
            .arguments
            .into_iter()
            .map(|(name, description, required)| ct::PromptArgument {
                name,
                description,
                required,
            })
            .collect(),
    });
    c.completions = true;
}

/// Whether a read is for `R` (its URI, or its template).
pub fn resource_matches<R: Resource>(request: &ct::ResourceRequest) -> bool {
    request.template.as_deref().unwrap_or(&request.uri) == R::URI
}

fn contents(c: Contents) -> ct::ResourceContents {
    let (text, blob) = match c.body {
        Body::Text(t) => (Some(t), None),
        Body::Blob(b) => (None, Some(b)),
    };
    ct::ResourceContents {
        uri: c.uri,
        mime_type: c.mime_type,
        text,
        blob,
    }
}

/// `read-resource` for `R`.
pub fn read_resource<R: Resource>(
    request: ct::ResourceRequest,
) -> Result<Vec<ct::ResourceContents>, types::RpcError> {
    let vars = Vars(request.variables);
    R::read(&request_context(), &request.uri, &vars)
        .map(|c| c.into_iter().map(contents).collect())
        .map_err(rpc_error)
}

/// The error for a read of a URI no listed resource serves.
pub fn unknown_resource(uri: &str) -> types::RpcError {
    rpc_error(
        RpcError::invalid_params("Resource not found").with_data(serde_json::json!({ "uri": uri })),
    )
}

/// `get-prompt` for `P`.
pub fn get_prompt<P: Prompt>(arguments: &str) -> Result<ct::PromptResult, types::RpcError> {
    let args = parse_arguments(arguments)
        .and_then(|v| {
            serde_json::from_value::<P::Args>(v).map_err(|e| {
                RpcError::invalid_params(format!("invalid arguments for prompt {}: {e}", P::NAME))
            })
        })
        .map_err(rpc_error)?;
    let rendered = P::get(&request_context(), args).map_err(rpc_error)?;
    Ok(ct::PromptResult {
        description: rendered.description,
        messages: rendered
            .messages
            .into_iter()
            .map(|(role, c)| ct::PromptMessage {
                role: match role {
                    Role::User => ct::Role::User,
                    Role::Assistant => ct::Role::Assistant,
                },
                content: content(c),
            })
            .collect(),
    })
}

/// The error for a prompt this component does not have.
pub fn unknown_prompt(name: &str) -> types::RpcError {
    rpc_error(RpcError::invalid_params(format!("unknown prompt: {name}")))
}

fn completion(mut values: Vec<String>) -> ct::Completion {
    let total = values.len();
    let has_more = total > 100;
    values.truncate(100);
    ct::Completion {
        values,
        total: u32::try_from(total).ok(),
        has_more,
    }
}

/// No suggestions.
pub fn no_completion() -> ct::Completion {
    completion(Vec::new())
}

/// `complete` for an argument of `P`.
pub fn complete_prompt<P: Prompt>(argument: &str, value: &str, context: &str) -> ct::Completion {
    let context =
        serde_json::from_str::<serde_json::Map<String, Value>>(context).unwrap_or_default();
    completion(P::complete(argument, value, &context))
}

/// `complete` for a variable of `R`'s template.
pub fn complete_resource<R: Resource>(variable: &str, value: &str) -> ct::Completion {
    completion(R::complete(variable, value))
}
