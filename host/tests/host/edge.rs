//! The hardened edge: connection limits and timeouts over real sockets, Host checks and the
//! metrics token through the router, readiness on a store that cannot commit, replies that
//! never carry host detail, and `snodo inspect` on a store a killed server left.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use snodo::http::{HttpConfig, HttpLimits, router};
use snodo::mcp::McpServer;
use snodo::runner::{Catalog, RunnerOptions};
use snodo::serve::ServeOptions;
use snodo::store::StoreConfig;
use snodo::store::{MemoryStore, RedbStore, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

use common::Served;
use common::process::{await_log, post_mcp, request, run_ok, snodo, spawn_serve, tool_call};

/// How long a test waits for something that should happen promptly before it fails.
const PATIENCE: Duration = Duration::from_secs(30);

// ---- a server in this process, on a real socket ----

/// A server with the memory store and no components, under `limits`.
async fn serve_with(limits: HttpLimits) -> Served {
    let mut opts = ServeOptions::new(std::env::temp_dir(), Vec::new());
    opts.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    opts.store = StoreConfig::Memory;
    opts.cache_dir = None;
    opts.http_limits = limits;
    // Longer than the patience: a stop within it proves connections closed on their
    // own, not that the drain timeout cut them off.
    opts.runner.drain_timeout = Duration::from_secs(120);
    Served::start(opts).await
}

/// Stops `server`: `serve` returns cleanly within the patience.
async fn stop(server: Served) {
    server.stop(PATIENCE).await.expect("serve");
}

/// Waits until the server closes `conn` (EOF or reset); fails after the patience.
async fn closed_by_server(conn: &mut TcpStream) {
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(PATIENCE, async {
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the server closes the connection");
}

async fn healthz(conn: &mut TcpStream) -> Option<(u16, String)> {
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .ok()?;
    read_response(conn).await
}

/// A new connection to `addr` whose `/healthz` is answered `ok` within the patience (else the
/// test fails saying `what`); kept alive.
async fn served_connection(addr: SocketAddr, what: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let reply = tokio::time::timeout(PATIENCE, healthz(&mut c))
        .await
        .expect(what);
    assert_eq!(reply, Some((200, "ok".into())), "{what}");
    c
}

/// Limits with a silent connection given as long as a slow head (`header_ms`).
fn limits(header_ms: u64, idle_ms: u64, body_ms: u64, max_connections: usize) -> HttpLimits {
    HttpLimits {
        first_byte_timeout: Duration::from_millis(header_ms),
        header_timeout: Duration::from_millis(header_ms),
        idle_timeout: Duration::from_millis(idle_ms),
        body_timeout: Duration::from_millis(body_ms),
        max_connections,
        ..HttpLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_do_not_delay_a_request() {
    // Timeouts far longer than the test, so the slow connections stay open throughout;
    // the default connection cap.
    let server = serve_with(HttpLimits {
        first_byte_timeout: Duration::from_secs(120),
        header_timeout: Duration::from_secs(120),
        idle_timeout: Duration::from_secs(120),
        ..HttpLimits::default()
    })
    .await;
    let mut slow = Vec::new();
    for i in 0..200 {
        let mut c = TcpStream::connect(server.addr).await.expect("connect");
        if i % 2 == 0 {
            // Half a request line, never finished; the other half send nothing at all.
            c.write_all(b"GET /heal").await.expect("write");
        }
        slow.push(c);
    }
    let started = Instant::now();
    let _real = served_connection(
        server.addr,
        "a real request is answered while 200 slow connections are open",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered in {:?}",
        started.elapsed()
    );
    // The slow connections were open all along, and each is still served once it finishes
    // its request.
    for (i, c) in slow.iter_mut().enumerate() {
        let rest: &[u8] = if i % 2 == 0 {
            b"thz HTTP/1.1\r\nHost: localhost\r\n\r\n"
        } else {
            b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
        };
        c.write_all(rest).await.expect("write");
        let reply = tokio::time::timeout(PATIENCE, read_response(c))
            .await
            .expect("an answer");
        assert_eq!(reply, Some((200, "ok".into())), "slow connection #{i}");
    }
    // They are idle keep-alive connections now, with two minutes to go: shutdown closes
    // them at once instead of waiting.
    stop(server).await;
    for c in &mut slow {
        closed_by_server(c).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_sent_too_slowly_is_closed_after_the_header_timeout() {
    let server = serve_with(limits(300, 60_000, 60_000, 1_024)).await;
    // Nothing at all.
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    closed_by_server(&mut silent).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    // A header trickled one byte every 50 ms: still closed, bytes do not extend the time.
    let started = Instant::now();
    let mut trickle = TcpStream::connect(server.addr).await.expect("connect");
    let request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut sent = 0;
    while sent < request.len() {
        tick.tick().await;
        let mut b = [0u8; 64];
        match trickle.try_read(&mut b) {
            Ok(0) => break,
            Ok(_) => panic!("the server answered a request whose head took too long"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        if trickle.write_all(&request[sent..=sent]).await.is_err() {
            break;
        }
        sent += 1;
    }
    if sent == request.len() {
        // The last byte went out before the close was seen: the head was complete only
        // after the timeout, so the server must still close without answering.
        closed_by_server(&mut trickle).await;
    }
    let elapsed = started.elapsed();
    assert!(
        sent < request.len(),
        "the whole trickled head was accepted ({elapsed:?})"
    );
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    served_connection(server.addr, "a prompt client on the same server is served").await;
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed_and_busy_ones_are_not() {
    let server = serve_with(limits(300, 300, 60_000, 1_024)).await;
    // Busy: a body that takes longer than the header and idle timeouts together is still
    // read and answered (only the body timeout bounds it).
    let mut busy = TcpStream::connect(server.addr).await.expect("connect");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}})
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nMcp-Method: tools/list\r\nMcp-Protocol-Version: 2026-07-28\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    busy.write_all(head.as_bytes()).await.expect("head");
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    for part in body.as_bytes().chunks(body.len().div_ceil(4)) {
        tick.tick().await;
        busy.write_all(part)
            .await
            .expect("a busy connection stays open");
    }
    let reply = tokio::time::timeout(PATIENCE, read_response(&mut busy))
        .await
        .expect("an answer");
    assert!(started.elapsed() >= Duration::from_millis(600));
    let (status, text) = reply.expect("answered, not closed");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"tools\""), "{text}");

    let mut c = served_connection(server.addr, "a new connection is served").await;
    // Kept alive: a second request on the same connection.
    assert_eq!(healthz(&mut c).await, Some((200, "ok".into())));
    // The server's idle time starts when it has sent the response, a moment before the
    // client has read it.
    let idle_since = Instant::now();
    closed_by_server(&mut c).await;
    assert!(idle_since.elapsed() >= Duration::from_millis(250));
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_too_slowly_gets_408() {
    let server = serve_with(limits(60_000, 60_000, 300, 1_024)).await;
    let mut c = TcpStream::connect(server.addr).await.expect("connect");
    c.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"",
    )
    .await
    .expect("write");
    let started = Instant::now();
    let (status, body) = tokio::time::timeout(PATIENCE, read_response(&mut c))
        .await
        .expect("an answer")
        .expect("a response");
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("http.body_timeout_ms"), "{body}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    closed_by_server(&mut c).await;
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_spoke_keep_their_slots_and_a_newcomer_waits_for_one() {
    let server = serve_with(limits(60_000, 400, 60_000, 2)).await;
    let started = Instant::now();
    // Two keep-alive connections that were served: never closed for a newcomer.
    let mut holders = vec![
        served_connection(server.addr, "the first").await,
        served_connection(server.addr, "the second").await,
    ];
    // The third is accepted only when a holder's idle timeout frees its slot.
    let _third = served_connection(server.addr, "served once a slot frees").await;
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "served before any slot could free: {:?}",
        started.elapsed()
    );
    for h in &mut holders {
        closed_by_server(h).await;
    }
    stop(server).await;
}

/// Sockets that never speak cannot hold the server: every slot taken by them, a newcomer
/// is served at once in the slot of the oldest, which is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_takes_the_slot_of_the_oldest_silent_connection() {
    // Silent sockets would otherwise stay open for two minutes.
    let server = serve_with(HttpLimits {
        first_byte_timeout: Duration::from_secs(120),
        max_connections: 4,
        ..HttpLimits::default()
    })
    .await;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    // All four accepted (a served request proves the accept loop passed them).
    let mut talking = TcpStream::connect(server.addr).await.expect("connect");
    let reply = tokio::time::timeout(PATIENCE, healthz(&mut talking))
        .await
        .expect("served while four silent sockets hold every slot");
    assert_eq!(reply.map(|r| r.0), Some(200));
    closed_by_server(&mut silent[0]).await;
    stop(server).await;
}

/// Heads trickled a byte at a time cannot hold the server either: every slot held by a
/// connection that started a request head and never finished it, a newcomer is served
/// within the patience though the head timeout is two minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_takes_the_slot_of_an_unfinished_head() {
    let server = serve_with(HttpLimits {
        first_byte_timeout: Duration::from_secs(120),
        header_timeout: Duration::from_secs(120),
        max_connections: 4,
        ..HttpLimits::default()
    })
    .await;
    let mut trickling = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(server.addr).await.expect("connect");
        c.write_all(b"GET /hea").await.expect("write");
        trickling.push(c);
    }
    let mut talking = TcpStream::connect(server.addr).await.expect("connect");
    let reply = tokio::time::timeout(PATIENCE, healthz(&mut talking))
        .await
        .expect("served while four unfinished heads hold every slot");
    assert_eq!(reply.map(|r| r.0), Some(200));
    drop(trickling);
    stop(server).await;
}

/// A socket that says nothing is closed after the short first-byte timeout, though the
/// head timeout is long; one that starts a request gets the head timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_first_byte_timeout() {
    let server = serve_with(HttpLimits {
        first_byte_timeout: Duration::from_millis(200),
        header_timeout: Duration::from_secs(120),
        ..HttpLimits::default()
    })
    .await;
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    let mut talking = TcpStream::connect(server.addr).await.expect("connect");
    talking.write_all(b"GET /heal").await.expect("write");
    closed_by_server(&mut silent).await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    // The one that started a request is still open: it finishes and is answered.
    talking
        .write_all(b"thz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    let reply = tokio::time::timeout(PATIENCE, read_response(&mut talking))
        .await
        .expect("an answer");
    assert_eq!(reply, Some((200, "ok".into())));
    stop(server).await;
}

/// One peer holds at most its share of the connection slots: past it a connection is
/// closed at once, and a slot given back is usable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_holds_at_most_its_share_of_connections() {
    // Silent connections would otherwise stay open for two minutes: a close seen within
    // the patience is the cap's.
    let server = serve_with(HttpLimits {
        max_connections_per_peer: 2,
        first_byte_timeout: Duration::from_secs(120),
        ..HttpLimits::default()
    })
    .await;
    let mut first = served_connection(server.addr, "the first connection").await;
    let _second = served_connection(server.addr, "the second connection").await;
    let mut third = TcpStream::connect(server.addr).await.expect("connect");
    closed_by_server(&mut third).await;
    // Ending one gives its slot back.
    first.shutdown().await.expect("shutdown");
    closed_by_server(&mut first).await;
    let _again = crate::common::eventually("a slot given back", || async {
        let mut c = TcpStream::connect(server.addr).await.ok()?;
        tokio::time::timeout(PATIENCE, healthz(&mut c))
            .await
            .ok()
            .flatten()
            .filter(|r| r.0 == 200)
            .map(|_| c)
    })
    .await;
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_keep_alive_connections() {
    let server = serve_with(limits(60_000, 120_000, 60_000, 1_024)).await;
    let mut c = served_connection(server.addr, "served").await;
    // The idle timeout is two minutes: only shutdown can close this promptly.
    stop(server).await;
    closed_by_server(&mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_subscription_streams() {
    let server = serve_with(HttpLimits::default()).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": ["0123456789abcdef0123456789abcdef"]},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        }
    }})
    .to_string();
    let mut c = TcpStream::connect(server.addr).await.expect("connect");
    let req = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nMcp-Method: subscriptions/listen\r\nMcp-Protocol-Version: 2026-07-28\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.expect("write");
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(PATIENCE, async {
        while !String::from_utf8_lossy(&seen).contains("acknowledged") {
            let n = c.read(&mut chunk).await.expect("read");
            assert!(
                n > 0,
                "the stream ended early: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("the stream is acknowledged");
    assert!(String::from_utf8_lossy(&seen).contains("text/event-stream"));
    // The stream would stay open forever; shutdown ends it and then the server returns.
    stop(server).await;
    closed_by_server(&mut c).await;
}

// ---- through the router ----

/// An MCP server with no tools over `store`.
fn server_over(store: Arc<dyn Store>) -> Arc<McpServer> {
    let catalog = Arc::new(Catalog::new());
    Arc::new(common::server_with(&store, catalog, RunnerOptions::default()).0)
}

async fn get(app: &snodo::http::App, path: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
    let mut req = Request::get(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn every_route_checks_the_host() {
    let app = router(
        server_over(Arc::new(MemoryStore::new())),
        HttpConfig::default(),
    );
    for path in ["/mcp", "/healthz", "/readyz", "/metrics"] {
        let (s, body) = get(&app, path, &[("host", "evil.example:3001")]).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{path}: {body}");
        let (s, body) = get(
            &app,
            path,
            &[
                ("host", "localhost:3001"),
                ("origin", "http://evil.example"),
            ],
        )
        .await;
        assert_eq!(
            s,
            StatusCode::FORBIDDEN,
            "{path} with a foreign Origin: {body}"
        );
        let (s, _) = get(&app, path, &[("host", "localhost:3001")]).await;
        assert_ne!(s, StatusCode::FORBIDDEN, "{path} from the allowed host");
        // Parsed as authorities: what follows an allowed name must be a port, nothing else.
        for (host, origin) in [
            ("127.0.0.1:3401:evil.com", None),
            ("localhost:3001", Some("http://127.0.0.1:80.evil.com")),
            ("localhost:3001", Some("http://localhost:3001/path")),
            ("localhost:3001", Some("null")),
            ("[::1]x", None),
            ("localhost:", None),
        ] {
            let mut headers = vec![("host", host)];
            headers.extend(origin.map(|o| ("origin", o)));
            let (s, body) = get(&app, path, &headers).await;
            assert_eq!(s, StatusCode::FORBIDDEN, "{path} {host} {origin:?}: {body}");
        }
        let (s, _) = get(
            &app,
            path,
            &[("host", "[::1]:3001"), ("origin", "http://localhost:3001/")],
        )
        .await;
        assert_ne!(
            s,
            StatusCode::FORBIDDEN,
            "{path}: IPv6 literal, origin with a slash"
        );
    }
    // A request without a Host header (HTTP/1.0) names no host: refused.
    let (s, body) = get(&app, "/healthz", &[]).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
    let (s, body) = get(&app, "/healthz", &[("host", "127.0.0.1:3001")]).await;
    assert_eq!((s, body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn metrics_can_require_a_token() {
    let token = "metrics-token-0123456789";
    let app = router(
        server_over(Arc::new(MemoryStore::new())),
        HttpConfig {
            metrics_token: Some(token.into()),
            ..HttpConfig::default()
        },
    );
    let host = ("host", "localhost");
    let (s, _) = get(&app, "/metrics", &[host]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let wrong = format!("Bearer {token}x");
    let (s, _) = get(&app, "/metrics", &[host, ("authorization", &wrong)]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let lower = format!("bearer {token}");
    let (s, _) = get(&app, "/metrics", &[host, ("authorization", &lower)]).await;
    assert_eq!(s, StatusCode::OK);
    // Without the setting, metrics stay open where nothing else needs a token (a loopback
    // deployment)...
    let open = router(
        server_over(Arc::new(MemoryStore::new())),
        HttpConfig::default(),
    );
    let (s, _) = get(&open, "/metrics", &[host]).await;
    assert_eq!(s, StatusCode::OK);
    // ...and are closed where tenants hold tokens: the counters span every tenant.
    let tenants = router(
        server_over(Arc::new(MemoryStore::new())),
        HttpConfig {
            tokens: vec![(
                "tenant-token-0123456789".into(),
                snodo::model::Principal::new("a", "x"),
            )],
            ..HttpConfig::default()
        },
    );
    let tenant = ("authorization", "Bearer tenant-token-0123456789");
    let (s, body) = get(&tenants, "/metrics", &[host, tenant]).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body.contains("metrics.token"), "{body}");
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_and_every_token_authenticates_its_principal() {
    let tokens = vec![
        (
            "alpha-token-0123456789".to_owned(),
            snodo::model::Principal::new("a", "x"),
        ),
        (
            "beta-token-0123456789-longer".to_owned(),
            snodo::model::Principal::new("b", "y"),
        ),
    ];
    let app = router(
        server_over(Arc::new(MemoryStore::new())),
        HttpConfig {
            tokens,
            ..HttpConfig::default()
        },
    );
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    }});
    let status = |auth: Option<&'static str>| {
        let app = app.clone();
        let body = body.to_string();
        async move {
            let mut req = Request::post("/mcp")
                .header("host", "localhost")
                .header("content-type", "application/json")
                .header("mcp-method", "tools/list")
                .header("mcp-protocol-version", "2026-07-28");
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            app.oneshot(req.body(Body::from(body)).expect("request"))
                .await
                .expect("response")
                .status()
        }
    };
    for ok in [
        "Bearer alpha-token-0123456789",
        "bearer beta-token-0123456789-longer",
        "BEARER  alpha-token-0123456789",
    ] {
        assert_eq!(status(Some(ok)).await, StatusCode::OK, "{ok}");
    }
    for bad in [
        "Bearer alpha-token-012345678",
        "Bearer alpha-token-0123456789x",
        "Basic alpha-token-0123456789",
        "Bearer",
        "Bearer ",
        "alpha-token-0123456789",
    ] {
        assert_eq!(status(Some(bad)).await, StatusCode::UNAUTHORIZED, "{bad}");
    }
    assert_eq!(status(None).await, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_while_the_store_cannot_commit() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("tasks.redb");
    let faults = Arc::new(snodo::store::Faults::default());
    let backend = snodo::store::FaultyDevice::at(&path, faults.clone()).expect("backend");
    let store =
        RedbStore::open_with_backend(backend, &path, Arc::new(snodo::model::SystemClock::new()))
            .expect("open");
    let store: Arc<dyn Store> = Arc::new(store);
    let app = router(server_over(store.clone()), HttpConfig::default());
    let host = ("host", "localhost");
    let (s, body) = get(&app, "/readyz", &[host]).await;
    assert_eq!((s, body.as_str()), (StatusCode::OK, "ready"));
    faults.failing.store(true, Ordering::SeqCst);
    // Reads still work: the old probe (a snapshot read) would have stayed green.
    store.now().await.expect("reads are unaffected");
    let (s, body) = get(&app, "/readyz", &[host]).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(!body.contains(&*dir.path().to_string_lossy()), "{body}");
    faults.failing.store(false, Ordering::SeqCst);
}

// ---- the `snodo` binary ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_reply_carries_no_host_detail_and_guest_logs_are_marked() {
    let server = spawn_serve(
        &[
            "--store",
            "memory",
            "--component",
            snodo_test_guests::HOSTILE,
        ],
        &[
            ("RUST_BACKTRACE", "1"),
            ("RUST_LIB_BACKTRACE", "1"),
            ("RUST_LOG", "info,snodo::guest=debug,snodo_wasm::exec=debug"),
        ],
    );
    let (status, reply) = post_mcp(server.addr, &tool_call("trap", json!({}), false)).await;
    assert_eq!(status, 200, "{reply}");
    let text = reply.to_string();
    assert_eq!(reply["error"]["data"]["kind"], "trap", "{text}");
    assert!(text.contains("unreachable"), "the trap's reason: {text}");
    for leak in ["host/src", ".rs:", "backtrace", "/root", "/home", "/work"] {
        let head: String = text.chars().take(600).collect();
        assert!(!text.contains(leak), "the reply leaks {leak:?}: {head}");
    }
    // The operator's warning is one line with the reason; the backtrace is kept at debug.
    let warned = await_log(&server, "the trap's warning", |v| {
        v["fields"]["message"] == "the guest trapped"
    });
    let reason = warned["fields"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("unreachable") && !reason.contains('\n'),
        "{warned}"
    );
    assert_eq!(warned["level"], "WARN", "{warned}");
    let logged = await_log(&server, "the trap's detail", |v| {
        v["fields"]["message"] == "the guest trapped: its backtrace"
    });
    assert_eq!(logged["level"], "DEBUG", "{logged}");
    assert!(
        logged["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("backtrace")),
        "{logged}"
    );
    // As a task, the guest's stderr reaches the log marked as guest content.
    let (status, reply) = post_mcp(server.addr, &tool_call("trap", json!({}), true)).await;
    assert_eq!(status, 200, "{reply}");
    let line = await_log(&server, "the guest's panic message", |v| {
        v["target"] == "snodo::guest"
            && v["fields"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("traps on purpose"))
    });
    assert_eq!(line["fields"]["guest"], true, "{line}");
    assert_eq!(line["fields"]["message"], "guest output", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_log_lines_reach_the_operator_at_their_level_on_sync_calls_and_tasks() {
    let server = spawn_serve(
        &[
            "--store",
            "memory",
            "--component",
            snodo_test_guests::FIXTURES,
            "--component",
            snodo_test_guests::HOSTILE,
        ],
        &[("RUST_LOG", "info")],
    );
    let guest_line = |v: &Value| {
        v["target"] == "snodo::guest"
            && v["fields"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("test_logging_tool ran"))
    };
    let (status, reply) = post_mcp(
        server.addr,
        &tool_call("test_logging_tool", json!({}), false),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let line = await_log(&server, "the sync call's guest line", guest_line);
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["fields"]["guest"], true, "{line}");
    assert_eq!(line["fields"]["tool"], "test_logging_tool", "{line}");
    assert_eq!(line["fields"]["task"], "-", "{line}");

    // A task's guest writes to stderr: a warning, marked with the task and its attempt.
    let (status, reply) = post_mcp(server.addr, &tool_call("trap", json!({}), true)).await;
    assert_eq!(status, 200, "{reply}");
    let task = reply["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {reply}"))
        .to_owned();
    let line = await_log(&server, "the task's guest line", |v| {
        v["target"] == "snodo::guest"
            && v["fields"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("traps on purpose"))
    });
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["fields"]["stream"], "stderr", "{line}");
    assert_eq!(line["fields"]["task"], task.as_str(), "{line}");
    assert_eq!(line["fields"]["attempt"], 1, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_a_store_a_killed_server_left() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let data_arg = data.to_string_lossy().into_owned();
    let server = spawn_serve(
        &[
            "--store",
            "redb",
            "--data",
            &data_arg,
            "--component",
            snodo_test_guests::FIXTURES,
        ],
        &[],
    );
    let (status, reply) = post_mcp(
        server.addr,
        &tool_call("slow_compute", json!({"seconds": 600}), true),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let id = reply["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {reply}"))
        .to_owned();
    // SIGKILL: no destructor runs, the file is not closed cleanly.
    drop(server);
    let store = data.join("tasks.redb");
    assert!(
        matches!(
            redb::ReadOnlyDatabase::open(&store),
            Err(redb::DatabaseError::RepairAborted)
        ),
        "the killed server's file needs a repair before redb reads it"
    );
    let out = run_ok(snodo(&["inspect", &id, "--store"]).arg(&store));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let view: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(view["taskId"], json!(id), "{view}");
    assert_eq!(view["work"]["tool"], "slow_compute", "{view}");
    assert_eq!(view["status"], "working", "{view}");
    // Inspecting did not open the file as a store: the next server is boot epoch 2.
    let reopened = RedbStore::open(&store).expect("reopen");
    assert_eq!(reopened.epoch(), 2);
}

#[test]
fn duplicate_or_anonymous_cli_tokens_are_refused() {
    let run = |tokens: &[&str]| {
        let mut cmd = snodo(&["serve", "--store", "memory", "--component", "missing.wasm"]);
        for t in tokens {
            cmd.args(["--token", t]);
        }
        let out = cmd.env_remove("MCP_PORT").output().expect("run");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[
        "0123456789abcdef-one=acme:alice",
        "0123456789abcdef-one=acme:bob",
    ]);
    assert!(
        err.contains("--token #2") && err.contains("unique"),
        "{err}"
    );
    let err = run(&["0123456789abcdef-one=:alice"]);
    assert!(err.contains("--token") && err.contains("tenant"), "{err}");
    let err = run(&["0123456789abcdef-one=acme:"]);
    assert!(err.contains("--token") && err.contains("subject"), "{err}");
}

/// `snodo serve` tells its failures apart by exit code: 2 settings, 3 listening, 4 store,
/// 5 components (documented in the README, "Operating").
#[test]
fn serve_exit_codes_tell_the_failure_apart() {
    let dir = tempfile::tempdir().expect("tmp");
    let run = |args: &[&str]| {
        snodo(&["serve"])
            .args(args)
            .env_remove("MCP_PORT")
            .output()
            .expect("run")
            .status
            .code()
    };
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("dir");
    std::fs::write(data.join("tasks.redb"), b"not a database at all").expect("write");
    let fixtures = snodo_test_guests::FIXTURES;
    let data_arg = data.to_str().expect("utf-8");
    assert_eq!(
        run(&[
            "--listen",
            "127.0.0.1:0",
            "--data",
            data_arg,
            "--component",
            fixtures
        ]),
        Some(4),
        "a store that is not a store"
    );
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm junk").expect("write");
    let junk_arg = junk.to_str().expect("utf-8");
    assert_eq!(
        run(&[
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--component",
            junk_arg
        ]),
        Some(5),
        "a component that is not a component"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    assert_eq!(
        run(&[
            "--listen",
            &addr,
            "--store",
            "memory",
            "--component",
            fixtures
        ]),
        Some(3),
        "an address in use"
    );
    assert_eq!(
        run(&[
            "--listen",
            "127.0.0.1:0",
            "--store",
            "mongo",
            "--component",
            fixtures
        ]),
        Some(2),
        "a bad setting"
    );
}

#[test]
fn snodo_tools_names_modes_hooks_resources_and_prompts() {
    let out = run_ok(&mut snodo(&[
        "tools",
        "--component",
        snodo_test_guests::FIXTURES,
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |tool: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(tool))
            .unwrap_or_else(|| panic!("no row for {tool}: {text}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        row("slow_compute")[1..3],
        ["optional", "choose_mode"],
        "{text}"
    );
    assert_eq!(row("test_tool_with_task")[2], "prepare", "{text}");
    assert_eq!(row("test_simple_text")[2], "-", "{text}");
    let mut tables = text.split("\n\n");
    for line in tables.next().unwrap_or_default().lines().skip(1) {
        let mode = line.split_whitespace().nth(1).unwrap_or_default();
        assert!(["sync", "optional", "required"].contains(&mode), "{line}");
    }
    // Then what the component serves besides tools.
    assert_eq!(row("test://template/{id}/data")[1], "template", "{text}");
    assert_eq!(row("test://static-text")[1], "fixed", "{text}");
    assert_eq!(
        row("test_prompt_with_arguments")[1],
        "arg1*,arg2*",
        "{text}"
    );
    assert_eq!(row("test_simple_prompt")[1], "-", "{text}");
    assert_eq!(row("greet").last().map(String::as_str), Some("-"), "{text}");
}

#[test]
fn snodo_tools_shows_what_each_tool_may_reach() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("snodo.toml");
    std::fs::write(
        &config,
        format!(
            "[[components]]\npath = \"{}\"\n[secrets]\nk = {{ value = \"v\", development = true }}\n\
             [tools.greet]\nallowed_outbound_hosts = [\"https://api.example.com\", \"http://127.0.0.1:8080\"]\n\
             inject = [{{ host = \"https://api.example.com\", header = \"x-key\", value = \"{{secret.k}}\" }}]\n\
             [tools.slow_compute]\nallowed_outbound_hosts = []\njournal = false\n",
            snodo_test_guests::FIXTURES
        ),
    )
    .expect("write");
    let out = run_ok(&mut snodo(&[
        "tools",
        "--config",
        &config.display().to_string(),
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |tool: &str| -> String {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(tool))
            .unwrap_or_else(|| panic!("no row for {tool}: {text}"))
            .to_owned()
    };
    assert!(
        row("greet").ends_with("https://api.example.com,http://127.0.0.1:8080 journal inject:1"),
        "{text}"
    );
    assert!(
        row("slow_compute").ends_with("nothing-allowed no-journal"),
        "{text}"
    );
    assert!(row("test_simple_text").ends_with(" -"), "{text}");
    assert!(!text.contains("\"v\""), "no secret is printed: {text}");
}

/// Regression: `snodo tools` and `snodo config validate` wrote a compile cache into the
/// directory they were run from.
#[test]
fn operator_commands_leave_the_working_directory_alone() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("snodo.toml");
    std::fs::write(
        &config,
        format!("[[components]]\npath = {:?}\n", snodo_test_guests::FIXTURES),
    )
    .expect("config");
    for args in [
        vec!["tools", "--component", snodo_test_guests::FIXTURES],
        vec!["config", "validate", config.to_str().expect("utf-8")],
    ] {
        run_ok(snodo(&args).current_dir(dir.path()));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["snodo.toml"], "{args:?} left files behind");
    }
}

/// A mistyped key or tool name is refused with the nearest valid one suggested.
#[test]
fn config_validate_suggests_the_nearest_key_and_tool() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("snodo.toml");
    let check = |text: String| {
        std::fs::write(&config, text).expect("config");
        let out = snodo(&["config", "validate", config.to_str().expect("utf-8")])
            .output()
            .expect("run snodo");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let component = format!("[[components]]\npath = {:?}\n", snodo_test_guests::FIXTURES);
    let err = check(format!(
        "{component}[tools.test_simple_txt]\nttl_ms = 60000\n"
    ));
    assert!(err.contains("did you mean \"test_simple_text\"?"), "{err}");
    let err = check(format!("{component}[http]\nidle_timout_ms = 1000\n"));
    assert!(err.contains("did you mean \"idle_timeout_ms\"?"), "{err}");
}

/// Reads one response off a raw connection: these tests speak raw bytes on purpose (slow,
/// partial and malformed requests), so they read raw bytes back.
async fn read_response(conn: &mut tokio::net::TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = conn.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
            return Some((status, body));
        }
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Text logs written to a pipe or a file carry no terminal colour codes.
#[test]
fn text_logs_off_a_terminal_carry_no_escape_codes() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_snodo"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "memory"])
        .args(["--component", snodo_test_guests::FIXTURES])
        .env_remove("MCP_PORT")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn snodo serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.expect("a log line");
        let serving = line.contains("serving MCP at http://");
        seen.push(line);
        if serving {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.last().is_some_and(|l| l.contains("serving MCP at")),
        "{seen:?}"
    );
    assert!(
        seen.iter().all(|l| !l.contains('\u{1b}')),
        "escape codes in {seen:?}"
    );
}

/// Every key of the configuration can come from the environment, file or no file:
/// `SNODO_METRICS__TOKEN` closes `/metrics` (open on a loopback node without it) to callers
/// without the token, and a value that does not fit its key is refused naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_keys_come_from_the_environment() {
    let served = [
        "--store",
        "memory",
        "--component",
        snodo_test_guests::FIXTURES,
    ];
    let open = spawn_serve(&served, &[]);
    let (status, _) = common::process::get(open.addr, "/metrics").await;
    assert_eq!(status, 200, "open without the setting");
    drop(open);
    let closed = spawn_serve(
        &served,
        &[("SNODO_METRICS__TOKEN", "metrics-token-0123456789")],
    );
    let (status, _) = common::process::get(closed.addr, "/metrics").await;
    assert_eq!(status, 401, "the variable's token is required");
    drop(closed);
    let out = snodo(&["serve", "--listen", "127.0.0.1:0"])
        .args(served)
        .env("SNODO_HTTP__MAX_CONNECTIONS", "many")
        .env_remove("MCP_PORT")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the environment: SNODO_HTTP__MAX_CONNECTIONS: invalid type"),
        "{err}"
    );
}

/// SIGHUP reloads the configuration file and never stops the server: a file that does not
/// validate is refused and what serves stays; a valid one deploys its new component set,
/// takes its tool settings and names the settings that wait for a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_configuration_and_a_bad_one_changes_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let conf = dir.path().join("node.toml");
    let write = |listen: &str, components: &[&str], tools: &str| {
        let mut text = format!(
            "listen = \"{listen}\"\n[store]\nkind = \"redb\"\npath = \"{}\"\n",
            dir.path().join("tasks.redb").display()
        );
        for c in components {
            text.push_str(&format!("\n[[components]]\npath = \"{c}\"\n"));
        }
        text.push_str(tools);
        std::fs::write(&conf, text).expect("config");
    };
    write("127.0.0.1:0", &[snodo_test_guests::FIXTURES], "");
    let server = spawn_serve(&["--config", conf.to_str().expect("utf-8")], &[]);
    let hangup = || {
        run_ok(std::process::Command::new("kill").args(["-HUP", &server.child.id().to_string()]));
    };
    let tools = |addr| async move {
        let (status, reply) = post_mcp(addr, &request("tools/list", json!({}), false)).await;
        assert_eq!(status, 200, "{reply}");
        reply["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect::<Vec<_>>()
    };
    assert!(
        !tools(server.addr)
            .await
            .contains(&"quick_report".to_owned())
    );

    // A file that does not validate: refused, and the server serves on as it was.
    std::fs::write(&conf, "[store]\nkind = \"nonsense\"\n").expect("config");
    hangup();
    let refused = await_log(&server, "the refusal", |v| {
        v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("does not validate"))
    });
    assert_eq!(refused["level"], "ERROR", "{refused}");
    assert!(tools(server.addr).await.contains(&"greet".to_owned()));

    // A valid one: a second component is deployed and served, a tool setting applies, and
    // a changed listen address waits for a restart.
    write(
        "127.0.0.1:9",
        &[snodo_test_guests::FIXTURES, snodo_test_guests::EXAMPLES],
        "\n[tools.greet]\nmode = \"required\"\n",
    );
    hangup();
    let restart = await_log(&server, "the settings that need a restart", |v| {
        v["fields"]["message"] == "changed settings apply after a restart"
    });
    assert_eq!(restart["fields"]["settings"], "listen", "{restart}");
    await_log(&server, "the reload", |v| {
        v["fields"]["message"] == "configuration reloaded"
    });
    let served = tools(server.addr).await;
    assert!(served.contains(&"quick_report".to_owned()), "{served:?}");
    let (_, reply) = post_mcp(
        server.addr,
        &tool_call("greet", json!({"name": "x"}), false),
    )
    .await;
    assert_eq!(
        reply["error"]["code"], -32021,
        "greet now requires the tasks extension: {reply}"
    );
}

/// With trusted keys configured, a component loads only with a signature one of them
/// made: `snodo keygen` and `snodo sign` make them, an unsigned or wrongly signed
/// component is refused with the reason and counted, and what serves stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_components_signed_by_a_trusted_key_load() {
    let dir = tempfile::tempdir().expect("tmp");
    let copy = |name: &str, from: &str| {
        let to = dir.path().join(name);
        std::fs::copy(from, &to).expect("copy");
        to
    };
    let fixtures = copy("fixtures.wasm", snodo_test_guests::FIXTURES);
    let examples = copy("examples.wasm", snodo_test_guests::EXAMPLES);
    let keygen = |name: &str| {
        let key = dir.path().join(name);
        let out = run_ok(snodo(&["keygen", "--out"]).arg(&key));
        let public = String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned();
        (key, public)
    };
    let (release_key, release_public) = keygen("release.key");
    let (other_key, _) = keygen("other.key");
    run_ok(snodo(&["sign", "--key"]).arg(&release_key).arg(&fixtures));
    assert!(dir.path().join("fixtures.wasm.sig").exists());

    let conf = dir.path().join("node.toml");
    let write = |components: &[&std::path::Path]| {
        let mut text = format!(
            "listen = \"127.0.0.1:0\"\n[store]\nkind = \"redb\"\npath = \"{}\"\n\n[deploy.trusted_keys]\nrelease = \"{release_public}\"\n",
            dir.path().join("tasks.redb").display()
        );
        for c in components {
            text.push_str(&format!("\n[[components]]\npath = \"{}\"\n", c.display()));
        }
        std::fs::write(&conf, text).expect("config");
    };
    // Unsigned at start: the server does not start, and says why.
    write(&[&fixtures, &examples]);
    let out = snodo(&["serve", "--config"])
        .arg(&conf)
        .env_remove("MCP_PORT")
        .output()
        .expect("run");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{said}");
    assert!(said.contains("examples.wasm is not signed"), "{said}");

    // Signed: served.
    write(&[&fixtures]);
    let server = spawn_serve(&["--config", conf.to_str().expect("utf-8")], &[]);
    let hangup = || {
        run_ok(std::process::Command::new("kill").args(["-HUP", &server.child.id().to_string()]));
    };
    let refusals = |reason: &'static str| {
        let addr = server.addr;
        async move {
            let (_, text) = common::process::get(addr, "/metrics").await;
            text.lines()
                .find_map(|l| {
                    l.strip_prefix(&format!(
                        "snodo_components_refused_total{{reason=\"{reason}\"}} "
                    ))
                })
                .and_then(|v| v.trim().parse::<u64>().ok())
                .expect("the counter")
        }
    };
    // Signed by a key that is not trusted: refused on reload, counted, nothing changes.
    run_ok(snodo(&["sign", "--key"]).arg(&other_key).arg(&examples));
    write(&[&fixtures, &examples]);
    hangup();
    let refused = await_log(&server, "the refusal", |v| {
        v["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("not made by a trusted key"))
    });
    assert_eq!(refused["level"], "ERROR", "{refused}");
    assert_eq!(refusals("bad_signature").await, 1);
    let (_, reply) = post_mcp(server.addr, &tool_call("quick_report", json!({}), false)).await;
    assert_eq!(
        reply["error"]["message"], "Unknown tool: quick_report",
        "not served: {reply}"
    );
    // Signed by the trusted key: deployed on the next reload.
    run_ok(snodo(&["sign", "--key"]).arg(&release_key).arg(&examples));
    hangup();
    await_log(&server, "the reload", |v| {
        v["fields"]["message"] == "configuration reloaded"
    });
    let (_, reply) = post_mcp(server.addr, &request("tools/list", json!({}), false)).await;
    assert!(
        reply.to_string().contains("quick_report"),
        "served once signed: {reply}"
    );
    assert_eq!(refusals("unsigned").await, 0);
}

/// A deployment a node with trusted keys refuses (here stored by `snodo deploy` under a
/// configuration without keys) does not keep that node from starting: it serves the
/// newest deployment it trusts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_keys_restarts_past_a_deployment_it_refuses() {
    let dir = tempfile::tempdir().expect("tmp");
    let fixtures = dir.path().join("fixtures.wasm");
    std::fs::copy(snodo_test_guests::FIXTURES, &fixtures).expect("copy");
    let examples = dir.path().join("examples.wasm");
    std::fs::copy(snodo_test_guests::EXAMPLES, &examples).expect("copy");
    let key = dir.path().join("release.key");
    let public = String::from_utf8(run_ok(snodo(&["keygen", "--out"]).arg(&key)).stdout)
        .expect("utf-8")
        .trim()
        .to_owned();
    run_ok(snodo(&["sign", "--key"]).arg(&key).arg(&fixtures));
    let store = format!(
        "[store]\nkind = \"redb\"\npath = \"{}\"\n",
        dir.path().join("tasks.redb").display()
    );
    let keyed = dir.path().join("keyed.toml");
    std::fs::write(
        &keyed,
        format!(
            "listen = \"127.0.0.1:0\"\n{store}\n[deploy.trusted_keys]\nrelease = \"{public}\"\n\n\
             [[components]]\npath = \"{}\"\n",
            fixtures.display()
        ),
    )
    .expect("config");
    let keyless = dir.path().join("keyless.toml");
    std::fs::write(&keyless, &store).expect("config");
    let listed = |addr| async move {
        let (_, reply) = post_mcp(addr, &request("tools/list", json!({}), false)).await;
        reply.to_string()
    };

    let server = spawn_serve(&["--config", keyed.to_str().expect("utf-8")], &[]);
    assert!(listed(server.addr).await.contains("\"greet\""));
    drop(server);
    // Deployed where nobody checks signatures: unsigned, and the current deployment.
    run_ok(
        snodo(&["deploy"])
            .arg(&examples)
            .arg("--config")
            .arg(&keyless),
    );

    let server = spawn_serve(&["--config", keyed.to_str().expect("utf-8")], &[]);
    let tools = listed(server.addr).await;
    assert!(
        tools.contains("\"greet\""),
        "the signed deployment serves: {tools}"
    );
    assert!(
        !tools.contains("quick_report"),
        "the unsigned one does not: {tools}"
    );
}

/// A watched directory: a component file dropped into it is deployed at the next poll,
/// and one removed stops serving new calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_dropped_into_the_watched_directory_is_deployed() {
    let dir = tempfile::tempdir().expect("tmp");
    let watch = dir.path().join("watch");
    std::fs::create_dir(&watch).expect("dir");
    let conf = dir.path().join("node.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1:0\"\n[store]\nkind = \"redb\"\npath = \"{}\"\n\n[deploy]\npoll_ms = 100\nwatch = \"{}\"\n\n[[components]]\npath = \"{}\"\n",
            dir.path().join("tasks.redb").display(),
            watch.display(),
            snodo_test_guests::FIXTURES,
        ),
    )
    .expect("config");
    let server = spawn_serve(&["--config", conf.to_str().expect("utf-8")], &[]);
    let listed = |addr| async move {
        let (_, reply) = post_mcp(addr, &request("tools/list", json!({}), false)).await;
        reply.to_string()
    };
    assert!(!listed(server.addr).await.contains("quick_report"));
    std::fs::copy(snodo_test_guests::EXAMPLES, watch.join("examples.wasm")).expect("drop");
    await_log(&server, "the watched component deployed", |v| {
        v["fields"]["message"] == "deployment swapped in"
    });
    assert!(listed(server.addr).await.contains("quick_report"));
    std::fs::remove_file(watch.join("examples.wasm")).expect("remove");
    await_log(&server, "the removal deployed", |v| {
        v["fields"]["message"] == "deployment swapped in"
    });
    let now = listed(server.addr).await;
    assert!(
        !now.contains("quick_report") && now.contains("greet"),
        "{now}"
    );
}

/// A server holding its single store file takes `snodo deploy`, `snodo deployments` and
/// `snodo rollback` through its admin API: the commands find the file locked and speak to
/// the server (`SNODO_URL` here, the port being chosen at start), which swaps each deployment
/// in at once (its poll is a minute away). Only an operator of every tenant deploys; a
/// component that does not load deploys nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_file_server_takes_deploys_through_its_admin_api() {
    let dir = tempfile::tempdir().expect("tmp");
    let conf = dir.path().join("node.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1:0\"\n[store]\nkind = \"redb\"\npath = \"{}\"\n\n[deploy]\npoll_ms = 60000\n\n\
             [[admin.tokens]]\ntoken = \"acme-operator-token-0123\"\ntenant = \"acme\"\n\n\
             [[components]]\npath = \"{}\"\n",
            dir.path().join("tasks.redb").display(),
            snodo_test_guests::FIXTURES,
        ),
    )
    .expect("config");
    let server = spawn_serve(&["--config", conf.to_str().expect("utf-8")], &[]);
    let url = format!("http://{}", server.addr);
    let cli = |args: &[&str]| {
        let mut c = snodo(args);
        c.arg("--config").arg(&conf).env("SNODO_URL", &url);
        c
    };
    let listed = |addr| async move {
        let (_, reply) = post_mcp(addr, &request("tools/list", json!({}), false)).await;
        reply.to_string()
    };
    assert!(!listed(server.addr).await.contains("quick_report"));

    let out = run_ok(&mut cli(&["deploy", snodo_test_guests::EXAMPLES]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("deployed revision 2") && said.contains("through the server"),
        "{said}"
    );
    await_log(&server, "the deployment swapped in", |v| {
        v["fields"]["message"] == "deployment swapped in" && v["fields"]["revision"] == 2
    });
    let tools = listed(server.addr).await;
    assert!(
        tools.contains("quick_report") && tools.contains("greet"),
        "added beside the fixtures: {tools}"
    );
    let examples = snodo::model::component_digest(
        &std::fs::read(snodo_test_guests::EXAMPLES).expect("examples"),
    );
    let out = run_ok(&mut cli(&["deployments", "--json"]));
    let view: Value = serde_json::from_slice(&out.stdout).expect("json");
    let revisions: Vec<u64> = view["deployments"]
        .as_array()
        .expect("deployments")
        .iter()
        .filter_map(|d| d["revision"].as_u64())
        .collect();
    assert_eq!(revisions, [2, 1], "{view}");
    assert!(
        view["deployments"][0]["components"]
            .as_array()
            .is_some_and(|c| c.contains(&json!(examples))),
        "{view}"
    );

    // A file that is no component: refused with the server's reason, nothing deployed.
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm not really").expect("junk");
    let out = cli(&["deploy", junk.to_str().expect("utf-8")])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("junk.wasm") && err.contains("HTTP 400"),
        "{err}"
    );
    // An operator of one tenant may not deploy for all.
    let out = cli(&["rollback"])
        .env("SNODO_ADMIN_TOKEN", "acme-operator-token-0123")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("operator of every tenant"),
        "{err}"
    );

    let out = run_ok(&mut cli(&["rollback"]));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("deployed revision 3: the components of revision 1"),
        "{said}"
    );
    await_log(&server, "the rollback swapped in", |v| {
        v["fields"]["message"] == "deployment swapped in" && v["fields"]["revision"] == 3
    });
    assert!(!listed(server.addr).await.contains("quick_report"));

    // A held file and no server where the commands look: what to do, said.
    let out = snodo(&["deployments", "--config"])
        .arg(&conf)
        .env("SNODO_URL", "http://127.0.0.1:1")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("SNODO_URL"),
        "{err}"
    );
}

