//! 2025-11-25's experimental tasks (SEP-1686) on the same durable tasks: the capability and
//! each tool's `execution.taskSupport`, `tools/call` with `params.task`, `tasks/get`,
//! `tasks/result` (its questions asked on its stream and answered by posted responses),
//! `tasks/list` and `tasks/cancel`, and the isolation 2026-07-28's tasks keep.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use snodo_core::model::Principal;
use snodo_server::identity::Caller;
use snodo_server::mcp::{McpServer, Reply, RoutingHeaders};
use tokio::sync::mpsc;

use crate::common;

/// A 2025-11-25 client of `server`: a principal and the session its `initialize` opened.
struct Client {
    server: Arc<McpServer>,
    caller: Caller,
    session: String,
}

async fn server() -> Arc<McpServer> {
    let fixtures = super::fixtures().await;
    common::mcp_server(
        common::catalog_of(&[&fixtures], Default::default()),
        Default::default(),
    )
    .0
}

impl Client {
    /// Opens a session as `subject` of tenant `acme`, declaring elicitation.
    async fn open(server: &Arc<McpServer>, subject: &str) -> (Self, Value) {
        Self::open_as(server, Caller::trusted(Principal::new("acme", subject))).await
    }

    /// Opens a session for `caller`, declaring elicitation.
    async fn open_as(server: &Arc<McpServer>, caller: Caller) -> (Self, Value) {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "t", "version": "1"}}});
        let headers = RoutingHeaders {
            accepts_sse: true,
            ..Default::default()
        };
        let reply = server
            .handle(&headers, &caller, init.to_string().as_bytes())
            .await;
        let Reply::Initialized { session, body } = reply else {
            panic!("initialize opens a session");
        };
        let client = Self {
            server: server.clone(),
            caller,
            session,
        };
        (client, serde_json::from_slice(&body).expect("json"))
    }

    fn headers(&self, sse: bool) -> RoutingHeaders {
        RoutingHeaders {
            protocol_version: Some(Ok("2025-11-25".into())),
            session: Some(Ok(self.session.clone())),
            accepts_sse: sse,
            ..Default::default()
        }
    }

    async fn reply(&self, id: i64, method: &str, params: Value, sse: bool) -> Reply {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.server
            .handle(
                &self.headers(sse),
                &self.caller,
                body.to_string().as_bytes(),
            )
            .await
    }

    /// The response to one request (the last message of a stream).
    async fn call(&self, id: i64, method: &str, params: Value) -> Value {
        match self.reply(id, method, params, true).await {
            Reply::Json { body, .. } => serde_json::from_slice(&body).expect("json"),
            Reply::Stream(mut rx) => loop {
                let m = next(&mut rx).await;
                if m.get("method").is_none() {
                    break m;
                }
            },
            _ => panic!("a JSON-RPC response"),
        }
    }

    /// Posts the client's response `result` to the server request `id`.
    async fn answer(&self, id: &Value, result: Value) {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        let reply = self
            .server
            .handle(
                &self.headers(true),
                &self.caller,
                body.to_string().as_bytes(),
            )
            .await;
        assert!(matches!(reply, Reply::Accepted));
    }

    /// Calls `tool` as a task, and gives the created task.
    async fn task(&self, id: i64, tool: &str, arguments: Value) -> Value {
        let v = self
            .call(
                id,
                "tools/call",
                json!({"name": tool, "arguments": arguments, "task": {"ttl": 60000}}),
            )
            .await;
        v["result"]["task"].clone()
    }
}

/// The next server request of a `tasks/result` stream: status notifications may come first.
async fn question(rx: &mut mpsc::Receiver<Value>) -> Value {
    loop {
        let m = next(rx).await;
        if m["method"] == "elicitation/create" {
            return m;
        }
        assert_eq!(m["method"], "notifications/tasks/status", "{m}");
    }
}

async fn next(rx: &mut mpsc::Receiver<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a message in time")
        .expect("the stream is open")
}

