//! Who is calling: the [`Authenticator`] a server is built with turns a request's headers
//! into a [`Caller`] (a principal and its scopes), which the edge puts into the request's
//! extensions for every handler behind it to read. [`StaticTokens`] is the configured
//! bearer tokens (or, with none, the anonymous local principal of a loopback-only server).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

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

/// The shortest accepted bearer token.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why a configured bearer token cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Shorter than [`MIN_TOKEN_LEN`].
    #[error("a bearer token must be at least {MIN_TOKEN_LEN} characters")]
    TooShort,
    /// The tenant (the store scope) is empty.
    #[error("the tenant must not be empty")]
    EmptyTenant,
    /// The subject is empty.
    #[error("the subject must not be empty")]
    EmptySubject,
    /// The tenant or subject holds a control character.
    #[error("the tenant and subject must not hold control characters")]
    ControlCharacter,
    /// The same token is configured twice: it could only ever authenticate one of them.
    #[error("the same token is already configured (entry {first}); tokens must be unique")]
    Duplicate {
        /// The index of the earlier entry.
        first: usize,
    },
}

/// Checks one token against the rules and against the tokens configured before it.
pub fn check_token(
    token: &str,
    principal: &Principal,
    earlier: &[(String, Principal)],
) -> Result<(), TokenError> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenError::TooShort);
    }
    if principal.tenant.is_empty() {
        return Err(TokenError::EmptyTenant);
    }
    if principal.subject.is_empty() {
        return Err(TokenError::EmptySubject);
    }
    if (principal.tenant.chars())
        .chain(principal.subject.chars())
        .any(char::is_control)
    {
        return Err(TokenError::ControlCharacter);
    }
    if let Some(first) = earlier.iter().position(|(t, _)| t == token) {
        return Err(TokenError::Duplicate { first });
    }
    Ok(())
}

/// The principal of unauthenticated requests to a loopback-only server.
pub fn local_principal() -> Principal {
    Principal::new("local", "anonymous")
}

/// A SHA-256 digest of a bearer token: tokens are compared by digest, so the comparison
/// takes the same time whatever the presented token's length.
pub(crate) type TokenDigest = [u8; 32];

pub(crate) fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares two digests without an early exit.
pub(crate) fn digests_equal(a: &TokenDigest, b: &TokenDigest) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}

/// The credentials of an `Authorization: Bearer …` header. The scheme is
/// case-insensitive and may be followed by several spaces (RFC 9110 §11.1, §11.4).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim_start_matches(' ');
    (!token.is_empty()).then_some(token)
}

/// Configured bearer tokens, each granting every scope to its principal. None configured:
/// every request is the [`local_principal`] (the server must then listen on loopback only,
/// which `serve` checks).
pub struct StaticTokens {
    tokens: Box<[(TokenDigest, Principal)]>,
}

impl StaticTokens {
    /// The tokens, each checked where it was configured ([`check_token`]).
    pub fn new(tokens: &[(String, Principal)]) -> Self {
        Self {
            tokens: tokens.iter().map(|(t, p)| (digest(t), p.clone())).collect(),
        }
    }

    /// The principal of the presented bearer token. Every configured token is compared (by
    /// digest, in constant time), whether or not an earlier one matched, so the timing tells
    /// neither which entry matched nor how long the tokens are. Configured tokens are unique,
    /// so at most one matches.
    fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        if self.tokens.is_empty() {
            return Some(local_principal());
        }
        self.matching(bearer_token(headers)?)
    }

    /// The principal of `token` if it is a configured one (as [`StaticTokens::principal`]
    /// compares, without the local principal's fallback).
    pub(crate) fn matching(&self, token: &str) -> Option<Principal> {
        let presented = digest(token);
        let mut found = None;
        for (configured, principal) in &self.tokens {
            let matched = digests_equal(configured, &presented);
            found = if matched { Some(principal) } else { found };
        }
        found.cloned()
    }
}

impl Authenticator for StaticTokens {
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> Authentication<'a> {
        Authentication::ready(
            self.principal(headers)
                .map(Caller::trusted)
                .ok_or_else(|| Unauthenticated::bearer("a valid bearer token is required")),
        )
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with_auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[tokio::test]
    async fn a_configured_token_authenticates_its_principal_and_nothing_else_does() {
        let ada = Principal::new("acme", "ada");
        let bob = Principal::new("zeta", "bob");
        let tokens = StaticTokens::new(&[
            ("a".repeat(MIN_TOKEN_LEN), ada.clone()),
            ("b".repeat(MIN_TOKEN_LEN), bob.clone()),
        ]);
        let got = tokens
            .authenticate(&with_auth(&format!("bearer   {}", "b".repeat(16))))
            .await
            .expect("bob's token");
        assert_eq!(got, Caller::trusted(bob));
        assert!(got.has_scope("admin"), "a static token grants every scope");
        for wrong in [
            "Bearer nope-nope-nope-nope",
            "Basic YWxhZGRpbjpvcGVu",
            "Bearer ",
        ] {
            let refused = tokens.authenticate(&with_auth(wrong)).await;
            assert_eq!(
                refused.expect_err(wrong).challenge,
                "Bearer",
                "refused with a bearer challenge"
            );
        }
        assert!(tokens.authenticate(&HeaderMap::new()).await.is_err());
    }

    #[tokio::test]
    async fn without_tokens_every_request_is_the_local_principal() {
        let open = StaticTokens::new(&[]);
        let got = open.authenticate(&HeaderMap::new()).await.expect("local");
        assert_eq!(got.principal, local_principal());
    }

    #[test]
    fn scopes_granted_one_by_one_are_checked_one_by_one() {
        let c = Caller {
            principal: local_principal(),
            scopes: Scopes::Only(vec!["mcp".into()]),
            claims: BTreeMap::new(),
        };
        assert!(c.has_scope("mcp"));
        assert!(!c.has_scope("admin"));
    }
}
