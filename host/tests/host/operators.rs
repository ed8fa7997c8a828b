//! Operators at a terminal: `snodo tasks` against a `snodo serve` process, with an admin
//! token from the configuration: list, show, answer, watch, bulk cancel, counts, and the
//! refusals a script branches on (exit codes 1 and 2).

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use snodo::client::Connection;

use common::process::{snodo, spawn_serve, tool_call};

const ALICE: &str = "alice-token-0123456789";
const OPS: &str = "acme-ops-token-0123456789";

/// `snodo tasks ARGS` against the server at `addr` with `token` as the admin token.
fn tasks(addr: SocketAddr, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = snodo(&["tasks"]);
    cmd.args(args)
        .env("SNODO_URL", format!("http://{addr}"))
        .env_remove("SNODO_ADMIN_TOKEN");
    if let Some(t) = token {
        cmd.env("SNODO_ADMIN_TOKEN", t);
    }
    cmd.output().expect("run snodo tasks")
}

/// The JSON `snodo tasks ARGS --json` printed; fails the test unless it exited 0.
fn json_of(addr: SocketAddr, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = tasks(addr, Some(OPS), &all);
    assert!(
        out.status.success(),
        "snodo tasks {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

async fn start(addr: SocketAddr, name: &str, args: Value) -> String {
    let mut c = Connection::open(addr).await.expect("connect");
    // A client that can answer questions: the task asks instead of deciding alone.
    let mut body = tool_call(name, args, true);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"] =
        json!({});
    let (status, v) = c.call(&body, Some(ALICE)).await.expect("a reply");
    assert_eq!(status, 200, "{v}");
    v["result"]["taskId"].as_str().expect("a task").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_lists_answers_watches_and_cancels_from_the_terminal() {
    let dir = tempfile::tempdir().expect("tmp");
    let conf = dir.path().join("node.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1:0\"\n[store]\nkind = \"redb\"\npath = \"{}\"\n\
             [[components]]\npath = \"{}\"\n\
             [[auth.tokens]]\ntoken = \"{ALICE}\"\ntenant = \"acme\"\nsubject = \"alice\"\n\
             [[admin.tokens]]\ntoken_env = \"OPS_TOKEN\"\ntenant = \"acme\"\nsubject = \"ops\"\n",
            dir.path().join("tasks.redb").display(),
            snodo_test_guests::FIXTURES,
        ),
    )
    .expect("config");
    let server = spawn_serve(
        &["--config", conf.to_str().expect("utf-8")],
        &[("OPS_TOKEN", OPS)],
    );
    let addr = server.addr;
    let confirm = start(addr, "confirm_delete", json!({"filename": "a.txt"})).await;
    let slow = start(addr, "slow_compute", json!({"seconds": 600})).await;

    // Refusals a script can tell apart: no token (1), no server (2).
    let out = tasks(addr, None, &["list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HTTP 401") && err.contains("admin"), "{err}");
    let out = tasks(addr, Some(ALICE), &["list"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an MCP token is not an operator's"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP 403"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let nowhere = closed.local_addr().expect("addr");
    drop(closed);
    let out = tasks(nowhere, Some(OPS), &["list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--url") && err.contains("SNODO_URL") && err.contains("--config"),
        "the refusal says how to name the server: {err}"
    );
    // --config FILE: the file's listen is where the server is.
    let pointer = dir.path().join("cli.toml");
    std::fs::write(&pointer, format!("listen = \"{addr}\"\n")).expect("config");
    let out = snodo(&["tasks", "list", "--json", "--config"])
        .arg(&pointer)
        .env_remove("SNODO_URL")
        .env("SNODO_ADMIN_TOKEN", OPS)
        .output()
        .expect("run snodo tasks");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        listed["tasks"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );

    // List: JSON for scripts, a table for people.
    let listed = json_of(addr, &["list"]);
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, vec![slow.as_str(), confirm.as_str()]);
    let out = tasks(addr, Some(OPS), &["list", "--tool", "slow_compute"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("id") && table.contains(&slow) && !table.contains(&confirm),
        "{table}"
    );

    // Show: the question it waits on.
    let shown = common::eventually("the question", || async {
        let t = json_of(addr, &["show", &confirm]);
        (t["status"] == "input_required").then_some(t)
    })
    .await;
    assert_eq!(shown["waitingOn"], json!(["confirm"]));
    assert_eq!(shown["asking"], json!(["Delete a.txt?"]));
    let table = tasks(addr, Some(OPS), &["list", "--tool", "confirm_delete"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("asks: Delete a.txt?"),
        "the list shows the question: {table}"
    );

    // Watch while answering: the change arrives on the stream.
    let mut watch = snodo(&["tasks", "watch", "--json", "--tool", "confirm_delete"])
        .env("SNODO_URL", format!("http://{addr}"))
        .env("SNODO_ADMIN_TOKEN", OPS)
        .stdout(Stdio::piped())
        .spawn()
        .expect("watch");
    let stdout = watch.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The stream is open once the server answered its head; an answer refused for its
    // content changes nothing, so the watch hears only the accepted one.
    let bad = tasks(
        addr,
        Some(OPS),
        &["answer", &confirm, "--accept", "{\"confirm\": \"yes\"}"],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("HTTP 400"));
    let answered = json_of(
        addr,
        &["answer", &confirm, "--accept", "{\"confirm\": true}"],
    );
    assert_eq!(answered["id"], confirm.as_str());
    let completed = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the watch reports the task");
        let v: Value = serde_json::from_str(&line).expect("one JSON summary a line");
        if v["id"] == confirm.as_str() && v["status"] == "completed" {
            break v;
        }
    };
    assert_eq!(completed["tool"], "confirm_delete");
    let shown = tasks(addr, Some(OPS), &["show", &confirm]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("result    Deleted a.txt"),
        "show prints the result: {shown}"
    );
    let _ = watch.kill();
    let _ = watch.wait();

    // Bulk cancel: preview, then run.
    let preview = json_of(
        addr,
        &["cancel", "--all", "--tool", "slow_compute", "--preview"],
    );
    assert_eq!(
        (preview["matched"].as_u64(), preview["cancelled"].as_u64()),
        (Some(1), Some(0))
    );
    let run = json_of(
        addr,
        &[
            "cancel",
            "--all",
            "--tool",
            "slow_compute",
            "--message",
            "batch stopped",
        ],
    );
    assert_eq!(run["cancelled"], 1);
    let t = json_of(addr, &["show", &slow]);
    assert_eq!(
        (t["status"].as_str(), t["statusMessage"].as_str()),
        (Some("cancelled"), Some("batch stopped"))
    );

    // Counts.
    let counts = json_of(addr, &["counts"]);
    assert_eq!(counts["byStatus"]["completed"], 1, "{counts}");
    assert_eq!(counts["byStatus"]["cancelled"], 1);
    assert_eq!(counts["byTool"]["slow_compute"]["cancelled"], 1);
}
