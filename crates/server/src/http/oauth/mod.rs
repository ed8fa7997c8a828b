//! An OAuth 2.1 resource server, as the MCP authorization specification makes an HTTP
//! server that authorizes: [`ResourceServer`] accepts access tokens that the configured
//! issuers made for this resource, and publishes the Protected Resource Metadata (RFC
//! 9728) that tells clients where to get them.
//!
//! - JWT access tokens are verified with the issuer's key set (fetched over HTTPS, cached,
//!   refreshed when a token names an unknown key, at most once per `jwks_min_refresh`), then
//!   their issuer, audience (RFC 8707: this resource), `exp` and `nbf` are checked.
//! - Opaque tokens are asked about at the issuer's introspection endpoint (RFC 7662), and
//!   the answer is cached (`introspection_cache`). A caller cannot make this server an
//!   amplifier against its identity provider: requests carrying the same unknown token
//!   share one introspection, at most `introspections_per_second` are sent per issuer
//!   (past that, a token not already answered is 503, try again), a value shaped like a
//!   JWT is never introspected as an opaque token (it names its issuer, and only that
//!   issuer may be asked about it), and a failed metadata fetch is not repeated for a
//!   backoff that doubles from one second to a minute.
//! - Configured static tokens are checked first and grant every scope.
//! - The principal (tenant and subject) and the granted scopes come from claims named in
//!   the configuration; a token never goes further than this module.

mod fetch;
pub mod jwt;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use parking_lot::{Mutex, RwLock};
use serde_json::{Map, Value, json};

use snodo_core::model::{Isolation, Principal};

use super::auth::{
    Authentication, Authenticator, Caller, Scopes, StaticTokens, Unauthenticated, bearer_token,
    digest,
};
pub(crate) use fetch::form_encode;
use fetch::{FetchError, Fetcher};
pub use jwt::{Algorithm, MAX_TOKEN_BYTES};
use jwt::{KeySet, Unverified};

/// The longest a tenant or subject taken from a claim may be.
pub const MAX_IDENTITY_BYTES: usize = 256;
/// How many introspection answers are cached at most.
pub const INTROSPECTION_CACHE_ENTRIES: usize = 10_000;
/// How long a refusal by introspection (an inactive token) is remembered.
const INACTIVE_CACHE_SECS: u64 = 10;
/// The longest wait before a failed metadata fetch is tried again.
const METADATA_BACKOFF_MAX_SECS: u64 = 60;

/// Where the resource server reads the time: Unix seconds (injected by tests).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    })
}

/// `[auth.oauth]`: the resource server's settings.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// This resource's identifier: the URL clients call (`https://mcp.example.com/mcp`),
    /// which tokens must name as their audience. `None`: `http://{listen address}/mcp`,
    /// known once the server is bound (for servers on loopback).
    pub resource: Option<String>,
    /// The authorization servers whose tokens are accepted.
    pub issuers: Vec<IssuerConfig>,
    /// How far `exp` and `nbf` may be off (clock skew between the issuer and this server).
    pub leeway: Duration,
    /// How tasks are kept apart: by tenant, or by tenant and subject.
    pub isolation: Isolation,
    /// Claims passed on with the caller (for the tools the operator allows to see them).
    pub forward_claims: Vec<String>,
    /// The least time between two fetches of an issuer's key set caused by unknown keys.
    pub jwks_min_refresh: Duration,
    /// How long a fetched key set is used before it is fetched again.
    pub jwks_max_age: Duration,
    /// How long an active introspection answer is reused (never past the token's `exp`).
    pub introspection_cache: Duration,
    /// The scopes a 401 challenge asks for (what ordinary use of the server needs).
    pub challenge_scopes: Vec<String>,
    /// `scopes_supported` in the metadata: every scope the server checks.
    pub scopes_supported: Vec<String>,
    /// How long a request to an identity provider may take.
    pub fetch_timeout: Duration,
    /// The most introspection requests sent to one issuer in one second
    /// (`introspections_per_second`); tokens already answered are served from the cache.
    pub introspections_per_second: u32,
    /// Whether issuers may put principals in the same tenants (`shared_tenants`): two
    /// issuers with the same `tenant_claim`, or the same fixed `tenant`, are refused
    /// without it, since either one's tokens could then act in the other's tenants.
    pub shared_tenants: bool,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            resource: None,
            issuers: Vec::new(),
            leeway: Duration::from_secs(60),
            isolation: Isolation::Tenant,
            forward_claims: Vec::new(),
            jwks_min_refresh: Duration::from_secs(30),
            jwks_max_age: Duration::from_secs(3600),
            introspection_cache: Duration::from_secs(60),
            challenge_scopes: Vec::new(),
            scopes_supported: Vec::new(),
            fetch_timeout: Duration::from_secs(10),
            introspections_per_second: 50,
            shared_tenants: false,
        }
    }
}

