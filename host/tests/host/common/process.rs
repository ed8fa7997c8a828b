//! A `snodo serve` child process, requests to it through `snodo::client`, and the other
//! `snodo` commands run to their end: for the tests that run the binary as an operator would.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use snodo::client::{Connection, Events, mcp_request};

/// A `snodo serve` child logging JSON lines, killed when dropped.
pub(crate) struct ServeProcess {
    /// The child.
    pub(crate) child: Child,
    /// Where it serves.
    pub(crate) addr: SocketAddr,
    /// Its stdout, line by line.
    pub(crate) log: std::sync::mpsc::Receiver<String>,
    /// What it logged before it served (its start).
    pub(crate) started: Vec<String>,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `snodo` binary with `args`, ready to run.
pub(crate) fn snodo(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_snodo"));
    cmd.args(args);
    cmd
}

/// Runs `cmd` to its end; fails the test, with what it wrote to stderr, unless it exited 0.
pub(crate) fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `snodo serve` with `args` and the variables `env`, logging JSON lines, on an ephemeral
/// loopback port: `--listen 127.0.0.1:0` unless a configuration file is given, whose own
/// `listen` then stands (a flag would override it, reloads included).
pub(crate) fn spawn_serve(args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_snodo"));
    cmd.arg("serve").arg("--log-json");
    if !args.contains(&"--config") {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    cmd.args(args)
        .env_remove("MCP_PORT")
        // Every node of a test run shares one cache of compiled components (a test's own
        // `env` or configuration file may name another).
        .env("SNODO_CACHE_DIR", snodo_test_guests::COMPONENT_CACHE)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn snodo serve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut started = Vec::new();
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("snodo serve logs its address");
        if let Some(at) = line.find("serving MCP at http://") {
            let rest = &line[at + "serving MCP at http://".len()..];
            let addr = rest.split("/mcp").next().expect("address");
            break addr.parse().expect("a socket address");
        }
        started.push(line);
    };
    ServeProcess {
        child,
        addr,
        log: rx,
        started,
    }
}

/// POSTs the JSON-RPC `body` over a fresh connection: the status and the reply.
pub(crate) async fn post_mcp(addr: SocketAddr, body: &Value) -> (u16, Value) {
    let exchange = async {
        let mut c = Connection::open(addr).await.expect("connect");
        c.call(body, None).await.expect("a response")
    };
    tokio::time::timeout(Duration::from_secs(120), exchange)
        .await
        .expect("an answer")
}

/// A `tools/call` request, declaring the tasks extension when `tasks`.
pub(crate) fn tool_call(name: &str, arguments: Value, tasks: bool) -> Value {
    request(
        "tools/call",
        json!({"name": name, "arguments": arguments}),
        tasks,
    )
}

/// A 2026-07-28 request with its `_meta`, declaring the tasks extension when `tasks`.
pub(crate) fn request(method: &str, mut params: Value, tasks: bool) -> Value {
    let caps = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// `GET path` with `Host: localhost`: the status and the body.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let exchange = async {
        let mut c = Connection::open(addr).await.expect("connect");
        c.get(path).await.expect("a response")
    };
    tokio::time::timeout(Duration::from_secs(120), exchange)
        .await
        .expect("an answer")
}

/// Collects log lines until one satisfies `want`, or fails after the patience.
pub(crate) fn await_log(server: &ServeProcess, what: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = server
            .log
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no log line: {what}"));
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && want(&v)
        {
            return v;
        }
    }
}

/// A server-sent event stream: the reply to a POST that accepts one.
pub(crate) struct Sse {
    events: Events,
    /// Holds the connection open while the stream is read.
    _connection: Connection,
}

impl Sse {
    /// POSTs `body` accepting an event stream and reads the response head.
    pub(crate) async fn open(addr: SocketAddr, body: &Value) -> Self {
        let mut connection = Connection::open(addr).await.expect("connect");
        let response = connection
            .send(mcp_request(body, None, true))
            .await
            .expect("a response");
        let events = Events::of(response).expect("an event stream");
        Self {
            events,
            _connection: connection,
        }
    }

    /// The next event's JSON data.
    pub(crate) async fn next(&mut self) -> Value {
        self.events.next().await.expect("the stream ended")
    }
}
