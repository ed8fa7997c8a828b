//! Several `snodo serve` nodes on one PostgreSQL database, driven over HTTP as a client and
//! an operator would: a task created on one node is read and answered on another, a cancel
//! on one node stops the guest running on another, and a node killed with SIGKILL has its
//! running tasks finished by the survivor once their leases run out, each exactly once.
//!
//! Needs the PostgreSQL server of the machine (127.0.0.1:5432, database `test`, or
//! `SNODO_TEST_POSTGRES`): skipped with a loud line where it is absent, a failure under
//! `CI=true`.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::Served;
use common::process::{
    ServeProcess, Sse, get, post_mcp, request, run_ok, snodo, spawn_serve, tool_call,
};

/// How long a step may take before the test fails (the machine is shared and slow).
const PATIENCE: Duration = Duration::from_secs(90);
/// The lease the nodes use: a killed node's tasks are due again this long after its last
/// heartbeat.
const LEASE_MS: u64 = 3_000;

fn url() -> String {
    std::env::var("SNODO_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5432 user=postgres dbname=test".to_owned())
}

fn available() -> bool {
    std::env::var("SNODO_TEST_POSTGRES").is_ok()
        || common::postgres_reachable("the multi-node test")
}

/// A schema for this test, dropped when the test ends.
struct Schema {
    name: String,
    client: tokio_postgres::Client,
}

impl Schema {
    async fn new(test: &str) -> Self {
        let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .expect("connect to PostgreSQL");
        tokio::spawn(conn);
        let name = format!("snodo_{test}_{}", std::process::id());
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            .await
            .expect("clean");
        Self { name, client }
    }

    /// The component digest a task is pinned to, from the database.
    async fn pinned(&self, task: &str) -> Option<String> {
        let id = snodo::ids::unhex(task).expect("hex id");
        self.client
            .query_one(
                &format!(
                    "SELECT convert_from(work, 'UTF8')::jsonb #>> '{{work,componentDigest}}'
                     FROM {}.tasks WHERE id = $1",
                    self.name
                ),
                &[&id],
            )
            .await
            .expect("the task's row")
            .get(0)
    }

    /// `(status, claim owner, attempt, recoveries)` of a task, from the database.
    async fn row(&self, task: &str) -> (String, Option<String>, u64, u64) {
        let id = snodo::ids::unhex(task).expect("hex id");
        let row = self
            .client
            .query_one(
                &format!(
                    "SELECT status, claim_owner, body FROM {}.tasks WHERE id = $1",
                    self.name
                ),
                &[&id],
            )
            .await
            .expect("the task's row");
        let body: Value = serde_json::from_slice(row.get::<_, &[u8]>(2)).expect("body");
        (
            row.get(0),
            row.get(1),
            body["task"]["attempt"].as_u64().unwrap_or(0),
            body["task"]["recoveries"].as_u64().unwrap_or(0),
        )
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let mut options = snodo::store::PgOptions::new(url(), "cleanup");
        options.schema = self.name.clone();
        let _ = snodo::store::drop_postgres_schema_blocking(&options);
    }
}

fn config(dir: &std::path::Path, node: &str, schema: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{node}.toml"));
    let text = format!(
        r#"listen = "127.0.0.1:0"
cache_dir = "{cache}"

[node]
id = "{node}"

[store]
kind = "postgres"
url = "{url}"
schema = "{schema}"
pool = 8

[[components]]
path = "{fixtures}"

[runner]
lease_ms = {LEASE_MS}
heartbeat_ms = 500

[deploy]
poll_ms = 300
"#,
        cache = dir.join("cache").display(),
        url = url(),
        fixtures = snodo_test_guests::FIXTURES,
    );
    std::fs::write(&path, text).expect("write config");
    path
}

