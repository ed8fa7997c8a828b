//! Removed and unknown methods, `server/discover`, `tools/list` and the errors of `tools/call`.

use axum::http::StatusCode;
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
        let (s, v) = ask(&app, 9, m, json!({"taskId": "x"}), caps(true)).await;
        assert_eq!(
            (s.as_u16(), code(&v), v["id"].clone()),
            (404, -32601, json!(9)),
            "{m}"
        );
    }
    let (s, v) = ask(&app, 1, "server/discover", json!({}), caps(false)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["result"]["capabilities"]["extensions"][TASKS], json!({}));
    assert!(
        v["result"]["capabilities"].get("tasks").is_none(),
        "no legacy capability"
    );
    assert_eq!(v["result"]["resultType"], "complete");
    let (_, v) = ask(&app, 2, "tools/list", json!({}), caps(false)).await;
    let names = fields(&v["result"]["tools"], "name");
    assert!(names.contains(&"greet") && names.contains(&"slow_compute"));
    assert!(
        v["result"]["tools"][0].get("execution").is_none(),
        "no task policy on the wire"
    );
    // Unknown tool, bad arguments.
    let (s, v) = ask(&app, 3, "tools/call", json!({"name": "nope"}), caps(false)).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32602));
    let not_object = json!({"name": "greet", "arguments": [1]});
    let (_, v) = ask(&app, 3, "tools/call", not_object, caps(false)).await;
    assert_eq!(code(&v), -32602);
    // A required tool without the declaration: -32021 before the guest runs.
    let required = json!({"name": "failing_job", "arguments": {}});
    let (s, v) = ask(&app, 4, "tools/call", required, caps(false)).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32021));
    assert_eq!(
        v["error"]["data"],
        json!({"requiredCapabilities": {"extensions": {TASKS: {}}}})
    );
    // A tool needing sampling.
    let sampling = json!({"name": "test_missing_capability"});
    let (s, v) = ask(&app, 5, "tools/call", sampling, caps(true)).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32021));
    assert_eq!(
        v["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    // Optional tool without the declaration runs synchronously; the legacy hint is ignored.
    let optional = json!({"name": "greet", "arguments": {"name": "h"}, "task": {"ttl": 1}});
    let (_, v) = ask(&app, 6, "tools/call", optional, caps(true)).await;
    assert_eq!(v["result"]["resultType"], "complete");
    // tasks/* need the declaration, before any lookup.
    for m in ["tasks/get", "tasks/cancel"] {
        let (s, v) = ask(&app, 7, m, json!({"taskId": "gate-test"}), caps(false)).await;
        assert_eq!((s.as_u16(), code(&v)), (400, -32021), "{m}");
    }
    let unknown = json!({"taskId": "tasks-conformance-nonexistent-12345"});
    let (_, v) = ask(&app, 8, "tasks/get", unknown, caps(true)).await;
    assert_eq!(code(&v), -32602);
    let (_, v) = ask(&app, 8, "tasks/update", json!({"taskId": "x"}), caps(true)).await;
    assert_eq!(code(&v), -32602, "inputResponses is required");
    // DNS rebinding.
    let body = rpc(10, "tools/list", json!({}), caps(false));
    for (h, v) in [
        ("host", "evil.example:3001"),
        ("origin", "http://evil.example"),
    ] {
        let req = post_with(&body, h, v);
        assert_eq!(send(&app, req).await.0, StatusCode::FORBIDDEN, "{h}");
    }
}
