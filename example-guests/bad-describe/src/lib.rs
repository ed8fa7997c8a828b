//! A component whose `describe` is invalid: an input schema that is not JSON, and a name
//! given twice. The host must refuse it at load time and say why. Bound to
//! snodo:tasks@0.1.0 directly, not through the SDK (which targets 0.2.0): this component is
//! also the proof that the host keeps serving 0.1.0 components unchanged.

#[path = "../../shared/describe_only.rs"]
mod describe_only;

use describe_only::{Describe, Tool, tool};

struct Bad;

impl Describe for Bad {
    fn describe() -> Vec<Tool> {
        vec![
            tool("dup", None, r#"{"type":"object"}"#.into()),
            tool("dup", None, "{not json".into()),
        ]
    }
}

describe_only::bindings::export!(Bad with_types_in describe_only::bindings);
