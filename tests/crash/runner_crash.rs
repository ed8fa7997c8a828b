//! A host process with tasks in `working` and `input_required` is killed with SIGKILL and
//! restarted: every task reaches the right terminal state with one terminal commit each,
//! and nobody is asked the same question twice.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

struct Host {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Host {
    fn start(path: &std::path::Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_runner-host"))
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the host");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut host = Host {
            child,
            stdin,
            stdout,
        };
        assert_eq!(host.line(), "ready");
        host
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        let n = self.stdout.read_line(&mut l).expect("read");
        assert!(n > 0, "the host exited");
        l.trim().to_owned()
    }

    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").expect("write");
        self.stdin.flush().expect("flush");
        self.line()
    }

    fn create(&mut self, tool: &str, args: Value) -> String {
        let reply = self.ask(&format!("create {tool} {args}"));
        reply.strip_prefix("created ").expect("created").to_owned()
    }

    fn get(&mut self, id: &str) -> Value {
        let reply = self.ask(&format!("get {id}"));
        serde_json::from_str(reply.strip_prefix("task ").expect("task")).expect("json")
    }

    /// Asks again until `pred` holds. The wait is for the state, never for time: the pause
    /// between asks only keeps the test from spinning against the child it waits for on two
    /// cores (each ask is a round trip through the child's store).
    fn await_task(&mut self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let t = self.get(id);
            if pred(&t) {
                return t;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{id} never became {what}: {t}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }
}

#[test]
fn tasks_survive_a_killed_host_and_finish_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("tasks.redb");
    let mut host = Host::start(&path);
    let parked = host.create("confirm_delete", json!({"filename": "report.csv"}));
    let working = host.create("slow_compute", json!({"seconds": 2, "label": "crash"}));
    let before = host.await_task(&parked, "input_required", |t| {
        t["status"] == "input_required"
    });
    host.await_task(&working, "running", |t| {
        t["status"] == "working" && t["attempt"] == 1
    });
    host.kill();

    let mut host = Host::start(&path);
    // The parked task is where it was: same question, no new event, waiting for an answer.
    let after = host.get(&parked);
    assert_eq!(after["status"], "input_required");
    assert_eq!(
        after["revision"], before["revision"],
        "nobody was asked again"
    );
    assert_eq!(after["outstanding"], json!(["confirm"]));
    // The working task is recovered at once by a new generation and completes.
    let done = host.await_task(&working, "completed", |t| t["status"] == "completed");
    assert_eq!(done["attempt"], 2, "recovered, not failed");
    assert_eq!(done["outcomes"], 1, "one terminal commit");
    assert_eq!(done["text"], "Completed crash after 2 seconds");

    let reply = host.ask(&format!(
        "answer {parked} confirm {}",
        json!({"action": "accept", "content": {"confirm": true}})
    ));
    assert_eq!(reply, format!("answered {parked} true"));
    let done = host.await_task(&parked, "completed", |t| t["status"] == "completed");
    assert_eq!(done["text"], "Deleted report.csv");
    assert_eq!(done["outcomes"], 1);
    assert_eq!(done["inputs"], json!(["confirm"]));
    host.kill();
}
