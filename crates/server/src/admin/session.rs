//! Console sign-ins: a signed cookie naming the operator, and the CSRF token each form
//! carries.
//!
//! The cookie holds the operator (tenant, subject, reach) and its expiry, sealed with an
//! HMAC under a key derived from the store's server key: every node sharing the store
//! accepts it, and nobody without the key can make or change one. It is `HttpOnly`,
//! `SameSite=Strict` and `Path=/console`. A form's CSRF token is an HMAC of the cookie's
//! value under a second derived key: a page on another origin can neither read it nor
//! compute it, so a forged post fails even where a browser would send the cookie.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::hmac;
use serde::{Deserialize, Serialize};

use snodo_core::model::{Principal, Timestamp};

use super::Operator;

/// The console's session cookie.
pub const SESSION_COOKIE: &str = "snodo_console";
/// The session cookie's name when the console is reached over HTTPS: the `__Host-` prefix
/// makes browsers keep it only when it is `Secure`, host-only and on `Path=/`, so neither
/// a sibling subdomain nor a plain-HTTP response can plant or overwrite it.
pub const SECURE_SESSION_COOKIE: &str = "__Host-snodo_console";
/// The cookie holding a sign-in through the identity provider while it is under way.
pub(crate) const PENDING_COOKIE: &str = "snodo_console_oauth";

/// A sign-in under way: what the callback checks and needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pending {
    /// The `state` sent to the provider.
    pub(crate) state: String,
    /// The PKCE verifier of the challenge sent.
    pub(crate) verifier: String,
    /// Where to go once signed in.
    pub(crate) next: String,
    /// The redirect URI sent (the token request repeats it).
    pub(crate) redirect_uri: String,
    pub(crate) exp: u64,
}

#[derive(Serialize, Deserialize)]
struct Claims {
    t: String,
    s: String,
    x: bool,
    exp: u64,
    /// The operator configuration it was made under ([`super::Admin`]'s fingerprint).
    f: String,
}

/// Seals and opens sessions and CSRF tokens.
pub(crate) struct Sessions {
    seal: hmac::Key,
    csrf: hmac::Key,
    pending: hmac::Key,
}

impl Sessions {
    /// Keys derived from the store's server key.
    pub(crate) fn new(server_key: &[u8; 32]) -> Self {
        let derive = |label: &[u8]| {
            let mut k = [0u8; 32];
            let _ = hkdf::Hkdf::<sha2::Sha256>::new(None, server_key).expand(label, &mut k);
            hmac::Key::new(hmac::HMAC_SHA256, &k)
        };
        Self {
            seal: derive(b"snodo console session v1"),
            csrf: derive(b"snodo console csrf v1"),
            pending: derive(b"snodo console sign-in v1"),
        }
    }

    /// A cookie value for `op` valid until `exp` under the operator configuration
    /// `fingerprint`.
    pub(crate) fn seal(&self, op: &Operator, exp: Timestamp, fingerprint: &str) -> String {
        let claims = Claims {
            t: op.principal.tenant.clone(),
            s: op.principal.subject.clone(),
            x: op.cross_tenant,
            exp: exp.as_millis(),
            f: fingerprint.to_owned(),
        };
        let body = B64.encode(serde_json::to_vec(&claims).unwrap_or_default());
        let tag = B64.encode(hmac::sign(&self.seal, body.as_bytes()).as_ref());
        format!("{body}.{tag}")
    }

    /// The operator a cookie value names, if its seal holds, it has not expired at `now`
    /// and it was made under the operator configuration `fingerprint`.
    pub(crate) fn open(&self, value: &str, now: Timestamp, fingerprint: &str) -> Option<Operator> {
        let (body, tag) = value.split_once('.')?;
        let tag = B64.decode(tag).ok()?;
        hmac::verify(&self.seal, body.as_bytes(), &tag).ok()?;
        let claims: Claims = serde_json::from_slice(&B64.decode(body).ok()?).ok()?;
        if claims.exp <= now.as_millis() || claims.f != fingerprint {
            return None;
        }
        Some(Operator {
            principal: Principal::new(claims.t, claims.s),
            cross_tenant: claims.x,
        })
    }

