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
    // The message is what many clients show: the tool, why, and what would change it.
    let message = v["error"]["message"].as_str().unwrap_or_default();
    for part in [
        "tool \"failing_job\" runs only as a durable task",
        "did not declare the io.modelcontextprotocol/tasks extension",
        "mode = \"optional\" under [tools.failing_job]",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    // A tool needing sampling.
    let sampling = json!({"name": "test_missing_capability"});
    let (s, v) = ask(&app, 5, "tools/call", sampling, caps(true)).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32021));
    assert_eq!(
        v["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("tool \"test_missing_capability\" asks the client for completions")
            && message.contains("declare sampling in _meta"),
        "{message}"
    );
    // Optional tool without the declaration runs synchronously; the legacy hint is ignored.
    let optional = json!({"name": "greet", "arguments": {"name": "h"}, "task": {"ttl": 1}});
    let (_, v) = ask(&app, 6, "tools/call", optional, caps(true)).await;
    assert_eq!(v["result"]["resultType"], "complete");
    // tasks/* need the declaration, before any lookup.
    for m in ["tasks/get", "tasks/cancel"] {
        let (s, v) = ask(&app, 7, m, json!({"taskId": "gate-test"}), caps(false)).await;
        assert_eq!((s.as_u16(), code(&v)), (400, -32021), "{m}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("{m} belongs to the {TASKS} extension")),
            "{message}"
        );
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

/// `POST /mcp` skips the router; every other route goes through it. Both refuse a foreign
/// host and a missing or wrong token alike: the same status, the same JSON-RPC error, the
/// same challenge.
#[tokio::test]
async fn the_direct_post_path_and_the_router_refuse_alike() {
    let app = app(vec![(
        "token-of-alice-0123456789".into(),
        Principal::new("acme", "alice"),
    )])
    .await;
    let body = rpc(1, "tools/list", json!({}), caps(false));
    let refusals = |method: &'static str| {
        let body = body.clone();
        move |header: Option<(&'static str, &'static str)>| {
            let mut req = request_of(&body);
            *req.method_mut() = method.parse().expect("method");
            if let Some((name, value)) = header {
                req.headers_mut()
                    .insert(name, value.parse().expect("header value"));
            }
            req
        }
    };
    let (post, delete) = (refusals("POST"), refusals("DELETE"));
    for header in [
        Some(("host", "evil.example:3001")),
        Some(("origin", "http://evil.example")),
        None,
        Some(("authorization", "Bearer wrong-token-0123456789")),
    ] {
        let by_post = app.clone().oneshot(post(header)).await.expect("response");
        let by_router = app.clone().oneshot(delete(header)).await.expect("response");
        assert_eq!(by_post.status(), by_router.status(), "{header:?}");
        assert!(
            [StatusCode::FORBIDDEN, StatusCode::UNAUTHORIZED].contains(&by_post.status()),
            "{header:?}: {}",
            by_post.status()
        );
        assert_eq!(
            by_post.headers().get("www-authenticate"),
            by_router.headers().get("www-authenticate"),
            "{header:?}"
        );
        let text = |r: axum::response::Response| async move {
            r.into_body().collect().await.expect("body").to_bytes()
        };
        assert_eq!(text(by_post).await, text(by_router).await, "{header:?}");
    }
}

/// A server built with its own [`Authenticator`] serves whom it authenticates, and
/// answers its refusal with its challenge.
#[tokio::test]
async fn a_custom_authenticator_decides_who_calls() {
    use snodo_server::http::router_with;
    use snodo_server::identity::{Authentication, Authenticator, Caller, Scopes, Unauthenticated};

    /// Decides after waiting, as an authenticator that fetches keys would.
    struct OnlyAda;
    impl Authenticator for OnlyAda {
        fn authenticate<'a>(&'a self, headers: &'a axum::http::HeaderMap) -> Authentication<'a> {
            Authentication::Waiting(Box::pin(async move {
                tokio::task::yield_now().await;
                Self::decide(headers)
            }))
        }
    }
    impl OnlyAda {
        fn decide(headers: &axum::http::HeaderMap) -> Result<Caller, Unauthenticated> {
            match headers.get("x-user").and_then(|v| v.to_str().ok()) {
                Some("ada") => Ok(Caller {
                    principal: Principal::new("acme", "ada"),
                    scopes: Scopes::Only(vec!["mcp".into()]),
                    claims: Default::default(),
                }),
                _ => Err(Unauthenticated {
                    message: "who are you?".into(),
                    challenge: r#"Bearer resource_metadata="https://example/.well-known""#.into(),
                    status: 401,
                }),
            }
        }
    }
    let fixtures = fixtures().await;
    let (server, _) = common::mcp_server(
        common::catalog_of(&[&fixtures], Default::default()),
        Default::default(),
    );
    let app = router_with(server, HttpConfig::default(), Arc::new(OnlyAda));
    let body = rpc(1, "tools/list", json!({}), caps(false));
    let refused = app.handle(request_of(&body)).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        refused.headers()["www-authenticate"],
        r#"Bearer resource_metadata="https://example/.well-known""#
    );
    let bytes = refused
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(v["error"]["message"], "who are you?");
    let (s, v, _) = send(&app, post_with(&body, "x-user", "ada")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
}
