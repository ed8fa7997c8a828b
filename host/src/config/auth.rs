//! The `[auth]`, `[admin]` and `[metrics]` sections: who may call, who operates, and the
//! scopes and tokens each needs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{Config, ConfigError, config_error};
use crate::identity::{self, TokenError};
use crate::model::Principal;
use crate::serve::ServeOptions;

/// `[metrics]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// The bearer token `GET /metrics` requires (prefer `token_env`).
    pub token: Option<String>,
    /// An environment variable holding that token.
    pub token_env: Option<String>,
}

/// A token given as itself or by the environment variable holding it (exactly one of the
/// two), or the key under `key` and the reason it cannot be read.
fn token_of(
    token: &Option<String>,
    token_env: &Option<String>,
    key: &str,
) -> Result<String, (String, String)> {
    match (token, token_env) {
        (Some(t), None) => Ok(t.clone()),
        (None, Some(var)) => std::env::var(var).map_err(|_| {
            (
                format!("{key}.token_env"),
                format!("the environment variable {var} is not set"),
            )
        }),
        _ => Err((
            key.to_owned(),
            "give exactly one of token and token_env".into(),
        )),
    }
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// Admin bearer tokens (the admin API and the console only).
    #[serde(default)]
    pub tokens: Vec<AdminTokenSection>,
    /// Tenants whose operators act on every tenant.
    #[serde(default)]
    pub cross_tenant: Vec<String>,
    /// How long a console sign-in lasts (default 28 800 000: eight hours).
    pub session_ms: Option<u64>,
    /// Console sign-in through the identity provider.
    pub oauth: Option<AdminOAuthSection>,
}

/// `[admin.oauth]`: the console's client at one of `[[auth.oauth.issuers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminOAuthSection {
    /// The issuer (exactly one of `[[auth.oauth.issuers]]`).
    pub issuer: String,
    /// The console's client id there.
    pub client_id: String,
    /// An environment variable holding its secret (a confidential client).
    pub client_secret_env: Option<String>,
    /// The scopes asked for (default: the admin scopes).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Where the provider sends the browser back (default: the resource's origin and
    /// `/console/oauth/callback`).
    pub redirect_uri: Option<String>,
}

/// `[[admin.tokens]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminTokenSection {
    /// The token itself (prefer `token_env`).
    pub token: Option<String>,
    /// An environment variable holding the token.
    pub token_env: Option<String>,
    /// The operator's tenant.
    pub tenant: String,
    /// Who the operator is (default `operator`).
    pub subject: Option<String>,
    /// Whether it acts on every tenant.
    #[serde(default)]
    pub cross_tenant: bool,
}

/// `[[auth.tokens]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSection {
    /// The token itself (prefer `token_env`).
    pub token: Option<String>,
    /// An environment variable holding the token.
    pub token_env: Option<String>,
    /// The tenant (the store scope).
    pub tenant: String,
    /// The subject.
    pub subject: String,
}

/// `[auth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Bearer tokens.
    #[serde(default)]
    pub tokens: Vec<TokenSection>,
    /// What tasks are kept apart by: `tenant` (the default) or `tenant_subject`.
    pub isolation: Option<crate::model::Isolation>,
    /// The OAuth resource server.
    pub oauth: Option<OAuthSection>,
    /// The scopes each operation needs.
    #[serde(default)]
    pub scopes: ScopesSection,
}

/// `[auth.oauth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSection {
    /// This resource's URL (the audience tokens must name); default
    /// `http://{listen address}/mcp`.
    pub resource: Option<String>,
    /// How far `exp` and `nbf` may be off (default 60 000).
    pub leeway_ms: Option<u64>,
    /// The least time between key-set fetches caused by unknown keys (default 30 000).
    pub jwks_min_refresh_ms: Option<u64>,
    /// How long a key set is used before it is fetched again (default 3 600 000).
    pub jwks_max_age_ms: Option<u64>,
    /// How long an introspection answer is reused (default 60 000).
    pub introspection_cache_ms: Option<u64>,
    /// How long a request to an identity provider may take (default 10 000).
    pub fetch_timeout_ms: Option<u64>,
    /// The most introspection requests sent to one issuer per second (default 50).
    pub introspections_per_second: Option<u32>,
    /// Whether issuers naming their tenants the same way may share them (default false).
    #[serde(default)]
    pub shared_tenants: bool,
    /// Claims passed on with the caller.
    #[serde(default)]
    pub forward_claims: Vec<String>,
    /// The authorization servers.
    #[serde(default)]
    pub issuers: Vec<IssuerSection>,
}

