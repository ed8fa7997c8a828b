//! `[auth.oauth]`: the resource server's settings, and the checks a configuration passes
//! before it serves.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use snodo_core::config::{SettingError, millis};
use snodo_core::model::Isolation;

use super::jwt::Algorithm;

/// `[auth.oauth]`: the resource server's settings, as the configuration file gives them
/// (times in milliseconds, under the names with `_ms`, kept in whole seconds rounded up),
/// with the values the host takes from other sections (`auth.isolation`, `[auth.scopes]`)
/// beside them. Every field has a default, documented here and in docs/configuration.md.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// This resource's identifier: the URL clients call (`https://mcp.example.com/mcp`),
    /// which tokens must name as their audience. `None`: `http://{listen address}/mcp`,
    /// known once the server is bound (for servers on loopback).
    pub resource: Option<String>,
    /// The authorization servers whose tokens are accepted (`[[auth.oauth.issuers]]`).
    pub issuers: Vec<IssuerConfig>,
    /// How far `exp` and `nbf` may be off: clock skew between the issuer and this server
    /// (`leeway_ms`, default 60 000, at most 300 000).
    #[serde(rename = "leeway_ms", with = "millis::seconds")]
    pub leeway: Duration,
    /// How tasks are kept apart: by tenant, or by tenant and subject (`auth.isolation`).
    #[serde(skip)]
    pub isolation: Isolation,
    /// Claims passed on with the caller, for the tools the operator allows to see them
    /// (`forward_claims`, none by default).
    pub forward_claims: Vec<String>,
    /// The least time between two fetches of an issuer's key set caused by unknown keys
    /// (`jwks_min_refresh_ms`, default 30 000, at least 1 000).
    #[serde(rename = "jwks_min_refresh_ms", with = "millis::seconds")]
    pub jwks_min_refresh: Duration,
    /// How long a fetched key set is used before it is fetched again (`jwks_max_age_ms`,
    /// default 3 600 000).
    #[serde(rename = "jwks_max_age_ms", with = "millis::seconds")]
    pub jwks_max_age: Duration,
    /// How long an active introspection answer is reused, never past the token's `exp`
    /// (`introspection_cache_ms`, default 60 000).
    #[serde(rename = "introspection_cache_ms", with = "millis::seconds")]
    pub introspection_cache: Duration,
    /// The scopes a 401 challenge asks for (what ordinary use of the server needs).
    #[serde(skip)]
    pub challenge_scopes: Vec<String>,
    /// `scopes_supported` in the metadata: every scope the server checks.
    #[serde(skip)]
    pub scopes_supported: Vec<String>,
    /// How long a request to an identity provider may take (`fetch_timeout_ms`, default
    /// 10 000).
    #[serde(rename = "fetch_timeout_ms", with = "millis::seconds")]
    pub fetch_timeout: Duration,
    /// The most introspection requests sent to one issuer in one second
    /// (`introspections_per_second`, default 50); tokens already answered are served from
    /// the cache.
    pub introspections_per_second: u32,
    /// Whether issuers may put principals in the same tenants (`shared_tenants`, default
    /// false): two issuers with the same `tenant_claim`, or the same fixed `tenant`, are
    /// refused without it, since either one's tokens could then act in the other's tenants.
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

/// The longest leeway: a longer one keeps expired tokens working.
const MAX_LEEWAY: Duration = Duration::from_secs(300);

impl OAuthConfig {
    /// The rules of `[auth.oauth]`, naming the key (relative to the section; the section
    /// itself for the rules [`check`] states in its reason).
    pub fn check(&self) -> Result<(), SettingError> {
        if self.leeway > MAX_LEEWAY {
            return Err(SettingError::new(
                "leeway_ms",
                "at most 300000: a longer leeway keeps expired tokens working",
            ));
        }
        check(self).map_err(|reason| SettingError::new("", reason))
    }
}

/// `[[auth.oauth.issuers]]`: one authorization server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The issuer identifier: the `iss` its tokens carry, exactly.
    pub issuer: String,
    /// Its key set. `None`: taken from its metadata (`jwks_uri`), if it has one.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// Introspection of its opaque tokens, if it issues any.
    #[serde(default)]
    pub introspection: Option<IntrospectionConfig>,
    /// Audiences accepted besides the resource (empty: the resource only).
    #[serde(default)]
    pub audiences: Vec<String>,
    /// The signature algorithms accepted (default RS256, ES256 and EdDSA).
    #[serde(
        default = "default_algorithms",
        deserialize_with = "algorithms_by_name"
    )]
    pub algorithms: Vec<Algorithm>,
    /// The claim naming the tenant (a dotted path, e.g. `org_id` or `organization.id`).
    /// `None`: every principal of this issuer is in `tenant`.
    #[serde(default)]
    pub tenant_claim: Option<String>,
    /// The tenant when no claim names it.
    #[serde(default)]
    pub tenant: Option<String>,
    /// The claim naming the subject (default `sub`).
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    /// A PEM file of CA certificates to trust for this issuer's endpoints, besides the
    /// WebPKI roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

fn default_algorithms() -> Vec<Algorithm> {
    Algorithm::DEFAULT.to_vec()
}

fn default_subject_claim() -> String {
    "sub".into()
}

/// `algorithms = ["RS256", ...]`, refused as a whole (under the key `algorithms`) when one
/// name is not an asymmetric algorithm.
fn algorithms_by_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Algorithm>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    (names.iter())
        .map(|n| Algorithm::parse(n))
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
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
            algorithms: default_algorithms(),
            tenant_claim: None,
            tenant: Some(tenant.into()),
            subject_claim: default_subject_claim(),
            ca_file: None,
        }
    }
}

/// RFC 7662 introspection for one issuer (`[auth.oauth.issuers.introspection]`): the
/// secret given as itself or by the variable holding it, exactly one of the two.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionConfig {
    /// The endpoint; `None`: the issuer metadata's `introspection_endpoint`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// This resource server's client id at the issuer.
    pub client_id: String,
    /// Its secret (prefer `client_secret_env`); the host reads the variable into it.
    #[serde(default)]
    pub client_secret: String,
    /// An environment variable holding the secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
}

impl std::fmt::Debug for IntrospectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntrospectionConfig")
            .field("endpoint", &self.endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<hidden>")
            .field("client_secret_env", &self.client_secret_env)
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
        super::fetch::check_url(&issuer.issuer).map_err(|e| format!("{}: {e}", at("issuer")))?;
        if let Some(u) = &issuer.jwks_uri {
            super::fetch::check_url(u).map_err(|e| format!("{}: {e}", at("jwks_uri")))?;
        }
        if let Some(IntrospectionConfig {
            endpoint: Some(u), ..
        }) = &issuer.introspection
        {
            super::fetch::check_url(u)
                .map_err(|e| format!("{}: {e}", at("introspection.endpoint")))?;
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