fn code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn initialize_and_tools_list_offer_tasks_by_each_tools_mode() {
    let server = server().await;
    let (c, init) = Client::open(&server, "ada").await;
    assert_eq!(
        init["result"]["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    let instructions = init["result"]["instructions"].as_str().expect("text");
    assert!(!instructions.contains("2026-07-28"), "{instructions}");
    let tools = c.call(1, "tools/list", json!({})).await;
    let support = |name: &str| {
        tools["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["execution"]["taskSupport"].clone())
            .expect("listed")
    };
    assert_eq!(support("greet"), "forbidden");
    assert_eq!(support("slow_compute"), "optional");
    assert_eq!(support("failing_job"), "required");
}

#[tokio::test]
async fn a_task_is_created_read_collected_listed_and_kept_to_its_owner() {
    let server = server().await;
    let (ada, _) = Client::open(&server, "ada").await;
    let created = ada
        .call(
            1,
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "t"},
                   "task": {"ttl": 60000}}),
        )
        .await;
    let task = &created["result"]["task"];
    let id = task["taskId"].as_str().expect("a task id").to_owned();
    assert_eq!(task["status"], "working", "{created}");
    assert!(
        task["ttl"].is_u64() && task["pollInterval"].is_u64(),
        "{task}"
    );
    assert!(task["createdAt"].is_string() && task["lastUpdatedAt"].is_string());
    for absent in ["ttlMs", "pollIntervalMs", "resultType"] {
        assert!(task.get(absent).is_none(), "{absent} in {task}");
        assert!(created["result"].get(absent).is_none(), "{absent}");
    }
    // The TypeScript SDK repeats `task` on tasks/get and tasks/result: it is ignored.
    let got = ada
        .call(
            2,
            "tasks/get",
            json!({"taskId": id, "task": {"ttl": 60000}}),
        )
        .await;
    assert_eq!(got["result"]["taskId"], id.as_str(), "{got}");
    assert!(got["result"].get("task").is_none(), "flat");
    let result = ada
        .call(3, "tasks/result", json!({"taskId": id, "task": {}}))
        .await;
    let r = &result["result"];
    assert_eq!(r["isError"], false, "{result}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Completed t"))
    );
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    assert!(r.get("resultType").is_none());
    assert_eq!(
        ada.call(4, "tasks/result", json!({"taskId": id})).await["result"],
        *r,
        "repeatable"
    );
    // Without a stream, the wait answers in the response body.
    let Reply::Json { body, .. } = ada
        .reply(5, "tasks/result", json!({"taskId": id}), false)
        .await
    else {
        panic!("a JSON response");
    };
    let plain: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(plain["result"], *r);

    // Absent params list the caller's tasks; another principal sees none of them.
    let listed = ada.call(6, "tasks/list", Value::Null).await;
    let ids: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    assert_eq!(ids, vec![id.as_str()], "{listed}");
    let eve = Caller::trusted(Principal::new("evil", "eve"));
    let (eve, _) = Client::open_as(&server, eve).await;
    let theirs = eve.call(7, "tasks/list", json!({})).await;
    assert_eq!(theirs["result"]["tasks"], json!([]), "{theirs}");
    let unknown = eve.call(8, "tasks/get", json!({"taskId": "nope"})).await;
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let foreign = eve.call(9, method, json!({"taskId": id})).await;
        assert_eq!(code(&foreign), -32602, "{method}: {foreign}");
        assert_eq!(
            foreign["error"]["message"], unknown["error"]["message"],
            "a foreign id reads as an unknown one"
        );
    }
    let bad = ada
        .call(10, "tasks/list", json!({"cursor": "not-a-cursor"}))
        .await;
    assert_eq!(code(&bad), -32602);
}

#[tokio::test]
async fn a_call_must_ask_the_way_the_tool_runs() {
    let server = server().await;
    let (c, _) = Client::open(&server, "ada").await;
    let v = c
        .call(
            1,
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
        )
        .await;
    assert_eq!(code(&v), -32601, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    for part in [
        "tool \"failing_job\" runs only as a durable task",
        "params.task",
        "mode = \"optional\" under [tools.failing_job]",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    let v = c
        .call(
            2,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "A"}, "task": {}}),
        )
        .await;
    assert_eq!(code(&v), -32601, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("forbidden"))
    );
    let v = c
        .call(
            3,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "A"}, "task": 1}),
        )
        .await;
    assert_eq!(code(&v), -32602, "{v}");
    // A tool that asks before its task exists cannot be a 2025-11-25 task; it says so
    // rather than hanging or answering a 2026-07-28 shape.
    let v = c
        .call(
            4,
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(code(&v), -32021, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("before its task is created")),
        "{v}"
    );
}

