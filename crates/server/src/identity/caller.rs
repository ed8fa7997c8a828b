//! Who is calling: the [`Authenticator`] a server is built with turns a request's headers
//! into a [`Caller`] (a principal and its scopes), which the edge puts into the request's
//! extensions for every handler behind it to read.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::HeaderMap;

use snodo_core::model::Principal;

/// The authenticated caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Whom the request acts for: its tenant (the store scope) and subject.
    pub principal: Principal,
    /// What the caller may do.
    pub scopes: Scopes,
    /// The claims of its token that the configuration forwards (`auth.oauth.forward_claims`).
    pub claims: BTreeMap<String, serde_json::Value>,
}

/// The scopes a caller was granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scopes {
    /// Every scope: a configured static token, or the local principal.
    All,
    /// Only these.
    Only(Vec<String>),
}

impl Caller {
    /// A caller granted every scope.
    pub fn trusted(principal: Principal) -> Self {
        Self {
            principal,
            scopes: Scopes::All,
            claims: BTreeMap::new(),
        }
    }

    /// The scopes of `needed` this caller was not granted.
    pub fn missing<'n>(&self, needed: &'n [String]) -> Vec<&'n String> {
        needed.iter().filter(|s| !self.has_scope(s)).collect()
    }

    /// Whether the caller was granted `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        match &self.scopes {
            Scopes::All => true,
            Scopes::Only(granted) => granted.iter().any(|s| s == scope),
        }
    }
}

/// Why a request was not authenticated: answered 401 with `WWW-Authenticate` (or 503
/// when the identity provider could not be asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unauthenticated {
    /// What the client must send (the error message of the 401).
    pub message: String,
    /// The `WWW-Authenticate` challenge.
    pub challenge: String,
    /// The HTTP status: 401, or 503 when the credential could not be checked now.
    pub status: u16,
}

impl Unauthenticated {
    /// A plain bearer challenge.
    pub fn bearer(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            challenge: "Bearer".into(),
            status: 401,
        }
    }
}

/// Authenticates requests. Implementations must take the same time whichever credential
/// they were shown, up to the credential's own validation, and never log a credential.
pub trait Authenticator: Send + Sync + 'static {
    /// The caller `headers` authenticate.
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> Authentication<'a>;

    /// The `WWW-Authenticate` challenge of a 403 for a request that needs the scopes
    /// `needed` (every scope the operation needs, granted or not).
    fn insufficient_scope(&self, needed: &[String]) -> String {
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\"",
            needed.join(" ")
        )
    }

    /// The Protected Resource Metadata served at `path` (a `/.well-known/…` path), if this
    /// authenticator publishes one there.
    fn resource_metadata(&self, _path: &str) -> Option<serde_json::Value> {
        None
    }
}

/// What [`Authenticator::authenticate`] answers, as a future: decided at once (static
/// tokens, a token checked against keys already held) without allocating, or after
/// waiting (fetching keys, asking an introspection endpoint).
pub enum Authentication<'a> {
    /// Decided; taken by the first poll.
    Ready(Option<Result<Caller, Unauthenticated>>),
    /// To be decided by this future.
    Waiting(Pin<Box<dyn Future<Output = Result<Caller, Unauthenticated>> + Send + 'a>>),
}

impl Authentication<'_> {
    /// Decided at once.
    pub fn ready(decided: Result<Caller, Unauthenticated>) -> Self {
        Self::Ready(Some(decided))
    }
}

impl Future for Authentication<'_> {
    type Output = Result<Caller, Unauthenticated>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Ready(decided) => Poll::Ready(
                decided
                    .take()
                    .expect("an Authentication is not polled after it completed"),
            ),
            Self::Waiting(waiting) => waiting.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_granted_one_by_one_are_checked_one_by_one() {
        let c = Caller {
            principal: Principal::new("local", "anonymous"),
            scopes: Scopes::Only(vec!["mcp".into()]),
            claims: BTreeMap::new(),
        };
        assert!(c.has_scope("mcp"));
        assert!(!c.has_scope("admin"));
    }
}
