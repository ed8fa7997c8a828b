//! A component whose `describe` waits a minute before it answers, in an import (a sleep on
//! the WASI clock), where no execution deadline counts: the load-time wall clock must stop
//! it, so that it cannot hold a deploy or a node's start. Bound to snodo:tasks@0.1.0
//! directly, as `bad-describe` is.

#[path = "../../shared/describe_only.rs"]
mod describe_only;

use describe_only::{Describe, Tool, tool};

struct Slow;

impl Describe for Slow {
    fn describe() -> Vec<Tool> {
        std::thread::sleep(std::time::Duration::from_secs(60));
        vec![tool("slow", None, r#"{"type":"object"}"#.into())]
    }
}

describe_only::bindings::export!(Slow with_types_in describe_only::bindings);
