//! A component whose one tool's input schema holds 2,000 distinct patterns: compiled, they
//! would keep most of a gigabyte resident. The host must refuse it at load, naming the
//! bound, before compiling any.

/// Bound to snodo:tasks@0.1.0 directly: a hostile component needs no SDK.
#[path = "../../shared/describe_only.rs"]
mod describe_only;

use describe_only::{Describe, Tool, tool};

struct Bomb;

const PATTERNS: usize = 2_000;

/// `{"type":"object","properties":{"p0":{"pattern":"^(x0|y)+[a-z]{1,64}$"}, …}}`.
fn schema() -> String {
    let properties: Vec<String> = (0..PATTERNS)
        .map(|i| format!(r#""p{i}":{{"type":"string","pattern":"^(x{i}|y)+[a-z]{{1,64}}$"}}"#))
        .collect();
    format!(r#"{{"type":"object","properties":{{{}}}}}"#, properties.join(","))
}

impl Describe for Bomb {
    fn describe() -> Vec<Tool> {
        vec![tool(
            "bomb",
            Some("a schema with too many patterns"),
            schema(),
        )]
    }
}

describe_only::bindings::export!(Bomb with_types_in describe_only::bindings);
