//! The handle a client without tasks is given where a tool sets `handle_after_ms`: the call
//! becomes a durable task and answers with its result when it finishes in time, else with a
//! result naming the task, which the built-in `task_result` tool follows; the task's
//! questions come as MRTR rounds whose state names the task; another caller's task is not
//! found.

use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use snodo_runner::{Catalog, TASK_RESULT_TOOL};
use snodo_server::http::{App, HttpConfig, router};

use super::*;

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

/// The fixtures with `handle_after_ms = wait_ms` on every tool, served to Alice and Bob
/// (two tenants) by their tokens.
pub(crate) async fn catalog_with_handles(wait_ms: u64) -> Catalog {
    let fixtures = fixtures().await;
    let plain = common::catalog_of(&[&fixtures], Default::default());
    let mut catalog = Catalog::new();
    for tool in plain.tools() {
        let mut tool = tool.clone();
        tool.handle_after_ms = Some(wait_ms);
        catalog.add(tool).expect("unique names");
    }
    for source in plain.sources() {
        catalog.add_source(source.clone()).expect("unique sources");
    }
    catalog
}

async fn app_with_handles(wait_ms: u64) -> App {
    let (server, _) = common::mcp_server(catalog_with_handles(wait_ms).await, Default::default());
    router(
        server,
        HttpConfig {
            max_body_bytes: 64 << 10,
            tokens: vec![
                (ALICE.to_owned(), Principal::new("acme", "alice")),
                (BOB.to_owned(), Principal::new("globex", "bob")),
            ],
            ..HttpConfig::default()
        },
    )
}

/// Request `id` of `method` with `params` from a client declaring `caps`, bearing `token`.
async fn as_(app: &App, token: &str, id: i64, method: &str, params: Value, caps: Value) -> Value {
    let body = rpc(id, method, params, caps);
    let req: Request<Body> = post(&body)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(body.to_string()))
        .expect("request");
    send(app, req).await.1
}

fn text(v: &Value) -> &str {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

fn related(v: &Value) -> String {
    v["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
        .as_str()
        .expect("the related task")
        .to_owned()
}

/// The status of Alice's task `id`, as a client with tasks reads it.
async fn status_of(app: &App, id: &str) -> Value {
    let got = as_(
        app,
        ALICE,
        90,
        "tasks/get",
        json!({"taskId": id}),
        caps(true),
    )
    .await;
    got["result"]["status"].clone()
}

fn no_tasks() -> Value {
    caps(false)
}

#[tokio::test]
async fn a_call_that_finishes_in_time_answers_with_its_result_from_a_durable_task() {
    let app = app_with_handles(60_000).await;
    let listed = as_(&app, ALICE, 1, "tools/list", json!({}), no_tasks()).await;
    let names = fields(&listed["result"]["tools"], "name");
    assert!(names.contains(&TASK_RESULT_TOOL), "{names:?}");
    let with_tasks = as_(&app, ALICE, 2, "tools/list", json!({}), caps(true)).await;
    assert!(
        !fields(&with_tasks["result"]["tools"], "name").contains(&TASK_RESULT_TOOL),
        "a client with tasks follows its tasks itself"
    );

    let call = json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "inline"}});
    let v = as_(&app, ALICE, 3, "tools/call", call, no_tasks()).await;
    assert_eq!(text(&v), "Completed inline after 1 seconds", "{v}");
    assert_eq!(v["result"]["resultType"], "complete");
    assert_ne!(v["result"]["isError"], true);
    // It ran as a task, which a client with tasks can read.
    let id = related(&v);
    let got = status_of(&app, &id).await;
    assert_eq!(got, "completed");
}

#[tokio::test]
async fn past_the_wait_a_handle_names_the_task_and_task_result_follows_it_for_its_owner_only() {
    let app = app_with_handles(0).await;
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 2, "label": "later"}});
    let v = as_(&app, ALICE, 1, "tools/call", call, no_tasks()).await;
    let id = related(&v);
    let handle = text(&v);
    assert!(
        handle.contains(&format!("slow_compute is still running as task {id}"))
            && handle.contains(&format!("{TASK_RESULT_TOOL} with {{\"taskId\": \"{id}\"}}"))
            && handle.contains("kept until"),
        "{v}"
    );
    assert!(v["result"].get("isError").is_none(), "a handle is no error");

    // Bob, of another tenant, learns nothing of it.
    let follow = json!({"name": TASK_RESULT_TOOL, "arguments": {"taskId": id}});
    let foreign = as_(&app, BOB, 2, "tools/call", follow.clone(), no_tasks()).await;
    assert_eq!(foreign["result"]["isError"], true, "{foreign}");
    assert!(text(&foreign).starts_with(&format!("No task {id}")));
    let unknown = json!({"name": TASK_RESULT_TOOL, "arguments": {"taskId": "nope"}});
    let unknown = as_(&app, ALICE, 3, "tools/call", unknown, no_tasks()).await;
    assert_eq!(unknown["result"]["isError"], true);
    assert_eq!(text(&unknown), text(&foreign).replace(&id, "nope"));
    let malformed = json!({"name": TASK_RESULT_TOOL, "arguments": {"task": id}});
    let malformed = as_(&app, ALICE, 4, "tools/call", malformed, no_tasks()).await;
    assert_eq!(code(&malformed), -32602, "{malformed}");

    // Alice follows it until it is done: each call waits up to the tool's 0 ms.
    let app = &app;
    let done = common::eventually("the task's outcome", || {
        let follow = follow.clone();
        async move {
            let v = as_(app, ALICE, 5, "tools/call", follow, no_tasks()).await;
            (!text(&v).contains("still running")).then_some(v)
        }
    })
    .await;
    assert_eq!(text(&done), "Completed later after 2 seconds", "{done}");
    assert_eq!(related(&done), id);
}

