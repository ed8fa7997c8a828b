//! Who is an operator: an admin token, a caller holding the admin scopes, or the local
//! caller of a loopback-only server ([`Admin`]); and how far an [`Operator`] reaches.

use std::sync::Arc;

use axum::http::HeaderMap;

use snodo_core::model::Principal;

use super::{AdminConfig, AdminError};
use crate::identity::{Authenticator, Caller, Scopes, TokenTable, bearer_token, digest};

/// Who the operators are here: the `[admin]` settings and the admin tokens.
pub(crate) struct Admin {
    config: AdminConfig,
    tokens: TokenTable<Operator>,
    /// A digest of who is an operator here (the admin tokens, cross-tenant tenants, admin
    /// scopes, the loopback case): console sessions carry it, so a change of any of them
    /// ends the sessions it made, and a session from a node configured otherwise (a
    /// development node without authentication sharing the store) is refused.
    fingerprint: String,
}

/// Who is acting, and how far they reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// The operator's principal.
    pub principal: Principal,
    /// Whether it acts on every tenant.
    pub cross_tenant: bool,
}

impl Operator {
    /// The tenant a query covers: the operator's own unless it is cross-tenant; another
    /// tenant asked for by a single-tenant operator is refused.
    pub(super) fn tenant(&self, asked: Option<String>) -> Result<Option<String>, AdminError> {
        if self.cross_tenant {
            return Ok(asked);
        }
        match asked {
            Some(t) if t != self.principal.tenant => Err(AdminError::Forbidden(format!(
                "an operator of tenant {:?} acts on its own tenant only",
                self.principal.tenant
            ))),
            _ => Ok(Some(self.principal.tenant.clone())),
        }
    }

    /// Whether the tasks of `tenant` are within its reach.
    pub(super) fn reaches(&self, tenant: &str) -> bool {
        self.cross_tenant || tenant == self.principal.tenant
    }
}

impl Admin {
    pub(crate) fn new(config: AdminConfig) -> Self {
        let tokens = TokenTable::new(config.tokens.iter().map(|(t, principal, cross)| {
            let op = Operator {
                principal: principal.clone(),
                cross_tenant: *cross,
            };
            (t, op)
        }));
        let mut who: Vec<String> = tokens
            .entries()
            .iter()
            .map(|(d, op)| {
                format!(
                    "{}|{}|{}|{}",
                    snodo_core::ids::hex(d),
                    op.principal.tenant,
                    op.principal.subject,
                    op.cross_tenant
                )
            })
            .collect();
        who.sort();
        let described = serde_json::json!({
            "tokens": who,
            "cross": config.cross_tenant,
            "scopes": config.scopes,
            "open": config.open_locally,
        });
        let fingerprint = snodo_core::ids::hex(&digest(&described.to_string()))[..16].to_owned();
        Self {
            config,
            tokens,
            fingerprint,
        }
    }

    /// The digest console sessions are bound to.
    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub(crate) fn config(&self) -> &AdminConfig {
        &self.config
    }

    /// The operator an admin token names, comparing every configured token.
    pub(crate) fn token_operator(&self, token: &str) -> Option<Operator> {
        self.tokens.matching(token).cloned()
    }

    /// The operator a caller of the MCP authenticator is, if any.
    pub(crate) fn caller_operator(&self, caller: &Caller) -> Result<Operator, AdminError> {
        let admin = match &caller.scopes {
            // A static MCP token grants every MCP scope but is not an operator's: admin
            // tokens are configured apart. Only the local caller of an unauthenticated
            // loopback server is.
            Scopes::All => self.config.open_locally,
            Scopes::Only(_) => {
                !self.config.scopes.is_empty() && caller.missing(&self.config.scopes).is_empty()
            }
        };
        if !admin {
            return Err(AdminError::Forbidden(format!(
                "operators need the scope {:?} or an admin token",
                self.config.scopes.join(" ")
            )));
        }
        let cross_tenant =
            self.config.open_locally || self.config.cross_tenant.contains(&caller.principal.tenant);
        Ok(Operator {
            principal: caller.principal.clone(),
            cross_tenant,
        })
    }

    /// The operator of a request's bearer credential: an admin token, else a caller of
    /// the MCP authenticator holding the admin scopes.
    pub(crate) async fn bearer_operator(
        &self,
        headers: &HeaderMap,
        authenticator: &Arc<dyn Authenticator>,
    ) -> Result<Operator, AdminError> {
        if let Some(op) = bearer_token(headers).and_then(|t| self.token_operator(t)) {
            return Ok(op);
        }
        if bearer_token(headers).is_none() && !self.config.open_locally {
            return Err(AdminError::Unauthenticated(
                "an admin token or an access token with the admin scope is required".into(),
            ));
        }
        match authenticator.authenticate(headers).await {
            Ok(caller) => self.caller_operator(&caller),
            Err(refused) => Err(AdminError::Unauthenticated(refused.message)),
        }
    }
}
