//! A test identity provider: an OAuth authorization server on a loopback port that signs
//! RS256 and ES256 access tokens with keys it generates, serves its JWK Set and its
//! metadata (RFC 8414 and OpenID Connect discovery), answers introspection (RFC 7662),
//! client-credentials token requests and the authorization code flow with PKCE (every
//! authorization is approved for [`USER`]), and rotates its keys on demand. Tests also use it to
//! forge the tokens a resource server must refuse.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use parking_lot::Mutex;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use serde_json::{Value, json};

/// The client the provider knows for introspection and client credentials.
pub const CLIENT_ID: &str = "snodo-test-client";
/// Its secret.
pub const CLIENT_SECRET: &str = "snodo-test-secret";
/// The user every authorization request is approved for.
pub const USER: &str = "ada";

/// An authorization code not redeemed yet: what it was issued for.
struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    scope: String,
    resource: String,
}

enum Pair {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

/// One signing key and its public JWK.
struct SigningKey {
    kid: String,
    pair: Pair,
    jwk: Value,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn rsa_key(kid: &str) -> SigningKey {
    use rsa::pkcs8::EncodePrivateKey;
    use rsa::traits::PublicKeyParts;
    let private =
        rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("an RSA key is generated");
    let der = private.to_pkcs8_der().expect("the key encodes");
    let pair = RsaKeyPair::from_pkcs8(der.as_bytes()).expect("ring reads the key");
    let jwk = json!({
        "kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
        "n": b64(&private.n().to_bytes_be()),
        "e": b64(&private.e().to_bytes_be()),
    });
    SigningKey {
        kid: kid.into(),
        pair: Pair::Rsa(pair),
        jwk,
    }
}

fn ec_key(kid: &str) -> SigningKey {
    let rng = SystemRandom::new();
    let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("an EC key is generated");
    let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("ring reads the key");
    let point = pair.public_key().as_ref();
    let jwk = json!({
        "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
        "x": b64(&point[1..33]), "y": b64(&point[33..65]),
    });
    SigningKey {
        kid: kid.into(),
        pair: Pair::Ec(pair),
        jwk,
    }
}

struct Inner {
    issuer: String,
    keys: Mutex<Vec<SigningKey>>,
    generation: AtomicUsize,
    jwks_fetches: AtomicUsize,
    introspections: AtomicUsize,
    metadata_fetches: AtomicUsize,
    /// Whether the metadata documents answer 503.
    metadata_down: std::sync::atomic::AtomicBool,
    /// Opaque tokens and what introspection answers for them.
    opaque: Mutex<HashMap<String, Value>>,
    /// Authorization codes issued and not redeemed.
    codes: Mutex<HashMap<String, Grant>>,
}

impl Inner {
    /// Claims of a valid token for `audience`: this issuer, `sub`, `scope`, five minutes
    /// to live. The token endpoint issues these; tests forge variations of them.
    fn claims(&self, audience: &str, subject: &str, scope: &str) -> Value {
        let now = now();
        json!({
            "iss": self.issuer, "aud": audience, "sub": subject, "scope": scope,
            "iat": now, "nbf": now, "exp": now + 300, "client_id": CLIENT_ID,
        })
    }

