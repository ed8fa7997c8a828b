//! The `[auth]` and `[metrics]` sections and the tokens of `[admin]`: who may call, who
//! operates, and the scopes and tokens each needs.

use serde::Deserialize;

use super::{Config, ConfigError, config_error};
use crate::admin::AdminConfig;
use crate::identity::oauth::{IntrospectionConfig, OAuthConfig};
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
    config: &Config,
    token: &Option<String>,
    token_env: &Option<String>,
    key: &str,
) -> Result<String, (String, String)> {
    match (token, token_env) {
        (Some(t), None) => Ok(t.clone()),
        (None, Some(var)) => config.env_secret(var).ok_or_else(|| {
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
    pub oauth: Option<OAuthConfig>,
    /// The scopes each operation needs.
    #[serde(default)]
    pub scopes: crate::mcp::ScopePolicy,
}

impl Config {
    /// `[auth.oauth]`, `[auth.scopes]` and `auth.isolation`, checked as `serve` checks them,
    /// with the introspection secrets read.
    pub(super) fn oauth_into(
        &self,
        file: &str,
        opts: &mut ServeOptions,
    ) -> Result<(), ConfigError> {
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
        let mut config = OAuthConfig {
            isolation,
            challenge_scopes: opts.scopes.ordinary(),
            scopes_supported: opts.scopes.all(),
            ..o.clone()
        };
        for (i, issuer) in config.issuers.iter_mut().enumerate() {
            if let Some(x) = &mut issuer.introspection {
                introspection_secret(self, x, &format!("auth.oauth.issuers[{i}].introspection"))
                    .map_err(|(k, r)| err(&k, r))?;
            }
        }
        config
            .check()
            .map_err(|e| super::setting_error(file, e.under("auth.oauth")))?;
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
            let token =
                token_of(self, &t.token, &t.token_env, &key).map_err(|(k, r)| err(&k, r))?;
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

    /// `[admin]`, checked, with its tokens and its sign-in secret read: admin tokens are
    /// checked as MCP tokens are and distinct from them, and sign-in names a configured
    /// issuer.
    pub(super) fn admin(
        &self,
        file: &str,
        mcp_tokens: &[(String, Principal)],
    ) -> Result<AdminConfig, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let mut admin = self.admin.clone();
        admin.tokens = self.admin_tokens(file, mcp_tokens)?;
        admin
            .check()
            .map_err(|e| super::setting_error(file, e.under("admin")))?;
        if let Some(s) = &mut admin.sign_in {
            let issuers = self.auth.oauth.as_ref().map(|x| &x.issuers);
            if !issuers.is_some_and(|is| is.iter().any(|i| i.issuer == s.issuer)) {
                return Err(err(
                    "admin.oauth.issuer",
                    format!("{:?} is not one of [[auth.oauth.issuers]]", s.issuer),
                ));
            }
            if let Some(var) = &s.client_secret_env {
                s.client_secret = Some(self.env_secret(var).ok_or_else(|| {
                    err(
                        "admin.oauth.client_secret_env",
                        format!("the environment variable {var} is not set"),
                    )
                })?);
            }
        }
        Ok(admin)
    }

    /// `[metrics]`: the token `GET /metrics` requires, if any.
    pub(super) fn metrics_token(&self, file: &str) -> Result<Option<String>, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let token = match (&self.metrics.token, &self.metrics.token_env) {
            (None, None) => None,
            (Some(t), None) => Some(t.clone()),
            (None, Some(var)) => Some(self.env_secret(var).ok_or_else(|| {
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
        let policy = self.auth.scopes.clone();
        policy
            .check()
            .map_err(|reason| config_error(file, "auth.scopes", reason))?;
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
        for (i, t) in self.admin.token_entries.iter().enumerate() {
            let key = format!("admin.tokens[{i}]");
            let token =
                token_of(self, &t.token, &t.token_env, &key).map_err(|(k, r)| err(&k, r))?;
            let principal = t.principal();
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
}

/// The introspection secret at `key`, given as itself or read from its variable (exactly
/// one of the two), or the key and the reason it cannot be had.
fn introspection_secret(
    config: &Config,
    x: &mut IntrospectionConfig,
    key: &str,
) -> Result<(), (String, String)> {
    match (x.client_secret.is_empty(), &x.client_secret_env) {
        (false, None) => Ok(()),
        (true, Some(var)) => {
            x.client_secret = config.env_secret(var).ok_or_else(|| {
                (
                    format!("{key}.client_secret_env"),
                    format!("the environment variable {var} is not set"),
                )
            })?;
            Ok(())
        }
        _ => Err((
            key.to_owned(),
            "give exactly one of client_secret and client_secret_env".into(),
        )),
    }
}
