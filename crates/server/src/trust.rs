//! Signatures on components: an optional trust policy, checked before a component is
//! stored or loaded.
//!
//! A signature is a plain Ed25519 signature over the component file's bytes (what
//! `openssl pkeyutl -sign -rawin` makes with an Ed25519 key, or `snodo sign`), kept beside
//! the file as `<file>.sig` (the 64 bytes, raw or base64) and in the store beside the
//! component, so every node checks it again with its own keys. The trusted keys are raw
//! 32-byte Ed25519 public keys, base64, by name.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use ring::signature::{ED25519, UnparsedPublicKey};

/// Why a component was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The policy requires a signature and there is none.
    Unsigned,
    /// There is a signature and no trusted key verifies it.
    BadSignature,
}

impl Refusal {
    /// `"unsigned"` or `"bad_signature"`, as counted.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::BadSignature => "bad_signature",
        }
    }
}

/// Why a key or a signature cannot be read, made or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// A key's or a signature's text is not base64.
    #[error("not base64: {0}")]
    NotBase64(String),
    /// A public key of another length than Ed25519's.
    #[error("an Ed25519 public key is 32 bytes, got {0}")]
    KeyLength(usize),
    /// A signature file that is neither the raw bytes nor text.
    #[error("neither 64 raw bytes nor base64")]
    SignatureNotText,
    /// A signature of another length than Ed25519's.
    #[error("an Ed25519 signature is 64 bytes, got {0}")]
    SignatureLength(usize),
    /// The signature beside a component cannot be read or is malformed.
    #[error("{}: {reason}", path.display())]
    SignatureFile {
        /// The `.sig` file.
        path: PathBuf,
        /// What is wrong with it (an I/O error's text, or the signature's fault).
        reason: String,
    },
    /// A private key that is not a PKCS#8 Ed25519 key.
    #[error("not an Ed25519 private key (PKCS#8): {0}")]
    PrivateKey(String),
    /// A key pair could not be made (the system's randomness failed).
    #[error("{0}")]
    Generate(&'static str),
}

/// The keys components must be signed with. Default: none, and nothing required.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustPolicy {
    /// Trusted public keys, by name.
    pub keys: Vec<(String, [u8; 32])>,
    /// Whether an unsigned component is refused (with keys configured: yes unless said).
    pub require: bool,
}

/// How many components the policy refused, by reason.
#[derive(Debug, Default)]
pub struct TrustCounters {
    unsigned: AtomicU64,
    bad_signature: AtomicU64,
}

impl TrustCounters {
    fn count(&self, r: Refusal) {
        match r {
            Refusal::Unsigned => &self.unsigned,
            Refusal::BadSignature => &self.bad_signature,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// The counts, by reason.
    pub fn counts(&self) -> [(Refusal, u64); 2] {
        [
            (Refusal::Unsigned, self.unsigned.load(Ordering::Relaxed)),
            (
                Refusal::BadSignature,
                self.bad_signature.load(Ordering::Relaxed),
            ),
        ]
    }
}

/// A trusted Ed25519 public key as `deploy.trusted_keys` gives it: 32 bytes, base64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(pub [u8; 32]);

impl<'de> serde::Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_key(&text).map(Self).map_err(serde::de::Error::custom)
    }
}

/// Reads a public key: 32 bytes, base64.
pub fn parse_key(text: &str) -> Result<[u8; 32], TrustError> {
    let bytes = base64_text(text)?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| TrustError::KeyLength(bytes.len()))
}

fn base64_text(text: &str) -> Result<Vec<u8>, TrustError> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| TrustError::NotBase64(e.to_string()))
}

/// Reads a signature: the 64 bytes, raw or base64.
pub fn parse_signature(raw: &[u8]) -> Result<Vec<u8>, TrustError> {
    if raw.len() == 64 {
        return Ok(raw.to_vec());
    }
    let text = std::str::from_utf8(raw).map_err(|_| TrustError::SignatureNotText)?;
    let bytes = base64_text(text)?;
    if bytes.len() != 64 {
        return Err(TrustError::SignatureLength(bytes.len()));
    }
    Ok(bytes)
}