    /// `claims` signed with the current key for `alg` (`RS256` or `ES256`), under `header`
    /// or, without one, an access token's header naming the key.
    fn sign(&self, alg: &str, header: Option<&Value>, claims: &Value) -> String {
        let keys = self.keys.lock();
        let want_rsa = alg == "RS256";
        let key = keys
            .iter()
            .find(|k| matches!(k.pair, Pair::Rsa(_)) == want_rsa)
            .expect("a key of that kind");
        match header {
            Some(header) => sign_with(key, header, claims),
            None => sign_with(
                key,
                &json!({"alg": alg, "typ": "at+jwt", "kid": key.kid}),
                claims,
            ),
        }
    }
}

/// A running test identity provider; it stops when dropped.
pub struct TestIdp {
    inner: Arc<Inner>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestIdp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Unix seconds now.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl TestIdp {
    /// Starts a provider on a free loopback port with an RS256 and an ES256 key.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let inner = Arc::new(Inner {
            issuer: format!("http://{addr}"),
            keys: Mutex::new(vec![rsa_key("rsa-1"), ec_key("ec-1")]),
            generation: AtomicUsize::new(1),
            jwks_fetches: AtomicUsize::new(0),
            introspections: AtomicUsize::new(0),
            metadata_fetches: AtomicUsize::new(0),
            metadata_down: std::sync::atomic::AtomicBool::new(false),
            opaque: Mutex::new(HashMap::new()),
            codes: Mutex::new(HashMap::new()),
        });
        let routes = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/.well-known/openid-configuration", get(metadata))
            .route("/jwks", get(jwks))
            .route("/introspect", post(introspect))
            .route("/token", post(token))
            .route("/authorize", get(authorize))
            .with_state(inner.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, routes).await;
        });
        Self { inner, server }
    }

    /// Approves the authorization request `url` (this provider's `/authorize` with its query)
    /// for [`USER`], as a browser following it would: the redirect back to the client, with
    /// a code and the request's state. `Err` for a request the provider refuses.
    pub fn approve(&self, url: &str) -> Result<String, String> {
        let query = url.split_once('?').map_or("", |(_, q)| q);
        let params: HashMap<String, String> = query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (decode(k), decode(v)))
            .collect();
        approve(&self.inner, &params)
    }

    /// The issuer identifier (`http://127.0.0.1:PORT`).
    pub fn issuer(&self) -> &str {
        &self.inner.issuer
    }

    /// The JWK Set's URL.
    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.inner.issuer)
    }

    /// The introspection endpoint.
    pub fn introspection_endpoint(&self) -> String {
        format!("{}/introspect", self.inner.issuer)
    }

    /// How many times the key set was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.inner.jwks_fetches.load(Ordering::SeqCst)
    }

    /// How many times a metadata document was asked for.
    pub fn metadata_fetches(&self) -> usize {
        self.inner.metadata_fetches.load(Ordering::SeqCst)
    }

    /// Makes the metadata documents answer 503 (`true`) or serve again.
    pub fn set_metadata_down(&self, down: bool) {
        self.inner.metadata_down.store(down, Ordering::SeqCst);
    }

    /// How many introspection requests were answered.
    pub fn introspections(&self) -> usize {
        self.inner.introspections.load(Ordering::SeqCst)
    }

    /// Claims of a valid token for `audience`: this issuer, `sub`, `scope`, five minutes
    /// to live.
    pub fn claims(&self, audience: &str, subject: &str, scope: &str) -> Value {
        self.inner.claims(audience, subject, scope)
    }

    /// A token of `claims` signed with the current key for `alg` (`RS256` or `ES256`).
    pub fn sign(&self, alg: &str, claims: &Value) -> String {
        self.inner.sign(alg, None, claims)
    }

    /// A token with this `header` (whose `kid` picks nothing: the key is the current one
    /// for `alg`) and `claims`, signed.
    pub fn sign_with_header(&self, alg: &str, header: &Value, claims: &Value) -> String {
        self.inner.sign(alg, Some(header), claims)
    }

    /// A token with this `header` and `claims` and a signature made with `hmac_key` under
    /// HMAC-SHA256 (for refusals: HS256 signed with a public key).
    pub fn sign_hmac(header: &Value, claims: &Value, hmac_key: &[u8]) -> String {
        let input = signing_input(header, claims);
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, hmac_key);
        let tag = ring::hmac::sign(&key, input.as_bytes());
        format!("{input}.{}", b64(tag.as_ref()))
    }

    /// A token with this `header` and `claims` and no signature (`alg: none`).
    pub fn unsigned(header: &Value, claims: &Value) -> String {
        format!("{}.", signing_input(header, claims))
    }

    /// The current public key set, as served.
    pub fn jwks_document(&self) -> Value {
        json!({"keys": self.inner.keys.lock().iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
    }

    /// Replaces every key with new ones (new kids); the old keys are no longer served.
    /// Returns the new kids.
    pub fn rotate(&self) -> Vec<String> {
        let g = self.inner.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let fresh = vec![rsa_key(&format!("rsa-{g}")), ec_key(&format!("ec-{g}"))];
        let kids = fresh.iter().map(|k| k.kid.clone()).collect();
        *self.inner.keys.lock() = fresh;
        kids
    }

    /// An opaque token whose introspection answers `answer`.
    pub fn opaque(&self, answer: Value) -> String {
        let token = format!("opaque-{}", b64(&rand_bytes()));
        self.inner.opaque.lock().insert(token.clone(), answer);
        token
    }
}

fn rand_bytes() -> [u8; 18] {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 18];
    SystemRandom::new().fill(&mut b).expect("random bytes");
    b
}

