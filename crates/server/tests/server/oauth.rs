//! The OAuth resource server against a real identity provider on a loopback port: the
//! Protected Resource Metadata, the challenges, every refusal of a token, key rotation,
//! introspection, scopes and the principal taken from claims.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use snodo_core::model::{Isolation, Principal};
use snodo_server::http::{App, HttpConfig, router_with};
use snodo_server::identity::ResourceServer;
use snodo_server::identity::oauth::{Clock, IntrospectionConfig, IssuerConfig, OAuthConfig};
use snodo_server::mcp::ScopePolicy;
use snodo_server::testing::idp::{self, TestIdp};
use tower::ServiceExt;

use super::{caps, common, fixtures, request_of, rpc, send};

const RESOURCE: &str = "https://mcp.example.com/mcp";
const STATIC: &str = "static-token-0123456789";

/// A clock the test moves by hand (Unix seconds).
fn manual_clock() -> (Clock, Arc<AtomicU64>) {
    let now = Arc::new(AtomicU64::new(idp::now()));
    let read = now.clone();
    (Arc::new(move || read.load(Ordering::SeqCst)), now)
}

fn issuer_of(idp: &TestIdp) -> IssuerConfig {
    IssuerConfig {
        // Discovered from the metadata: the jwks_uri is not configured.
        jwks_uri: None,
        introspection: Some(IntrospectionConfig {
            endpoint: None,
            client_id: idp::CLIENT_ID.into(),
            client_secret: idp::CLIENT_SECRET.into(),
            client_secret_env: None,
        }),
        ..IssuerConfig::new(idp.issuer(), "acme")
    }
}

struct Guarded {
    app: App,
    clock: Arc<AtomicU64>,
}

async fn guarded(
    idp: &TestIdp,
    scopes: ScopePolicy,
    tweak: impl FnOnce(&mut OAuthConfig),
) -> Guarded {
    let fixtures = fixtures().await;
    let catalog = common::catalog_of(&[&fixtures], Default::default());
    guarded_serving(idp, scopes, tweak, catalog).await
}

async fn guarded_serving(
    idp: &TestIdp,
    scopes: ScopePolicy,
    tweak: impl FnOnce(&mut OAuthConfig),
    catalog: snodo_runner::Catalog,
) -> Guarded {
    let (clock, now) = manual_clock();
    let mut config = OAuthConfig {
        resource: Some(RESOURCE.into()),
        issuers: vec![issuer_of(idp)],
        challenge_scopes: scopes.ordinary(),
        scopes_supported: scopes.all(),
        ..OAuthConfig::default()
    };
    tweak(&mut config);
    let statics = [(STATIC.to_owned(), Principal::new("machines", "ci"))];
    let rs = ResourceServer::new(config, &statics, clock).expect("a valid configuration");
    let (server, _) = common::mcp_server_scoped(catalog, Default::default(), scopes);
    let http = HttpConfig {
        oauth: true,
        ..HttpConfig::default()
    };
    Guarded {
        app: router_with(server, http, Arc::new(rs)),
        clock: now,
    }
}

fn with_bearer(body: &Value, token: &str) -> Request<Body> {
    let mut req = request_of(body);
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    req
}

fn list() -> Value {
    rpc(1, "tools/list", json!({}), caps(false))
}

