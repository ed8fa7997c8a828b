//! JSON Web Tokens as access tokens (RFC 7519, RFC 9068): the compact form parsed, the
//! signature verified with a key of the issuer's key set (RFC 7517), the algorithm checked
//! against the configured list. Verification uses `ring`; nothing here knows a symmetric
//! algorithm, so `none` and HMAC signed with a public key cannot verify whatever the token
//! claims.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};

/// The largest token considered: anything longer is refused before it is decoded.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token, an algorithm's name or a key set is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JwtError {
    /// `none` names no signature at all.
    #[error("`none` is never accepted")]
    NoneAlgorithm,
    /// An HMAC algorithm (`HS*`): a shared secret, never a key pair.
    #[error(
        "{0} is a shared-secret algorithm; access tokens must be signed with a key pair \
         (RS256, ES256, EdDSA, ...)"
    )]
    SharedSecret(String),
    /// A name no algorithm has.
    #[error("unknown algorithm {0:?}")]
    UnknownAlgorithm(String),
    /// The algorithm is not among the issuer's configured ones.
    #[error("{0} is not an accepted algorithm")]
    NotAccepted(String),
    /// The header has no `alg`.
    #[error("the token names no algorithm")]
    NoAlgorithm,
    /// The header's `typ` is another kind of token's.
    #[error("the token's type is not an access token's")]
    NotAnAccessToken,
    /// The header has `crit` parameters.
    #[error("the token has critical header parameters this server does not know")]
    Critical,
    /// The `kid` the header names is not in the issuer's key set.
    #[error("no key {0:?} in the issuer's key set")]
    UnknownKey(String),
    /// The key the header names is of another kind than the algorithm.
    #[error("key {kid:?} is not a {alg} key")]
    WrongKey {
        /// The key.
        kid: String,
        /// The algorithm's name.
        alg: &'static str,
    },
    /// No key verifies the signature.
    #[error("the token's signature does not verify")]
    BadSignature,
    /// The token is longer than [`MAX_TOKEN_BYTES`].
    #[error("the token is longer than {MAX_TOKEN_BYTES} bytes")]
    TooLong,
    /// The token is not three dot-separated parts.
    #[error("the token is not a compact JWT")]
    NotCompact,
    /// A part (`header`, `claims`, `signature`) is not base64url.
    #[error("the token's {0} is not base64url")]
    NotBase64(&'static str),
    /// A part (`header`, `claims`) is not a JSON object.
    #[error("the token's {0} is not a JSON object")]
    NotAnObject(&'static str),
    /// A key set document without its `keys`.
    #[error("the key set has no \"keys\" array")]
    NoKeys,
}

/// A signature algorithm a token may be signed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    Rs512,
    /// RSASSA-PSS with SHA-256.
    Ps256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// ECDSA on P-384 with SHA-384.
    Es384,
    /// Ed25519.
    EdDsa,
}

impl Algorithm {
    /// The algorithms accepted when none are configured.
    pub const DEFAULT: [Algorithm; 3] = [Algorithm::Rs256, Algorithm::Es256, Algorithm::EdDsa];

    /// The `alg` name: `RS256`, `ES256`, `EdDSA`, ...
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Rs384 => "RS384",
            Algorithm::Rs512 => "RS512",
            Algorithm::Ps256 => "PS256",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
            Algorithm::EdDsa => "EdDSA",
        }
    }

    /// The algorithm named `name`; asymmetric ones only (`none` and `HS*` are refused here
    /// and can never be configured).
    pub fn parse(name: &str) -> Result<Self, JwtError> {
        Ok(match name {
            "RS256" => Algorithm::Rs256,
            "RS384" => Algorithm::Rs384,
            "RS512" => Algorithm::Rs512,
            "PS256" => Algorithm::Ps256,
            "ES256" => Algorithm::Es256,
            "ES384" => Algorithm::Es384,
            "EdDSA" => Algorithm::EdDsa,
            "none" => return Err(JwtError::NoneAlgorithm),
            n if n.starts_with("HS") => return Err(JwtError::SharedSecret(n.to_owned())),
            n => return Err(JwtError::UnknownAlgorithm(n.to_owned())),
        })
    }

    fn kty(self) -> &'static str {
        match self {
            Algorithm::Rs256 | Algorithm::Rs384 | Algorithm::Rs512 | Algorithm::Ps256 => "RSA",
            Algorithm::Es256 | Algorithm::Es384 => "EC",
            Algorithm::EdDsa => "OKP",
        }
    }
}

/// One verification key of an issuer's key set.
#[derive(Debug, Clone)]
pub(crate) struct Key {
    /// `kid`, if the set names its keys.
    pub(crate) kid: Option<String>,
    /// `alg`, if the set pins the key to one.
    alg: Option<Algorithm>,
    material: Material,
}

#[derive(Debug, Clone)]
enum Material {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed point, and its curve's algorithm.
    Ec {
        point: Vec<u8>,
        curve: Algorithm,
    },
    Ed25519(Vec<u8>),
}