    /// A cookie value for a sign-in under way.
    pub(crate) fn seal_pending(&self, p: &Pending) -> String {
        let body = B64.encode(serde_json::to_vec(p).unwrap_or_default());
        let tag = B64.encode(hmac::sign(&self.pending, body.as_bytes()).as_ref());
        format!("{body}.{tag}")
    }

    /// The sign-in a cookie value holds, if its seal holds and it has not expired.
    pub(crate) fn open_pending(&self, value: &str, now: Timestamp) -> Option<Pending> {
        let (body, tag) = value.split_once('.')?;
        hmac::verify(&self.pending, body.as_bytes(), &B64.decode(tag).ok()?).ok()?;
        let p: Pending = serde_json::from_slice(&B64.decode(body).ok()?).ok()?;
        (p.exp > now.as_millis()).then_some(p)
    }

    /// The CSRF token of the session whose cookie value is `value`.
    pub(crate) fn csrf(&self, value: &str) -> String {
        B64.encode(hmac::sign(&self.csrf, value.as_bytes()).as_ref())
    }
}

/// The value of cookie `name` in `headers`.
/// The `Set-Cookie` value of a session cookie holding `value` for `max_age_s` seconds
/// (0 clears it): [`SECURE_SESSION_COOKIE`] when `secure`, else [`SESSION_COOKIE`] scoped
/// to the console.
pub(crate) fn session_set_cookie(value: &str, max_age_s: u64, secure: bool) -> String {
    if secure {
        format!(
            "{SECURE_SESSION_COOKIE}={value}; Path=/; Secure; HttpOnly; SameSite=Strict; \
             Max-Age={max_age_s}"
        )
    } else {
        format!(
            "{SESSION_COOKIE}={value}; Path=/console; HttpOnly; SameSite=Strict; \
             Max-Age={max_age_s}"
        )
    }
}

/// The session cookie a request carries, under either name.
pub(crate) fn session_cookie_of(headers: &axum::http::HeaderMap) -> Option<&str> {
    cookie(headers, SECURE_SESSION_COOKIE).or_else(|| cookie(headers, SESSION_COOKIE))
}

/// The key a signed-out session is revoked under in the store: a digest of the cookie,
/// never the cookie itself.
pub(crate) fn revocation_key(value: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(value.as_bytes());
    format!("console-session:{}", snodo_core::ids::hex(&digest))
}

pub(crate) fn cookie<'h>(headers: &'h axum::http::HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> Operator {
        Operator {
            principal: Principal::new("acme", "ada"),
            cross_tenant: false,
        }
    }

    #[test]
    fn a_session_opens_only_sealed_unaltered_and_in_time() {
        let s = Sessions::new(&[7; 32]);
        let v = s.seal(&op(), Timestamp(1_000), "f1");
        assert_eq!(s.open(&v, Timestamp(999), "f1"), Some(op()));
        assert_eq!(s.open(&v, Timestamp(1_000), "f1"), None, "expired");
        assert_eq!(
            s.open(&v, Timestamp(0), "f2"),
            None,
            "operators configured otherwise"
        );
        let other = Sessions::new(&[8; 32]);
        assert_eq!(
            other.open(&v, Timestamp(0), "f1"),
            None,
            "another store's key"
        );
        // A changed body (a cross-tenant claim slipped in) breaks the seal.
        let (body, tag) = v.split_once('.').expect("sealed");
        let forged = B64.encode(
            serde_json::to_vec(&Claims {
                t: "acme".into(),
                s: "ada".into(),
                x: true,
                exp: 1_000,
                f: "f1".into(),
            })
            .expect("json"),
        );
        assert_ne!(forged, body);
        assert_eq!(s.open(&format!("{forged}.{tag}"), Timestamp(0), "f1"), None);
        let csrf = s.csrf(&v);
        assert_eq!(csrf, s.csrf(&v), "one token per session");
        assert_ne!(csrf, s.csrf(&s.seal(&op(), Timestamp(2_000), "f1")));
        assert_ne!(csrf, other.csrf(&v));
    }
}