/// `[[auth.oauth.issuers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerSection {
    /// The issuer identifier (`iss`).
    pub issuer: String,
    /// Its JWK Set; default: its metadata's `jwks_uri`.
    pub jwks_uri: Option<String>,
    /// Audiences accepted besides the resource.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Accepted algorithms (default RS256, ES256, EdDSA).
    pub algorithms: Option<Vec<String>>,
    /// The claim naming the tenant (dotted path).
    pub tenant_claim: Option<String>,
    /// The tenant of every principal when no claim names it.
    pub tenant: Option<String>,
    /// The claim naming the subject (default `sub`).
    pub subject_claim: Option<String>,
    /// CA certificates (PEM) to trust for this issuer.
    pub ca_file: Option<PathBuf>,
    /// Introspection of opaque tokens.
    pub introspection: Option<IntrospectionSection>,
}

/// `[auth.oauth.issuers.introspection]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionSection {
    /// The endpoint; default: the issuer metadata's.
    pub endpoint: Option<String>,
    /// This server's client id at the issuer.
    pub client_id: String,
    /// Its secret (prefer `client_secret_env`).
    pub client_secret: Option<String>,
    /// An environment variable holding it.
    pub client_secret_env: Option<String>,
}

/// `[auth.scopes]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopesSection {
    /// Needed by every MCP request.
    #[serde(default)]
    pub mcp: Vec<String>,
    /// `tools/call`.
    #[serde(default)]
    pub tools_call: Vec<String>,
    /// `tools/call` of the tools a pattern (`name`, `prefix*`, `*`) matches, on top.
    #[serde(default)]
    pub tools: BTreeMap<String, Vec<String>>,
    /// `tasks/get` and `subscriptions/listen`.
    #[serde(default)]
    pub tasks_get: Vec<String>,
    /// `tasks/update`.
    #[serde(default)]
    pub tasks_update: Vec<String>,
    /// `tasks/cancel`.
    #[serde(default)]
    pub tasks_cancel: Vec<String>,
    /// `resources/read`.
    #[serde(default)]
    pub resources_read: Vec<String>,
    /// `prompts/get`.
    #[serde(default)]
    pub prompts_get: Vec<String>,
    /// The operator API.
    #[serde(default)]
    pub admin: Vec<String>,
}