fn b64(v: &Value, field: &str) -> Result<Vec<u8>, String> {
    let s = v[field]
        .as_str()
        .ok_or_else(|| format!("the key has no {field}"))?;
    URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| format!("the key's {field} is not base64url"))
}

impl Key {
    /// One JWK. Keys that are not for signatures, or of a kind this server cannot verify
    /// with, are `Ok(None)`: a set may hold encryption keys beside signing keys.
    pub(crate) fn from_jwk(jwk: &Value) -> Result<Option<Self>, String> {
        if jwk["use"].as_str().is_some_and(|u| u != "sig") {
            return Ok(None);
        }
        if let Some(ops) = jwk["key_ops"].as_array()
            && !ops.iter().any(|o| o == "verify")
        {
            return Ok(None);
        }
        let alg = match jwk["alg"].as_str() {
            None => None,
            Some(a) => match Algorithm::parse(a) {
                Ok(a) => Some(a),
                // A key for an algorithm this server never accepts verifies nothing.
                Err(_) => return Ok(None),
            },
        };
        let material = match jwk["kty"].as_str() {
            Some("RSA") => Material::Rsa {
                n: b64(jwk, "n")?,
                e: b64(jwk, "e")?,
            },
            Some("EC") => {
                let (curve, len) = match jwk["crv"].as_str() {
                    Some("P-256") => (Algorithm::Es256, 32),
                    Some("P-384") => (Algorithm::Es384, 48),
                    _ => return Ok(None),
                };
                let (x, y) = (b64(jwk, "x")?, b64(jwk, "y")?);
                if x.len() != len || y.len() != len {
                    return Err("the key's coordinates have the wrong length".into());
                }
                let mut point = Vec::with_capacity(1 + 2 * len);
                point.push(4);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                Material::Ec { point, curve }
            }
            Some("OKP") if jwk["crv"] == "Ed25519" => {
                let x = b64(jwk, "x")?;
                if x.len() != 32 {
                    return Err("the Ed25519 key is not 32 bytes".into());
                }
                Material::Ed25519(x)
            }
            // Symmetric keys ("oct") and others are never used to verify.
            _ => return Ok(None),
        };
        Ok(Some(Self {
            kid: jwk["kid"].as_str().map(str::to_owned),
            alg,
            material,
        }))
    }

    /// Whether this key may verify a token signed with `alg`: the key's kind (and curve)
    /// must be the algorithm's, and a key pinned to an algorithm verifies only that one.
    fn fits(&self, alg: Algorithm) -> bool {
        if self.alg.is_some_and(|a| a != alg) {
            return false;
        }
        match &self.material {
            Material::Rsa { .. } => alg.kty() == "RSA",
            Material::Ec { curve, .. } => *curve == alg,
            Material::Ed25519(_) => alg == Algorithm::EdDsa,
        }
    }

    fn verify(&self, alg: Algorithm, message: &[u8], sig: &[u8]) -> bool {
        match &self.material {
            Material::Rsa { n, e } => {
                let params = match alg {
                    Algorithm::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    Algorithm::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    Algorithm::Rs512 => &signature::RSA_PKCS1_2048_8192_SHA512,
                    Algorithm::Ps256 => &signature::RSA_PSS_2048_8192_SHA256,
                    _ => return false,
                };
                RsaPublicKeyComponents { n, e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            Material::Ec { point, curve } => {
                let params = match curve {
                    Algorithm::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
                    _ => &signature::ECDSA_P384_SHA384_FIXED,
                };
                UnparsedPublicKey::new(params, point)
                    .verify(message, sig)
                    .is_ok()
            }
            Material::Ed25519(x) => UnparsedPublicKey::new(&signature::ED25519, x)
                .verify(message, sig)
                .is_ok(),
        }
    }
}

/// An issuer's verification keys, by `kid` (and those without one).
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySet {
    by_kid: HashMap<String, Key>,
    unnamed: Vec<Key>,
}

impl KeySet {
    /// The keys of a JWK Set document.
    pub(crate) fn from_document(doc: &Value) -> Result<Self, JwtError> {
        let keys = doc["keys"].as_array().ok_or(JwtError::NoKeys)?;
        let mut set = KeySet::default();
        for jwk in keys {
            // One malformed key must not take the issuer's other keys with it.
            match Key::from_jwk(jwk) {
                Ok(Some(k)) => match k.kid.clone() {
                    Some(kid) => {
                        set.by_kid.insert(kid, k);
                    }
                    None => set.unnamed.push(k),
                },
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "a key of the issuer's key set is skipped"),
            }
        }
        Ok(set)
    }

    /// How many usable keys the set holds.
    pub(crate) fn len(&self) -> usize {
        self.by_kid.len() + self.unnamed.len()
    }

    /// Whether the set holds the key `kid`.
    pub(crate) fn has(&self, kid: &str) -> bool {
        self.by_kid.contains_key(kid)
    }
}

/// A token split and decoded, not yet verified.
pub(crate) struct Unverified<'t> {
    /// The protected header.
    pub(crate) header: Map<String, Value>,
    /// The claims.
    pub(crate) claims: Map<String, Value>,
    signing_input: &'t str,
    signature: Vec<u8>,
}