/// `[[auth.oauth.issuers]]`: one authorization server.
#[derive(Debug, Clone)]
pub struct IssuerConfig {
    /// The issuer identifier: the `iss` its tokens carry, exactly.
    pub issuer: String,
    /// Its key set. `None`: taken from its metadata (`jwks_uri`), if it has one.
    pub jwks_uri: Option<String>,
    /// Introspection of its opaque tokens, if it issues any.
    pub introspection: Option<IntrospectionConfig>,
    /// Audiences accepted besides the resource (empty: the resource only).
    pub audiences: Vec<String>,
    /// The signature algorithms accepted.
    pub algorithms: Vec<Algorithm>,
    /// The claim naming the tenant (a dotted path, e.g. `org_id` or `organization.id`).
    /// `None`: every principal of this issuer is in `tenant`.
    pub tenant_claim: Option<String>,
    /// The tenant when no claim names it.
    pub tenant: Option<String>,
    /// The claim naming the subject (default `sub`).
    pub subject_claim: String,
    /// A PEM file of CA certificates to trust for this issuer's endpoints, besides the
    /// WebPKI roots.
    pub ca_file: Option<PathBuf>,
}

impl IssuerConfig {
    /// An issuer with the defaults: RS256, ES256 and EdDSA, `sub` as the subject, and
    /// every principal in the tenant named `tenant`.
    pub fn new(issuer: impl Into<String>, tenant: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            jwks_uri: None,
            introspection: None,
            audiences: Vec::new(),
            algorithms: Algorithm::DEFAULT.to_vec(),
            tenant_claim: None,
            tenant: Some(tenant.into()),
            subject_claim: "sub".into(),
            ca_file: None,
        }
    }
}

/// RFC 7662 introspection for one issuer.
#[derive(Clone)]
pub struct IntrospectionConfig {
    /// The endpoint; `None`: the issuer metadata's `introspection_endpoint`.
    pub endpoint: Option<String>,
    /// This resource server's client id at the issuer.
    pub client_id: String,
    /// Its secret.
    pub client_secret: String,
}

impl std::fmt::Debug for IntrospectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionConfig")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<hidden>")
            .finish()
    }
}

/// Checks a configuration before it serves: URLs, algorithms, the tenant source.
pub fn check(config: &OAuthConfig) -> Result<(), String> {
    // An opaque token names no issuer: with two introspecting issuers one of them would be
    // shown the other's bearer tokens.
    if config
        .issuers
        .iter()
        .filter(|i| i.introspection.is_some())
        .count()
        > 1
    {
        return Err(
            "introspection may be configured for one issuer only: an opaque token names no \
             issuer, and another provider must never be sent it"
                .into(),
        );
    }
    if config.introspections_per_second == 0 {
        return Err(
            "auth.oauth.introspections_per_second must be at least 1: with 0 no \
                    opaque token could ever be checked"
                .into(),
        );
    }
    if config.jwks_min_refresh < std::time::Duration::from_secs(1) {
        return Err("auth.oauth.jwks_min_refresh_ms must be at least 1000".into());
    }
    if config.issuers.is_empty() {
        return Err("auth.oauth needs at least one issuer".into());
    }
    if let Some(r) = &config.resource {
        check_resource(r)?;
    }
    for (i, issuer) in config.issuers.iter().enumerate() {
        let at = |field: &str| format!("auth.oauth.issuers[{i}].{field}");
        fetch::check_url(&issuer.issuer).map_err(|e| format!("{}: {e}", at("issuer")))?;
        if let Some(u) = &issuer.jwks_uri {
            fetch::check_url(u).map_err(|e| format!("{}: {e}", at("jwks_uri")))?;
        }
        if let Some(IntrospectionConfig {
            endpoint: Some(u), ..
        }) = &issuer.introspection
        {
            fetch::check_url(u).map_err(|e| format!("{}: {e}", at("introspection.endpoint")))?;
        }
        if issuer.algorithms.is_empty() {
            return Err(format!("{}: name at least one algorithm", at("algorithms")));
        }
        if issuer.tenant_claim.is_none() && issuer.tenant.as_deref().is_none_or(str::is_empty) {
            return Err(format!(
                "{}: give tenant_claim, or tenant for every principal of this issuer",
                at("tenant")
            ));
        }
        if config.issuers[..i]
            .iter()
            .any(|e| e.issuer == issuer.issuer)
        {
            return Err(format!("{}: the same issuer twice", at("issuer")));
        }
        if !config.shared_tenants
            && let Some(j) = config.issuers[..i]
                .iter()
                .position(|e| same_tenants(e, issuer))
        {
            return Err(format!(
                "{}: auth.oauth.issuers[{j}] names its tenants the same way, so either \
                 issuer's tokens could act in the other's tenants; give each its own \
                 tenant_claim or tenant, or set auth.oauth.shared_tenants = true if they \
                 really share them",
                at(if issuer.tenant_claim.is_some() {
                    "tenant_claim"
                } else {
                    "tenant"
                })
            ));
        }
    }
    Ok(())
}