#[tokio::test]
async fn task_result_is_served_only_where_a_tool_gives_handles() {
    let plain = super::app(vec![]).await;
    let (_, listed) = ask(&plain, 1, "tools/list", json!({}), no_tasks()).await;
    assert!(!fields(&listed["result"]["tools"], "name").contains(&TASK_RESULT_TOOL));
    let follow = json!({"name": TASK_RESULT_TOOL, "arguments": {"taskId": "x"}});
    let (_, v) = ask(&plain, 2, "tools/call", follow, no_tasks()).await;
    assert_eq!(code(&v), -32602, "{v}");
    // Without handles a task-only tool is refused to a client without tasks.
    let confirm = json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}});
    let (_, v) = ask(&plain, 3, "tools/call", confirm, no_tasks()).await;
    assert_eq!(code(&v), -32021, "{v}");
}

#[tokio::test]
async fn a_question_is_an_mrtr_round_whose_retry_answers_the_task() {
    let app = app_with_handles(60_000).await;
    // confirm_delete runs only as a task: with a handle, a client without tasks calls it.
    let call = json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}});
    let asked = as_(&app, ALICE, 1, "tools/call", call.clone(), no_tasks()).await;
    let r = &asked["result"];
    assert_eq!(r["resultType"], "input_required", "{asked}");
    assert_eq!(
        r["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    let state = r["requestState"].as_str().expect("a state").to_owned();
    let id = related(&asked);

    // The state is Alice's: Bob's retry with it is refused and answers nothing.
    let mut retry = call.clone();
    retry["inputResponses"] =
        json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    retry["requestState"] = json!(state);
    let stolen = as_(&app, BOB, 2, "tools/call", retry.clone(), no_tasks()).await;
    assert_eq!(code(&stolen), -32602, "{stolen}");

    let done = as_(&app, ALICE, 3, "tools/call", retry, no_tasks()).await;
    assert_eq!(text(&done), "Deleted a.txt", "{done}");
    // The same task, answered: the retry did not call the tool again.
    assert_eq!(related(&done), id);
    let got = status_of(&app, &id).await;
    assert_eq!(got, "completed");
}

/// A client that did not declare elicitation is never asked, and the model is never handed
/// the question: the tool is told the client cannot answer, as for any task of that client.
#[tokio::test]
async fn a_question_the_client_cannot_show_is_never_put_to_the_model() {
    let app = app_with_handles(60_000).await;
    let call = json!({"name": "confirm_delete", "arguments": {"filename": "b.txt"}});
    let v = as_(&app, ALICE, 1, "tools/call", call, json!({})).await;
    assert!(v["result"].get("inputRequests").is_none(), "{v}");
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert!(
        text(&v).contains("needs the client capability `elicitation`"),
        "{v}"
    );
    related(&v);
}

#[tokio::test]
async fn a_tool_named_task_result_cannot_be_served_beside_handles() {
    let fixtures = fixtures().await;
    let plain = common::catalog_of(&[&fixtures], Default::default());
    let tool = plain.tool("greet").expect("greet").clone();
    let mut named = tool.clone();
    named.info.name = TASK_RESULT_TOOL.to_owned();
    let mut handles = tool.clone();
    handles.handle_after_ms = Some(1_000);

    let mut catalog = Catalog::new();
    catalog.add(handles.clone()).expect("a tool with a handle");
    let e = catalog.add(named.clone()).expect_err("its name is taken");
    assert!(e.to_string().contains("\"task_result\""), "{e}");
    assert!(catalog.handles());

    let mut catalog = Catalog::new();
    catalog.add(named).expect("no handles: the name is free");
    assert!(!catalog.handles());
    handles.info.name = "other".to_owned();
    catalog.add(handles).expect_err("handles would shadow it");
}
