//! The whole of a guest bound to snodo:tasks@0.1.0 directly (not through the SDK, which
//! targets a later version) that exists for what the host makes of its description: its
//! tools are synchronous and never run. A hostile fixture includes this file as a module
//! with `#[path]`, implements [`Describe`] and exports itself with
//! `describe_only::bindings::export!`; what it describes is all that sets it apart.

/// The bindings of snodo:tasks@0.1.0's executor world.
pub(crate) mod bindings {
    wit_bindgen::generate!({
        world: "executor",
        path: "../../wit/deps/tasks-0.1.0",
    });
}

use bindings::exports::snodo::tasks::tools::Guest;
use bindings::snodo::tasks::types::{Outcome, RpcError, TaskMode, Work};

pub(crate) use bindings::snodo::tasks::types::Tool;

/// What a describe-only guest answers to `describe`.
pub(crate) trait Describe {
    /// The tools it declares.
    fn describe() -> Vec<Tool>;
}

/// A synchronous tool `name` whose input schema is `input_schema`, as written.
pub(crate) fn tool(name: &str, description: Option<&str>, input_schema: String) -> Tool {
    Tool {
        name: name.into(),
        title: None,
        description: description.map(Into::into),
        input_schema,
        output_schema: None,
        mode: TaskMode::Sync,
        required_capabilities: None,
        has_prepare: false,
        has_mode_rule: false,
    }
}

impl<T: Describe> Guest for T {
    fn describe() -> Vec<Tool> {
        <T as Describe>::describe()
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
