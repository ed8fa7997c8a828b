//! Malformed envelopes, transport errors, routing headers and `_meta` rules.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;

/// A POST of the bytes `body` as they are, declaring JSON and `tools/list`.
fn raw_list(body: impl Into<Body>) -> Request<Body> {
    Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("mcp-method", "tools/list")
        .body(body.into())
        .expect("request")
}

#[tokio::test]
async fn malformed_envelopes() {
    let app = app(vec![]).await;
    for (body, status, expect) in [
        ("{", 400, -32700),
        ("[]", 400, -32600),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
            400,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}"#,
            400,
            -32700,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}"#,
            400,
            -32602,
        ),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
            400,
            -32600,
        ),
    ] {
        let (s, v, _) = send(&app, raw_list(body)).await;
        assert_eq!((s.as_u16(), code(&v)), (status, expect), "{body}: {v}");
        assert_eq!(v["jsonrpc"], "2.0");
    }
    // Non-UTF-8 body.
    let req = Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Body::from(vec![0xff, 0xfe, 0x00]))
        .expect("request");
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32700));
    // Too large: 413, before anything is parsed.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"x":"{}"}}}}"#,
        "a".repeat(70_000)
    );
    let (s, v, _) = send(&app, raw_list(big)).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&v), -32600);
    // Wrong content type.
    let req = Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "text/plain")
        .body(Body::from("{}"))
        .expect("request");
    assert_eq!(send(&app, req).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // No content type: refused the same way (every real client sends it).
    let req = Request::post("/mcp")
        .header("host", "localhost")
        .header("mcp-method", "tools/list")
        .body(Body::from(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        ))
        .expect("request");
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s, code(&v)), (StatusCode::UNSUPPORTED_MEDIA_TYPE, -32600));
    // Notifications are accepted without a body.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}});
    assert_eq!(send(&app, request_of(&note)).await.0, StatusCode::ACCEPTED);
    // There is no GET stream; DELETE ends only a 2025-11-25 session, named by its id.
    let get = Request::get("/mcp")
        .header("host", "localhost")
        .body(Body::empty())
        .expect("request");
    let resp = app.clone().oneshot(get).await.expect("response");
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        resp.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("POST, DELETE")
    );
    let delete = Request::delete("/mcp")
        .header("host", "localhost")
        .body(Body::empty())
        .expect("request");
    assert_eq!(send(&app, delete).await.0, StatusCode::BAD_REQUEST);
    // Every other method and path: 405 naming what is allowed, or 404.
    for (method, path, allow) in [
        ("PUT", "/mcp", "POST, DELETE"),
        ("PATCH", "/mcp", "POST, DELETE"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/metrics", "GET, HEAD"),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .body(Body::empty())
            .expect("request");
        let resp = app.clone().oneshot(req).await.expect("response");
        assert_eq!(
            resp.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(
            resp.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some(allow),
            "{method} {path}"
        );
    }
    for path in ["/", "/mcp/", "/mcpx", "/health"] {
        let req = Request::get(path)
            .header("host", "localhost")
            .body(Body::empty())
            .expect("request");
        assert_eq!(send(&app, req).await.0, StatusCode::NOT_FOUND, "{path}");
    }
    let head = Request::head("/healthz")
        .header("host", "localhost")
        .body(Body::empty())
        .expect("request");
    assert_eq!(send(&app, head).await.0, StatusCode::OK);
}

#[tokio::test]
async fn routing_headers_and_meta() {
    let app = app(vec![]).await;
    let body = rpc(
        1,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "x"}}),
        caps(false),
    );
    // Missing Mcp-Method.
    let req = Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("mcp-name", "greet")
        .body(Body::from(body.to_string()))
        .expect("r");
    let (s, v, _) = send(&app, req).await;
    assert_eq!(
        (s.as_u16(), code(&v), v["id"].clone()),
        (400, -32020, json!(1))
    );
    // Mismatched method.
    let req = post_with(&body, "mcp-method", "tasks/get");
    assert_eq!(code(&send(&app, req).await.1), -32020);
    // Mcp-Name mismatch, missing, base64 form, unreadable bytes.
    let with_name = |name: &[u8]| {
        Request::post("/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header(
                "mcp-name",
                axum::http::HeaderValue::from_bytes(name).expect("value"),
            )
            .body(Body::from(body.to_string()))
            .expect("r")
    };
    assert_eq!(code(&send(&app, with_name(b"other")).await.1), -32020);
    let (s, v, _) = send(&app, with_name(b"=?base64?Z3JlZXQ=?=")).await;
    assert_eq!(
        (s, v["result"]["content"][0]["text"].clone()),
        (StatusCode::OK, json!("Hello, x!"))
    );
    assert_eq!(code(&send(&app, with_name(b"gr\xffeet")).await.1), -32020);
    let req = Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .body(Body::from(body.to_string()))
        .expect("r");
    assert_eq!(code(&send(&app, req).await.1), -32020);
    // A missing MCP-Protocol-Version is a header failure too (400, -32020).
    let mut req = request_of(&body);
    req.headers_mut().remove("mcp-protocol-version");
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32020), "{v}");
    // _meta rules.
    let mut no_meta = body.clone();
    no_meta["params"]
        .as_object_mut()
        .expect("params")
        .remove("_meta");
    let (s, v) = call(&app, no_meta).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32602));
    let mut old = body.clone();
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let req = post_with(&old, "mcp-protocol-version", "2025-11-25");
    let (s, v, _) = send(&app, req).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32022));
    assert_eq!(
        v["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
    );
    // Header and body versions disagree: a header mismatch whatever the versions.
    let (s, v) = call(&app, old).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32020));
}

