//! Resources, prompts and completion served from a component, on 2026-07-28: lists with
//! caching hints, reads and renders with MRTR, and every bad request a -32602.

use serde_json::{Value, json};

use super::{app, ask, call, code, fields, rpc};

#[tokio::test]
async fn resources_are_listed_and_read_with_caching_hints() {
    let app = app(vec![]).await;
    let (s, v) = ask(&app, 1, "resources/list", json!({}), json!({})).await;
    assert_eq!(s, 200);
    let r = &v["result"];
    assert_eq!(
        (&r["resultType"], &r["ttlMs"], &r["cacheScope"]),
        (&json!("complete"), &json!(0), &json!("private"))
    );
    let uris = fields(&r["resources"], "uri");
    assert!(uris.contains(&"test://static-text") && uris.contains(&"test://static-binary"));
    let (_, v) = ask(&app, 2, "resources/templates/list", json!({}), json!({})).await;
    assert_eq!(
        v["result"]["resourceTemplates"][0]["uriTemplate"],
        "test://template/{id}/data"
    );

    let read = |id, uri: Value| ask(&app, id, "resources/read", json!({"uri": uri}), json!({}));
    let (s, v) = read(3, json!("test://static-binary")).await;
    assert_eq!(s, 200);
    let c = &v["result"]["contents"][0];
    assert_eq!(
        (&c["mimeType"], c["blob"].is_string()),
        (&json!("image/png"), true)
    );
    assert_eq!(v["result"]["cacheScope"], "private");
    // Unknown: -32602 naming the URI, whether no component or the guest says so.
    let (s, v) = read(4, json!("test://nope")).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32602));
    assert_eq!(v["error"]["data"]["uri"], "test://nope");
    let (_, v) = read(5, json!(7)).await;
    assert_eq!(code(&v), -32602);
}

