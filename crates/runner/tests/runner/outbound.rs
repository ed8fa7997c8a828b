//! Outbound HTTP from real guests (`example-guests/outbound`, built with wstd) to a real
//! local server: the allow-list and the address rules (refusals the guest can read), the
//! limits, secrets injected by the host and scrubbed from what the guest sees however the
//! server reflects them, and the journal that answers a replayed attempt so its effects
//! happen once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use snodo_core::model::{
    JournalEntry, JournalRequest, JournalResponse, ManualClock, TaskId, TaskStatus, Timestamp,
};
use snodo_core::store::{ClaimRequest, Lease, RedbStore, Store};
use snodo_runner::InputWaiters;
use snodo_wasm::outbound::{AllowList, AllowedHost, HttpGrant, Injection, OutboundLimits, Secret};
use snodo_wasm::{
    AttemptError, CancelToken, Component, EngineConfig, Execution, ExecutionIo, ExecutionReport,
    GuestOutcome, InputAnswers, InputFailure, InputRequests, Progress, WasiGrants,
};

use crate::common;

use common::{HttpRecorder, base64};

const LEASE_MS: u64 = 30_000;

/// The outbound guest on an engine whose resolver answers `rebind.test` with loopback, as a
/// name an attacker controls would.
async fn outbound() -> Arc<Component> {
    let mut config = EngineConfig {
        max_instances: 16,
        max_memory_bytes: 64 << 20,
        ..EngineConfig::default()
    };
    config.outbound.resolve = BTreeMap::from([(
        "rebind.test".to_owned(),
        vec!["127.0.0.1".parse().expect("ip")],
    )]);
    common::load_guests_with(config).await.outbound
}

/// IO for a synchronous call: no input, no journal.
struct Plain;

#[async_trait::async_trait]
impl ExecutionIo for Plain {
    async fn await_inputs(&self, requests: InputRequests, _: &CancelToken) -> InputAnswers {
        Err(InputFailure::Suspend(requests))
    }
    async fn set_status(&self, _: String) -> Result<(), snodo_wasm::IoError> {
        Ok(())
    }
    async fn progress(&self, _: Progress) {}
}

fn grant(allowed: &[&str]) -> HttpGrant {
    HttpGrant::new(AllowList::parse(allowed).expect("allow-list"))
}

/// A synchronous call of `tool` with `args` and `io`, its outbound HTTP granted `grant`.
fn granted(
    tool: &str,
    args: Value,
    grant: Option<Arc<HttpGrant>>,
    io: Arc<dyn ExecutionIo>,
) -> Execution {
    let mut exec = Execution::new(tool, args, io);
    exec.grants = WasiGrants {
        http: grant,
        ..WasiGrants::default()
    };
    exec
}

async fn call(
    component: &Component,
    grant: Option<HttpGrant>,
    args: Value,
    io: Arc<dyn ExecutionIo>,
) -> ExecutionReport {
    let exec = granted("fetch", args, grant.map(Arc::new), io);
    component.execute(exec).await
}

/// `grant` for `base` whose requests there carry `header: value`, added by the host.
fn injecting_at(base: &str, header: &str, value: &str) -> HttpGrant {
    let mut g = grant(&[base]);
    g.inject = vec![Injection {
        host: AllowedHost::parse(base).expect("entry"),
        header: header.into(),
        value: Secret::new(value),
    }];
    g
}

/// A claim of `id` by `node` on `store`: its lease.
async fn claim(store: &dyn Store, id: &TaskId, node: &str) -> Lease {
    store
        .claim(id, &ClaimRequest::new(LEASE_MS, node))
        .await
        .expect("claim")
        .lease
}

/// A redb store in `dir` whose time is a [`ManualClock`], its file, and that clock.
fn redb_on_manual_clock(
    dir: &tempfile::TempDir,
) -> (Arc<dyn Store>, std::path::PathBuf, ManualClock) {
    let clock = ManualClock::new(Timestamp(1_700_000_000_000));
    let file = dir.path().join("tasks.redb");
    let store: Arc<dyn Store> =
        Arc::new(RedbStore::open_with_clock(&file, Arc::new(clock.clone())).expect("store"));
    (store, file, clock)
}

/// What an earlier attempt recorded at position 0: a GET of `url` answered 200 with `body`.
fn recorded_get(url: String, body: Vec<u8>) -> JournalEntry {
    JournalEntry {
        seq: 0,
        request: JournalRequest {
            method: "GET".into(),
            url,
            body_sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
        },
        response: JournalResponse {
            status: 200,
            headers: Vec::new(),
            body,
        },
    }
}