#[tokio::test]
async fn a_tool_error_is_a_failed_task_whose_result_is_the_tools() {
    let server = server().await;
    let (c, _) = Client::open(&server, "ada").await;
    let task = c.task(1, "failing_job", json!({})).await;
    let id = task["taskId"].as_str().expect("id").to_owned();
    let r = c.call(2, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let got = c.call(3, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(got["result"]["status"], "failed", "{got}");
    // A protocol error is the error tools/call would have answered.
    let task = c.task(4, "protocol_error_job", json!({})).await;
    let id = task["taskId"].as_str().expect("id").to_owned();
    let r = c.call(5, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(code(&r), -32603, "{r}");
    assert_eq!(
        c.call(6, "tasks/get", json!({"taskId": id})).await["result"]["status"],
        "failed"
    );
}

#[tokio::test]
async fn a_cancel_is_committed_before_the_reply_and_sticks() {
    let server = server().await;
    let (c, _) = Client::open(&server, "ada").await;
    let task = c
        .task(1, "slow_compute", json!({"seconds": 60, "label": "c"}))
        .await;
    let id = task["taskId"].as_str().expect("id").to_owned();
    let v = c.call(2, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(v["result"]["status"], "cancelled", "{v}");
    assert_eq!(v["result"]["taskId"], id.as_str());
    assert_eq!(
        c.call(3, "tasks/get", json!({"taskId": id})).await["result"]["status"],
        "cancelled"
    );
    let again = c.call(4, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(code(&again), -32602, "a finished task: {again}");
    let r = c.call(5, "tasks/result", json!({"taskId": id})).await;
    assert!(
        r.get("error").is_some(),
        "a cancelled task has no result: {r}"
    );
    assert_eq!(
        c.call(6, "tasks/get", json!({"taskId": id})).await["result"]["status"],
        "cancelled",
        "sticky: what the stopped attempt reports changes nothing"
    );
}

/// The question reaches the open `tasks/result` stream with the related-task `_meta`; a
/// stream that went away leaves it outstanding, the next `tasks/result` asks it again, and
/// the answer posted there completes the task.
#[tokio::test]
async fn a_question_is_asked_on_tasks_result_and_answered_by_a_posted_response() {
    let server = server().await;
    let (c, _) = Client::open(&server, "ada").await;
    let task = c
        .task(1, "confirm_delete", json!({"filename": "a.txt"}))
        .await;
    let id = task["taskId"].as_str().expect("id").to_owned();
    let Reply::Stream(mut first) = c
        .reply(2, "tasks/result", json!({"taskId": id}), true)
        .await
    else {
        panic!("tasks/result waits on a stream");
    };
    // The stream opens with the task's status, related to it.
    let status = next(&mut first).await;
    assert_eq!(status["method"], "notifications/tasks/status", "{status}");
    assert_eq!(status["params"]["taskId"], id.as_str());
    assert_eq!(
        status["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let asked = question(&mut first).await;
    assert_eq!(
        asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    assert_eq!(
        c.call(3, "tasks/get", json!({"taskId": id})).await["result"]["status"],
        "input_required"
    );
    // The client goes away without answering; it reconnects and is asked again.
    drop(first);
    let Reply::Stream(mut second) = c
        .reply(4, "tasks/result", json!({"taskId": id}), true)
        .await
    else {
        panic!("tasks/result waits on a stream");
    };
    let asked = question(&mut second).await;
    c.answer(
        &asked["id"],
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    let done = loop {
        let m = next(&mut second).await;
        if m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(done["id"], 4);
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted a.txt",
        "{done}"
    );
}

/// A `tasks/result` that waits holds one of its tenant's stream slots until it ends: past
/// `limits.streams_per_tenant` the next wait is refused at once, naming the limit.
#[tokio::test]
async fn a_waiting_tasks_result_holds_a_stream_slot() {
    let fixtures = super::fixtures().await;
    let limits = snodo_runner::budget::TenantLimits {
        streams_per_tenant: 1,
        ..Default::default()
    };
    let (server, _) =
        common::mcp_server(common::catalog_of(&[&fixtures], Default::default()), limits);
    let (c, _) = Client::open(&server, "ada").await;
    let task = c
        .task(1, "slow_compute", json!({"seconds": 60, "label": "w"}))
        .await;
    let id = task["taskId"].as_str().expect("id").to_owned();
    let Reply::Stream(waiting) = c
        .reply(2, "tasks/result", json!({"taskId": id}), true)
        .await
    else {
        panic!("tasks/result waits on a stream");
    };
    let refused = c.call(3, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(code(&refused), -32000, "{refused}");
    assert_eq!(
        refused["error"]["data"]["limit"],
        "limits.streams_per_tenant"
    );
    drop(waiting);
    c.call(4, "tasks/cancel", json!({"taskId": id})).await;
}

/// Where a tool gives handles, a 2025-11-25 call without `params.task` reaches a task-only
/// tool all the same: the task's question comes on the call's event stream with the
/// related-task `_meta`, the posted answer goes to the task, and the call ends with the
/// tool's result; `tools/list` shows `task_result`, and the tool as `optional`; a call with
/// `params.task` is a task.
#[tokio::test]
async fn a_call_without_a_task_gets_its_tasks_question_on_its_stream_and_then_its_result() {
    let catalog = super::handle::catalog_with_handles(60_000).await;
    let (server, _) = common::mcp_server(catalog, Default::default());
    let (c, _) = Client::open(&server, "ada").await;
    let tools = c.call(1, "tools/list", json!({})).await;
    let listed = |tools: &Value| {
        tools["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .any(|t| t["name"] == snodo_runner::TASK_RESULT_TOOL)
    };
    assert!(listed(&tools));
    // Task-only, it serves a call without a task too: clients check before they call.
    let confirm = tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "confirm_delete")
        .expect("listed");
    assert_eq!(confirm["execution"]["taskSupport"], "optional");
    let call = json!({"name": "confirm_delete", "arguments": {"filename": "c.txt"}});
    let Reply::Stream(mut rx) = c.reply(2, "tools/call", call, true).await else {
        panic!("the call follows its task on a stream");
    };
    let asked = question(&mut rx).await;
    let task_id = asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
        .as_str()
        .expect("the related task")
        .to_owned();
    c.answer(
        &asked["id"],
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    let done = next(&mut rx).await;
    assert_eq!(done["id"], 2);
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted c.txt",
        "{done}"
    );
    assert_eq!(
        done["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    assert!(
        done["result"].get("resultType").is_none(),
        "2025-11-25 has none"
    );

    // A call that asks for a task with params.task gets one, as without handles.
    let task = c
        .task(3, "slow_compute", json!({"seconds": 1, "label": "own"}))
        .await;
    assert_eq!(task["status"], "working", "{task}");
}

/// A question asked on one node's `tasks/result` stream may be answered on another (a load
/// balancer sends the client's POST anywhere): the request id names the task and the
/// question, sealed, and that node commits the answer to the task.
#[tokio::test]
async fn an_answer_posted_to_another_node_reaches_the_task() {
    let fixtures = super::fixtures().await;
    let store: Arc<dyn snodo_core::store::Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    // A's guest waits for the answer in-process, and nothing tells it of B's commit (a
    // shared PostgreSQL would): parked soon, it resumes by replay once answered.
    let options = snodo_runner::RunnerOptions {
        poll_interval: Duration::from_millis(10),
        park_after: Duration::from_millis(200),
        ..Default::default()
    };
    let (a, _runs_a) = common::server_with(&store, catalog.clone(), options.clone());
    let (b, _runs_b) = common::server_with(&store, catalog, options);
    let (a, b) = (Arc::new(a), Arc::new(b));
    let (on_a, _) = Client::open(&a, "ada").await;
    let on_b = Client {
        server: b,
        caller: on_a.caller.clone(),
        session: on_a.session.clone(),
    };
    let task = on_a
        .task(1, "confirm_delete", json!({"filename": "x.txt"}))
        .await;
    let id = task["taskId"].as_str().expect("id").to_owned();
    let Reply::Stream(mut rx) = on_a
        .reply(2, "tasks/result", json!({"taskId": id}), true)
        .await
    else {
        panic!("tasks/result waits on a stream");
    };
    let asked = question(&mut rx).await;
    // Someone else's POST of the same id commits nothing.
    let (mallory, _) = Client::open(&a, "mallory").await;
    let stolen = Client {
        server: on_b.server.clone(),
        caller: mallory.caller.clone(),
        session: mallory.session.clone(),
    };
    stolen
        .answer(
            &asked["id"],
            json!({"action": "accept", "content": {"confirm": false}}),
        )
        .await;
    on_b.answer(
        &asked["id"],
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    let done = loop {
        let m = next(&mut rx).await;
        if m.get("method").is_none() {
            break m;
        }
    };
    assert_eq!(done["id"], 2);
    assert_eq!(
        done["result"]["content"][0]["text"], "Deleted x.txt",
        "{done}"
    );
}