/// The fixtures component with a custom section naming `tag` appended: the same tools,
/// another digest (another version, as a rebuild makes).
fn fixtures_version(dir: &std::path::Path, tag: &str) -> (std::path::PathBuf, String) {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut bytes = std::fs::read(snodo_test_guests::FIXTURES).expect("fixtures");
    let name = b"snodo-test-version";
    let mut section = Vec::new();
    leb(name.len(), &mut section);
    section.extend_from_slice(name);
    section.extend_from_slice(tag.as_bytes());
    bytes.push(0);
    leb(section.len(), &mut bytes);
    bytes.extend_from_slice(&section);
    let path = dir.join(format!("fixtures-{tag}.wasm"));
    std::fs::write(&path, &bytes).expect("write the version");
    (path, snodo::model::component_digest(&bytes))
}

async fn call(node: SocketAddr, method: &str, params: Value) -> Value {
    let (status, reply) = post_mcp(node, &request(method, params, true)).await;
    assert_eq!(status, 200, "{method}: {reply}");
    reply
}

async fn start_task(node: SocketAddr, tool: &str, arguments: Value) -> String {
    let mut call = tool_call(tool, arguments, true);
    // A client that can answer forms.
    call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["elicitation"] =
        json!({"form": {}});
    let (status, reply) = post_mcp(node, &call).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["result"]["resultType"], "task", "{reply}");
    reply["result"]["taskId"]
        .as_str()
        .expect("a task id")
        .to_owned()
}

/// Answers `confirm_delete`'s question on `node` with yes; the answer is accepted.
async fn confirm(node: SocketAddr, id: &str) {
    let answered = call(
        node,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {
            "confirm": {"action": "accept", "content": {"confirm": true}}}}),
    )
    .await;
    assert_eq!(
        answered["result"],
        json!({"resultType": "complete"}),
        "{answered}"
    );
}