impl Config {
    /// `[auth.oauth]`, `[auth.scopes]` and `auth.isolation`, checked as `serve` checks them.
    pub(super) fn oauth_into(
        &self,
        file: &str,
        opts: &mut ServeOptions,
    ) -> Result<(), ConfigError> {
        use crate::identity::oauth::OAuthConfig;
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let isolation = self.auth.isolation.unwrap_or_default();
        for (_, p) in &mut opts.tokens {
            p.isolation = isolation;
        }
        opts.scopes = self.scope_policy(file)?;
        let Some(o) = &self.auth.oauth else {
            if !opts.scopes.is_empty() {
                return Err(err(
                    "auth.scopes",
                    "scopes need [auth.oauth]: static tokens and the local principal hold every scope".into(),
                ));
            }
            return Ok(());
        };
        let d = OAuthConfig::default();
        let ms = |v: Option<u64>, default: std::time::Duration| {
            v.map_or(default, |ms| {
                std::time::Duration::from_secs(ms.div_ceil(1000))
            })
        };
        let issuers = (o.issuers.iter().enumerate())
            .map(|(i, is)| issuer_config(is, &format!("auth.oauth.issuers[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|(k, r)| err(&k, r))?;
        let config = OAuthConfig {
            resource: o.resource.clone(),
            issuers,
            leeway: ms(o.leeway_ms, d.leeway),
            isolation,
            forward_claims: o.forward_claims.clone(),
            jwks_min_refresh: ms(o.jwks_min_refresh_ms, d.jwks_min_refresh),
            jwks_max_age: ms(o.jwks_max_age_ms, d.jwks_max_age),
            introspection_cache: ms(o.introspection_cache_ms, d.introspection_cache),
            fetch_timeout: ms(o.fetch_timeout_ms, d.fetch_timeout),
            introspections_per_second: o
                .introspections_per_second
                .unwrap_or(d.introspections_per_second),
            shared_tenants: o.shared_tenants,
            challenge_scopes: opts.scopes.ordinary(),
            scopes_supported: opts.scopes.all(),
        };
        if config.leeway > std::time::Duration::from_secs(300) {
            return Err(err(
                "auth.oauth.leeway_ms",
                "at most 300000: a longer leeway keeps expired tokens working".into(),
            ));
        }
        crate::identity::oauth::check(&config).map_err(|e| err("auth.oauth", e))?;
        opts.oauth = Some(config);
        Ok(())
    }

    /// `[[auth.tokens]]`: each token and the principal it stands for, checked as the command
    /// line checks them.
    pub(super) fn tokens(&self, file: &str) -> Result<Vec<(String, Principal)>, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let mut tokens: Vec<(String, Principal)> = Vec::new();
        for (i, t) in self.auth.tokens.iter().enumerate() {
            let key = format!("auth.tokens[{i}]");
            let token = token_of(&t.token, &t.token_env, &key).map_err(|(k, r)| err(&k, r))?;
            let principal = Principal::new(&t.tenant, &t.subject);
            if let Err(e) = identity::check_token(&token, &principal, &tokens) {
                let field = match e {
                    TokenError::EmptyTenant | TokenError::ControlCharacter => "tenant",
                    TokenError::EmptySubject => "subject",
                    TokenError::TooShort | TokenError::Duplicate { .. } if t.token.is_some() => {
                        "token"
                    }
                    TokenError::TooShort | TokenError::Duplicate { .. } => "token_env",
                };
                let reason = match e {
                    TokenError::Duplicate { first } => {
                        format!("the same token as auth.tokens[{first}]; tokens must be unique")
                    }
                    other => other.to_string(),
                };
                return Err(err(&format!("{key}.{field}"), reason));
            }
            tokens.push((token, principal));
        }
        Ok(tokens)
    }

    /// `[admin]`: admin tokens, checked as MCP tokens are and distinct from them.
    pub(super) fn admin(
        &self,
        file: &str,
        mcp_tokens: &[(String, Principal)],
    ) -> Result<crate::admin::AdminConfig, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let a = &self.admin;
        let tokens = self.admin_tokens(file, mcp_tokens)?;
        if let Some(t) = a.cross_tenant.iter().find(|t| t.is_empty()) {
            return Err(err("admin.cross_tenant", format!("{t:?} is not a tenant")));
        }
        let sign_in = a
            .oauth
            .as_ref()
            .map(|o| self.sign_in(file, o))
            .transpose()?;
        let session_ms = a.session_ms.unwrap_or(crate::admin::DEFAULT_SESSION_MS);
        if !(60_000..=7 * 24 * 3_600_000).contains(&session_ms) {
            return Err(err(
                "admin.session_ms",
                "from 60000 (a minute) to 604800000 (a week)".into(),
            ));
        }
        Ok(crate::admin::AdminConfig {
            tokens,
            cross_tenant: a.cross_tenant.clone(),
            session_ms,
            sign_in,
            ..Default::default()
        })
    }

    /// `[metrics]`: the token `GET /metrics` requires, if any.
    pub(super) fn metrics_token(&self, file: &str) -> Result<Option<String>, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let token = match (&self.metrics.token, &self.metrics.token_env) {
            (None, None) => None,
            (Some(t), None) => Some(t.clone()),
            (None, Some(var)) => Some(std::env::var(var).map_err(|_| {
                err(
                    "metrics.token_env",
                    format!("the environment variable {var} is not set"),
                )
            })?),
            (Some(_), Some(_)) => {
                return Err(err(
                    "metrics",
                    "give at most one of token and token_env".into(),
                ));
            }
        };
        if let Some(t) = &token
            && t.len() < identity::MIN_TOKEN_LEN
        {
            let key = if self.metrics.token.is_some() {
                "metrics.token"
            } else {
                "metrics.token_env"
            };
            return Err(err(key, TokenError::TooShort.to_string()));
        }
        Ok(token)
    }