#[tokio::test]
async fn prompts_render_with_arguments_and_ask_for_input() {
    let app = app(vec![]).await;
    let (_, v) = call(&app, rpc(1, "prompts/list", json!({}), json!({}))).await;
    let prompts = v["result"]["prompts"].as_array().expect("prompts");
    let with_args = prompts
        .iter()
        .find(|p| p["name"] == "test_prompt_with_arguments")
        .expect("listed");
    assert_eq!(
        with_args["arguments"][0],
        json!({"name": "arg1", "description": "First test argument", "required": true})
    );
    let get = |id, name: &str, args| {
        rpc(
            id,
            "prompts/get",
            json!({"name": name, "arguments": args}),
            json!({"elicitation": {}}),
        )
    };
    let args = json!({"arg1": "a", "arg2": "b"});
    let (_, v) = call(&app, get(2, "test_prompt_with_arguments", args)).await;
    assert_eq!(v["result"]["resultType"], "complete");
    assert_eq!(
        v["result"]["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='a', arg2='b'"
    );
    // Missing a required argument, non-string arguments, an unknown prompt: -32602 before
    // any guest runs.
    for (args, name) in [
        (json!({"arg1": "a"}), "test_prompt_with_arguments"),
        (
            json!({"arg1": 1, "arg2": "b"}),
            "test_prompt_with_arguments",
        ),
        (json!({}), "no_such_prompt"),
    ] {
        let (s, v) = call(&app, get(3, name, args)).await;
        assert_eq!((s.as_u16(), code(&v)), (400, -32602), "{v}");
    }
    // MRTR on prompts/get: a question, then the answer with the state it was given.
    let (_, v) = call(&app, get(4, "test_input_required_result_prompt", json!({}))).await;
    let r = &v["result"];
    assert_eq!(r["resultType"], "input_required");
    assert!(r["inputRequests"]["user_context"].is_object());
    let state = r["requestState"].as_str().expect("state").to_owned();
    let mut answer = get(5, "test_input_required_result_prompt", json!({}));
    answer["params"]["inputResponses"] =
        json!({"user_context": {"action": "accept", "content": {"context": "wire"}}});
    answer["params"]["requestState"] = json!(state);
    let (_, v) = call(&app, answer).await;
    assert_eq!(
        v["result"]["messages"][0]["content"]["text"],
        "Prompt with context: wire"
    );
    // Nor for the same prompt called with other arguments.
    let mut replayed = get(
        7,
        "test_input_required_result_prompt",
        json!({"extra": "x"}),
    );
    replayed["params"]["inputResponses"] =
        json!({"user_context": {"action": "accept", "content": {"context": "wire"}}});
    replayed["params"]["requestState"] = json!(state);
    assert_eq!(code(&call(&app, replayed).await.1), -32602);
    // A state issued for one prompt does not open for another.
    let mut other = get(6, "test_simple_prompt", json!({}));
    other["params"]["requestState"] = json!(state);
    assert_eq!(code(&call(&app, other).await.1), -32602);
}

#[tokio::test]
async fn completion_suggests_prompt_arguments_and_template_variables() {
    let app = app(vec![]).await;
    let complete = |id, reference, name: &str, value: &str| {
        rpc(
            id,
            "completion/complete",
            json!({"ref": reference, "argument": {"name": name, "value": value}}),
            json!({}),
        )
    };
    let prompt = json!({"type": "ref/prompt", "name": "test_prompt_with_arguments"});
    let (_, v) = call(&app, complete(1, prompt, "arg1", "pa")).await;
    assert_eq!(
        v["result"]["completion"]["values"],
        json!(["paris", "park", "party"])
    );
    assert_eq!(v["result"]["resultType"], "complete");
    let template = json!({"type": "ref/resource", "uri": "test://template/{id}/data"});
    let (_, v) = call(&app, complete(2, template, "id", "7")).await;
    assert_eq!(v["result"]["completion"]["values"], json!(["789"]));
    for bad in [
        json!({"type": "ref/prompt", "name": "nope"}),
        json!({"type": "ref/resource", "uri": "test://static-text"}),
        json!({"type": "ref/other"}),
    ] {
        assert_eq!(code(&call(&app, complete(3, bad, "x", "")).await.1), -32602);
    }
}

/// Arguments are checked against the tool's `inputSchema` before anything is decided:
/// -32602 naming the problem, in every mode, and no task is created.
#[tokio::test]
async fn bad_arguments_are_refused_on_the_call_before_any_task_exists() {
    let app = app(vec![]).await;
    let tasks = super::caps(true);
    for (tool, args) in [
        ("slow_compute", json!({"seconds": -1})),
        ("slow_compute", json!({"seconds": "soon"})),
        ("slow_compute", json!({})),
        ("greet", json!({"name": 7})),
        ("confirm_delete", json!({"path": 3})),
    ] {
        let params = json!({"name": tool, "arguments": args});
        let (s, v) = ask(&app, 1, "tools/call", params, tasks.clone()).await;
        assert_eq!((s.as_u16(), code(&v)), (400, -32602), "{tool} {args}: {v}");
        assert_eq!(v["error"]["data"]["tool"], tool);
        assert!(
            v["error"]["data"]["errors"][0]["message"].is_string(),
            "{v}"
        );
    }
    let req = axum::http::Request::get("/metrics")
        .header("host", "localhost:3001")
        .body(axum::body::Body::empty())
        .expect("request");
    let (_, metrics, _) = super::send(&app, req).await;
    let metrics = metrics.as_str().expect("text").to_owned();
    assert!(
        metrics.lines().any(|l| l == "snodo_tasks_created_total 0"),
        "{metrics}"
    );
    // Good arguments still make the task.
    let good = json!({"name": "slow_compute", "arguments": {"seconds": 1}});
    let (_, v) = ask(&app, 2, "tools/call", good, tasks).await;
    assert_eq!(v["result"]["resultType"], "task", "{v}");
}
