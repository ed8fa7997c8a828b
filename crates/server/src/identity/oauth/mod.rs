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
//!
//! Here: the server's decisions (which check a token goes to, what a refusal answers);
//! `config`: its settings and their checks; `discovery`: issuers' metadata, key sets and
//! endpoints, and this resource's own metadata; `claims`: a verified JWT's audience and the
//! caller its claims name; `introspection`: opaque tokens asked about, shared and cached;
//! `fetch` and `jwt`: HTTPS requests and JWS verification.

mod claims;
mod config;
mod discovery;
mod fetch;
mod introspection;
pub mod jwt;

pub use config::{IntrospectionConfig, IssuerConfig, OAuthConfig, check};
pub use discovery::metadata_path;
pub(crate) use fetch::form_encode;
pub use jwt::{Algorithm, JwtError, MAX_TOKEN_BYTES};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::HeaderMap;
use fetch::{FetchError, Fetcher};
use jwt::{KeySet, Unverified};
use parking_lot::{Mutex, RwLock};
use serde_json::Value;
use snodo_core::model::Principal;

use super::{Authentication, Authenticator, Caller, StaticTokens, Unauthenticated, bearer_token};
use discovery::metadata_url;
use introspection::Cached;

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
            let unverified =
                Unverified::parse(token).map_err(|e| Refusal::Invalid(e.to_string()))?;
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
