//! A component whose `describe` is invalid: an input schema that is not JSON, and a name
//! given twice. The host must refuse it at load time and say why.

use snodo_guest::bindings::exports::snodo::tasks::tools::Guest;
use snodo_guest::bindings::snodo::tasks::types::{Outcome, RpcError, TaskMode, Tool, Work};

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

snodo_guest::bindings::__export_executor!(Bad with_types_in snodo_guest::bindings);
