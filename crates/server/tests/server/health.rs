//! `/metrics`, `/healthz` and `/readyz`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;

use super::*;

#[tokio::test]
async fn metrics_and_health() {
    let app = app(vec![]).await;
    let failing_job = json!({"name": "failing_job"});
    let (_, v) = ask(&app, 1, "tools/call", failing_job, caps(true)).await;
    assert_eq!(v["result"]["resultType"], "task");
    let (_, _) = ask(&app, 2, "tools/call", json!({"name": "greet"}), caps(false)).await;
    let tool_error = json!({"name": "test_error_handling"});
    let (_, v) = ask(&app, 3, "tools/call", tool_error.clone(), caps(false)).await;
    assert_eq!(v["result"]["isError"], true);
    // The same call streaming its progress is timed to its response, and classified.
    let mut streamed = rpc(6, "tools/call", tool_error, caps(false));
    streamed["params"]["_meta"]["progressToken"] = json!("p-1");
    let (_, body, ctype) = send(&app, request_of(&streamed)).await;
    assert!(ctype.starts_with("text/event-stream"), "{ctype}: {body}");
    // A name no tool has is not a label: clients cannot grow the series.
    let unknown = json!({"name": "no-such-tool-7f3a"});
    let (_, v) = ask(&app, 4, "tools/call", unknown, caps(false)).await;
    assert_eq!(v["error"]["code"], -32602);
    let (_, _) = ask(&app, 5, "tools/list", json!({}), caps(false)).await;
    let req = Request::get("/metrics")
        .header("host", "localhost")
        .body(Body::empty())
        .expect("request");
    let (s, body, ctype) = send(&app, req).await;
    assert_eq!(s, StatusCode::OK);
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let text = body.as_str().expect("text").to_owned();
    assert!(text.contains("snodo_tasks_created_total 1"), "{text}");
    assert!(text.contains("snodo_sync_calls_total 3"), "{text}");
    assert!(text.contains("# TYPE snodo_store_operation_seconds histogram"));
    // mcp.server.operation.duration, by method, tool and error type.
    let op = "mcp_server_operation_duration_seconds_count";
    for series in [
        r#"{mcp_method_name="tools/call",gen_ai_tool_name="failing_job"} 1"#,
        r#"{mcp_method_name="tools/call",gen_ai_tool_name="greet"} 1"#,
        r#"{mcp_method_name="tools/call",gen_ai_tool_name="test_error_handling",error_type="tool_error"} 2"#,
        r#"{mcp_method_name="tools/call",error_type="-32602"} 1"#,
        r#"{mcp_method_name="tools/list"} 1"#,
    ] {
        assert!(
            text.contains(&format!("{op}{series}")),
            "{series} in {text}"
        );
    }
    assert!(!text.contains("no-such-tool-7f3a"), "{text}");
    for path in ["/healthz", "/readyz"] {
        let req = Request::get(path)
            .header("host", "localhost")
            .body(Body::empty())
            .expect("request");
        assert_eq!(send(&app, req).await.0, StatusCode::OK, "{path}");
    }
}