/// Polls `tasks/get` on `node` until `done` accepts the result.
async fn await_task(
    node: SocketAddr,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = call(node, "tasks/get", json!({"taskId": id})).await;
        if done(&v["result"]) {
            return v["result"].clone();
        }
        assert!(Instant::now() < deadline, "{what}: last seen {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `snodo_active_guests` gauge of a node.
async fn active_guests(node: SocketAddr) -> u64 {
    let (status, text) = get(node, "/metrics").await;
    assert_eq!(status, 200);
    text.lines()
        .find_map(|l| l.strip_prefix("snodo_active_guests "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the gauge")
}

fn node_of(servers: &[(&str, &ServeProcess)], owner: &str) -> SocketAddr {
    servers
        .iter()
        .find(|(n, _)| *n == owner)
        .map(|(_, s)| s.addr)
        .expect("a known node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_one_database_and_survive_one_of_them_dying() {
    if !available() {
        return;
    }
    let schema = Schema::new("nodes").await;
    let dir = tempfile::tempdir().expect("tmp");
    let a_conf = config(dir.path(), "node-a", &schema.name);
    let b_conf = config(dir.path(), "node-b", &schema.name);

    // The operator migrates once; the nodes refuse to start on an unmigrated database.
    let out = run_ok(snodo(&["migrate", "--config"]).arg(&a_conf));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("applied"), "{said}");
    let a = spawn_serve(&["--config", a_conf.to_str().expect("utf-8")], &[]);
    let b = spawn_serve(&["--config", b_conf.to_str().expect("utf-8")], &[]);
    let (mut a, b) = (a, b);
    let nodes = [("node-a", &a), ("node-b", &b)];
    let (metrics_status, metrics) = get(b.addr, "/metrics").await;
    assert_eq!(metrics_status, 200);
    assert!(
        metrics.contains("snodo_node_info{node=\"node-b\"} 1"),
        "{metrics}"
    );

    // 1. Created on A, read and answered on B; the guest waiting on whichever node runs it
    // gets the answer, and the question is asked once.
    let id = start_task(a.addr, "confirm_delete", json!({"filename": "report.txt"})).await;
    let parked = await_task(b.addr, &id, "input_required on B", |r| {
        r["status"] == "input_required"
    })
    .await;
    assert_eq!(
        parked["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    confirm(b.addr, &id).await;
    let done = await_task(a.addr, &id, "completed, read on A", |r| {
        r["status"] == "completed"
    })
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted report.txt",
        "{done}"
    );
    let (status, _, attempt, _) = schema.row(&id).await;
    assert_eq!(
        (status.as_str(), attempt),
        ("completed", 1),
        "one run, no second question"
    );

    // 1b. A subscriber on B sees the changes of a task that runs elsewhere.
    let id = start_task(a.addr, "slow_compute", json!({"seconds": 3, "label": "s"})).await;
    let mut stream = Sse::open(
        b.addr,
        &request(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [id]}}),
            true,
        ),
    )
    .await;
    let ack = tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("ack");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let completed = tokio::time::timeout(PATIENCE, async {
        loop {
            let n = stream.next().await;
            if n["params"]["taskId"] == json!(id) && n["params"]["status"] == "completed" {
                return n;
            }
        }
    })
    .await
    .expect("B's subscriber saw the task complete");
    assert_eq!(completed["method"], "notifications/tasks");
    drop(stream);

    // 2. Cancelled on the node that does not run it: the running guest stops.
    let id = start_task(
        a.addr,
        "slow_compute",
        json!({"seconds": 600, "label": "c"}),
    )
    .await;
    await_task(a.addr, &id, "running", |r| {
        r["statusMessage"].as_str() == Some("computing c")
    })
    .await;
    let (_, owner, _, _) = schema.row(&id).await;
    let runner = owner.expect("a claim while running");
    let other = if runner == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    assert_eq!(active_guests(node_of(&nodes, &runner)).await, 1);
    let asked = Instant::now();
    let cancelled = call(
        node_of(&nodes, other),
        "tasks/cancel",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(cancelled["result"]["resultType"], "complete", "{cancelled}");
    await_task(
        node_of(&nodes, &runner),
        &id,
        "cancelled, read on the running node",
        |r| r["status"] == "cancelled",
    )
    .await;
    let deadline = Instant::now() + PATIENCE;
    while active_guests(node_of(&nodes, &runner)).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the guest on {runner} kept running"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "cross-node cancel: the guest on {runner} stopped {} ms after {other} accepted the cancel",
        asked.elapsed().as_millis()
    );

    // 3. SIGKILL node A while its guests run: B finishes them after their leases expire.
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            start_task(
                a.addr,
                "slow_compute",
                json!({"seconds": 2, "label": format!("k{i}")}),
            )
            .await,
        );
    }
    for (i, id) in ids.iter().enumerate() {
        let label = format!("computing k{i}");
        await_task(b.addr, id, "running", |r| {
            r["statusMessage"].as_str() == Some(label.as_str())
        })
        .await;
    }
    let mut on_a = Vec::new();
    for id in &ids {
        if schema.row(id).await.1.as_deref() == Some("node-a") {
            on_a.push(id.clone());
        }
    }
    a.child.kill().expect("SIGKILL node A");
    a.child.wait().expect("reaped");
    for id in &ids {
        let done = await_task(b.addr, id, "finished after A died", |r| {
            r["status"] != "working"
        })
        .await;
        assert_eq!(done["status"], "completed", "{done}");
        let (status, owner, attempt, recoveries) = schema.row(id).await;
        assert_eq!((status.as_str(), owner), ("completed", None));
        if on_a.contains(id) {
            // A's attempt never committed; B's replay is the one terminal commit.
            assert_eq!((attempt, recoveries), (2, 1), "{id}");
        }
    }
    assert!(!on_a.is_empty() || ids.is_empty());
    drop(b);
}

/// A TCP relay to the database that the test can cut and restore: an outage as the node
/// sees it (connections reset, new ones refused), without touching the server.
struct Relay {
    port: u16,
    down: tokio::sync::watch::Sender<bool>,
}