/// The status, the `WWW-Authenticate` challenge and the body of `token`'s `body`.
async fn as_token(app: &App, body: &Value, token: &str) -> (StatusCode, String, Value) {
    let resp = app
        .clone()
        .oneshot(with_bearer(body, token))
        .await
        .expect("response");
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let status = resp.status();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        challenge,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn refused(app: &App, token: &str, why: &str) {
    let (status, challenge, body) = as_token(app, &list(), token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}: {body}");
    assert!(
        challenge.contains("error=\"invalid_token\""),
        "{why}: {challenge}"
    );
    assert!(
        challenge.contains(
            "resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""
        ),
        "{why}: {challenge}"
    );
}

async fn accepted(app: &App, token: &str, why: &str) {
    let (status, _, body) = as_token(app, &list(), token).await;
    assert_eq!(status, StatusCode::OK, "{why}: {body}");
}

async fn get(app: &App, path: &str, host: &str) -> (StatusCode, Value) {
    let req = Request::get(path)
        .header("host", host)
        .body(Body::empty())
        .expect("request");
    let (s, v, _) = send(app, req).await;
    (s, v)
}

#[tokio::test]
async fn the_protected_resource_metadata_is_served_at_both_well_known_paths() {
    let idp = TestIdp::start().await;
    let scopes = ScopePolicy {
        tools_call: vec!["tools:call".into()],
        admin: vec!["admin".into()],
        ..ScopePolicy::default()
    };
    let g = guarded(&idp, scopes, |_| {}).await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (s, doc) = get(&g.app, path, "localhost").await;
        assert_eq!(s, StatusCode::OK, "{path}");
        assert_eq!(doc["resource"], RESOURCE);
        assert_eq!(doc["authorization_servers"], json!([idp.issuer()]));
        assert_eq!(doc["scopes_supported"], json!(["tools:call", "admin"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    let (s, _) = get(
        &g.app,
        "/.well-known/oauth-protected-resource/other",
        "localhost",
    )
    .await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "another resource's metadata is not here"
    );
    let (s, _) = get(
        &g.app,
        "/.well-known/oauth-protected-resource",
        "evil.example",
    )
    .await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "the Host check guards the metadata too"
    );
    // Without OAuth there is no metadata.
    let (s, _) = get(
        &super::app(vec![]).await,
        "/.well-known/oauth-protected-resource",
        "localhost",
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_request_without_a_token_is_challenged_toward_the_metadata() {
    let idp = TestIdp::start().await;
    let scopes = ScopePolicy {
        mcp: vec!["mcp".into()],
        tools_call: vec!["tools:call".into()],
        admin: vec!["admin".into()],
        ..ScopePolicy::default()
    };
    let g = guarded(&idp, scopes, |_| {}).await;
    let resp = g
        .app
        .clone()
        .oneshot(request_of(&list()))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let challenge = resp.headers()["www-authenticate"].to_str().expect("ascii");
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"mcp tools:call\"",
        "ordinary use's scopes, not admin"
    );
}

#[tokio::test]
async fn tokens_of_each_algorithm_are_accepted_and_every_bad_one_is_refused() {
    let idp = TestIdp::start().await;
    let g = guarded(&idp, ScopePolicy::default(), |_| {}).await;
    let good = idp.claims(RESOURCE, "ada", "");
    accepted(&g.app, &idp.sign("RS256", &good), "RS256").await;
    accepted(&g.app, &idp.sign("ES256", &good), "ES256").await;
    accepted(&g.app, STATIC, "a static token beside OAuth").await;
    let mut listed = good.clone();
    listed["aud"] = json!(["https://other.example.com", RESOURCE]);
    accepted(
        &g.app,
        &idp.sign("RS256", &listed),
        "the resource among several audiences",
    )
    .await;
    let now = idp::now();
    let mut late = good.clone();
    late["exp"] = json!(now - 30);
    accepted(
        &g.app,
        &idp.sign("RS256", &late),
        "expired within the leeway",
    )
    .await;

    let with = |field: &str, value: Value| {
        let mut c = good.clone();
        c[field] = value;
        c
    };
    let without = |field: &str| {
        let mut c = good.clone();
        c.as_object_mut().expect("claims").remove(field);
        c
    };
    let cases = [
        (idp.sign("RS256", &with("exp", json!(now - 120))), "expired"),
        (idp.sign("RS256", &without("exp")), "without exp"),
        (
            idp.sign("RS256", &with("nbf", json!(now + 600))),
            "not valid yet",
        ),
        (
            idp.sign(
                "RS256",
                &with("aud", json!("https://other.example.com/mcp")),
            ),
            "another resource's audience",
        ),
        (idp.sign("RS256", &without("aud")), "without an audience"),
        (
            idp.sign("ES256", &with("iss", json!("https://evil.example.com"))),
            "an untrusted issuer",
        ),
        (
            idp.sign("RS256", &with("sub", json!(""))),
            "an empty subject",
        ),
    ];
    for (token, why) in &cases {
        refused(&g.app, token, why).await;
    }

    // Another provider's key, claiming this issuer: its kid is unknown here.
    let other = TestIdp::start().await;
    let mut forged = good.clone();
    forged["iss"] = json!(idp.issuer());
    refused(
        &g.app,
        &other.sign("RS256", &forged),
        "signed by a key the issuer does not hold",
    )
    .await;

    // `alg: none`, and HS256 keyed with the issuer's public RSA key.
    let none = TestIdp::unsigned(&json!({"alg": "none", "typ": "JWT"}), &good);
    refused(&g.app, &none, "alg none").await;
    let public = idp.jwks_document()["keys"][0].to_string();
    let hmac = TestIdp::sign_hmac(
        &json!({"alg": "HS256", "kid": "rsa-1"}),
        &good,
        public.as_bytes(),
    );
    refused(&g.app, &hmac, "HS256 with the public key").await;
    let n = idp.jwks_document()["keys"][0]["n"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let hmac = TestIdp::sign_hmac(
        &json!({"alg": "HS256", "kid": "rsa-1"}),
        &good,
        n.as_bytes(),
    );
    refused(&g.app, &hmac, "HS256 with the modulus").await;

    // A valid signature over other claims: the payload swapped after signing.
    let token = idp.sign("RS256", &good);
    let evil_claims = with("sub", json!("root"));
    let parts: Vec<&str> = token.split('.').collect();
    let swapped = format!(
        "{}.{}.{}",
        parts[0],
        base64_url(&evil_claims.to_string()),
        parts[2]
    );
    refused(&g.app, &swapped, "claims changed after signing").await;
    // Another token type (an ID token's) and critical extensions.
    refused(
        &g.app,
        &signed_with_header(&idp, json!({"typ": "id_token+jwt"}), &good),
        "an ID token's type",
    )
    .await;
    refused(
        &g.app,
        &signed_with_header(&idp, json!({"crit": ["exp"]}), &good),
        "critical header parameters",
    )
    .await;
    refused(
        &g.app,
        "not-a-jwt-and-not-active",
        "an opaque token introspection does not know",
    )
    .await;
}

fn base64_url(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

/// A token signed by the provider's current RSA key whose header has `extra` fields over
/// the usual ones.
fn signed_with_header(idp: &TestIdp, extra: Value, claims: &Value) -> String {
    let keys = idp.jwks_document();
    let kid = keys["keys"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["kty"] == "RSA"))
        .map(|k| k["kid"].clone())
        .expect("an RSA key");
    let mut header = json!({"alg": "RS256", "typ": "at+jwt", "kid": kid});
    for (k, v) in extra.as_object().expect("an object") {
        header[k] = v.clone();
    }
    idp.sign_with_header("RS256", &header, claims)
}

#[tokio::test]
async fn keys_rotate_and_unknown_kids_refresh_at_most_once_per_interval() {
    let idp = TestIdp::start().await;
    let g = guarded(&idp, ScopePolicy::default(), |_| {}).await;
    let good = idp.claims(RESOURCE, "ada", "");
    let before = idp.sign("RS256", &good);
    accepted(&g.app, &before, "the first token fetches the keys").await;
    assert_eq!(idp.jwks_fetches(), 1);

    // A flood of unknown kids within the interval fetches nothing.
    let unknown = signed_with_header(&idp, json!({"kid": "nobody"}), &good);
    for _ in 0..5 {
        refused(&g.app, &unknown, "an unknown kid").await;
    }
    assert_eq!(idp.jwks_fetches(), 1, "refreshes are rate-limited");

    // The provider rotates. Within the interval the new key is not fetched yet.
    let kids = idp.rotate();
    let after = idp.sign("RS256", &good);
    refused(
        &g.app,
        &after,
        "a new kid before the interval allows a refresh",
    )
    .await;
    assert_eq!(idp.jwks_fetches(), 1);
    // Past the interval, the new kid triggers one refresh and is accepted.
    g.clock.fetch_add(31, Ordering::SeqCst);
    accepted(&g.app, &after, "a new kid after rotation").await;
    assert_eq!(idp.jwks_fetches(), 2);
    assert!(kids.contains(&"rsa-2".to_owned()));
    // The retired key verifies nothing any more; asking again within the interval does not
    // fetch.
    refused(&g.app, &before, "a retired key").await;
    accepted(&g.app, &idp.sign("ES256", &good), "the new EC key").await;
    assert_eq!(idp.jwks_fetches(), 2);
    // An old key set is fetched again once it is jwks_max_age old.
    g.clock.fetch_add(3_600, Ordering::SeqCst);
    let fresh = idp.claims(RESOURCE, "ada", "");
    let mut fresh = fresh;
    fresh["exp"] = json!(idp::now() + 3_600 + 300);
    accepted(&g.app, &idp.sign("RS256", &fresh), "after the key set aged").await;
    assert_eq!(idp.jwks_fetches(), 3);
}

#[tokio::test]
async fn opaque_tokens_are_introspected_and_the_answers_cached() {
    let idp = TestIdp::start().await;
    let g = guarded(&idp, ScopePolicy::default(), |_| {}).await;
    let now = idp::now();
    let active = idp.opaque(json!({
        "active": true, "iss": idp.issuer(), "aud": RESOURCE, "sub": "ada",
        "scope": "mcp", "exp": now + 600,
    }));
    accepted(&g.app, &active, "an active token").await;
    accepted(&g.app, &active, "the same token again").await;
    assert_eq!(idp.introspections(), 1, "the answer is cached");
    g.clock.fetch_add(61, Ordering::SeqCst);
    accepted(&g.app, &active, "after the cache time").await;
    assert_eq!(
        idp.introspections(),
        2,
        "asked again once the cache time passed"
    );

    let inactive = idp.opaque(json!({"active": false}));
    refused(&g.app, &inactive, "introspection answering inactive").await;
    let elsewhere = idp.opaque(json!({
        "active": true, "iss": idp.issuer(), "aud": "https://other.example.com", "sub": "ada",
        "exp": now + 600,
    }));
    refused(&g.app, &elsewhere, "active, for another resource").await;
    let expired = idp.opaque(json!({
        "active": true, "iss": idp.issuer(), "aud": RESOURCE, "sub": "ada", "exp": now - 600,
    }));
    refused(&g.app, &expired, "active but expired").await;
}

/// Unknown opaque tokens cannot turn the server into an amplifier against the identity
/// provider: requests carrying the same token share one introspection, at most
/// `introspections_per_second` are sent per issuer (the rest are 503 naming the limit),
/// and a JWT in a padded encoding is refused without being sent anywhere.
#[tokio::test]
async fn introspection_is_shared_rate_limited_and_never_sent_a_jwt() {
    let idp = TestIdp::start().await;
    let g = guarded(&idp, ScopePolicy::default(), |c| {
        c.introspections_per_second = 3;
    })
    .await;
    let unknown = "an-unknown-opaque-token-0123456789";
    let body = list();
    let same: Vec<_> = (0..8).map(|_| as_token(&g.app, &body, unknown)).collect();
    for (status, _, body) in futures_util::future::join_all(same).await {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    assert_eq!(idp.introspections(), 1, "eight requests, one introspection");

    // Two more distinct tokens fill this second's budget of three; the next is 503.
    refused(&g.app, "another-unknown-token-0000000001", "unknown").await;
    refused(&g.app, "another-unknown-token-0000000002", "unknown").await;
    let (status, _, body) = as_token(&g.app, &list(), "another-unknown-token-0000000003").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body.to_string().contains("introspections_per_second"),
        "{body}"
    );
    assert_eq!(idp.introspections(), 3);
    // Answers already given are still served from the cache meanwhile.
    refused(&g.app, unknown, "cached").await;
    g.clock.fetch_add(1, Ordering::SeqCst);
    refused(
        &g.app,
        "another-unknown-token-0000000003",
        "the next second",
    )
    .await;
    assert_eq!(idp.introspections(), 4);

    // A padded JWT is a JWT: refused as one, not introspected.
    let jwt = idp.sign("RS256", &idp.claims(RESOURCE, "ada", ""));
    let mut parts: Vec<String> = jwt.split('.').map(str::to_owned).collect();
    parts[0].push_str("==");
    refused(&g.app, &parts.join("."), "a padded JWT").await;
    assert_eq!(idp.introspections(), 4, "nothing was sent for it");
}

/// A metadata document that cannot be fetched is not asked for on every request: the
/// next try waits a second, then two, and a success ends the backoff.
#[tokio::test]
async fn a_failed_metadata_fetch_backs_off() {
    let idp = TestIdp::start().await;
    idp.set_metadata_down(true);
    let g = guarded(&idp, ScopePolicy::default(), |_| {}).await;
    let down = |i: usize| format!("opaque-while-down-{i:020}");
    for i in 0..5 {
        let (status, _, body) = as_token(&g.app, &list(), &down(i)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    }
    let first = idp.metadata_fetches();
    assert!(
        (1..=2).contains(&first),
        "one try of each well-known path: {first}"
    );
    g.clock.fetch_add(1, Ordering::SeqCst);
    for i in 5..8 {
        let (status, _, _) = as_token(&g.app, &list(), &down(i)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        idp.metadata_fetches(),
        2 * first,
        "one more try after a second"
    );
    idp.set_metadata_down(false);
    g.clock.fetch_add(1, Ordering::SeqCst);
    let (status, _, _) = as_token(&g.app, &list(), &down(9)).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "the wait has doubled to two"
    );
    assert_eq!(idp.metadata_fetches(), 2 * first);
    g.clock.fetch_add(1, Ordering::SeqCst);
    let now = idp::now();
    let active = idp.opaque(json!({
        "active": true, "iss": idp.issuer(), "aud": RESOURCE, "sub": "ada",
        "scope": "mcp", "exp": now + 600,
    }));
    accepted(&g.app, &active, "the provider is back").await;
}

#[tokio::test]
async fn a_missing_scope_is_403_naming_every_scope_the_operation_needs() {
    let idp = TestIdp::start().await;
    let scopes = ScopePolicy {
        mcp: vec!["mcp".into()],
        tools_call: vec!["tools:call".into()],
        tools: vec![("gre*".into(), vec!["greeting".into()])],
        tasks_get: vec!["tasks:read".into()],
        ..ScopePolicy::default()
    };
    let g = guarded(&idp, scopes, |_| {}).await;
    let greet = rpc(
        2,
        "tools/call",
        json!({"name": "greet", "arguments": {"name": "x"}}),
        caps(false),
    );
    let token = |scope: &str| idp.sign("ES256", &idp.claims(RESOURCE, "ada", scope));

    let (s, _, _) = as_token(&g.app, &list(), &token("mcp")).await;
    assert_eq!(s, StatusCode::OK, "tools/list needs the base scope only");
    let (s, _, _) = as_token(&g.app, &list(), &token("other")).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "without the base scope");

    let (s, challenge, body) = as_token(&g.app, &greet, &token("mcp tools:call")).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
    assert!(
        challenge.starts_with("Bearer error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(
        challenge.contains("scope=\"mcp tools:call greeting\""),
        "{challenge}"
    );
    assert!(challenge.contains("resource_metadata="), "{challenge}");
    assert_eq!(body["id"], 2, "a JSON-RPC error for the request: {body}");

    let (s, _, body) = as_token(&g.app, &greet, &token("tools:call greeting mcp")).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert!(body["result"]["content"].is_array(), "{body}");

    let get = rpc(
        3,
        "tasks/get",
        json!({"taskId": "0".repeat(32)}),
        caps(true),
    );
    let (s, challenge, _) = as_token(&g.app, &get, &token("mcp tools:call")).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert!(
        challenge.contains("scope=\"mcp tasks:read\""),
        "{challenge}"
    );
    // A static token holds every scope.
    let (s, _, _) = as_token(&g.app, &greet, STATIC).await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn tenant_and_subject_come_from_the_configured_claims() {
    let idp = TestIdp::start().await;
    let by_org = |isolation: Isolation| {
        move |c: &mut OAuthConfig| {
            c.isolation = isolation;
            c.issuers[0].tenant_claim = Some("org.id".into());
            c.issuers[0].tenant = None;
        }
    };
    let person = |subject: &str, org: &str| {
        let mut c = idp.claims(RESOURCE, subject, "");
        c["org"] = json!({"id": org});
        idp.sign("RS256", &c)
    };
    let long = rpc(
        1,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
        caps(true),
    );
    for (isolation, colleague_sees) in
        [(Isolation::Tenant, true), (Isolation::TenantSubject, false)]
    {
        let g = guarded(&idp, ScopePolicy::default(), by_org(isolation)).await;
        let (s, _, v) = as_token(&g.app, &long, &person("ada", "acme")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let id = v["result"]["taskId"].as_str().expect("a task").to_owned();
        let get = rpc(2, "tasks/get", json!({"taskId": id}), caps(true));
        let (_, _, own) = as_token(&g.app, &get, &person("ada", "acme")).await;
        assert_eq!(own["result"]["taskId"], id.as_str(), "{own}");
        let (_, _, colleague) = as_token(&g.app, &get, &person("bob", "acme")).await;
        assert_eq!(
            colleague["result"]["taskId"] == id.as_str(),
            colleague_sees,
            "{isolation:?}: {colleague}"
        );
        let (_, _, stranger) = as_token(&g.app, &get, &person("ada", "globex")).await;
        assert!(
            stranger.get("error").is_some(),
            "another tenant never sees it: {stranger}"
        );
        let cancel = rpc(3, "tasks/cancel", json!({"taskId": id}), caps(true));
        let (s, _, _) = as_token(&g.app, &cancel, &person("ada", "acme")).await;
        assert_eq!(s, StatusCode::OK);
        // No tenant claim: refused.
        refused(
            &g.app,
            &idp.sign("RS256", &idp.claims(RESOURCE, "ada", "")),
            "no tenant claim",
        )
        .await;
    }
}

#[tokio::test]
async fn an_unreachable_identity_provider_is_503_not_a_refusal() {
    let idp = TestIdp::start().await;
    let token = idp.sign("RS256", &idp.claims(RESOURCE, "ada", ""));
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        l.local_addr().expect("addr")
    };
    let g = guarded(&idp, ScopePolicy::default(), |c| {
        c.issuers[0].jwks_uri = Some(format!("http://{closed}/jwks"));
    })
    .await;
    let (s, _, body) = as_token(&g.app, &list(), &token).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
}

/// The fixtures with `test_whoami` shown the `email` claim and retried once at once.
async fn whoami_catalog() -> snodo_runner::Catalog {
    let fixtures = fixtures().await;
    let mut catalog = snodo_runner::Catalog::new();
    for info in fixtures.tools() {
        let mut tool = snodo_runner::CatalogTool::new(fixtures.clone(), info.clone());
        if info.name == "test_whoami" {
            tool.claims = vec!["email".into()];
            tool.retry_policy = snodo_core::model::RetryPolicy::new([0]).expect("a policy");
        }
        catalog.add(tool).expect("unique tools");
    }
    catalog
}

#[tokio::test]
async fn the_caller_reaches_the_tool_the_same_on_every_attempt() {
    let idp = TestIdp::start().await;
    let g = guarded_serving(
        &idp,
        ScopePolicy::default(),
        |c| c.forward_claims = vec!["email".into(), "org".into()],
        whoami_catalog().await,
    )
    .await;
    let mut claims = idp.claims(RESOURCE, "ada", "mcp tools:call");
    claims["email"] = json!("ada@acme.example");
    claims["org"] = json!("research");
    let token = idp.sign("ES256", &claims);
    let expected = json!({
        "tenant": "acme", "subject": "ada", "scopes": ["mcp", "tools:call"],
        // `org` is forwarded, but this tool is shown `email` only.
        "claims": {"email": "ada@acme.example"},
    });
    let shown = |v: &Value| {
        let mut s = v["structuredContent"].clone();
        for k in ["attempt", "elicitation"] {
            s.as_object_mut().map(|o| o.remove(k));
        }
        s
    };
    let whoami = |id: i64, args: Value, tasks: bool| {
        rpc(
            id,
            "tools/call",
            json!({"name": "test_whoami", "arguments": args}),
            caps(tasks),
        )
    };

    // On the request path.
    let (s, _, v) = as_token(&g.app, &whoami(1, json!({}), false), &token).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(shown(&v["result"]), expected);
    assert_eq!(v["result"]["structuredContent"]["elicitation"], true);

    // As a task, from the second attempt: a fresh guest that had only the stored work.
    let (_, _, v) = as_token(&g.app, &whoami(2, json!({"retry": true}), true), &token).await;
    let id = v["result"]["taskId"].as_str().expect("a task").to_owned();
    let get = rpc(3, "tasks/get", json!({"taskId": id}), caps(true));
    let done = common::eventually("the task to complete", || async {
        let (_, _, v) = as_token(&g.app, &get, &token).await;
        (v["result"]["status"] == "completed").then(|| v["result"].clone())
    })
    .await;
    assert_eq!(done["result"]["structuredContent"]["attempt"], 2, "{done}");
    assert_eq!(shown(&done["result"]), expected);

    // A static token holds every scope and carries no claims.
    let (_, _, v) = as_token(&g.app, &whoami(4, json!({}), false), STATIC).await;
    assert_eq!(
        shown(&v["result"]),
        json!({"tenant": "machines", "subject": "ci", "scopes": null, "claims": {}})
    );
}

#[tokio::test]
async fn a_mode_rule_sees_the_caller_and_sets_ttl_and_poll_interval_within_bounds() {
    let idp = TestIdp::start().await;
    // slow_compute's configured TTL, three hours, is the ceiling of what its rule may set.
    let fixtures = fixtures().await;
    let mut catalog = snodo_runner::Catalog::new();
    for info in fixtures.tools() {
        let mut tool = snodo_runner::CatalogTool::new(fixtures.clone(), info.clone());
        tool.ttl_ms = Some(10_800_000);
        catalog.add(tool).expect("unique tools");
    }
    let g = guarded_serving(&idp, ScopePolicy::default(), |_| {}, catalog).await;
    let slow = rpc(
        1,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
        caps(true),
    );
    let task = |subject: &str| {
        let token = idp.sign("RS256", &idp.claims(RESOURCE, subject, ""));
        let app = g.app.clone();
        let slow = slow.clone();
        async move {
            let (_, _, v) = as_token(&app, &slow, &token).await;
            let id = v["result"]["taskId"].as_str().expect("a task").to_owned();
            let get = rpc(2, "tasks/get", json!({"taskId": id}), caps(true));
            let (_, _, t) = as_token(&app, &get, &token).await;
            let cancel = rpc(3, "tasks/cancel", json!({"taskId": id}), caps(true));
            as_token(&app, &cancel, &token).await;
            t["result"].clone()
        }
    };
    // The rule keeps a batch caller's task two hours and asks for a 10 ms poll, which the
    // host raises to its least interval (100 ms).
    let batch = task("batch-nightly").await;
    assert_eq!(
        (batch["ttlMs"].clone(), batch["pollIntervalMs"].clone()),
        (json!(7_200_000), json!(100)),
        "{batch}"
    );
    // Anyone else gets the tool's configured TTL and poll interval.
    let person = task("ada").await;
    assert_eq!(
        (person["ttlMs"].clone(), person["pollIntervalMs"].clone()),
        (json!(10_800_000), json!(1_000)),
        "{person}"
    );
}

/// A console of a server guarded by `idp`, whose sign-in asks the provider for `scopes`.
async fn console_of(idp: &TestIdp, scopes: &[&str]) -> App {
    let fixtures = fixtures().await;
    let catalog = common::catalog_of(&[&fixtures], Default::default());
    let config = OAuthConfig {
        resource: Some(RESOURCE.into()),
        issuers: vec![issuer_of(idp)],
        ..OAuthConfig::default()
    };
    let rs = ResourceServer::new(config, &[], snodo_server::identity::oauth::system_clock())
        .expect("a valid configuration");
    let (server, _) = common::mcp_server(catalog, Default::default());
    let http = HttpConfig {
        oauth: true,
        // Served under its public name, as behind a proxy.
        allowed_hosts: Vec::new(),
        admin: snodo_server::admin::AdminConfig {
            scopes: vec!["admin".into()],
            session_ms: 3_600_000,
            sign_in: Some(snodo_server::admin::SignIn {
                issuer: idp.issuer().into(),
                client_id: idp::CLIENT_ID.into(),
                client_secret_env: None,
                client_secret: Some(idp::CLIENT_SECRET.into()),
                scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
                redirect_uri: None,
            }),
            ..Default::default()
        },
        ..HttpConfig::default()
    };
    snodo_server::http::router_oauth(server, http, Arc::new(rs))
}

/// `GET path` on the console with `cookies`: the status, the headers and the body.
async fn console_get(
    app: &App,
    path: &str,
    cookies: &[String],
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut b = Request::get(path).header("host", "mcp.example.com");
    if !cookies.is_empty() {
        b = b.header("cookie", cookies.join("; "));
    }
    let resp = app
        .clone()
        .oneshot(b.body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let (parts, body) = resp.into_parts();
    let bytes = http_body_util::BodyExt::collect(body)
        .await
        .expect("body")
        .to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// The CSRF token of the first form on a console page.
fn page_csrf(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF token");
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').expect("the value's end")].to_owned()
}

/// The `name=value` of every cookie a response sets.
fn set_cookies(h: &axum::http::HeaderMap) -> Vec<String> {
    h.get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .filter(|kv| !kv.ends_with('='))
        .map(str::to_owned)
        .collect()
}

/// The console's sign-in through the identity provider: the authorization code flow with
/// PKCE, its state bound to the browser, and an operator only with the admin scope.
#[tokio::test]
async fn the_console_signs_in_through_the_identity_provider() {
    let idp = TestIdp::start().await;
    let app = console_of(&idp, &[]).await;
    let (s, _, page) = console_get(&app, "/console/login?next=/console/tasks", &[]).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        page.contains("/console/oauth/start?next=/console/tasks"),
        "{page}"
    );

    // Start: to the provider, with PKCE (S256), the state, the admin scope and this resource.
    let (s, h, _) = console_get(&app, "/console/oauth/start?next=/console/tasks", &[]).await;
    assert_eq!(s, StatusCode::SEE_OTHER);
    let to = h["location"].to_str().expect("location").to_owned();
    assert!(
        to.starts_with(&format!("{}/authorize?", idp.issuer())),
        "{to}"
    );
    for part in [
        "response_type=code",
        "code_challenge_method=S256",
        "scope=admin",
        "resource=https%3A%2F%2Fmcp.example.com%2Fmcp",
        "redirect_uri=https%3A%2F%2Fmcp.example.com%2Fconsole%2Foauth%2Fcallback",
    ] {
        assert!(to.contains(part), "{part} in {to}");
    }
    let pending = set_cookies(&h);
    assert_eq!(pending.len(), 1);
    let pending_attrs = h["set-cookie"].to_str().expect("cookie").to_owned();
    assert!(
        pending_attrs.contains("HttpOnly")
            && pending_attrs.contains("SameSite=Lax")
            && pending_attrs.contains("Path=/console/oauth"),
        "{pending_attrs}"
    );

    // The provider approves and sends the browser back with a code.
    let back = idp.approve(&to).expect("approved");
    let callback = back
        .strip_prefix("https://mcp.example.com")
        .expect("to the console");

    // Without the browser's pending cookie, or with another state, nothing is signed in.
    let (s, _, _) = console_get(&app, callback, &[]).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let forged = callback.replace("state=", "state=x");
    let (s, _, _) = console_get(&app, &forged, &pending).await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    // The real callback: a session, and a page that moves on to where the sign-in began.
    let (s, h, page) = console_get(&app, callback, &pending).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert!(page.contains("url=/console/tasks"), "{page}");
    let session = set_cookies(&h);
    assert_eq!(session.len(), 1, "{session:?}");
    // Served as https://mcp.example.com: the cookie is Secure, host-only, on every path.
    assert!(
        session[0].starts_with("__Host-snodo_console="),
        "{session:?}"
    );
    let attrs: Vec<&str> = h
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter(|v| v.starts_with("__Host-"))
        .collect();
    assert!(
        attrs[0].contains("; Secure") && attrs[0].contains("Path=/;"),
        "{attrs:?}"
    );
    let (s, _, page) = console_get(&app, "/console/tasks", &session).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        page.contains(idp::USER),
        "the provider's user is the operator: {page}"
    );
    // A notice is chosen by its code; other words in the query are not shown.
    let long = rpc(
        1,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
        caps(true),
    );
    let ada = idp.sign("RS256", &idp.claims(RESOURCE, idp::USER, ""));
    let (s, _, v) = as_token(&app, &long, &ada).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let id = v["result"]["taskId"].as_str().expect("a task").to_owned();
    let task_page = |q: &str| {
        let path = format!("/console/tasks/{id}?{q}");
        let session = session.clone();
        let app = app.clone();
        async move { console_get(&app, &path, &session).await }
    };
    let (s, _, page) = task_page("done=cancelled").await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert!(page.contains("Cancelled."), "{page}");
    let (_, _, page) = task_page("done=Call%20555-0100%20now&error=Your%20session%20expired").await;
    assert!(
        !page.contains("555-0100") && !page.contains("session expired"),
        "{page}"
    );

    // Signing out ends the session on the server: the old cookie no longer works.
    let csrf = page_csrf(&page);
    let out = Request::post("/console/logout")
        .header("host", "mcp.example.com")
        .header("origin", "https://mcp.example.com")
        .header("cookie", session.join("; "))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={csrf}")))
        .expect("request");
    let resp = app.clone().oneshot(out).await.expect("response");
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let (s, h, _) = console_get(&app, "/console/tasks", &session).await;
    assert_eq!(s, StatusCode::SEE_OTHER, "a signed-out session is refused");
    assert!(
        h["location"]
            .to_str()
            .expect("location")
            .starts_with("/console/login")
    );

    // A code is redeemed once.
    let (s, _, _) = console_get(&app, callback, &pending).await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    // A user the provider grants no admin scope is no operator.
    let plain = console_of(&idp, &["mcp"]).await;
    let (_, h, _) = console_get(&plain, "/console/oauth/start", &[]).await;
    let to = h["location"].to_str().expect("location").to_owned();
    let pending = set_cookies(&h);
    let back = idp.approve(&to).expect("approved");
    let callback = back
        .strip_prefix("https://mcp.example.com")
        .expect("to the console");
    let (s, h, page) = console_get(&plain, callback, &pending).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{page}");
    assert!(set_cookies(&h).is_empty());
}
