//! A component whose `describe` waits a minute before it answers, in an import (a sleep on
//! the WASI clock), where no execution deadline counts: the load-time wall clock must stop
//! it, so that it cannot hold a deploy or a node's start.

/// Bound to snodo:tasks@0.1.0 directly, as `bad-describe` is.
mod bindings {
    wit_bindgen::generate!({
        world: "executor",
        path: "../../wit/deps/tasks-0.1.0",
    });
}

use bindings::exports::snodo::tasks::tools::Guest;
use bindings::snodo::tasks::types::{Outcome, RpcError, TaskMode, Tool, Work};

struct Slow;

impl Guest for Slow {
    fn describe() -> Vec<Tool> {
        std::thread::sleep(std::time::Duration::from_secs(60));
        vec![Tool {
            name: "slow".into(),
            title: None,
            description: None,
            input_schema: r#"{"type":"object"}"#.into(),
            output_schema: None,
            mode: TaskMode::Sync,
            required_capabilities: None,
            has_prepare: false,
            has_mode_rule: false,
        }]
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

bindings::export!(Slow with_types_in bindings);
