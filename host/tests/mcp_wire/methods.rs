//! Removed and unknown methods, `server/discover`, `tools/list` and the errors of `tools/call`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;

use super::*;

#[tokio::test]
async fn methods_and_tools_errors() {
    let app = app(vec![]).await;
    for m in [
        "tasks/list",
        "tasks/result",
        "initialize",
        "ping",
        "no/such",
    ] {
        let (s, v) = call(&app, rpc(9, m, json!({"taskId": "x"}), caps(true))).await;
        assert_eq!(
            (s.as_u16(), code(&v), v["id"].clone()),
            (404, -32601, json!(9)),
            "{m}"
        );
    }
    let (s, v) = call(&app, rpc(1, "server/discover", json!({}), caps(false))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["result"]["capabilities"]["extensions"][TASKS], json!({}));
    assert!(
        v["result"]["capabilities"].get("tasks").is_none(),
        "no legacy capability"
    );
    assert_eq!(v["result"]["resultType"], "complete");
    let (_, v) = call(&app, rpc(2, "tools/list", json!({}), caps(false))).await;
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"greet") && names.contains(&"slow_compute"));
    assert!(
        v["result"]["tools"][0].get("execution").is_none(),
        "no task policy on the wire"
    );
    // Unknown tool, bad arguments.
    let (s, v) = call(
        &app,
        rpc(3, "tools/call", json!({"name": "nope"}), caps(false)),
    )
    .await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32602));
    let (_, v) = call(
        &app,
        rpc(
            3,
            "tools/call",
            json!({"name": "greet", "arguments": [1]}),
            caps(false),
        ),
    )
    .await;
    assert_eq!(code(&v), -32602);
    // A required tool without the declaration: -32021 before the guest runs.
    let (s, v) = call(
        &app,
        rpc(
            4,
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
            caps(false),
        ),
    )
    .await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32021));
    assert_eq!(
        v["error"]["data"],
        json!({"requiredCapabilities": {"extensions": {TASKS: {}}}})
    );
    // A tool needing sampling.
    let (s, v) = call(
        &app,
        rpc(
            5,
            "tools/call",
            json!({"name": "test_missing_capability"}),
            caps(true),
        ),
    )
    .await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32021));
    assert_eq!(
        v["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    // Optional tool without the declaration runs synchronously; the legacy hint is ignored.
    let (_, v) = call(
        &app,
        rpc(
            6,
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "h"}, "task": {"ttl": 1}}),
            caps(true),
        ),
    )
    .await;
    assert_eq!(v["result"]["resultType"], "complete");
    // tasks/* need the declaration, before any lookup.
    for m in ["tasks/get", "tasks/cancel"] {
        let (s, v) = call(&app, rpc(7, m, json!({"taskId": "gate-test"}), caps(false))).await;
        assert_eq!((s.as_u16(), code(&v)), (400, -32021), "{m}");
    }
    let (_, v) = call(
        &app,
        rpc(
            8,
            "tasks/get",
            json!({"taskId": "tasks-conformance-nonexistent-12345"}),
            caps(true),
        ),
    )
    .await;
    assert_eq!(code(&v), -32602);
    let (_, v) = call(
        &app,
        rpc(8, "tasks/update", json!({"taskId": "x"}), caps(true)),
    )
    .await;
    assert_eq!(code(&v), -32602, "inputResponses is required");
    // DNS rebinding.
    let body = rpc(10, "tools/list", json!({}), caps(false));
    for (h, v) in [
        ("host", "evil.example:3001"),
        ("origin", "http://evil.example"),
    ] {
        let req = post(&body)
            .header(h, v)
            .body(Body::from(body.to_string()))
            .expect("r");
        let req = {
            let (mut parts, b) = req.into_parts();
            parts.headers.insert(h, v.parse().expect("value"));
            Request::from_parts(parts, b)
        };
        assert_eq!(send(&app, req).await.0, StatusCode::FORBIDDEN, "{h}");
    }
}
