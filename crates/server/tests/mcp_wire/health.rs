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
    let req = Request::get("/metrics")
        .header("host", "localhost")
        .body(Body::empty())
        .expect("request");
    let (s, body, ctype) = send(&app, req).await;
    assert_eq!(s, StatusCode::OK);
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    let text = body.as_str().expect("text").to_owned();
    assert!(text.contains("snodo_tasks_created_total 1"), "{text}");
    assert!(text.contains("snodo_sync_calls_total 1"), "{text}");
    assert!(text.contains("# TYPE snodo_store_operation_seconds histogram"));
    for path in ["/healthz", "/readyz"] {
        let req = Request::get(path)
            .header("host", "localhost")
            .body(Body::empty())
            .expect("request");
        assert_eq!(send(&app, req).await.0, StatusCode::OK, "{path}");
    }
}