fn signing_input(header: &Value, claims: &Value) -> String {
    format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

fn sign_with(key: &SigningKey, header: &Value, claims: &Value) -> String {
    let input = signing_input(header, claims);
    let rng = SystemRandom::new();
    let sig = match &key.pair {
        Pair::Rsa(pair) => {
            let mut sig = vec![0; pair.public().modulus_len()];
            pair.sign(
                &signature::RSA_PKCS1_SHA256,
                &rng,
                input.as_bytes(),
                &mut sig,
            )
            .expect("RSA signs");
            sig
        }
        Pair::Ec(pair) => pair
            .sign(&rng, input.as_bytes())
            .expect("ECDSA signs")
            .as_ref()
            .to_vec(),
    };
    format!("{input}.{}", b64(&sig))
}

/// Percent-decodes a query component (`+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Checks an authorization request and issues its code: the redirect back to the client.
fn approve(idp: &Inner, p: &HashMap<String, String>) -> Result<String, String> {
    let get = |k: &str| p.get(k).cloned().ok_or_else(|| format!("no {k}"));
    if get("response_type")? != "code" {
        return Err("response_type must be code".into());
    }
    if get("client_id")? != CLIENT_ID {
        return Err("unknown client".into());
    }
    if get("code_challenge_method")? != "S256" {
        return Err("PKCE with S256 is required".into());
    }
    let redirect_uri = get("redirect_uri")?;
    let state = get("state")?;
    let code = b64(&snodo_core::ids::random_bytes::<16>());
    idp.codes.lock().insert(
        code.clone(),
        Grant {
            client_id: CLIENT_ID.into(),
            redirect_uri: redirect_uri.clone(),
            challenge: get("code_challenge")?,
            scope: p.get("scope").cloned().unwrap_or_default(),
            resource: get("resource")?,
        },
    );
    let sep = if redirect_uri.contains('?') { '&' } else { '?' };
    Ok(format!(
        "{redirect_uri}{sep}code={code}&state={}",
        crate::identity::oauth::form_encode(&state)
    ))
}

/// `/authorize`: approved at once for [`USER`] (a browser is redirected back).
async fn authorize(
    State(idp): State<Arc<Inner>>,
    axum::extract::Query(params): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    match approve(&idp, &params) {
        Ok(back) => (StatusCode::FOUND, [("location", back)]).into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

/// The authorization code grant: the code once, for the client it was issued to, with the
/// same redirect URI and the verifier of its challenge.
fn redeem(idp: &Inner, form: &HashMap<String, String>) -> Result<(String, String), String> {
    let code = form.get("code").ok_or("no code")?;
    let grant = idp
        .codes
        .lock()
        .remove(code)
        .ok_or("an unknown or used code")?;
    if form.get("redirect_uri") != Some(&grant.redirect_uri) {
        return Err("the redirect_uri differs from the authorization request's".into());
    }
    let verifier = form.get("code_verifier").ok_or("no code_verifier")?;
    let digest = ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes());
    if b64(digest.as_ref()) != grant.challenge {
        return Err("the code_verifier does not match the challenge".into());
    }
    let _ = grant.client_id;
    Ok((grant.resource, grant.scope))
}

async fn metadata(State(idp): State<Arc<Inner>>) -> Response {
    idp.metadata_fetches.fetch_add(1, Ordering::SeqCst);
    if idp.metadata_down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let iss = &idp.issuer;
    axum::Json(json!({
        "issuer": iss,
        "jwks_uri": format!("{iss}/jwks"),
        "token_endpoint": format!("{iss}/token"),
        "introspection_endpoint": format!("{iss}/introspect"),
        "authorization_endpoint": format!("{iss}/authorize"),
        "grant_types_supported": ["client_credentials", "authorization_code"],
        "response_types_supported": ["code"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "code_challenge_methods_supported": ["S256"],
    }))
    .into_response()
}

async fn jwks(State(idp): State<Arc<Inner>>) -> Response {
    idp.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    let keys: Vec<Value> = idp.keys.lock().iter().map(|k| k.jwk.clone()).collect();
    axum::Json(json!({ "keys": keys })).into_response()
}

/// The client's id and secret: HTTP Basic, or the form's `client_id` and `client_secret`.
fn client(headers: &HeaderMap, form: &HashMap<String, String>) -> Option<(String, String)> {
    if let Some(basic) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    {
        let decoded = String::from_utf8(STANDARD.decode(basic).ok()?).ok()?;
        let (id, secret) = decoded.split_once(':')?;
        return Some((id.to_owned(), secret.to_owned()));
    }
    Some((
        form.get("client_id")?.clone(),
        form.get("client_secret")?.clone(),
    ))
}

async fn introspect(
    State(idp): State<Arc<Inner>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if client(&headers, &form) != Some((CLIENT_ID.into(), CLIENT_SECRET.into())) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    idp.introspections.fetch_add(1, Ordering::SeqCst);
    let answer = form
        .get("token")
        .and_then(|t| idp.opaque.lock().get(t).cloned())
        .unwrap_or_else(|| json!({"active": false}));
    axum::Json(answer).into_response()
}

/// Client credentials: an RS256 token for the requested `resource` (RFC 8707) with the
/// requested `scope`.
async fn token(
    State(idp): State<Arc<Inner>>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if client(&headers, &form) != Some((CLIENT_ID.into(), CLIENT_SECRET.into())) {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let refuse = |error: &str| {
        (StatusCode::BAD_REQUEST, axum::Json(json!({"error": error}))).into_response()
    };
    let (resource, scope, subject) = match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => {
            let Some(resource) = form.get("resource") else {
                return refuse("invalid_target");
            };
            let scope = form.get("scope").cloned().unwrap_or_default();
            (resource.clone(), scope, CLIENT_ID)
        }
        Some("authorization_code") => match redeem(&idp, &form) {
            Ok((resource, scope)) => (resource, scope, USER),
            Err(_) => return refuse("invalid_grant"),
        },
        _ => return refuse("unsupported_grant_type"),
    };
    let access = idp.sign("RS256", None, &idp.claims(&resource, subject, &scope));
    axum::Json(json!({
        "access_token": access, "token_type": "Bearer", "expires_in": 300, "scope": scope,
    }))
    .into_response()
}
