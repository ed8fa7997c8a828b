//! Webhooks: subscriptions declared through the admin API; events delivered from the outbox
//! to a real receiver over HTTP, signed per Standard Webhooks; tries repeated on the
//! store's clock, then kept as dead letters and redelivered; secrets rotated without a gap;
//! the outbox read back by cursor; and what is refused, refused clearly.

use std::sync::atomic::{AtomicU16, Ordering};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use snodo_core::model::{ManualClock, Timestamp, Webhook};
use snodo_core::store::{MemoryStore, Store};
use snodo_runner::RunnerOptions;
use snodo_server::WebhookSettings;
use snodo_server::mcp::McpServer;
use snodo_wasm::outbound::{Outbound, OutboundConfig};
use tokio_util::sync::CancellationToken;

use super::*;

const ALICE: &str = "alice-token-0123456789";
/// 2026-12-07T00:00:00Z.
const T0: u64 = 1_796_601_600_000;

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Got {
    id: String,
    timestamp: String,
    signature: String,
    body: Vec<u8>,
}

/// A receiver on a real socket: records every request, answers `status`.
struct Receiver {
    url: String,
    got: Arc<parking_lot::Mutex<Vec<Got>>>,
    status: Arc<AtomicU16>,
}

async fn receiver() -> Receiver {
    let got: Arc<parking_lot::Mutex<Vec<Got>>> = Arc::default();
    let status = Arc::new(AtomicU16::new(200));
    let (g, s) = (got.clone(), status.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (g, s) = (g.clone(), s.clone());
            async move {
                let h = |k: &str| {
                    headers
                        .get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                g.lock().push(Got {
                    id: h("webhook-id"),
                    timestamp: h("webhook-timestamp"),
                    signature: h("webhook-signature"),
                    body: body.to_vec(),
                });
                StatusCode::from_u16(s.load(Ordering::SeqCst)).unwrap_or(StatusCode::OK)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Receiver {
        url: format!("http://{addr}/hook"),
        got,
        status,
    }
}

struct Node {
    clock: ManualClock,
    store: Arc<dyn Store>,
    server: Arc<McpServer>,
    app: snodo_server::http::App,
    hook: Receiver,
    _stop: tokio_util::sync::DropGuard,
}

/// A server over a store on a manual clock, delivering to a receiver that
/// `webhooks.allowed_hosts` names, with tries 1 s and 2 s apart.
async fn node() -> Node {
    let clock = ManualClock::new(Timestamp(T0));
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let fixtures = fixtures().await;
    let catalog = Arc::new(common::catalog_of(&[&fixtures], Default::default()));
    let options = RunnerOptions {
        poll_interval: Duration::from_millis(10),
        ..RunnerOptions::default()
    };
    let (server, _) = common::server_with(&store, catalog, options);
    let server = Arc::new(server);
    let hook = receiver().await;
    let origin = hook.url.trim_end_matches("/hook").to_owned();
    let settings = WebhookSettings {
        allowed_hosts: vec![origin],
        retry_ms: vec![1_000, 2_000],
        ..WebhookSettings::default()
    };
    settings.check().expect("settings");
    let stop = CancellationToken::new();
    let outbound = Arc::new(Outbound::new(OutboundConfig::default()).expect("outbound"));
    server
        .start_webhooks(outbound, settings, "node-a", stop.clone())
        .await
        .expect("start");
    let app = router(
        server.clone(),
        HttpConfig {
            max_body_bytes: 64 << 10,
            tokens: vec![(ALICE.into(), Principal::new("acme", "alice"))],
            admin: ops_admin(),
            ..HttpConfig::default()
        },
    );
    Node {
        clock,
        store,
        server,
        app,
        hook,
        _stop: stop.drop_guard(),
    }
}

async fn admin(
    n: &Node,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    as_operator(&n.app, method, path, token, body).await
}

/// `tools/call` of `test_whoami` as alice, with `meta` added to `_meta`: the answer.
async fn call_as_alice(n: &Node, id: i64, meta: Value) -> Value {
    let mut body = rpc(
        id,
        "tools/call",
        json!({"name": "test_whoami", "arguments": {}}),
        caps(true),
    );
    if let Value::Object(extra) = meta {
        for (k, v) in extra {
            body["params"]["_meta"][k] = v;
        }
    }
    let req = post(&body)
        .header("authorization", format!("Bearer {ALICE}"))
        .body(Body::from(body.to_string()))
        .expect("request");
    send(&n.app, req).await.1
}

async fn row(n: &Node, name: &str) -> Webhook {
    n.store
        .webhook(name)
        .await
        .expect("read")
        .expect("a webhook")
}

/// Waits until the receiver has got `count` requests; the last.
async fn got(n: &Node, count: usize) -> Got {
    common::eventually(&format!("{count} requests at the receiver"), || async {
        let g = n.hook.got.lock();
        (g.len() >= count).then(|| {
            assert_eq!(g.len(), count, "no more than {count}: {g:?}");
            g[count - 1].clone()
        })
    })
    .await
}

/// Whether `secret` signed `got`, checked from the Standard Webhooks definition: base64
/// HMAC-SHA256 of `id.timestamp.body` under the secret's decoded key, among the
/// space-separated `v1,` signatures.
fn signed_by(got: &Got, secret: &str) -> bool {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .expect("base64");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key);
    let mut signed = format!("{}.{}.", got.id, got.timestamp).into_bytes();
    signed.extend_from_slice(&got.body);
    let want = format!(
        "v1,{}",
        STANDARD.encode(ring::hmac::sign(&key, &signed).as_ref())
    );
    got.signature.split(' ').any(|s| s == want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_is_delivered_signed_retried_dead_lettered_and_redelivered() {
    let n = node().await;
    let (s, v) = admin(
        &n,
        "POST",
        "/admin/v1/webhooks",
        ACME_OPS,
        Some(json!({"name": "ops", "tenant": "acme", "url": n.hook.url,
            "events": ["completed", "cancelled"], "tools": ["test_whoami"]})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let secret = v["secret"]
        .as_str()
        .expect("a new subscription shows its secret")
        .to_owned();
    assert!(secret.starts_with("whsec_"));
    let (_, listed) = admin(&n, "GET", "/admin/v1/webhooks", ACME_OPS, None).await;
    let shown = listed["webhooks"][0]["secrets"][0]["secret"]
        .as_str()
        .expect("a hint");
    assert!(
        shown.ends_with('…') && shown.len() < secret.len(),
        "{listed}"
    );
    assert!(
        listed["webhooks"][0].get("secret").is_none(),
        "listed without it"
    );

    // Delivered, signed, once.
    let v = call_as_alice(&n, 1, json!({})).await;
    let task = task_id(&v);
    let first = got(&n, 1).await;
    assert!(signed_by(&first, &secret), "{first:?}");
    let payload: Value = serde_json::from_slice(&first.body).expect("JSON");
    assert_eq!(payload["type"], "task.completed");
    assert_eq!(payload["data"]["taskId"], task);
    assert_eq!(payload["data"]["tool"], "test_whoami");
    assert_eq!(payload["data"]["eventId"], first.id);
    common::eventually("the delivery settled", || async {
        (row(&n, "ops").await.delivered == 1).then_some(())
    })
    .await;

    // The cursor: what was missed, in commit order, with the ids receivers saw.
    let (s, page) = admin(&n, "GET", "/admin/v1/events?after=0", ACME_OPS, None).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(page["events"][0]["id"], first.id);
    assert_eq!(page["events"][0]["payload"], payload);
    assert_eq!(page["next"], 1);
    let (_, rest) = admin(&n, "GET", "/admin/v1/events?after=1", ACME_OPS, None).await;
    assert_eq!(rest["events"], json!([]));
    assert_eq!(rest["next"], 1);

    // Down: tried at once, then after 1 s and 2 s of the store's clock, then dead.
    n.hook.status.store(503, Ordering::SeqCst);
    call_as_alice(&n, 2, json!({})).await;
    let tried = got(&n, 2).await;
    common::eventually("a retry waits", || async {
        let r = row(&n, "ops").await;
        (r.retrying.len() == 1 && r.lease.is_none()).then_some(())
    })
    .await;
    let waiting = row(&n, "ops").await.retrying[0].clone();
    assert_eq!(waiting.attempts, 1);
    assert_eq!(waiting.error, "the receiver answered 503");
    n.clock.advance(999);
    n.server
        .deliver_webhooks()
        .await
        .expect("started")
        .expect("look");
    assert_eq!(n.hook.got.lock().len(), 2, "not before its time");
    n.clock.advance(1);
    assert_eq!(got(&n, 3).await.id, tried.id, "a retry repeats the id");
    common::eventually("the second try settles", || async {
        let r = row(&n, "ops").await;
        (r.retrying.first().map(|w| w.attempts) == Some(2) && r.lease.is_none()).then_some(())
    })
    .await;
    n.clock.advance(2_000);
    assert_eq!(got(&n, 4).await.id, tried.id);
    let dead = common::eventually("a dead letter", || async {
        let r = row(&n, "ops").await;
        (r.dead.len() == 1 && r.lease.is_none()).then_some(r)
    })
    .await;
    assert!(dead.retrying.is_empty());
    assert_eq!((dead.dead[0].attempts, dead.failures), (3, 3));
    assert_eq!(dead.dead[0].event.id, tried.id);
    let counted = |outcome: &str| -> u64 {
        let prefix = format!("snodo_webhook_tries_total{{outcome=\"{outcome}\"}} ");
        n.server
            .metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
            .and_then(|v| v.parse().ok())
            .expect("the counter is exposed")
    };
    assert_eq!(
        (counted("delivered"), counted("failed"), counted("dead")),
        (1, 3, 1)
    );

    // Up again: an operator redelivers the dead letter; same id.
    n.hook.status.store(200, Ordering::SeqCst);
    let (s, v) = admin(
        &n,
        "POST",
        "/admin/v1/webhooks/ops/redeliver",
        ACME_OPS,
        Some(json!({"event": "evt_none"})),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = admin(
        &n,
        "POST",
        "/admin/v1/webhooks/ops/redeliver",
        ACME_OPS,
        None,
    )
    .await;
    assert_eq!((s, &v["redelivering"]), (StatusCode::OK, &json!(1)), "{v}");
    let again = got(&n, 5).await;
    assert_eq!(again.id, tried.id);
    assert!(signed_by(&again, &secret));
    common::eventually("the redelivery settles", || async {
        let r = row(&n, "ops").await;
        (r.delivered == 2 && r.dead.is_empty() && r.replayed.is_empty()).then_some(())
    })
    .await;

    // A rotation signs with both secrets until the grace runs out.
    let (s, v) = admin(&n, "POST", "/admin/v1/webhooks/ops/rotate", ACME_OPS, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let rotated = v["secret"].as_str().expect("the new secret").to_owned();
    assert_ne!(rotated, secret);
    call_as_alice(&n, 3, json!({})).await;
    let both = got(&n, 6).await;
    assert!(
        signed_by(&both, &rotated) && signed_by(&both, &secret),
        "{both:?}"
    );
    n.clock.advance(24 * 3_600_000);
    call_as_alice(&n, 4, json!({})).await;
    let after = got(&n, 7).await;
    assert!(
        signed_by(&after, &rotated) && !signed_by(&after, &secret),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_refused_clearly_and_kept_to_their_tenant() {
    let n = node().await;
    let declare =
        |name: &str, tenant: &str, url: &str| json!({"name": name, "tenant": tenant, "url": url});
    // A URL the allow-list does not name.
    let (s, v) = admin(
        &n,
        "POST",
        "/admin/v1/webhooks",
        ROOT_OPS,
        Some(declare("far", "acme", "https://hooks.example.com/in")),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("webhooks.allowed_hosts") && message.contains("https://hooks.example.com"),
        "{message}"
    );
    // An unknown event, a bad secret.
    let mut bad = declare("x", "acme", &n.hook.url);
    bad["events"] = json!(["finished"]);
    let (s, v) = admin(&n, "POST", "/admin/v1/webhooks", ROOT_OPS, Some(bad)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("events"),
        "{v}"
    );
    let mut bad = declare("x", "acme", &n.hook.url);
    bad["secret"] = json!("hunter2");
    let (s, v) = admin(&n, "POST", "/admin/v1/webhooks", ROOT_OPS, Some(bad)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    // Another tenant's subscription: an acme operator may not make one, nor see one.
    let (s, _) = admin(
        &n,
        "POST",
        "/admin/v1/webhooks",
        ACME_OPS,
        Some(declare("theirs", "globex", &n.hook.url)),
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = admin(
        &n,
        "POST",
        "/admin/v1/webhooks",
        ROOT_OPS,
        Some(declare("theirs", "globex", &n.hook.url)),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = admin(&n, "GET", "/admin/v1/webhooks/theirs", ACME_OPS, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, v) = admin(&n, "GET", "/admin/v1/webhooks", ACME_OPS, None).await;
    assert_eq!(v["webhooks"], json!([]));
    // A call asking for an endpoint its tenant did not subscribe: refused, nothing made.
    let v = call_as_alice(&n, 1, json!({"io.snodo/webhook": n.hook.url})).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("io.snodo/webhook"),
        "{v}"
    );
    // On request only: heard by the call that asks for it, not by the others.
    let mut on_request = declare("mine", "acme", &n.hook.url);
    on_request["on_request"] = json!(true);
    let (s, v) = admin(&n, "POST", "/admin/v1/webhooks", ACME_OPS, Some(on_request)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let quiet = task_id(&call_as_alice(&n, 2, json!({})).await);
    let quiet = snodo_core::model::TaskId::parse(&quiet).expect("a task id");
    let asked = task_id(&call_as_alice(&n, 3, json!({"io.snodo/webhook": n.hook.url})).await);
    let heard = got(&n, 1).await;
    let payload: Value = serde_json::from_slice(&heard.body).expect("JSON");
    assert_eq!(payload["data"]["taskId"], asked);
    common::eventually("the quiet task finished", || async {
        let (t, _) = n.store.inspect(&quiet).await.ok()??;
        t.status.is_terminal().then_some(())
    })
    .await;
    n.server
        .deliver_webhooks()
        .await
        .expect("started")
        .expect("look");
    assert_eq!(
        n.hook.got.lock().len(),
        1,
        "the call that did not ask is not heard"
    );
}
