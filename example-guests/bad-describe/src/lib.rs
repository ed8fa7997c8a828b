//! A component whose `describe` is invalid: an input schema that is not JSON, and a name
//! given twice. The host must refuse it at load time and say why.

/// Bound to snodo:tasks@0.1.0 directly, not through the SDK (which targets 0.2.0): this
/// component is also the proof that the host keeps serving 0.1.0 components unchanged.
mod bindings {
    wit_bindgen::generate!({
        world: "executor",
        path: "../../wit/deps/tasks-0.1.0",
    });
}

use bindings::exports::snodo::tasks::tools::Guest;
use bindings::snodo::tasks::types::{Outcome, RpcError, TaskMode, Tool, Work};

struct Bad;

fn tool(name: &str, schema: &str) -> Tool {
    Tool {
        name: name.into(),
        title: None,
        description: None,
        input_schema: schema.into(),
        output_schema: None,
        mode: TaskMode::Sync,
        required_capabilities: None,
        has_prepare: false,
        has_mode_rule: false,
    }
}

impl Guest for Bad {
    fn describe() -> Vec<Tool> {
        vec![tool("dup", r#"{"type":"object"}"#), tool("dup", "{not json")]
    }

    fn choose_mode(_tool: String, _arguments: String) -> TaskMode {
        TaskMode::Sync
    }

    fn prepare(_tool: String, arguments: String) -> Result<String, RpcError> {
        Ok(arguments)
    }

    fn execute(_work: Work) -> Outcome {
        Outcome::Failed(RpcError {
            code: -32603,
            message: "never runs".into(),
            data: None,
        })
    }
}

bindings::export!(Bad with_types_in bindings);
