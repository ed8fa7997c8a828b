//! A `snodo serve` child process and a plain HTTP/1.1 client for it, and the other `snodo`
//! commands run to their end: for the tests that run the binary as an operator would.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A `snodo serve` child logging JSON lines, killed when dropped.
pub(crate) struct ServeProcess {
    /// The child.
    pub(crate) child: Child,
    /// Where it serves.
    pub(crate) addr: SocketAddr,
    /// Its stdout, line by line.
    pub(crate) log: std::sync::mpsc::Receiver<String>,
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

pub(crate) fn spawn_serve(args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_snodo"));
    cmd.arg("serve")
        .args(["--listen", "127.0.0.1:0", "--log-json"])
        .args(args)
        .env_remove("MCP_PORT")
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
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("snodo serve logs its address");
        if let Some(at) = line.find("serving MCP at http://") {
            let rest = &line[at + "serving MCP at http://".len()..];
            let addr = rest.split("/mcp").next().expect("address");
            break addr.parse().expect("a socket address");
        }
    };
    ServeProcess {
        child,
        addr,
        log: rx,
    }
}

pub(crate) async fn post_mcp(addr: SocketAddr, body: &Value) -> (u16, Value) {
    let text = body.to_string();
    let method = body["method"].as_str().unwrap_or_default();
    let name = match body["params"]["name"].as_str() {
        Some(n) => format!("Mcp-Name: {n}\r\n"),
        None => String::new(),
    };
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nMcp-Method: {method}\r\n{name}Mcp-Protocol-Version: 2026-07-28\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    );
    c.write_all(req.as_bytes()).await.expect("write");
    let (status, body) = tokio::time::timeout(Duration::from_secs(120), read_response(&mut c))
        .await
        .expect("an answer")
        .expect("a response");
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

pub(crate) async fn read_response(conn: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = conn.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
            return Some((status, body));
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
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
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    c.write_all(req.as_bytes()).await.expect("write");
    tokio::time::timeout(Duration::from_secs(120), read_response(&mut c))
        .await
        .expect("an answer")
        .expect("a response")
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

/// A server-sent event stream read off a raw connection (chunked transfer decoded).
pub(crate) struct Sse {
    conn: TcpStream,
    buf: Vec<u8>,
    text: String,
}

impl Sse {
    /// POSTs `body` accepting an event stream and reads the response head.
    pub(crate) async fn open(addr: SocketAddr, body: &Value) -> Self {
        let text = body.to_string();
        let method = body["method"].as_str().unwrap_or_default();
        let mut conn = TcpStream::connect(addr).await.expect("connect");
        let req = format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Method: {method}\r\nMcp-Protocol-Version: 2026-07-28\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        conn.write_all(req.as_bytes()).await.expect("write");
        let mut sse = Self {
            conn,
            buf: Vec::new(),
            text: String::new(),
        };
        let end = loop {
            if let Some(end) = sse.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            sse.fill().await;
        };
        let head = String::from_utf8_lossy(&sse.buf[..end]).to_ascii_lowercase();
        assert!(head.contains("text/event-stream"), "{head}");
        assert!(head.contains("chunked"), "{head}");
        sse.buf.drain(..end + 4);
        sse
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self.conn.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the stream ended");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    /// The next event's JSON data.
    pub(crate) async fn next(&mut self) -> Value {
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let event: String = self.text.drain(..end + 2).collect();
                if let Some(v) = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                {
                    return v;
                }
                continue;
            }
            // One chunk: its size line, its bytes, CRLF.
            let line_end = loop {
                if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                self.fill().await;
            };
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&self.buf[..line_end]).trim(), 16)
                    .expect("a chunk size");
            while self.buf.len() < line_end + 2 + size + 2 {
                self.fill().await;
            }
            let data = &self.buf[line_end + 2..line_end + 2 + size];
            self.text.push_str(&String::from_utf8_lossy(data));
            self.buf.drain(..line_end + 2 + size + 2);
        }
    }
}
