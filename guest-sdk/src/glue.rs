//! Conversions between the SDK's types and the generated bindings, used by
//! [`crate::export_tools!`]. Not a stable interface.

use serde_json::Value;

use crate::bindings::snodo::tasks::types;
use crate::{Content, Context, Mode, Outcome, RpcError, Tool, ToolResult};

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

/// `describe` for one tool.
pub fn describe<T: Tool>() -> types::Tool {
    let spec = T::spec();
    types::Tool {
        name: T::NAME.to_owned(),
        title: spec.title,
        description: spec.description,
        input_schema: spec.input_schema.to_string(),
        output_schema: spec.output_schema.map(|s| s.to_string()),
        mode: mode(spec.mode),
        required_capabilities: spec.required_capabilities.map(|c| c.to_string()),
        has_prepare: spec.has_prepare,
        has_mode_rule: spec.has_mode_rule,
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

/// `choose-mode` for one tool.
pub fn choose_mode<T: Tool>(arguments: &str) -> types::TaskMode {
    match parse_arguments(arguments) {
        Ok(args) => mode(T::choose_mode(&args)),
        Err(_) => mode(T::spec().mode),
    }
}

/// `prepare` for one tool.
pub fn prepare<T: Tool>(arguments: &str) -> Result<String, types::RpcError> {
    let cx = Context {
        task_id: None,
        idempotency_key: String::new(),
        attempt: 0,
    };
    let args = parse_arguments(arguments).map_err(rpc_error)?;
    T::prepare(&cx, args)
        .map(|v| v.to_string())
        .map_err(rpc_error)
}

/// `execute` for one tool.
pub fn execute<T: Tool>(work: types::Work) -> types::Outcome {
    let cx = Context {
        task_id: work.task_id,
        idempotency_key: work.idempotency_key,
        attempt: work.attempt,
    };
    let args = match parse_arguments(&work.arguments).and_then(|v| {
        serde_json::from_value::<T::Args>(v).map_err(|e| {
            RpcError::invalid_params(format!("invalid arguments for {}: {e}", T::NAME))
        })
    }) {
        Ok(a) => a,
        Err(e) => return types::Outcome::Failed(rpc_error(e)),
    };
    match T::run(&cx, args) {
        Outcome::Completed(r) => types::Outcome::Completed(result(r)),
        Outcome::Failed(e) => types::Outcome::Failed(rpc_error(e)),
        Outcome::Retry {
            error,
            status_message,
        } => types::Outcome::Retry(types::RetryRequest {
            error: rpc_error(error),
            status_message,
        }),
    }
}
