//! Static bearer tokens: [`StaticTokens`] is the configured tokens (or, with none, the
//! anonymous local principal of a loopback-only server), each granting every scope, compared
//! by digest in constant time in a `TokenTable`, which the admin and metrics tokens use too;
//! [`check_token`] holds the rules a configured token meets.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};

use snodo_core::model::Principal;

use super::{Authentication, Authenticator, Caller, Unauthenticated};

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

/// The SHA-256 digest of `token`.
pub(crate) fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares two digests without an early exit.
fn digests_equal(a: &TokenDigest, b: &TokenDigest) -> bool {
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

/// Configured bearer tokens and what each stands for, kept as digests. A lookup compares
/// every entry (by digest, in constant time), whether or not an earlier one matched, so the
/// timing tells neither which entry matched nor how long the tokens are. The MCP tokens
/// ([`StaticTokens`]), the admin tokens and the metrics token are each one.
pub(crate) struct TokenTable<T> {
    entries: Box<[(TokenDigest, T)]>,
}

impl<T> TokenTable<T> {
    /// The table of `tokens`, each with what it stands for.
    pub(crate) fn new<S: AsRef<str>>(tokens: impl IntoIterator<Item = (S, T)>) -> Self {
        Self {
            entries: tokens
                .into_iter()
                .map(|(t, v)| (digest(t.as_ref()), v))
                .collect(),
        }
    }

    /// What `token` stands for, if it is a configured one (the last such entry: configured
    /// tokens are checked to be unique, so at most one matches).
    pub(crate) fn matching(&self, token: &str) -> Option<&T> {
        let presented = digest(token);
        let mut found = None;
        for (configured, value) in self.entries.iter() {
            let matched = digests_equal(configured, &presented);
            found = if matched { Some(value) } else { found };
        }
        found
    }

    /// Whether no token is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry: a token's digest and what it stands for.
    pub(crate) fn entries(&self) -> &[(TokenDigest, T)] {
        &self.entries
    }
}

/// Configured bearer tokens, each granting every scope to its principal. None configured:
/// every request is the [`local_principal`] (the server must then listen on loopback only,
/// which `serve` checks).
pub struct StaticTokens {
    tokens: TokenTable<Principal>,
}

impl StaticTokens {
    /// The tokens, each checked where it was configured ([`check_token`]).
    pub fn new(tokens: &[(String, Principal)]) -> Self {
        Self {
            tokens: TokenTable::new(tokens.iter().map(|(t, p)| (t, p.clone()))),
        }
    }

    /// The principal of the presented bearer token ([`TokenTable::matching`]).
    fn principal(&self, headers: &HeaderMap) -> Option<Principal> {
        if self.tokens.is_empty() {
            return Some(local_principal());
        }
        self.matching(bearer_token(headers)?)
    }

    /// The principal of `token` if it is a configured one (as [`StaticTokens::principal`]
    /// compares, without the local principal's fallback).
    pub(crate) fn matching(&self, token: &str) -> Option<Principal> {
        self.tokens.matching(token).cloned()
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
}