/// Headers set on a request: names and raw values.
type Headers<'a> = &'a [(&'static str, &'a [u8])];

#[tokio::test]
async fn arguments_marked_for_headers_must_be_mirrored_exactly() {
    let app = app(vec![]).await;
    // The marking is published as the tool declared it.
    let (_, list) = call(&app, rpc(1, "tools/list", json!({}), caps(false))).await;
    let tool = list["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "test_header_params"))
        .expect("the fixture tool")
        .clone();
    let props = &tool["inputSchema"]["properties"];
    assert_eq!(props["region"]["x-mcp-header"], "Region");
    assert_eq!(props["priority"]["x-mcp-header"], "Priority");
    assert_eq!(props["dry_run"]["x-mcp-header"], "Dry-Run");

    let calling = |args: Value, headers: &[(&'static str, &[u8])]| {
        let body = rpc(
            2,
            "tools/call",
            json!({"name": "test_header_params", "arguments": args}),
            caps(false),
        );
        let mut req = request_of(&body);
        for (name, value) in headers {
            req.headers_mut().insert(
                *name,
                axum::http::HeaderValue::from_bytes(value).expect("value"),
            );
        }
        req
    };
    let ok = |v: &Value| {
        v["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
    };
    let args = json!({"region": "eu-west", "priority": 7, "dry_run": false});
    let (s, v, _) = send(
        &app,
        calling(
            args.clone(),
            &[
                ("mcp-param-region", b"eu-west"),
                ("MCP-PARAM-PRIORITY", b"7"),
                ("mcp-param-dry-run", b" false "),
            ],
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        ok(&v).as_deref(),
        Some("region=eu-west priority=Some(7) dry_run=Some(false)")
    );
    // A value that is not plain visible ASCII travels base64-encoded.
    let (s, v, _) = send(
        &app,
        calling(
            json!({"region": "Zürich"}),
            &[("mcp-param-region", b"=?base64?WsO8cmljaA==?=")],
        ),
    )
    .await;
    assert_eq!(
        (s, ok(&v).as_deref()),
        (
            StatusCode::OK,
            Some("region=Zürich priority=None dry_run=None")
        ),
        "{v}"
    );

    let refused: [(Value, Headers<'_>, &str); 6] = [
        (
            args.clone(),
            &[
                ("mcp-param-priority", b"7"),
                ("mcp-param-dry-run", b"false"),
            ],
            "missing",
        ),
        (
            args.clone(),
            &[
                ("mcp-param-region", b"us-east"),
                ("mcp-param-priority", b"7"),
                ("mcp-param-dry-run", b"false"),
            ],
            "another value",
        ),
        (
            args.clone(),
            &[
                ("mcp-param-region", b"eu-west"),
                ("mcp-param-priority", b"8"),
                ("mcp-param-dry-run", b"false"),
            ],
            "another number",
        ),
        (
            json!({"region": "Hello"}),
            &[("mcp-param-region", b"=?base64?SGVsbG8?=")],
            "unpadded base64",
        ),
        (
            json!({"region": "Zürich"}),
            &[("mcp-param-region", b"Z\xc3\xbcrich")],
            "raw non-ASCII bytes",
        ),
        (
            json!({"region": "eu-west"}),
            &[
                ("mcp-param-region", b"eu-west"),
                ("mcp-param-priority", b"1"),
            ],
            "a header for an absent argument",
        ),
    ];
    for (args, headers, why) in refused {
        let (s, v, _) = send(&app, calling(args, headers)).await;
        assert_eq!((s.as_u16(), code(&v)), (400, -32020), "{why}: {v}");
        assert_eq!(v["id"], 2, "{why}");
    }
    // A header sent twice is refused, even when one copy matches.
    let mut twice = calling(
        json!({"region": "eu-west"}),
        &[("mcp-param-region", b"eu-west")],
    );
    twice
        .headers_mut()
        .append("mcp-param-region", "us-east".parse().expect("value"));
    let (s, v, _) = send(&app, twice).await;
    assert_eq!((s.as_u16(), code(&v)), (400, -32020), "{v}");
    // Tools without markings ignore such headers.
    let body = rpc(
        3,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "x"}}),
        caps(false),
    );
    let (s, _, _) = send(&app, post_with(&body, "mcp-param-region", "anything")).await;
    assert_eq!(s, StatusCode::OK);
}