/// Whether two issuers put principals in tenants named the same way: the same claim, or
/// the same fixed tenant.
fn same_tenants(a: &IssuerConfig, b: &IssuerConfig) -> bool {
    match (&a.tenant_claim, &b.tenant_claim) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a.tenant == b.tenant,
        _ => false,
    }
}

fn check_resource(resource: &str) -> Result<(), String> {
    let uri: axum::http::Uri = resource
        .parse()
        .map_err(|_| format!("auth.oauth.resource {resource:?} is not a URL"))?;
    let ok = matches!(uri.scheme_str(), Some("https" | "http"))
        && uri.authority().is_some()
        && uri.query().is_none()
        && !resource.contains('#');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "auth.oauth.resource {resource:?} must be an absolute http(s) URL without query or fragment"
        ))
    }
}

/// The well-known path of the metadata of `resource` (RFC 9728 §3.1): the well-known
/// prefix, then the resource's path (`/.well-known/oauth-protected-resource/mcp`).
pub fn metadata_path(resource: &str) -> String {
    let path = resource
        .parse::<axum::http::Uri>()
        .map(|u| u.path().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    format!("/.well-known/oauth-protected-resource{path}")
}

fn metadata_url(resource: &str) -> String {
    match resource.parse::<axum::http::Uri>() {
        Ok(u) => format!(
            "{}://{}{}",
            u.scheme_str().unwrap_or("https"),
            u.authority().map_or("", |a| a.as_str()),
            metadata_path(resource)
        ),
        Err(_) => String::new(),
    }
}

/// A quoted-string parameter of a challenge: quotes and backslashes (never in what this
/// module writes, but descriptions quote claims) become spaces.
fn quoted(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == '"' || c == '\\' || c.is_control() {
                ' '
            } else {
                c
            }
        })
        .collect()
}

struct Keys {
    set: Arc<KeySet>,
    fetched_at: u64,
}

/// One configured issuer and what has been fetched of it.
struct Issuer {
    config: IssuerConfig,
    fetcher: Fetcher,
    keys: RwLock<Option<Keys>>,
    /// When a key set was last asked for, successfully or not (rate limits refreshes).
    last_fetch: Mutex<Option<u64>>,
    /// One fetch at a time; the others wait for its keys.
    fetching: tokio::sync::Mutex<()>,
    metadata: tokio::sync::OnceCell<Value>,
    /// The last failed metadata fetch, until it may be tried again.
    metadata_failed: Mutex<Option<Failed>>,
    /// Introspections sent in the current second: `(second, count)`.
    introspections: Mutex<(u64, u32)>,
}

/// A fetch that failed, and when it may be tried again.
struct Failed {
    error: FetchError,
    retry_at: u64,
    /// The wait that led to `retry_at`; the next failure waits twice as long.
    wait: u64,
}

/// Why a token was refused: 401 (`invalid_token`), or 503 when this server could not ask
/// the identity provider.
enum Refusal {
    Invalid(String),
    Unavailable(String),
}

impl From<FetchError> for Refusal {
    fn from(e: FetchError) -> Self {
        tracing::warn!(error = %e, "an identity provider could not be reached");
        Refusal::Unavailable("the identity provider could not be reached; try again".into())
    }
}

/// A place in the line of requests introspecting one token; the line's entry is removed
/// when the last of them leaves.
struct SingleFlight<'a> {
    lines: &'a Mutex<HashMap<[u8; 32], Arc<tokio::sync::Mutex<()>>>>,
    key: [u8; 32],
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> SingleFlight<'a> {
    fn enter(
        lines: &'a Mutex<HashMap<[u8; 32], Arc<tokio::sync::Mutex<()>>>>,
        key: [u8; 32],
    ) -> Self {
        let gate = lines.lock().entry(key).or_default().clone();
        Self { lines, key, gate }
    }
}

