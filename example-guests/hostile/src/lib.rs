//! Hostile guests for the host's containment tests. Implemented on the raw bindings, so
//! they can return what the SDK would never produce.

/// Bound to snodo:tasks@0.1.0 directly, not through the SDK (which targets 0.2.0): this
/// component is also the proof that the host keeps serving 0.1.0 components unchanged.
mod bindings {
    wit_bindgen::generate!({
        world: "executor",
        path: "../../wit/deps/tasks-0.1.0",
    });
}

use bindings::exports::snodo::tasks::tools::Guest;
use bindings::snodo::tasks::context;
use bindings::snodo::tasks::types::{
    ContentBlock, EmbeddedResource, Outcome, RpcError, TaskMode, Tool, ToolResult, Work,
};

struct Hostile;

const TOOLS: [&str; 16] = [
    "counter",
    "probe",
    "spin",
    "memory_bomb",
    "trap",
    "invalid_outcome",
    "ignore_cancel",
    "chatty",
    "reserved_code",
    "big_result",
    "status_flood",
    "hold",
    "broken_promise",
    "burn",
    "backtrack",
    "branches",
];

/// `backtrack`'s schema: a nested quantifier that takes exponential time on a backtracking
/// regex engine for a string of `a`s that ends in something else. The host's engine is
/// linear, so checking it costs what reading it costs.
const BACKTRACK_SCHEMA: &str = r#"{"type":"object","properties":{"items":{"type":"array","items":{"type":"string","pattern":"^(a+)+$"}}}}"#;

/// `branches`' schema: two alternatives that both take an array and recurse into the same
/// definition, the shape schemars emits for a recursive untagged enum. Collecting the
/// errors of a value that fails at the bottom visits both at every level: 2^depth visits.
const BRANCHES_SCHEMA: &str = r##"{"type":"object","properties":{"v":{"$ref":"#/$defs/node"}},"$defs":{"node":{"anyOf":[{"type":"array","items":{"$ref":"#/$defs/node"},"minItems":1},{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":4},{"type":"integer"}]}}}"##;

/// A number argument of the call, or `default`.
fn arg(work: &Work, name: &str, default: u64) -> u64 {
    serde_json::from_str::<serde_json::Value>(&work.arguments)
        .ok()
        .and_then(|v| v.get(name).and_then(serde_json::Value::as_u64))
        .unwrap_or(default)
}

fn text(t: &str) -> Outcome {
    Outcome::Completed(ToolResult {
        content: vec![ContentBlock::Text(t.into())],
        structured_content: None,
        is_error: false,
    })
}

impl Guest for Hostile {
    fn describe() -> Vec<Tool> {
        TOOLS
            .iter()
            .map(|name| Tool {
                name: (*name).into(),
                title: None,
                description: Some("hostile".into()),
                input_schema: match *name {
                    "backtrack" => BACKTRACK_SCHEMA.into(),
                    "branches" => BRANCHES_SCHEMA.into(),
                    _ => r#"{"type":"object"}"#.into(),
                },
                // `broken_promise` promises a `sum` and never keeps it.
                output_schema: (*name == "broken_promise").then(|| {
                    r#"{"type":"object","properties":{"sum":{"type":"integer"}},"required":["sum"]}"#
                        .into()
                }),
                mode: TaskMode::Optional,
                required_capabilities: None,
                has_prepare: false,
                has_mode_rule: false,
            })
            .collect()
    }

    fn choose_mode(_tool: String, _arguments: String) -> TaskMode {
        TaskMode::Optional
    }

    fn prepare(_tool: String, arguments: String) -> Result<String, RpcError> {
        Ok(arguments)
    }