/// Under a service manager (a socket the test owns stands for systemd's): `READY=1` once
/// serving, with the address and the main pid; `WATCHDOG=1` every half of `WATCHDOG_USEC`
/// while the store commits; `STOPPING=1` when SIGTERM drains the node.
#[test]
fn a_service_manager_hears_ready_then_the_watchdog_then_stopping() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).expect("bind");
    socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let recv = || {
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let data = dir.path().join("data");
    let server = spawn_serve(
        &[
            "--store",
            "memory",
            "--data",
            data.to_str().expect("utf-8"),
            "--component",
            snodo_test_guests::FIXTURES,
        ],
        &[
            ("NOTIFY_SOCKET", path.to_str().expect("utf-8")),
            ("WATCHDOG_USEC", "200000"),
        ],
    );
    let ready = recv();
    assert!(
        ready.starts_with("READY=1\n")
            && ready.contains(&format!("http://{}/mcp", server.addr))
            && ready.contains(&format!("MAINPID={}", server.child.id())),
        "{ready}"
    );
    assert_eq!(recv(), "WATCHDOG=1");
    assert_eq!(recv(), "WATCHDOG=1");
    run_ok(std::process::Command::new("kill").args(["-TERM", &server.child.id().to_string()]));
    loop {
        let m = recv();
        if m.starts_with("STOPPING=1") {
            break;
        }
        assert_eq!(m, "WATCHDOG=1", "only pets before stopping");
    }
}