/// Where the signature of the component at `path` is kept: `<path>.sig`.
pub fn signature_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// The signature beside the component at `path`, if there is one.
pub fn signature_beside(path: &Path) -> Result<Option<Vec<u8>>, TrustError> {
    let at = signature_path(path);
    let fail = |reason: String| TrustError::SignatureFile {
        path: at.clone(),
        reason,
    };
    match std::fs::read(&at) {
        Ok(raw) => parse_signature(&raw)
            .map(Some)
            .map_err(|e| fail(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(fail(e.to_string())),
    }
}

impl TrustPolicy {
    /// Checks `bytes` against `signature`: the name of the key that verified it (`None`
    /// for an unsigned component the policy lets through), or why it is refused (counted
    /// in `counters`).
    pub fn check(
        &self,
        bytes: &[u8],
        signature: Option<&[u8]>,
        counters: &TrustCounters,
    ) -> Result<Option<String>, Refusal> {
        let refused = |r: Refusal| {
            counters.count(r);
            Err(r)
        };
        match signature {
            None if self.require => refused(Refusal::Unsigned),
            None => Ok(None),
            // A signature is checked whenever there are keys, required or not.
            Some(_) if self.keys.is_empty() => Ok(None),
            Some(sig) => {
                let signer = self.keys.iter().find(|(_, key)| {
                    UnparsedPublicKey::new(&ED25519, key)
                        .verify(bytes, sig)
                        .is_ok()
                });
                match signer {
                    Some((name, _)) => Ok(Some(name.clone())),
                    None => refused(Refusal::BadSignature),
                }
            }
        }
    }

    /// The message for a refusal of the component named `what`.
    pub fn explain(&self, what: &str, r: Refusal) -> String {
        let names: Vec<&str> = self.keys.iter().map(|(n, _)| n.as_str()).collect();
        match r {
            Refusal::Unsigned => format!(
                "{what} is not signed, and deploy.require_signature is on: sign it (snodo sign) and put the signature beside it as .sig"
            ),
            Refusal::BadSignature => format!(
                "{what}: its signature is not made by a trusted key (deploy.trusted_keys: {})",
                names.join(", ")
            ),
        }
    }
}

/// A new Ed25519 key pair: the private key (PKCS#8 DER) and the public key (raw 32 bytes).
pub fn generate_key() -> Result<(Vec<u8>, [u8; 32]), TrustError> {
    use ring::signature::KeyPair;
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng)
        .map_err(|_| TrustError::Generate("the system's randomness failed"))?;
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref())
        .map_err(|_| TrustError::Generate("a fresh key does not parse"))?;
    let public = <[u8; 32]>::try_from(pair.public_key().as_ref())
        .map_err(|_| TrustError::Generate("an Ed25519 public key is 32 bytes"))?;
    Ok((pkcs8.as_ref().to_vec(), public))
}

/// Signs `bytes` with the PKCS#8 Ed25519 private key `pkcs8`.
pub fn sign(pkcs8: &[u8], bytes: &[u8]) -> Result<Vec<u8>, TrustError> {
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8)
        .map_err(|e| TrustError::PrivateKey(e.to_string()))?;
    Ok(pair.sign(bytes).as_ref().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_checked_against_the_trusted_keys() {
        let (private, public) = generate_key().expect("key");
        let (other, _) = generate_key().expect("key");
        let policy = TrustPolicy {
            keys: vec![("release".into(), public)],
            require: true,
        };
        let counters = TrustCounters::default();
        let bytes = b"a component";
        let good = sign(&private, bytes).expect("sign");
        assert_eq!(
            policy.check(bytes, Some(&good), &counters),
            Ok(Some("release".into()))
        );
        assert_eq!(
            policy.check(b"another component", Some(&good), &counters),
            Err(Refusal::BadSignature)
        );
        let wrong = sign(&other, bytes).expect("sign");
        assert_eq!(
            policy.check(bytes, Some(&wrong), &counters),
            Err(Refusal::BadSignature)
        );
        assert_eq!(policy.check(bytes, None, &counters), Err(Refusal::Unsigned));
        assert_eq!(
            counters.counts(),
            [(Refusal::Unsigned, 1), (Refusal::BadSignature, 2)]
        );
        // Not required: an unsigned one passes, a bad signature still does not.
        let lax = TrustPolicy {
            require: false,
            ..policy
        };
        assert_eq!(lax.check(bytes, None, &counters), Ok(None));
        assert_eq!(
            lax.check(bytes, Some(&wrong), &counters),
            Err(Refusal::BadSignature)
        );
        // Keys and signatures in their text forms.
        let b64 = base64::engine::general_purpose::STANDARD;
        assert_eq!(parse_key(&b64.encode(public)), Ok(public));
        assert_eq!(parse_key("AAAA"), Err(TrustError::KeyLength(3)));
        assert!(matches!(
            parse_key("not base64!"),
            Err(TrustError::NotBase64(_))
        ));
        assert_eq!(
            parse_signature(b64.encode(&good).as_bytes()),
            Ok(good.clone())
        );
        assert_eq!(parse_signature(&good), Ok(good));
        assert!(matches!(
            parse_signature(b"short"),
            Err(TrustError::NotBase64(_))
        ));
        assert_eq!(
            parse_signature(b64.encode([0u8; 63]).as_bytes()),
            Err(TrustError::SignatureLength(63))
        );
    }
}
