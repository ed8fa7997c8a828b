//! What a JWT's claims decide once its signature holds: its issuer, audience (RFC 8707),
//! `exp` and `nbf`, and the caller they name (tenant, subject, scopes, forwarded claims).

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use snodo_core::model::Principal;

use super::jwt::Unverified;
use super::{Issuer, MAX_IDENTITY_BYTES, Refusal, ResourceServer};
use crate::identity::{Caller, Scopes};

impl ResourceServer {
    pub(super) async fn verify_jwt(
        &self,
        issuer: &Issuer,
        token: &Unverified<'_>,
    ) -> Result<Caller, Refusal> {
        let keys = self.keys(issuer, token.kid()).await?;
        token
            .verify(&issuer.config.algorithms, &keys)
            .map_err(|e| Refusal::Invalid(e.to_string()))?;
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
    pub(super) fn check_audience(
        &self,
        issuer: &Issuer,
        aud: Option<&Value>,
    ) -> Result<(), Refusal> {
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
    pub(super) fn caller(
        &self,
        issuer: &Issuer,
        claims: &Map<String, Value>,
    ) -> Result<Caller, Refusal> {
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
}

/// A tenant or subject from the claim at `path` (dots separate object keys): a non-empty
/// string (or an array of exactly one string) of at most
/// [`MAX_IDENTITY_BYTES`], without control characters.
pub(super) fn identity(claims: &Map<String, Value>, path: &str) -> Result<String, Refusal> {
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