impl Drop for SingleFlight<'_> {
    fn drop(&mut self) {
        let mut lines = self.lines.lock();
        // The map's reference and this one: nobody else waits.
        if Arc::strong_count(&self.gate) <= 2 {
            lines.remove(&self.key);
        }
    }
}

/// An introspection answer kept for reuse.
struct Cached {
    answer: Result<Caller, String>,
    until: u64,
}

/// The resource server: static tokens, then JWTs, then introspection.
pub struct ResourceServer {
    config: OAuthConfig,
    issuers: Vec<Issuer>,
    statics: StaticTokens,
    has_statics: bool,
    resource: RwLock<String>,
    clock: Clock,
    introspected: Mutex<HashMap<[u8; 32], Cached>>,
    /// One gate per token being introspected: requests with the same token wait for the
    /// first one's answer instead of asking again.
    introspecting: Mutex<HashMap<[u8; 32], Arc<tokio::sync::Mutex<()>>>>,
}

impl ResourceServer {
    /// A resource server for `config` (checked with [`check`]), also accepting the static
    /// `tokens`, reading the time from `clock`.
    pub fn new(
        config: OAuthConfig,
        tokens: &[(String, Principal)],
        clock: Clock,
    ) -> Result<Self, String> {
        check(&config)?;
        let issuers = config
            .issuers
            .iter()
            .map(|c| {
                Ok(Issuer {
                    fetcher: Fetcher::new(c.ca_file.as_deref(), config.fetch_timeout)?,
                    config: c.clone(),
                    keys: RwLock::new(None),
                    last_fetch: Mutex::new(None),
                    fetching: tokio::sync::Mutex::new(()),
                    metadata: tokio::sync::OnceCell::new(),
                    metadata_failed: Mutex::new(None),
                    introspections: Mutex::new((0, 0)),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            resource: RwLock::new(config.resource.clone().unwrap_or_default()),
            issuers,
            statics: StaticTokens::new(tokens),
            has_statics: !tokens.is_empty(),
            config,
            clock,
            introspected: Mutex::new(HashMap::new()),
            introspecting: Mutex::new(HashMap::new()),
        })
    }

    /// Tells the server the address it listens on: without a configured resource, the
    /// resource is `http://{addr}/mcp`.
    pub fn listening_on(&self, addr: SocketAddr) {
        if self.config.resource.is_none() {
            *self.resource.write() = format!("http://{addr}/mcp");
        }
    }

    /// This resource's identifier.
    pub fn resource(&self) -> String {
        self.resource.read().clone()
    }

    fn challenge(&self, error: Option<(&str, &str)>, scopes: &[String]) -> String {
        let mut c = String::from("Bearer");
        let mut sep = " ";
        if let Some((error, description)) = error {
            c.push_str(&format!(
                "{sep}error=\"{error}\", error_description=\"{}\"",
                quoted(description)
            ));
            sep = ", ";
        }
        c.push_str(&format!(
            "{sep}resource_metadata=\"{}\"",
            metadata_url(&self.resource())
        ));
        if !scopes.is_empty() {
            c.push_str(&format!(", scope=\"{}\"", quoted(&scopes.join(" "))));
        }
        c
    }

    fn refused(&self, refusal: Refusal) -> Unauthenticated {
        match refusal {
            Refusal::Invalid(why) => Unauthenticated {
                challenge: self
                    .challenge(Some(("invalid_token", &why)), &self.config.challenge_scopes),
                message: format!("the access token is not accepted: {why}"),
                status: 401,
            },
            Refusal::Unavailable(why) => Unauthenticated {
                challenge: self.challenge(None, &self.config.challenge_scopes),
                message: why,
                status: 503,
            },
        }
    }

    async fn authenticate_token(&self, token: &str) -> Result<Caller, Refusal> {
        if jwt::looks_like_jwt(token) {
            let unverified = Unverified::parse(token).map_err(Refusal::Invalid)?;
            let iss = unverified
                .claims
                .get("iss")
                .and_then(Value::as_str)
                .ok_or_else(|| Refusal::Invalid("the token names no issuer".into()))?;
            let issuer = self
                .issuers
                .iter()
                .find(|i| i.config.issuer == iss)
                .ok_or_else(|| Refusal::Invalid("the token's issuer is not trusted here".into()))?;
            if self.has_keys(issuer).await? {
                return self.verify_jwt(issuer, &unverified).await;
            }
            // An issuer that publishes no key set is asked about its JWTs too.
            return self.introspect_at(issuer, token).await;
        }
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::Invalid(format!(
                "the token is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        // A JWT in another encoding (padded, or the standard base64 alphabet) is still a
        // JWT: it names its issuer, and sending it to whichever issuer introspects would
        // hand one issuer's token to another.
        if jwt::is_jwt_shaped(token) {
            return Err(Refusal::Invalid(
                "the token is a JWT that is not in compact form (base64url without padding)".into(),
            ));
        }
        self.introspect(token).await
    }

    /// Whether the issuer's JWTs are verified with its key set: one is configured, or its
    /// metadata names one, or there is no introspection to ask instead.
    async fn has_keys(&self, issuer: &Issuer) -> Result<bool, Refusal> {
        if issuer.config.jwks_uri.is_some() || issuer.config.introspection.is_none() {
            return Ok(true);
        }
        let meta = self.metadata(issuer).await.map_err(Refusal::from)?;
        Ok(meta["jwks_uri"].is_string())
    }

    /// The issuer's keys, fetched when none are held, when they are older than
    /// `jwks_max_age`, or when `kid` is unknown and the last fetch is older than
    /// `jwks_min_refresh`. A failed fetch keeps the keys held.
    async fn keys(&self, issuer: &Issuer, kid: Option<&str>) -> Result<Arc<KeySet>, Refusal> {
        let now = (self.clock)();
        let due = |held: &Option<Keys>, last: Option<u64>| -> bool {
            let recently = last.is_some_and(|t| now < t + self.config.jwks_min_refresh.as_secs());
            match held {
                None => !recently,
                Some(k) => {
                    let stale = now >= k.fetched_at + self.config.jwks_max_age.as_secs();
                    let unknown = kid.is_some_and(|kid| !k.set.has(kid));
                    (stale || unknown) && !recently
                }
            }
        };
        if !due(&issuer.keys.read(), *issuer.last_fetch.lock()) {
            return held_keys(issuer);
        }
        let _one = issuer.fetching.lock().await;
        // Another request may have fetched while this one waited.
        if due(&issuer.keys.read(), *issuer.last_fetch.lock()) {
            *issuer.last_fetch.lock() = Some(now);
            match self.fetch_keys(issuer).await {
                Ok(set) => {
                    tracing::info!(issuer = %issuer.config.issuer, keys = set.len(), "fetched the issuer's key set");
                    *issuer.keys.write() = Some(Keys {
                        set: Arc::new(set),
                        fetched_at: now,
                    });
                }
                Err(e) => {
                    let refusal = Refusal::from(e);
                    if issuer.keys.read().is_none() {
                        return Err(refusal);
                    }
                }
            }
        }
        held_keys(issuer)
    }

    /// `configured`, else the URL the issuer's metadata names in `field`.
    async fn endpoint(
        &self,
        issuer: &Issuer,
        configured: Option<&String>,
        field: &str,
    ) -> Result<String, FetchError> {
        if let Some(u) = configured {
            return Ok(u.clone());
        }
        let meta = self.metadata(issuer).await?;
        match meta[field].as_str() {
            Some(u) if fetch::check_url(u).is_ok() => Ok(u.to_owned()),
            _ => Err(FetchError::new(
                &issuer.config.issuer,
                format!("the issuer's metadata names no usable {field}"),
            )),
        }
    }

    fn issuer(&self, issuer: &str) -> Result<&Issuer, String> {
        self.issuers
            .iter()
            .find(|i| i.config.issuer == issuer)
            .ok_or_else(|| format!("{issuer:?} is not one of [[auth.oauth.issuers]]"))
    }

    /// The authorization and token endpoints of the configured issuer `issuer`, from its
    /// metadata: where a browser signs in (the console's authorization code flow).
    pub(crate) async fn sign_in_endpoints(&self, issuer: &str) -> Result<(String, String), String> {
        let i = self.issuer(issuer)?;
        let authorize = self
            .endpoint(i, None, "authorization_endpoint")
            .await
            .map_err(|e| e.to_string())?;
        let token = self
            .endpoint(i, None, "token_endpoint")
            .await
            .map_err(|e| e.to_string())?;
        Ok((authorize, token))
    }

    /// Redeems an authorization code at `token_endpoint` of `issuer` (`form` holds the
    /// grant; `client` authenticates a confidential client): the access token.
    pub(crate) async fn redeem_code(
        &self,
        issuer: &str,
        token_endpoint: &str,
        client: Option<(&str, &str)>,
        form: &[(&str, &str)],
    ) -> Result<String, String> {
        let answer = self
            .issuer(issuer)?
            .fetcher
            .post_form(token_endpoint, client, form)
            .await
            .map_err(|e| e.to_string())?;
        match answer["access_token"].as_str() {
            Some(t) => Ok(t.to_owned()),
            None => Err(format!(
                "the token endpoint gave no access token ({})",
                answer["error"].as_str().unwrap_or("no error named")
            )),
        }
    }

    async fn fetch_keys(&self, issuer: &Issuer) -> Result<KeySet, FetchError> {
        let uri = self
            .endpoint(issuer, issuer.config.jwks_uri.as_ref(), "jwks_uri")
            .await?;
        let doc = issuer.fetcher.get_json(&uri).await?;
        KeySet::from_document(&doc).map_err(|e| FetchError::new(&uri, e))
    }

    /// The issuer's authorization server metadata (RFC 8414, or OpenID Connect
    /// discovery), whose `issuer` must be the configured one.
    async fn metadata(&self, issuer: &Issuer) -> Result<Value, FetchError> {
        if let Some(meta) = issuer.metadata.get() {
            return Ok(meta.clone());
        }
        let backing_off = || {
            let now = (self.clock)();
            issuer
                .metadata_failed
                .lock()
                .as_ref()
                .filter(|f| now < f.retry_at)
                .map(|f| f.error.clone())
        };
        if let Some(error) = backing_off() {
            return Err(error);
        }
        let fetched = issuer
            .metadata
            .get_or_try_init(|| async {
                // Requests that queued behind a failed fetch take its answer.
                if let Some(error) = backing_off() {
                    return Err(error);
                }
                let iss = issuer.config.issuer.trim_end_matches('/');
                let (origin, path) = match iss
                    .find("://")
                    .and_then(|s| iss[s + 3..].find('/').map(|p| s + 3 + p))
                {
                    Some(cut) => (&iss[..cut], &iss[cut..]),
                    None => (iss, ""),
                };
                let candidates = [
                    format!("{origin}/.well-known/oauth-authorization-server{path}"),
                    format!("{iss}/.well-known/openid-configuration"),
                ];
                let mut last = None;
                for url in candidates {
                    match issuer.fetcher.get_json(&url).await {
                        Ok(meta) if meta["issuer"] == issuer.config.issuer.as_str() => {
                            return Ok(meta);
                        }
                        Ok(_) => {
                            last = Some(FetchError::new(
                                &url,
                                "the metadata's issuer is not the configured issuer",
                            ));
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let error = last.unwrap_or_else(|| FetchError::new(iss, "no metadata"));
                let mut failed = issuer.metadata_failed.lock();
                let wait = failed
                    .as_ref()
                    .map_or(1, |f| (f.wait * 2).min(METADATA_BACKOFF_MAX_SECS));
                *failed = Some(Failed {
                    error: error.clone(),
                    retry_at: (self.clock)() + wait,
                    wait,
                });
                Err(error)
            })
            .await
            .cloned();
        if fetched.is_ok() {
            *issuer.metadata_failed.lock() = None;
        }
        fetched
    }

    async fn verify_jwt(&self, issuer: &Issuer, token: &Unverified<'_>) -> Result<Caller, Refusal> {
        let keys = self.keys(issuer, token.kid()).await?;
        token
            .verify(&issuer.config.algorithms, &keys)
            .map_err(Refusal::Invalid)?;
        let claims = &token.claims;
        let now = (self.clock)();
        let leeway = self.config.leeway.as_secs();
        let exp = claims
            .get("exp")
            .and_then(Value::as_u64)
            .ok_or_else(|| Refusal::Invalid("the token has no exp".into()))?;
        if now >= exp.saturating_add(leeway) {
            return Err(Refusal::Invalid("the token has expired".into()));
        }
        if let Some(nbf) = claims.get("nbf") {
            let nbf = nbf
                .as_u64()
                .ok_or_else(|| Refusal::Invalid("the token's nbf is not a number".into()))?;
            if now.saturating_add(leeway) < nbf {
                return Err(Refusal::Invalid("the token is not valid yet".into()));
            }
        }
        self.check_audience(issuer, claims.get("aud"))?;
        self.caller(issuer, claims)
    }

    /// RFC 8707: the token must name this resource (or an audience configured for the
    /// issuer) in `aud`.
    fn check_audience(&self, issuer: &Issuer, aud: Option<&Value>) -> Result<(), Refusal> {
        let resource = self.resource.read();
        let accepted =
            |a: &str| a == resource.as_str() || issuer.config.audiences.iter().any(|x| x == a);
        let ok = match aud {
            Some(Value::String(a)) => accepted(a),
            Some(Value::Array(all)) => all.iter().filter_map(Value::as_str).any(accepted),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(Refusal::Invalid(
                "the token was not issued for this resource (aud)".into(),
            ))
        }
    }

    /// The caller the claims name: tenant and subject from the configured claims, scopes
    /// from `scope` (or `scp`), and the forwarded claims.
    fn caller(&self, issuer: &Issuer, claims: &Map<String, Value>) -> Result<Caller, Refusal> {
        let subject = identity(claims, &issuer.config.subject_claim)?;
        let tenant = match &issuer.config.tenant_claim {
            Some(path) => identity(claims, path)?,
            None => issuer.config.tenant.clone().unwrap_or_default(),
        };
        let scopes = match claims.get("scope").or_else(|| claims.get("scp")) {
            Some(Value::String(s)) => s
                .split(' ')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            Some(Value::Array(all)) => all
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        let forwarded: BTreeMap<String, Value> = self
            .config
            .forward_claims
            .iter()
            .filter_map(|name| claims.get(name).map(|v| (name.clone(), v.clone())))
            .collect();
        Ok(Caller {
            principal: Principal::new(tenant, subject).isolated(self.config.isolation),
            scopes: Scopes::Only(scopes),
            claims: forwarded,
        })
    }

    async fn introspect(&self, token: &str) -> Result<Caller, Refusal> {
        let mut last =
            Refusal::Invalid("the token is not a JWT and no issuer introspects tokens".into());
        for issuer in self
            .issuers
            .iter()
            .filter(|i| i.config.introspection.is_some())
        {
            match self.introspect_at(issuer, token).await {
                Ok(caller) => return Ok(caller),
                Err(r) => last = r,
            }
        }
        Err(last)
    }

    async fn introspect_at(&self, issuer: &Issuer, token: &str) -> Result<Caller, Refusal> {
        let Some(config) = &issuer.config.introspection else {
            return Err(Refusal::Invalid(
                "the issuer does not introspect tokens".into(),
            ));
        };
        let now = (self.clock)();
        let mut key = digest(token);
        // One token may be asked about at several issuers: each answer has its own entry.
        for (k, b) in key.iter_mut().zip(digest(&issuer.config.issuer)) {
            *k ^= b;
        }
        let cached = || {
            self.introspected
                .lock()
                .get(&key)
                .filter(|c| now < c.until)
                .map(|c| c.answer.clone().map_err(Refusal::Invalid))
        };
        if let Some(answer) = cached() {
            return answer;
        }
        let gate = SingleFlight::enter(&self.introspecting, key);
        let _turn = gate.gate.lock().await;
        // The request this one waited for may have answered it.
        if let Some(answer) = cached() {
            return answer;
        }
        self.take_introspection(issuer, now)?;
        let endpoint = self
            .endpoint(issuer, config.endpoint.as_ref(), "introspection_endpoint")
            .await?;
        let answer = issuer
            .fetcher
            .post_form(
                &endpoint,
                Some((&config.client_id, &config.client_secret)),
                &[("token", token), ("token_type_hint", "access_token")],
            )
            .await?;
        let decided = self.introspected_caller(issuer, &answer, now);
        let until = match &decided {
            Ok(_) => {
                let exp = answer["exp"].as_u64().unwrap_or(u64::MAX);
                exp.min(now + self.config.introspection_cache.as_secs())
            }
            Err(_) => now + INACTIVE_CACHE_SECS,
        };
        let mut cache = self.introspected.lock();
        if cache.len() >= INTROSPECTION_CACHE_ENTRIES {
            cache.retain(|_, c| now < c.until);
            if cache.len() >= INTROSPECTION_CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Cached {
                answer: decided.clone(),
                until,
            },
        );
        decided.map_err(Refusal::Invalid)
    }

    /// Counts one introspection request against the issuer's `introspections_per_second`.
    fn take_introspection(&self, issuer: &Issuer, now: u64) -> Result<(), Refusal> {
        let mut sent = issuer.introspections.lock();
        if sent.0 != now {
            *sent = (now, 0);
        }
        if sent.1 >= self.config.introspections_per_second {
            tracing::debug!(issuer = %issuer.config.issuer, "introspection rate reached");
            return Err(Refusal::Unavailable(format!(
                "too many tokens to ask the identity provider about at once \
                 (auth.oauth.introspections_per_second = {}); try again",
                self.config.introspections_per_second
            )));
        }
        sent.1 += 1;
        Ok(())
    }

    fn introspected_caller(
        &self,
        issuer: &Issuer,
        answer: &Value,
        now: u64,
    ) -> Result<Caller, String> {
        let Some(claims) = answer.as_object() else {
            return Err("the introspection answer is not an object".into());
        };
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err("the token is not active".into());
        }
        // A refresh token is active too, but it is not an access token.
        if let Some(kind) = claims.get("token_type").and_then(Value::as_str)
            && !kind.eq_ignore_ascii_case("access_token")
            && !kind.eq_ignore_ascii_case("bearer")
            && !kind.eq_ignore_ascii_case("urn:ietf:params:oauth:token-type:access_token")
        {
            return Err("the token is not an access token".into());
        }
        if let Some(iss) = claims.get("iss")
            && iss != issuer.config.issuer.as_str()
        {
            return Err("the token's issuer is not the introspecting issuer".into());
        }
        let leeway = self.config.leeway.as_secs();
        if let Some(exp) = claims.get("exp").and_then(Value::as_u64)
            && now >= exp.saturating_add(leeway)
        {
            return Err("the token has expired".into());
        }
        if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64)
            && now.saturating_add(leeway) < nbf
        {
            return Err("the token is not valid yet".into());
        }
        let fail = |r: Refusal| match r {
            Refusal::Invalid(w) | Refusal::Unavailable(w) => w,
        };
        self.check_audience(issuer, claims.get("aud"))
            .map_err(fail)?;
        self.caller(issuer, claims).map_err(fail)
    }

    /// The Protected Resource Metadata document (RFC 9728).
    pub fn metadata_document(&self) -> Value {
        let mut doc = json!({
            "resource": self.resource(),
            "authorization_servers": self.config.issuers.iter().map(|i| i.issuer.clone()).collect::<Vec<_>>(),
            "bearer_methods_supported": ["header"],
            "resource_name": "Snodo",
        });
        if !self.config.scopes_supported.is_empty() {
            doc["scopes_supported"] = json!(self.config.scopes_supported);
        }
        doc
    }
}

/// The key set `issuer` holds, or 503 when none could be fetched yet.
fn held_keys(issuer: &Issuer) -> Result<Arc<KeySet>, Refusal> {
    issuer
        .keys
        .read()
        .as_ref()
        .map(|k| k.set.clone())
        .ok_or_else(|| {
            Refusal::Unavailable("the issuer's keys could not be fetched; try again".into())
        })
}

/// A tenant or subject from the claim at `path` (dots separate object keys): a non-empty
/// string (or an array of exactly one string) of at most
/// [`MAX_IDENTITY_BYTES`], without control characters.
fn identity(claims: &Map<String, Value>, path: &str) -> Result<String, Refusal> {
    let mut parts = path.split('.');
    let first = parts.next().unwrap_or_default();
    let mut at = claims.get(first);
    for key in parts {
        at = at.and_then(|v| v.get(key));
    }
    let value = match at {
        // Only strings: a number 1 and a string "1" must not name the same tenant.
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(one)) if one.len() == 1 && one[0].is_string() => {
            one[0].as_str().unwrap_or_default().to_owned()
        }
        _ => {
            return Err(Refusal::Invalid(format!(
                "the token has no usable {path} claim"
            )));
        }
    };
    if value.is_empty() || value.len() > MAX_IDENTITY_BYTES || value.chars().any(char::is_control) {
        return Err(Refusal::Invalid(format!(
            "the token's {path} claim is empty, longer than {MAX_IDENTITY_BYTES} bytes or \
             holds control characters"
        )));
    }
    Ok(value)
}

impl Authenticator for ResourceServer {
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> Authentication<'a> {
        let Some(token) = bearer_token(headers) else {
            return Authentication::ready(Err(Unauthenticated {
                message: "an access token is required (Authorization: Bearer)".into(),
                challenge: self.challenge(None, &self.config.challenge_scopes),
                status: 401,
            }));
        };
        if self.has_statics
            && let Some(principal) = self.statics.matching(token)
        {
            return Authentication::ready(Ok(Caller::trusted(principal)));
        }
        Authentication::Waiting(Box::pin(async move {
            self.authenticate_token(token)
                .await
                .map_err(|r| self.refused(r))
        }))
    }

    fn insufficient_scope(&self, needed: &[String]) -> String {
        self.challenge(
            Some((
                "insufficient_scope",
                "the access token lacks a scope this request needs",
            )),
            needed,
        )
    }

    fn resource_metadata(&self, path: &str) -> Option<Value> {
        let resource = self.resource();
        (path == "/.well-known/oauth-protected-resource" || path == metadata_path(&resource))
            .then(|| self.metadata_document())
    }
}