    /// `[auth.scopes]`, each scope checked.
    fn scope_policy(&self, file: &str) -> Result<crate::mcp::ScopePolicy, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let sc = &self.auth.scopes;
        let policy = crate::mcp::ScopePolicy {
            mcp: sc.mcp.clone(),
            tools_call: sc.tools_call.clone(),
            tools: sc
                .tools
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            tasks_get: sc.tasks_get.clone(),
            tasks_update: sc.tasks_update.clone(),
            tasks_cancel: sc.tasks_cancel.clone(),
            resources_read: sc.resources_read.clone(),
            prompts_get: sc.prompts_get.clone(),
            admin: sc.admin.clone(),
        };
        for scope in policy.all() {
            let ok = !scope.is_empty()
                && scope
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\');
            if !ok {
                return Err(err(
                    "auth.scopes",
                    format!(
                        "{scope:?} is not a scope (printable ASCII without spaces, quotes or backslashes)"
                    ),
                ));
            }
        }
        Ok(policy)
    }

    /// `[[admin.tokens]]`: checked as MCP tokens are, and distinct from them.
    fn admin_tokens(
        &self,
        file: &str,
        mcp_tokens: &[(String, Principal)],
    ) -> Result<Vec<(String, Principal, bool)>, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let mut tokens: Vec<(String, Principal, bool)> = Vec::new();
        let mut seen: Vec<(String, Principal)> = Vec::new();
        for (i, t) in self.admin.tokens.iter().enumerate() {
            let key = format!("admin.tokens[{i}]");
            let token = token_of(&t.token, &t.token_env, &key).map_err(|(k, r)| err(&k, r))?;
            let principal = Principal::new(
                &t.tenant,
                t.subject.clone().unwrap_or_else(|| "operator".into()),
            );
            let field = if t.token.is_some() {
                "token"
            } else {
                "token_env"
            };
            if mcp_tokens.iter().any(|(m, _)| *m == token) {
                return Err(err(
                    &format!("{key}.{field}"),
                    "the same token as one of auth.tokens: an admin token must be its own".into(),
                ));
            }
            if let Err(e) = identity::check_token(&token, &principal, &seen) {
                let at = match e {
                    TokenError::EmptyTenant | TokenError::ControlCharacter => "tenant",
                    TokenError::EmptySubject => "subject",
                    _ => field,
                };
                let reason = match e {
                    TokenError::Duplicate { first } => {
                        format!("the same token as admin.tokens[{first}]; tokens must be unique")
                    }
                    other => other.to_string(),
                };
                return Err(err(&format!("{key}.{at}"), reason));
            }
            seen.push((token.clone(), principal.clone()));
            tokens.push((token, principal, t.cross_tenant));
        }
        Ok(tokens)
    }

    /// `[admin.oauth]`: the console's client at one of the configured issuers.
    fn sign_in(
        &self,
        file: &str,
        o: &AdminOAuthSection,
    ) -> Result<crate::admin::SignIn, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let issuers = self.auth.oauth.as_ref().map(|x| &x.issuers);
        if !issuers.is_some_and(|is| is.iter().any(|i| i.issuer == o.issuer)) {
            return Err(err(
                "admin.oauth.issuer",
                format!("{:?} is not one of [[auth.oauth.issuers]]", o.issuer),
            ));
        }
        if o.client_id.is_empty() {
            return Err(err("admin.oauth.client_id", "must not be empty".into()));
        }
        let client_secret = match &o.client_secret_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                err(
                    "admin.oauth.client_secret_env",
                    format!("the environment variable {var} is not set"),
                )
            })?),
            None => None,
        };
        if let Some(u) = &o.redirect_uri
            && !(u.starts_with("https://")
                || u.starts_with("http://127.0.0.1")
                || u.starts_with("http://localhost")
                || u.starts_with("http://[::1]"))
        {
            return Err(err(
                "admin.oauth.redirect_uri",
                "https, or plain http to loopback only".into(),
            ));
        }
        Ok(crate::admin::SignIn {
            issuer: o.issuer.clone(),
            client_id: o.client_id.clone(),
            client_secret,
            scopes: o.scopes.clone(),
            redirect_uri: o.redirect_uri.clone(),
        })
    }
}

/// One `[[auth.oauth.issuers]]` table at `key`, or the key and the reason it is refused.
fn issuer_config(
    is: &IssuerSection,
    key: &str,
) -> Result<crate::identity::oauth::IssuerConfig, (String, String)> {
    use crate::identity::oauth::{Algorithm, IntrospectionConfig, IssuerConfig};
    let algorithms = match &is.algorithms {
        None => Algorithm::DEFAULT.to_vec(),
        Some(names) => names
            .iter()
            .map(|n| Algorithm::parse(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| (format!("{key}.algorithms"), e.to_string()))?,
    };
    let introspection = match &is.introspection {
        None => None,
        Some(x) => {
            let secret = match (&x.client_secret, &x.client_secret_env) {
                (Some(s), None) => s.clone(),
                (None, Some(var)) => std::env::var(var).map_err(|_| {
                    (
                        format!("{key}.introspection.client_secret_env"),
                        format!("the environment variable {var} is not set"),
                    )
                })?,
                _ => {
                    return Err((
                        format!("{key}.introspection"),
                        "give exactly one of client_secret and client_secret_env".into(),
                    ));
                }
            };
            Some(IntrospectionConfig {
                endpoint: x.endpoint.clone(),
                client_id: x.client_id.clone(),
                client_secret: secret,
            })
        }
    };
    Ok(IssuerConfig {
        issuer: is.issuer.clone(),
        jwks_uri: is.jwks_uri.clone(),
        introspection,
        audiences: is.audiences.clone(),
        algorithms,
        tenant_claim: is.tenant_claim.clone(),
        tenant: is.tenant.clone(),
        subject_claim: is.subject_claim.clone().unwrap_or_else(|| "sub".into()),
        ca_file: is.ca_file.clone(),
    })
}