/// The tool's structured answer, or its error text.
fn answer(report: &ExecutionReport) -> Result<Value, String> {
    match &report.outcome {
        Ok(GuestOutcome::Completed(r)) if r.get("isError") == Some(&json!(true)) => {
            Err(r["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned())
        }
        Ok(GuestOutcome::Completed(r)) => Ok(r["structuredContent"].clone()),
        other => panic!("expected a tool result, got {other:?}"),
    }
}

fn refused(component: &Component, reason: &str) -> u64 {
    refused_of(component, "fetch", reason)
}

fn refused_of(component: &Component, tool: &str, reason: &str) -> u64 {
    component
        .engine()
        .outbound()
        .counters()
        .refused
        .iter()
        .filter(|((t, r), _)| t == tool && *r == reason)
        .map(|(_, n)| *n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_tool_reaches_what_its_list_allows_and_nothing_else() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let port = server.addr.port();
    let allowed = format!("http://127.0.0.1:{port}");
    let io: Arc<dyn ExecutionIo> = Arc::new(Plain);

    let ok = call(
        &component,
        Some(grant(&[&allowed])),
        json!({"url": format!("{allowed}/template")}),
        io.clone(),
    )
    .await;
    assert_eq!(
        answer(&ok).expect("fetched"),
        json!({"status": 200, "body": "template-1"})
    );
    assert_eq!(server.count("GET", "/template"), 1);
    let sent = &server.seen()[0];
    assert_eq!(
        sent.header("idempotency-key"),
        None,
        "a synchronous call has no journal and no key"
    );

    // No grant: refused before anything is resolved or sent.
    let r = call(
        &component,
        None,
        json!({"url": format!("{allowed}/template")}),
        io.clone(),
    )
    .await;
    assert!(
        answer(&r)
            .expect_err("refused")
            .contains("HttpRequestDenied"),
        "{r:?}"
    );
    assert_eq!(refused(&component, "not_granted"), 1);

    // A URL no entry allows.
    let r = call(
        &component,
        Some(grant(&[&allowed])),
        json!({"url": "http://127.0.0.1:1/template"}),
        io.clone(),
    )
    .await;
    let err = answer(&r).expect_err("refused");
    assert!(err.contains("HttpRequestDenied"), "{err}");
    // What was refused, for which tool, and the key and the entry that would allow it.
    for says in [
        "GET http://127.0.0.1:1/template",
        "tool `fetch`",
        "tools.fetch.allowed_outbound_hosts",
        "http://127.0.0.1:1",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    assert_eq!(refused(&component, "not_allowed"), 1);

    // With every URL allowed, addresses that are not public stay out of reach unless an
    // entry names them: the metadata address, loopback on another port, IPv6 loopback, a
    // private network, and a name that resolves to loopback.
    let everything = grant(&["*://*:*", &allowed]);
    for url in [
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://127.0.0.1:{}/template", port.wrapping_add(1).max(1)),
        format!("http://[::1]:{port}/template"),
        "http://10.0.0.1/".to_owned(),
        format!("http://rebind.test:{port}/template"),
        format!("http://[::ffff:127.0.0.1]:{port}/template"),
    ] {
        let r = call(
            &component,
            Some(everything.clone()),
            json!({"url": url}),
            io.clone(),
        )
        .await;
        let err = answer(&r).expect_err(&url);
        assert!(err.contains("DestinationIpProhibited"), "{url}: {err}");
        assert!(
            err.contains("not a public address")
                && err.contains("tools.fetch.allowed_outbound_hosts"),
            "{url}: {err}"
        );
    }
    assert_eq!(refused(&component, "address"), 6);
    assert_eq!(
        server.count("GET", "/template"),
        1,
        "none of them reached the server"
    );

    // A redirect is not followed by the host: the guest sees it, and any request it makes
    // for the new location is checked like every other.
    let r = call(
        &component,
        Some(grant(&[&allowed])),
        json!({"url": format!("{allowed}/redirect")}),
        io.clone(),
    )
    .await;
    assert_eq!(answer(&r).expect("the redirect itself")["status"], 302);
    let r = call(
        &component,
        Some(grant(&[&allowed])),
        json!({"url": "http://169.254.169.254/latest/meta-data/"}),
        io,
    )
    .await;
    assert!(answer(&r).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_ends_the_request_with_an_error_the_guest_sees() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let allowed = server.base();
    let run = |limits: OutboundLimits, args: Value| {
        let mut g = grant(&[&allowed]);
        g.limits = limits;
        let component = component.clone();
        async move { answer(&call(&component, Some(g), args, Arc::new(Plain)).await) }
    };
    // Runs `args` under `limits`: the error names `says`, and `limit` was counted once.
    let refused = |limits: OutboundLimits, args: Value, says: &'static str, limit: &'static str| {
        let run = run(limits, args);
        let component = component.clone();
        async move {
            let err = run.await.expect_err(says);
            assert!(err.contains(says), "{err}");
            let counters = component.engine().outbound().counters();
            assert_eq!(
                counters.limited.get(&("fetch".to_owned(), limit)),
                Some(&1),
                "{limit}"
            );
        }
    };
    let at = |path: &str| json!({"url": format!("{allowed}{path}")});

    let small = OutboundLimits {
        max_response_bytes: 1_000,
        ..OutboundLimits::default()
    };
    let within = run(small, at("/big?n=999"))
        .await
        .expect("within the bound");
    assert_eq!(within["body"].as_str().map(str::len), Some(999));
    refused(
        small,
        at("/big?n=5000"),
        "body size exceeds limit: 1000 bytes",
        "max_response_bytes",
    )
    .await;

    let impatient = OutboundLimits {
        first_byte_timeout: Duration::from_millis(200),
        ..OutboundLimits::default()
    };
    refused(
        impatient,
        at("/slow"),
        "ConnectionReadTimeout",
        "first_byte_timeout",
    )
    .await;

    let two = OutboundLimits {
        max_requests: 2,
        ..OutboundLimits::default()
    };
    let before = server.count("GET", "/template");
    let three = json!({"url": format!("{allowed}/template"), "repeat": 3});
    refused(two, three, "max_requests (2)", "max_requests").await;
    assert_eq!(server.count("GET", "/template") - before, 2);

    let tiny = OutboundLimits {
        max_request_bytes: 10,
        ..OutboundLimits::default()
    };
    let post = json!({"url": format!("{allowed}/tickets"), "post": {"title": "far too long for ten bytes"}});
    refused(tiny, post, "HttpRequestBodySize", "max_request_bytes").await;
    assert_eq!(server.count("POST", "/tickets"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_secret_reaches_the_server_and_never_the_guest() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let allowed = server.base();
    let secret = "s3cr3t-token-0123456789";
    let mut g = injecting_at(&allowed, "authorization", &format!("Bearer {secret}"));
    g.scrub = vec![Secret::new(format!("Bearer {secret}")), Secret::new(secret)];
    let r = call(
        &component,
        Some(g),
        json!({"url": format!("{allowed}/headers")}),
        Arc::new(Plain),
    )
    .await;
    let body = answer(&r).expect("fetched")["body"]
        .as_str()
        .expect("text")
        .to_owned();
    assert_eq!(
        server.seen()[0].header("authorization"),
        Some(format!("Bearer {secret}").as_str()),
        "the host sent it"
    );
    assert!(body.contains("authorization: [redacted]"), "{body}");
    assert!(
        !body.contains(secret),
        "the echo was scrubbed before the guest saw it"
    );
    let logged: String = r.logs.iter().map(|l| l.message.as_str()).collect();
    assert!(
        logged.contains("fetched:") && !logged.contains(secret),
        "{logged}"
    );
}

/// A task's attempts on a redb store, as the runner runs them.
struct Attempts {
    component: Arc<Component>,
    store: Arc<dyn Store>,
    waiters: Arc<InputWaiters>,
    grant: Arc<HttpGrant>,
}

impl Attempts {
    fn new(component: Arc<Component>, store: Arc<dyn Store>, grant: HttpGrant) -> Self {
        Self {
            component,
            store,
            waiters: Arc::new(InputWaiters::new()),
            grant: Arc::new(grant),
        }
    }

    /// A task of `tool` with `args`, claimed by a node.
    async fn claimed(&self, tool: &str, args: &Value) -> (TaskId, Lease) {
        let id = common::create_tool_task(&*self.store, tool, args.clone()).await;
        let lease = claim(&*self.store, &id, "node-a").await;
        (id, lease)
    }

    fn start(
        &self,
        lease: Lease,
        tool: &str,
        args: Value,
    ) -> tokio::task::JoinHandle<ExecutionReport> {
        let mut exec =
            common::attempt_execution(self.store.clone(), &lease, self.waiters.clone(), tool, args);
        exec.grants = WasiGrants {
            http: Some(self.grant.clone()),
            ..WasiGrants::default()
        };
        let component = self.component.clone();
        tokio::spawn(async move { component.execute(exec).await })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_attempt_is_answered_from_the_journal_so_each_effect_happens_once() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, _, clock) = redb_on_manual_clock(&dir);
    let server = HttpRecorder::start().await;
    let attempts = Attempts::new(outbound().await, store.clone(), grant(&[&server.base()]));
    let args = json!({"base": server.base(), "title": "disk full"});
    let (id, first) = attempts.claimed("open_ticket", &args).await;

    // The first attempt reads the template and asks; then it is lost (its process died).
    let running = attempts.start(first.clone(), "open_ticket", args.clone());
    common::await_stored(&*store, &id, "the question stored", |t| {
        t.status == TaskStatus::InputRequired
    })
    .await;
    running.abort();
    assert_eq!(server.count("GET", "/template"), 1);

    // The answer arrives; a fresh guest replays the attempt on a new lease.
    common::confirm_key(&*store, &id, "confirm-ticket").await;
    clock.advance(LEASE_MS);
    let second = claim(&*store, &id, "node-b").await;
    let report = attempts
        .start(second.clone(), "open_ticket", args.clone())
        .await
        .expect("join");
    let result = answer(&report).expect("the ticket");
    assert_eq!(result["status"], 201);
    assert_eq!(result["ticket"], json!({"id": 1}));
    assert_eq!(
        server.count("GET", "/template"),
        1,
        "the template was answered from the journal"
    );
    assert_eq!(server.count("POST", "/tickets"), 1);
    let post = server
        .seen()
        .into_iter()
        .find(|r| r.method == "POST")
        .expect("the POST");
    assert_eq!(
        post.header("idempotency-key"),
        Some(format!("{id}-1").as_str()),
        "a non-idempotent request carries the task and its position"
    );
    let body: Value = serde_json::from_slice(&post.body).expect("json");
    assert_eq!(body["template"], "template-1");

    // A third replay (the attempt was lost after the POST) sends nothing at all.
    clock.advance(LEASE_MS);
    let third = claim(&*store, &id, "node-c").await;
    let report = attempts
        .start(third.clone(), "open_ticket", args)
        .await
        .expect("join");
    assert_eq!(
        answer(&report).expect("the same ticket")["ticket"],
        json!({"id": 1})
    );
    assert_eq!(server.seen().len(), 2, "one GET and one POST in all");
    let journal = store.journal(&third).await.expect("journal");
    assert_eq!(journal.len(), 2);
    assert_eq!(journal[1].request.method, "POST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_asks_something_else_fails_the_attempt_naming_the_position() {
    let dir = tempfile::tempdir().expect("dir");
    let store: Arc<dyn Store> =
        Arc::new(RedbStore::open(dir.path().join("tasks.redb")).expect("store"));
    let server = HttpRecorder::start().await;
    let attempts = Attempts::new(outbound().await, store.clone(), grant(&[&server.base()]));
    let args = json!({"url": format!("{}/template", server.base())});
    let (_, claimed) = attempts.claimed("fetch", &args).await;
    // What an earlier build of the tool recorded at position 0: another URL.
    let earlier = recorded_get(format!("{}/other", server.base()), b"old".to_vec());
    store
        .journal_append(&claimed, &earlier, 1 << 20)
        .await
        .expect("append");
    let report = attempts
        .start(claimed.clone(), "fetch", args)
        .await
        .expect("join");
    match &report.outcome {
        Err(e @ AttemptError::JournalDivergence(why)) => {
            assert!(why.contains("request 0"), "{why}");
            assert!(why.contains("/other") && why.contains("/template"), "{why}");
            assert_eq!(
                e.to_rpc_error().data.expect("data")["kind"],
                "journal_divergence"
            );
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    assert_eq!(server.seen().len(), 0, "nothing was sent");
}

/// Where a secret must not be found: a store's bytes.
fn absent_from_file(path: &std::path::Path, secret: &str) {
    for file in [path.to_path_buf(), path.with_extension("sqlite-wal")] {
        if let Ok(bytes) = std::fs::read(&file) {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the secret",
                file.display()
            );
        }
    }
}

/// A task on `store` whose guest fetches a page echoing its request headers, into which the
/// host injected a secret: the secret reaches the server, and neither the task's record,
/// its result nor its journal holds it.
async fn a_journaled_echo_keeps_no_secret(store: Arc<dyn Store>, component: Arc<Component>) {
    let server = HttpRecorder::start().await;
    let secret = "sk_live_never_stored_0123";
    let mut g = injecting_at(&server.base(), "x-api-key", secret);
    g.scrub = vec![Secret::new(secret)];
    let attempts = Attempts::new(component, store.clone(), g);
    let args = json!({"url": format!("{}/headers", server.base())});
    let (id, claimed) = attempts.claimed("fetch", &args).await;
    let report = attempts
        .start(claimed.clone(), "fetch", args)
        .await
        .expect("join");
    let body = answer(&report).expect("fetched")["body"].to_string();
    assert!(body.contains("x-api-key: [redacted]"), "{body}");
    assert_eq!(server.seen()[0].header("x-api-key"), Some(secret));
    let journal = store.journal(&claimed).await.expect("journal");
    assert_eq!(journal.len(), 1);
    let recorded = String::from_utf8_lossy(&journal[0].response.body).into_owned();
    assert!(
        recorded.contains("[redacted]") && !recorded.contains(secret),
        "{recorded}"
    );
    assert!(!format!("{journal:?}").contains(secret));
    // The result, as the runner would commit it.
    let Ok(GuestOutcome::Completed(result)) = &report.outcome else {
        panic!("a result");
    };
    store
        .transition(
            snodo_core::store::Authority::Worker(&claimed),
            snodo_core::model::TaskEvent::random(snodo_core::model::EventKind::Completed {
                result: Value::Object(result.clone()),
            }),
            None,
        )
        .await
        .expect("complete");
    let stored = store.inspect(&id).await.expect("inspect").expect("present");
    assert!(!format!("{stored:?}").contains(secret), "the task record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_in_no_store_file_or_row() {
    let component = outbound().await;
    let dir = tempfile::tempdir().expect("dir");
    let secret = "sk_live_never_stored_0123";
    let redb = dir.path().join("tasks.redb");
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&redb).expect("redb"));
    a_journaled_echo_keeps_no_secret(store, component.clone()).await;
    absent_from_file(&redb, secret);
    let sqlite = dir.path().join("tasks.sqlite");
    let store: Arc<dyn Store> =
        Arc::new(snodo_core::store::SqliteStore::open(&sqlite).expect("sqlite"));
    a_journaled_echo_keeps_no_secret(store.clone(), component.clone()).await;
    drop(store);
    absent_from_file(&sqlite, secret);

    if !common::postgres_reachable("the secret check on PostgreSQL rows") {
        return;
    }
    let mut pg = snodo_core::store::PgOptions::new(
        "host=127.0.0.1 port=5432 user=postgres dbname=test",
        "outbound-test",
    );
    pg.schema = format!("snodo_outbound_{}", std::process::id());
    pg.migrate = true;
    let store: Arc<dyn Store> = Arc::new(
        snodo_core::store::PgStore::open(pg.clone())
            .await
            .expect("pg"),
    );
    a_journaled_echo_keeps_no_secret(store.clone(), component).await;
    let (client, conn) = tokio_postgres::connect(
        "host=127.0.0.1 port=5432 user=postgres dbname=test",
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    let schema = &pg.schema;
    let hits: i64 = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {schema}.tasks
                          WHERE position($1::bytea IN body) > 0 OR position($1::bytea IN work) > 0)
                      + (SELECT count(*) FROM {schema}.journal WHERE position($1::bytea IN entry) > 0)"
            ),
            &[&secret.as_bytes()],
        )
        .await
        .expect("query")
        .get(0);
    let entries: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.journal"), &[])
        .await
        .expect("query")
        .get(0);
    snodo_core::store::drop_postgres_schema(&pg)
        .await
        .expect("drop");
    assert_eq!(entries, 1, "the journal row is there");
    assert_eq!(hits, 0, "no row holds the secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_sends_json_and_sees_refusals() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let allowed = server.base();
    let run = |args: Value, g: Option<HttpGrant>| {
        let component = component.clone();
        async move {
            let exec = granted("fetch_sdk", args, g.map(Arc::new), Arc::new(Plain));
            component.execute(exec).await
        }
    };
    let r = run(
        json!({"url": format!("{allowed}/tickets"), "post": {"title": "from the sdk"}}),
        Some(grant(&[&allowed])),
    )
    .await;
    let out = answer(&r).expect("posted");
    assert_eq!(out["status"], 201);
    assert_eq!(out["json"], json!({"id": 1}));
    let post = &server.seen()[0];
    assert_eq!(post.header("content-type"), Some("application/json"));
    let sent: Value = serde_json::from_slice(&post.body).expect("json");
    assert_eq!(sent, json!({"title": "from the sdk"}));

    let r = run(json!({"url": format!("{allowed}/template")}), None).await;
    let err = answer(&r).expect_err("not granted");
    assert!(err.contains("HttpRequestDenied"), "{err}");
    // The SDK reports a denial as one, with the host's explanation.
    assert!(err.starts_with("refused by the host: "), "{err}");
    for says in [
        format!("GET {allowed}/template"),
        "tool `fetch_sdk`".to_owned(),
        "tools.fetch_sdk.allowed_outbound_hosts".to_owned(),
    ] {
        assert!(err.contains(&says), "{says}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_is_verified_against_the_usual_roots_and_a_private_bundle() {
    let server = HttpRecorder::start_tls().await;
    let url = format!("https://localhost:{}/template", server.addr.port());
    let g = grant(&[&format!("https://localhost:{}", server.addr.port())]);

    // The usual roots do not know the test CA: the handshake fails, nothing is served.
    let usual = outbound().await;
    let r = call(
        &usual,
        Some(g.clone()),
        json!({"url": url}),
        Arc::new(Plain),
    )
    .await;
    let err = answer(&r).expect_err("an unknown issuer");
    assert!(err.to_lowercase().contains("tls"), "{err}");
    assert_eq!(server.seen().len(), 0);

    // With the private CA's bundle configured, the same request goes through.
    let mut config = EngineConfig {
        max_instances: 8,
        max_memory_bytes: 64 << 20,
        ..EngineConfig::default()
    };
    config.outbound.ca_bundle = Some(snodo_wasm::testing::TEST_CA_PEM.into());
    let trusting = common::load_guests_with(config).await.outbound;
    let r = call(&trusting, Some(g), json!({"url": url}), Arc::new(Plain)).await;
    assert_eq!(
        answer(&r).expect("verified"),
        json!({"status": 200, "body": "template-1"})
    );

    // A bundle that is not one stops the engine from being built, naming the file.
    let mut config = EngineConfig::default();
    config.outbound.ca_bundle = Some(std::path::PathBuf::from("/nonexistent/ca.pem"));
    let err = snodo_wasm::WasmEngine::new(config).expect_err("no such file");
    assert!(
        matches!(&err, snodo_wasm::EngineError::Outbound(m) if m.contains("outbound.ca_bundle /nonexistent/ca.pem")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_without_a_journal_sends_again_on_every_attempt() {
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let server = HttpRecorder::start().await;
    let mut g = grant(&[&server.base()]);
    g.journal = false;
    let attempts = Attempts::new(outbound().await, store.clone(), g);
    let args = json!({"url": format!("{}/tickets", server.base()), "post": {"n": 1}});
    let (_, claimed) = attempts.claimed("fetch", &args).await;
    for _ in 0..2 {
        let report = attempts
            .start(claimed.clone(), "fetch", args.clone())
            .await
            .expect("join");
        assert_eq!(answer(&report).expect("posted")["status"], 201);
    }
    assert_eq!(server.count("POST", "/tickets"), 2, "each attempt sent it");
    assert!(
        server
            .seen()
            .iter()
            .all(|r| r.header("idempotency-key").is_none()),
        "without a journal there is no key"
    );
    assert_eq!(store.journal(&claimed).await.expect("journal"), vec![]);
}

/// IO that keeps the status messages a guest sets.
#[derive(Default)]
struct Statuses(parking_lot::Mutex<Vec<String>>);

#[async_trait::async_trait]
impl ExecutionIo for Statuses {
    async fn await_inputs(&self, requests: InputRequests, _: &CancelToken) -> InputAnswers {
        Err(InputFailure::Suspend(requests))
    }
    async fn set_status(&self, message: String) -> Result<(), snodo_wasm::IoError> {
        self.0.lock().push(message);
        Ok(())
    }
    async fn progress(&self, _: Progress) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_tool_may_read_leaves_it_only_as_redacted() {
    let component = outbound().await;
    let secret = "pw_readable_by_grant_42";
    let io = Arc::new(Statuses::default());
    let mut exec = Execution::new("reveal", json!({"name": "TOKEN"}), io.clone());
    let mut g = grant(&[]);
    g.scrub = vec![Secret::new(secret)];
    exec.grants = WasiGrants {
        env: vec![("TOKEN".into(), secret.into())],
        http: Some(Arc::new(g)),
        ..WasiGrants::default()
    };
    let grants = exec.grants.clone();
    let report = component.execute(exec).await;
    let out = answer(&report).expect("a result");
    assert_eq!(
        out,
        json!({"value": "[redacted]", "nested": ["v=[redacted]"], "keyed": {"key-[redacted]": 1}}),
        "the result, object keys too"
    );
    let logged: Vec<&str> = report.logs.iter().map(|l| l.message.as_str()).collect();
    assert!(logged.contains(&"the value is [redacted]"), "{logged:?}");
    assert!(logged.contains(&"stdout: [redacted]"), "{logged:?}");
    assert_eq!(*io.0.lock(), vec!["revealing [redacted]".to_owned()]);
    assert!(!format!("{report:?}").contains(secret));

    // Its prepare phase, a resource read and a prompt render are scrubbed alike.
    let exec = || {
        let mut e = Execution::new("reveal", json!({"name": "TOKEN"}), Arc::new(Plain));
        e.grants = grants.clone();
        e
    };
    let prepared = component
        .prepare(exec())
        .await
        .expect("ran")
        .expect("prepared");
    assert_eq!(prepared, json!({"name": "TOKEN", "seen": "[redacted]"}));
    let read = component
        .read_resource(exec(), "env://TOKEN")
        .await
        .expect("ran")
        .expect("a resource it serves")
        .expect("read");
    assert!(
        read.to_string().contains("the value is [redacted]"),
        "{read}"
    );
    let rendered = component
        .get_prompt(exec(), "reveal", &json!({"name": "TOKEN"}))
        .await
        .expect("ran")
        .expect("rendered");
    let rendered = Value::Object(rendered).to_string();
    assert!(
        rendered.contains("the value is [redacted]") && !rendered.contains(secret),
        "{rendered}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_spent_waiting_for_a_response_counts_toward_the_wall_clock() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let mut exec = granted(
        "fetch",
        json!({"url": format!("{}/slow", server.base())}),
        Some(Arc::new(grant(&[&server.base()]))),
        Arc::new(Plain),
    );
    exec.limits.wall_clock_ms = Some(300);
    let report = component.execute(exec).await;
    assert_eq!(
        report.outcome,
        Err(AttemptError::Limit(snodo_wasm::Limit::WallClock {
            ms: 300
        })),
        "the guest computed nothing: only the wait ran out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_cannot_set_the_headers_the_host_sets() {
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let server = HttpRecorder::start().await;
    let g = injecting_at(&server.base(), "authorization", "Bearer host-held");
    let attempts = Attempts::new(outbound().await, store.clone(), g);
    let post = |header: &str| {
        json!({"url": format!("{}/tickets", server.base()), "post": {"n": 1},
               "headers": {header: "from-the-guest"}})
    };
    let sync = |args: Value| {
        let exec = granted(
            "fetch_sdk",
            args,
            Some(attempts.grant.clone()),
            Arc::new(Plain),
        );
        let component = attempts.component.clone();
        async move { answer(&component.execute(exec).await) }
    };

    // Outside a journal a tool may key its own requests.
    sync(post("idempotency-key")).await.expect("sent");
    assert_eq!(
        server.seen()[0].header("idempotency-key"),
        Some("from-the-guest")
    );
    // A header the host injects is the host's.
    let err = sync(post("authorization")).await.expect_err("refused");
    assert!(err.contains("not allowed"), "{err}");
    // In a journaled task the key is the host's too.
    let args = post("idempotency-key");
    let (_, lease) = attempts.claimed("fetch_sdk", &args).await;
    let report = attempts
        .start(lease, "fetch_sdk", args)
        .await
        .expect("join");
    let err = answer(&report).expect_err("refused");
    assert!(err.contains("not allowed"), "{err}");
    assert_eq!(
        server.count("POST", "/tickets"),
        1,
        "neither refused request went out"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_ends_at_the_between_bytes_timeout_streamed_or_journaled() {
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let server = HttpRecorder::start().await;
    let mut g = grant(&[&server.base()]);
    g.limits.between_bytes_timeout = Duration::from_millis(200);
    let attempts = Attempts::new(outbound().await, store.clone(), g);
    let args = json!({"url": format!("{}/stall", server.base())});
    let counted = || {
        attempts
            .component
            .engine()
            .outbound()
            .counters()
            .limited
            .get(&("fetch".to_owned(), "between_bytes_timeout"))
            .copied()
    };
    // A synchronous call streams the body to the guest.
    let g = Some(attempts.grant.clone());
    let exec = granted("fetch", args.clone(), g, Arc::new(Plain));
    let err = answer(&attempts.component.execute(exec).await).expect_err("stalled");
    assert!(err.to_lowercase().contains("timeout"), "{err}");
    assert_eq!(counted(), Some(1));
    // A task reads it whole before recording it.
    let (_, lease) = attempts.claimed("fetch", &args).await;
    let report = attempts
        .start(lease.clone(), "fetch", args)
        .await
        .expect("join");
    let err = answer(&report).expect_err("stalled");
    assert!(err.contains("ConnectionReadTimeout"), "{err}");
    assert_eq!(counted(), Some(2));
    assert_eq!(
        store.journal(&lease).await.expect("journal"),
        vec![],
        "nothing recorded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_address_needs_an_entry_naming_its_port() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let url = json!({"url": format!("{}/template", server.base())});
    // The recorder plays the server itself.
    component.engine().outbound().listening_on(server.addr);
    let any_port = grant(&["http://127.0.0.1:*"]);
    let r = call(&component, Some(any_port), url.clone(), Arc::new(Plain)).await;
    let err = answer(&r).expect_err("its own address");
    assert!(err.contains("DestinationIpProhibited"), "{err}");
    assert_eq!(refused(&component, "own_address"), 1);
    let its_port = grant(&[&server.base()]);
    let r = call(&component, Some(its_port), url, Arc::new(Plain)).await;
    assert_eq!(answer(&r).expect("named to the port")["status"], 200);
}

/// The secret the host injects in the tests below: mixed case, so an echo into a header
/// name (which the transport lower-cases) does not hold it as it was sent.
const REFLECTED: &str = "Sk_Live_Reflected_0123456789";

/// A grant for `server` whose requests carry [`REFLECTED`] in `x-api-key`, added by the host.
fn injecting(server: &HttpRecorder) -> HttpGrant {
    let mut g = injecting_at(&server.base(), "x-api-key", REFLECTED);
    g.scrub = vec![Secret::new(REFLECTED)];
    g
}

/// `fetch_sdk` of `path` on `server` under `g`, with the guest's `headers`: its answer
/// (status, headers, body) or its error.
async fn fetch_sdk(
    component: &Component,
    g: &HttpGrant,
    server: &HttpRecorder,
    path: &str,
    headers: Value,
) -> Result<Value, String> {
    let args = json!({"url": format!("{}{path}", server.base()), "headers": headers});
    let exec = granted(
        "fetch_sdk",
        args,
        Some(Arc::new(g.clone())),
        Arc::new(Plain),
    );
    answer(&component.execute(exec).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_secret_does_not_come_back_compressed() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let g = injecting(&server);
    // The guest asks for gzip, which it could inflate itself past an exact-match scrubber:
    // the host asks for the plain body instead, and scrubs it.
    let gzip = json!({"accept-encoding": "gzip"});
    let out = fetch_sdk(&component, &g, &server, "/headers", gzip.clone())
        .await
        .expect("fetched");
    assert_eq!(server.seen()[0].header("accept-encoding"), Some("identity"));
    let body = out["body"].as_str().expect("text");
    assert!(body.contains("x-api-key: [redacted]"), "{body}");
    assert!(
        !out["headers"].to_string().contains("content-encoding"),
        "{out}"
    );
    // A server that encodes whatever it is asked: the response is refused, not handed over.
    let err = fetch_sdk(&component, &g, &server, "/gzip/headers", gzip)
        .await
        .expect_err("an encoded response");
    assert!(err.contains("gzip") && err.contains("encoded"), "{err}");
    assert_eq!(refused_of(&component, "fetch_sdk", "encoded_response"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_secret_does_not_come_back_in_base64_or_in_a_header_name() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let g = injecting(&server);
    let out = fetch_sdk(&component, &g, &server, "/base64/headers", json!({}))
        .await
        .expect("fetched");
    let body = out["body"].as_str().expect("text");
    assert!(body.contains("[redacted]"), "{body}");
    // Wherever the secret fell in the echo, the characters it alone decides are gone.
    for k in 0..3 {
        let encoded = base64(format!("{}{REFLECTED}", &"ab"[..k]).as_bytes());
        let core = &encoded[4..encoded.len() - 4];
        assert!(!body.contains(core), "alignment {k}: {body}");
    }

    let out = fetch_sdk(&component, &g, &server, "/header-names", json!({}))
        .await
        .expect("fetched");
    let names: Vec<&str> = out["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .filter_map(|h| h[0].as_str())
        .collect();
    assert!(names.contains(&"x-echo-redacted"), "{names:?}");
    let lower = REFLECTED.to_ascii_lowercase();
    assert!(!names.iter().any(|n| n.contains(&lower)), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_secret_cannot_be_read_back_in_pieces() {
    let component = outbound().await;
    let server = HttpRecorder::start().await;
    let g = injecting(&server);
    // Ten bytes at a time, each piece too short for a scrubber to recognise.
    for from in (0..60).step_by(10) {
        let range = json!({"range": format!("bytes={from}-{}", from + 9)});
        let err = fetch_sdk(&component, &g, &server, "/headers", range)
            .await
            .expect_err("a range of a request carrying a secret");
        assert!(
            err.contains("HttpRequestDenied") && err.contains("Range header"),
            "{err}"
        );
    }
    assert_eq!(server.seen().len(), 0, "no piece was asked for");
    assert_eq!(refused_of(&component, "fetch_sdk", "range"), 6);
    // A server that answers with a piece unasked.
    let err = fetch_sdk(&component, &g, &server, "/piece?from=10&len=10", json!({}))
        .await
        .expect_err("a partial response");
    assert!(err.contains("partial"), "{err}");
    assert_eq!(refused_of(&component, "fetch_sdk", "partial_response"), 1);
    // Without an injected secret, ranges are the guest's business.
    let plain = grant(&[&server.base()]);
    let out = fetch_sdk(
        &component,
        &plain,
        &server,
        "/headers",
        json!({"range": "bytes=0-3"}),
    )
    .await
    .expect("a range");
    assert_eq!(out["status"], 206);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflection_is_journaled_scrubbed_and_replayed_scrubbed() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, file, clock) = redb_on_manual_clock(&dir);
    let server = HttpRecorder::start().await;
    let attempts = Attempts::new(outbound().await, store.clone(), injecting(&server));
    let args = json!({"url": format!("{}/headers", server.base()), "headers": {"accept-encoding": "gzip"}});
    let (id, first) = attempts.claimed("fetch_sdk", &args).await;
    let report = attempts
        .start(first.clone(), "fetch_sdk", args.clone())
        .await
        .expect("join");
    let seen = answer(&report).expect("fetched")["body"].clone();
    assert!(
        seen.as_str()
            .is_some_and(|b| b.contains("x-api-key: [redacted]")),
        "{seen}"
    );
    let journal = store.journal(&first).await.expect("journal");
    assert_eq!(journal.len(), 1);
    let recorded = String::from_utf8_lossy(&journal[0].response.body).into_owned();
    assert!(recorded.contains("x-api-key: [redacted]"), "{recorded}");
    assert!(
        !journal[0]
            .response
            .headers
            .iter()
            .any(|(n, _)| n == "content-encoding"),
        "{:?}",
        journal[0].response.headers
    );

    // The attempt is lost; the next one is answered from the journal, scrubbed as before.
    clock.advance(LEASE_MS);
    let second = claim(&*store, &id, "node-b").await;
    let report = attempts
        .start(second.clone(), "fetch_sdk", args)
        .await
        .expect("join");
    assert_eq!(answer(&report).expect("replayed")["body"], seen);
    assert_eq!(server.seen().len(), 1, "the replay sent nothing");
    let journal = store.journal(&second).await.expect("journal");
    assert!(!format!("{journal:?}").contains(REFLECTED));

    // A response the host cannot scrub is not recorded either.
    let args = json!({"url": format!("{}/gzip/headers", server.base())});
    let (_, lease) = attempts.claimed("fetch_sdk", &args).await;
    let report = attempts
        .start(lease.clone(), "fetch_sdk", args)
        .await
        .expect("join");
    answer(&report).expect_err("an encoded response");
    assert_eq!(store.journal(&lease).await.expect("journal"), vec![]);
    drop((attempts, store));
    absent_from_file(&file, REFLECTED);
}

/// A runner over `store` serving the outbound guest, its `fetch` tool granted `grant`.
async fn fetch_runner(store: &Arc<dyn Store>, grant: HttpGrant) -> snodo_runner::Runner {
    let component = outbound().await;
    let mut catalog = snodo_runner::Catalog::new()
        .with_component(&component)
        .expect("catalog");
    catalog.tool_mut("fetch").expect("fetch").grants = WasiGrants {
        http: Some(Arc::new(grant)),
        ..WasiGrants::default()
    };
    let options = snodo_runner::RunnerOptions {
        owner: "test".into(),
        poll_interval: Duration::from_millis(5),
        reap_interval: None,
        ..snodo_runner::RunnerOptions::default()
    };
    snodo_runner::Runner::start(
        store.clone(),
        Arc::new(catalog),
        options,
        Arc::new(snodo_runner::NoInstrumentation),
    )
}

/// A `fetch` task of tenant `acme` with `args` and a retry policy of `retries` retries
/// without delay, run to its end by `runner`.
async fn run_with_retries(
    store: &Arc<dyn Store>,
    runner: &snodo_runner::Runner,
    args: Value,
    retries: usize,
) -> snodo_core::model::Task {
    let id = TaskId::generate();
    let policy = snodo_core::model::RetryPolicy::fixed(0, retries).expect("policy");
    let work = snodo_runner::tool_call_work(&id, "fetch", args).with_retry_policy(policy);
    let new = snodo_core::store::NewTask::new(id, snodo_core::model::Scope::new("acme"), work);
    let id = store.create(new).await.expect("create").id;
    runner.submit(&id).await.expect("submit");
    common::await_stored(&**store, &id, "the task's end", |t| t.status.is_terminal()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_transient_answer_to_a_get_asks_again_and_completes() {
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let server = HttpRecorder::start().await;
    let runner = fetch_runner(&store, grant(&[&server.base()])).await;
    // The upstream answers 503 once, then 200; the tool asks for a retry on a 5xx.
    let args = json!({"url": format!("{}/flaky", server.base()), "retry_on_5xx": true});
    let t = run_with_retries(&store, &runner, args, 2).await;
    assert_eq!(t.status, TaskStatus::Completed, "{t:?}");
    assert_eq!((t.attempt, t.retry_count), (2, 1));
    let Some(snodo_core::model::Outcome::Result(result)) = &t.outcome else {
        panic!("a result: {t:?}");
    };
    assert_eq!(
        result["structuredContent"],
        json!({"status": 200, "body": "recovered"})
    );
    assert_eq!(server.count("GET", "/flaky"), 2, "the retry asked again");
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_answer_to_a_post_is_replayed_not_sent_again() {
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let server = HttpRecorder::start().await;
    let runner = fetch_runner(&store, grant(&[&server.base()])).await;
    let args = json!({
        "url": format!("{}/flaky", server.base()),
        "post": {"n": 1},
        "retry_on_5xx": true,
    });
    let t = run_with_retries(&store, &runner, args, 2).await;
    // The 503 was recorded: every retry replays it, and the POST went out once.
    assert_eq!(t.status, TaskStatus::Failed, "{t:?}");
    assert_eq!((t.attempt, t.retry_count), (3, 2));
    assert_eq!(
        server.count("POST", "/flaky"),
        1,
        "sent once, replayed since"
    );
    runner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_tried_again_in_an_attempt_takes_the_position_of_its_transient_answer() {
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let server = HttpRecorder::start().await;
    let attempts = Attempts::new(outbound().await, store.clone(), grant(&[&server.base()]));
    // The tool sends the same GET twice: a 503, then a 200.
    let args = json!({"url": format!("{}/flaky", server.base()), "repeat": 2});
    let (_, claimed) = attempts.claimed("fetch", &args).await;
    let report = attempts
        .start(claimed.clone(), "fetch", args)
        .await
        .expect("join");
    assert_eq!(answer(&report).expect("fetched")["status"], 200);
    assert_eq!(server.count("GET", "/flaky"), 2);
    // Only the 200 is recorded, at the first position: a replay that asks once finds it.
    let journal = store.journal(&claimed).await.expect("journal");
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!((journal[0].seq, journal[0].response.status), (0, 200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_answer_the_journal_has_no_room_for_is_not_sent() {
    let component = outbound().await;
    let store: Arc<dyn Store> = Arc::new(snodo_core::store::MemoryStore::new());
    let server = HttpRecorder::start().await;
    let url = format!("{}/template", server.base());
    let args = json!({"url": url, "repeat": 2});
    let id = common::create_tool_task(&*store, "fetch", args.clone()).await;
    let claimed = claim(&*store, &id, "node-a").await;
    // An earlier attempt recorded the first request's answer, 100 kB: the journal is
    // nearly full.
    let earlier = recorded_get(url.clone(), vec![b'x'; 100_000]);
    let bound = earlier.encode().len() as u64 + 200;
    store
        .journal_append(&claimed, &earlier, bound)
        .await
        .expect("append");
    let io = snodo_runner::TaskIo::new(
        store.clone(),
        claimed.clone(),
        json!({"elicitation": {}}),
        Arc::new(InputWaiters::new()),
    )
    .journal_bytes(bound);
    let g = Arc::new(grant(&[&server.base()]));
    let mut exec = granted("fetch", args, Some(g), Arc::new(io));
    exec.task_id = Some(id.to_string());
    let report = component.execute(exec).await;
    let err = answer(&report).expect_err("refused");
    for says in [
        "outbound limit journal_task_bytes",
        "outbound.journal_task_bytes",
        "tools.fetch.outbound.max_response_bytes",
        "not sent",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    // The first request was replayed and the second refused: the upstream saw neither.
    assert_eq!(server.seen().len(), 0);
    let limited = component.engine().outbound().counters().limited;
    assert_eq!(
        limited.get(&("fetch".to_owned(), "journal_task_bytes")),
        Some(&1)
    );
}