/// Whether `token` has the shape of a compact JWS (three base64url parts): a token that
/// does not is opaque and goes to introspection.
pub(crate) fn looks_like_jwt(token: &str) -> bool {
    token.len() <= MAX_TOKEN_BYTES
        && token.split('.').count() == 3
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Whether `token` is a JWT in any base64 encoding (padded, or the standard alphabet):
/// three parts, the first of which decodes to a JSON object naming an algorithm. Such a
/// value is not an opaque token, whether or not it is in the compact form
/// [`looks_like_jwt`] accepts.
pub(crate) fn is_jwt_shaped(token: &str) -> bool {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let normal: String = header
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    URL_SAFE_NO_PAD
        .decode(normal)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
        .is_some_and(|h| h.contains_key("alg"))
}

fn json_part(part: &str, what: &'static str) -> Result<Map<String, Value>, JwtError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| JwtError::NotBase64(what))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(JwtError::NotAnObject(what)),
    }
}

impl<'t> Unverified<'t> {
    /// Splits and decodes `token`.
    pub(crate) fn parse(token: &'t str) -> Result<Self, JwtError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(JwtError::TooLong);
        }
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::NotCompact);
        };
        let header = json_part(h, "header")?;
        let claims = json_part(c, "claims")?;
        let signature = URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| JwtError::NotBase64("signature"))?;
        Ok(Self {
            header,
            claims,
            signing_input: &token[..h.len() + 1 + c.len()],
            signature,
        })
    }

    /// The `kid` the header names.
    pub(crate) fn kid(&self) -> Option<&str> {
        self.header.get("kid").and_then(Value::as_str)
    }

    /// Checks the header against `allowed` (the algorithm, the type, no critical
    /// extensions) and the signature against `keys`. Ok: the algorithm it was signed with.
    pub(crate) fn verify(
        &self,
        allowed: &[Algorithm],
        keys: &KeySet,
    ) -> Result<Algorithm, JwtError> {
        let name = self
            .header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or(JwtError::NoAlgorithm)?;
        let alg = Algorithm::parse(name)?;
        if !allowed.contains(&alg) {
            return Err(JwtError::NotAccepted(name.to_owned()));
        }
        // RFC 9068's type, or the generic one; an ID token's or a logout token's type
        // here would be a token used for what it was not issued for.
        if let Some(typ) = self.header.get("typ") {
            let ok = typ.as_str().is_some_and(|t| {
                ["JWT", "at+jwt", "application/at+jwt"]
                    .iter()
                    .any(|x| t.eq_ignore_ascii_case(x))
            });
            if !ok {
                return Err(JwtError::NotAnAccessToken);
            }
        }
        if self.header.contains_key("crit") {
            return Err(JwtError::Critical);
        }
        let message = self.signing_input.as_bytes();
        let verified = match self.kid() {
            Some(kid) => {
                let key = keys
                    .by_kid
                    .get(kid)
                    .ok_or_else(|| JwtError::UnknownKey(kid.to_owned()))?;
                if !key.fits(alg) {
                    return Err(JwtError::WrongKey {
                        kid: kid.to_owned(),
                        alg: alg.name(),
                    });
                }
                key.verify(alg, message, &self.signature)
            }
            // Without a kid, each key of the algorithm's kind is tried.
            None => keys
                .by_kid
                .values()
                .chain(&keys.unnamed)
                .filter(|k| k.fits(alg))
                .any(|k| k.verify(alg, message, &self.signature)),
        };
        if verified {
            Ok(alg)
        } else {
            Err(JwtError::BadSignature)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_and_shared_secret_algorithms_can_never_be_named() {
        assert_eq!(Algorithm::parse("none"), Err(JwtError::NoneAlgorithm));
        assert_eq!(
            Algorithm::parse("HS256"),
            Err(JwtError::SharedSecret("HS256".into()))
        );
        assert!(matches!(
            Algorithm::parse("HS512"),
            Err(JwtError::SharedSecret(_))
        ));
        assert_eq!(
            Algorithm::parse("rs256"),
            Err(JwtError::UnknownAlgorithm("rs256".into())),
            "names are case-sensitive"
        );
        for a in Algorithm::DEFAULT {
            assert_eq!(Algorithm::parse(a.name()), Ok(a));
        }
    }

    #[test]
    fn symmetric_and_encryption_keys_verify_nothing() {
        let set = KeySet::from_document(&serde_json::json!({"keys": [
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "RSA", "use": "enc", "kid": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "EC", "crv": "P-256", "kid": "short", "x": "AQAB", "y": "AQAB"},
        ]}))
        .expect("a set");
        assert_eq!(set.len(), 0);
    }

    #[test]
    fn only_compact_tokens_look_like_jwts() {
        assert!(looks_like_jwt("eyJh.eyJi.c2ln"));
        assert!(!looks_like_jwt("opaque-token-value"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a b.c.d"));
    }
}