    fn execute(work: Work) -> Outcome {
        match work.tool.as_str() {
            "counter" => counter(),
            "probe" => probe(&work),
            "spin" => spin(),
            "burn" => burn(arg(&work, "ms", 100)),
            "backtrack" | "branches" => text("checked"),
            "memory_bomb" => memory_bomb(),
            "trap" => panic!("this guest traps on purpose"),
            "broken_promise" => Outcome::Completed(ToolResult {
                content: vec![ContentBlock::Text("no sum".into())],
                structured_content: Some(r#"{"total":"many"}"#.into()),
                is_error: false,
            }),
            "invalid_outcome" => Outcome::Completed(ToolResult {
                content: vec![ContentBlock::EmbeddedResource(EmbeddedResource {
                    uri: "test://x".into(),
                    mime_type: None,
                    text: None,
                    blob: None,
                })],
                structured_content: Some("{not json".into()),
                is_error: false,
            }),
            // Sleeps in a blocking host call, ignoring cancellation.
            "ignore_cancel" => loop {
                std::thread::sleep(std::time::Duration::from_millis(20));
            },
            "chatty" => chatty(),
            // Returns `mb` megabytes of text.
            "big_result" => text(&"x".repeat((arg(&work, "mb", 8) as usize) << 20)),
            "status_flood" => status_flood(arg(&work, "times", 3_000)),
            // Waits `ms` milliseconds in the clock import (not computing), then answers.
            "hold" => {
                std::thread::sleep(std::time::Duration::from_millis(arg(&work, "ms", 60_000)));
                text("held")
            }
            // Fails with a code from the range MCP reserves.
            "reserved_code" => Outcome::Failed(RpcError {
                code: -32042,
                message: "pretending to be the protocol".into(),
                data: None,
            }),
            other => Outcome::Failed(RpcError {
                code: -32602,
                message: format!("unknown tool {other}"),
                data: None,
            }),
        }
    }
}

/// Counts its own executions: a reused instance would answer more than 1.
fn counter() -> Outcome {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    text(&n.to_string())
}

/// Reports what ambient authority it can find.
fn probe(work: &Work) -> Outcome {
    let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    let root = std::fs::read_dir("/")
        .map(|d| d.count())
        .map_err(|e| e.to_string());
    let granted = std::fs::read_to_string("/granted/hello.txt").map_err(|e| e.to_string());
    // Sockets: a connect to `port` on loopback, a listener, a name lookup.
    let port = arg(work, "port", 1) as u16;
    let connect = std::net::TcpStream::connect(("127.0.0.1", port))
        .map(|_| ())
        .map_err(|e| e.kind().to_string());
    let bind = std::net::TcpListener::bind("0.0.0.0:0")
        .map(|_| ())
        .map_err(|e| e.kind().to_string());
    let lookup = std::net::ToSocketAddrs::to_socket_addrs("localhost:80")
        .map(|a| a.count())
        .map_err(|e| e.kind().to_string());
    let report = format!(
        "env={}\nroot={root:?}\ngranted={granted:?}\nconnect={connect:?}\nbind={bind:?}\nlookup={lookup:?}",
        env.join(",")
    );
    Outcome::Completed(ToolResult {
        content: vec![ContentBlock::Text(report)],
        structured_content: None,
        is_error: false,
    })
}

/// Computes forever and never looks at the cancellation token.
fn spin() -> ! {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Computes for `ms` milliseconds of wall time, then answers.
fn burn(ms: u64) -> Outcome {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
    let mut x: u64 = 0;
    while std::time::Instant::now() < until {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    text(&format!("burned {x}"))
}

/// Grows memory until the host's cap stops it.
fn memory_bomb() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 1 << 20];
        chunk[0] = hoard.len() as u8;
        hoard.push(std::hint::black_box(chunk));
    }
}

/// Floods stdout and the log import.
fn chatty() -> Outcome {
    let line = "x".repeat(1024);
    for _ in 0..4096 {
        println!("{line}");
        context::log(bindings::snodo::tasks::types::LogLevel::Info, &line);
    }
    text("done talking")
}

/// Sets its status `times` times.
fn status_flood(times: u64) -> Outcome {
    for i in 0..times {
        context::set_status(&format!("step {i}"));
    }
    text(&format!("set the status {times} times"))
}

bindings::export!(Hostile with_types_in bindings);