impl Relay {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (down, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if *rx.borrow() {
                    continue; // dropped: refused
                }
                let mut cut = rx.clone();
                tokio::spawn(async move {
                    let Ok(mut upstream) = tokio::net::TcpStream::connect("127.0.0.1:5432").await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                        _ = cut.wait_for(|d| *d) => {}
                    }
                });
            }
        });
        Self { port, down }
    }

    fn set_down(&self, down: bool) {
        self.down.send_replace(down);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_fails_requests_at_once_and_the_node_resumes() {
    if !available() || std::env::var("SNODO_TEST_POSTGRES").is_ok() {
        // The relay forwards to the local server only.
        return;
    }
    let schema = Schema::new("outage").await;
    let relay = Relay::start().await;
    let mut pg = snodo::store::PgOptions::new(
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=test",
            relay.port
        ),
        "outage-node",
    );
    pg.schema = schema.name.clone();
    pg.connect_timeout = Duration::from_secs(2);
    // This node migrates at start.
    pg.migrate = true;
    let dir = tempfile::tempdir().expect("tmp");
    let mut opts = snodo::serve::ServeOptions::new(
        dir.path().to_path_buf(),
        vec![snodo_test_guests::FIXTURES.into()],
    );
    opts.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    opts.cache_dir = Some(snodo_test_guests::COMPONENT_CACHE.into());
    opts.store = snodo::store::StoreConfig::Postgres(pg);
    let served = Served::start(opts).await;
    let addr = served.addr;
    let ready = || async { get(addr, "/readyz").await.0 };
    assert_eq!(ready().await, 200);
    let id = start_task(addr, "slow_compute", json!({"seconds": 1})).await;
    await_task(addr, &id, "completed before the outage", |r| {
        r["status"] == "completed"
    })
    .await;

    relay.set_down(true);
    let deadline = Instant::now() + PATIENCE;
    while ready().await != 503 {
        assert!(
            Instant::now() < deadline,
            "/readyz stayed ready without a database"
        );
    }
    let asked = Instant::now();
    let v = call(addr, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("store")),
        "{v}"
    );
    eprintln!(
        "during the outage tasks/get failed after {} ms",
        asked.elapsed().as_millis()
    );

    relay.set_down(false);
    let deadline = Instant::now() + PATIENCE;
    while ready().await != 200 {
        assert!(Instant::now() < deadline, "/readyz did not recover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = start_task(addr, "slow_compute", json!({"seconds": 1})).await;
    await_task(addr, &id, "completed after the outage", |r| {
        r["status"] == "completed"
    })
    .await;
    let _ = served.stop(PATIENCE).await;
}

/// Waits until a task created on `node` is pinned to `digest`: the node serves that
/// version.
async fn serves(schema: &Schema, node: SocketAddr, digest: &str, what: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let id = start_task(node, "slow_compute", json!({"seconds": 1, "label": "v"})).await;
        if schema.pinned(&id).await.as_deref() == Some(digest) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still another version");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_reaches_every_node_without_a_restart_and_pinned_tasks_keep_their_version() {
    if !available() {
        return;
    }
    let schema = Schema::new("deploy").await;
    let dir = tempfile::tempdir().expect("tmp");
    // A guest waiting for input is released soon: the answer then starts a new attempt,
    // which must find the version the task was created against.
    let parking = |conf: std::path::PathBuf| {
        let text = std::fs::read_to_string(&conf).expect("config");
        let text = text.replace(
            "heartbeat_ms = 500",
            "heartbeat_ms = 500\npark_after_ms = 300",
        );
        std::fs::write(&conf, text).expect("config");
        conf
    };
    let a_conf = parking(config(dir.path(), "node-a", &schema.name));
    let b_conf = parking(config(dir.path(), "node-b", &schema.name));
    run_ok(snodo(&["migrate", "--config"]).arg(&a_conf));
    let v1 = snodo::model::component_digest(
        &std::fs::read(snodo_test_guests::FIXTURES).expect("fixtures"),
    );
    // Version 1: node A deploys its configured component at its first start.
    let a = spawn_serve(&["--config", a_conf.to_str().expect("utf-8")], &[]);
    serves(&schema, a.addr, &v1, "A serves its configured version").await;
    let waiting = start_task(a.addr, "confirm_delete", json!({"filename": "v1.txt"})).await;
    await_task(a.addr, &waiting, "waiting for input on version 1", |r| {
        r["status"] == "input_required"
    })
    .await;
    assert_eq!(schema.pinned(&waiting).await.as_deref(), Some(v1.as_str()));
    let deadline = Instant::now() + PATIENCE;
    while schema.row(&waiting).await.1.is_some() {
        assert!(Instant::now() < deadline, "the waiting guest is parked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Version 2, deployed while A runs; B starts afterwards with the files of version 1
    // and serves version 2 all the same (it does not roll A back).
    let (v2_path, v2) = fixtures_version(dir.path(), "v2");
    let out = run_ok(snodo(&["deploy", "--config"]).arg(&a_conf).arg(&v2_path));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("deployed revision 2"), "{said}");
    assert!(said.contains(&v2), "{said}");
    serves(
        &schema,
        a.addr,
        &v2,
        "A swaps version 2 in without a restart",
    )
    .await;
    let b = spawn_serve(&["--config", b_conf.to_str().expect("utf-8")], &[]);
    serves(&schema, b.addr, &v2, "B serves the current deployment").await;
    // ... and says so at its start: which deployment its files are, which it serves, and
    // how to serve its files again.
    let said = b
        .started
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["configured"] == 1)
        .unwrap_or_else(|| panic!("no word of the configured deployment: {:?}", b.started));
    assert_eq!(said["fields"]["serving"], 2, "{said}");
    assert!(
        said["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("snodo rollback --config FILE --to 1")),
        "{said}"
    );

    // Which tasks still need version 1: the waiting one (and the probes `serves` made,
    // until they finish). The count and the ids are two reads, so a probe finishing
    // between them is waited out: they must agree once nothing moves.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = run_ok(snodo(&["deployments", "--json", "--config"]).arg(&b_conf));
        let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
        let old = listed["components"]
            .as_array()
            .expect("components")
            .iter()
            .find(|c| c["digest"] == v1.as_str())
            .expect("version 1 is stored")
            .clone();
        let ids = old["pinnedTaskIds"].as_array().expect("ids").clone();
        assert!(ids.contains(&json!(waiting)), "{listed}");
        if old["pinnedTasks"].as_u64() == Some(ids.len() as u64) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pinned count agrees with the pinned ids: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The waiting task, answered on B, finishes on version 1.
    confirm(b.addr, &waiting).await;
    let done = await_task(a.addr, &waiting, "completed on version 1", |r| {
        r["status"] == "completed" || r["status"] == "failed"
    })
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted v1.txt",
        "{done}"
    );

    // What is deployed and what pins it.
    let out = run_ok(snodo(&["deployments", "--json", "--config"]).arg(&b_conf));
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    let revisions: Vec<u64> = listed["deployments"]
        .as_array()
        .expect("deployments")
        .iter()
        .map(|d| d["revision"].as_u64().expect("revision"))
        .collect();
    assert_eq!(revisions, [2, 1], "{listed}");
    let retired = listed["components"]
        .as_array()
        .expect("components")
        .iter()
        .find(|c| c["digest"] == v1.as_str())
        .expect("version 1 is still stored");
    assert!(retired["retiredAt"].is_string(), "{listed}");

    // A rollback is a new deployment of what revision 1 named; both nodes follow.
    let out = run_ok(snodo(&["rollback", "--config"]).arg(&b_conf));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("deployed revision 3"), "{said}");
    serves(&schema, b.addr, &v1, "B follows the rollback").await;
    serves(&schema, a.addr, &v1, "A follows the rollback").await;
    drop((a, b));
}
