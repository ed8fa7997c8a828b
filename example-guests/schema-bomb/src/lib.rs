//! A component whose one tool's input schema holds 2,000 distinct patterns: compiled, they
//! would keep most of a gigabyte resident. The host must refuse it at load, naming the
//! bound, before compiling any.

/// Bound to snodo:tasks@0.1.0 directly: a hostile component needs no SDK.
mod bindings {
    wit_bindgen::generate!({
        world: "executor",
        path: "../../wit/deps/tasks-0.1.0",
    });
}

use bindings::exports::snodo::tasks::tools::Guest;
use bindings::snodo::tasks::types::{Outcome, RpcError, TaskMode, Tool, Work};

struct Bomb;

const PATTERNS: usize = 2_000;

/// `{"type":"object","properties":{"p0":{"pattern":"^(x0|y)+[a-z]{1,64}$"}, …}}`.
fn schema() -> String {
    let properties: Vec<String> = (0..PATTERNS)
        .map(|i| format!(r#""p{i}":{{"type":"string","pattern":"^(x{i}|y)+[a-z]{{1,64}}$"}}"#))
        .collect();
    format!(r#"{{"type":"object","properties":{{{}}}}}"#, properties.join(","))
}

impl Guest for Bomb {
    fn describe() -> Vec<Tool> {
        vec![Tool {
            name: "bomb".into(),
            title: None,
            description: Some("a schema with too many patterns".into()),
            input_schema: schema(),
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

bindings::export!(Bomb with_types_in bindings);
