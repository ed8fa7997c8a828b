//! Deployments: which versions of the components serve new calls, kept in the store so that
//! every node sharing it serves the same ones, and the components themselves, stored once
//! by digest.
//!
//! A deployment is a numbered, immutable list of component digests; the newest one is
//! current. A component a deployment no longer names is *retired* from that moment; it
//! stays stored while live tasks are pinned to it and for a retention period after, so a
//! task created against it finishes on it and a rollback can bring it back.

use serde::{Deserialize, Serialize};

use super::{Invalid, Timestamp};

/// The largest component the store keeps (64 MiB): far above what a tool compiles to, and
/// small enough that a node reads it in one piece.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;
/// The most components one deployment names.
pub const MAX_DEPLOYED_COMPONENTS: usize = 256;
/// The longest note a deployment carries.
pub const MAX_DEPLOYMENT_NOTE_BYTES: usize = 1024;

/// One deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deployment {
    /// 1 for the first, one more for each after it.
    pub revision: u64,
    /// When it was committed (store time).
    pub deployed_at: Timestamp,
    /// The digests of the components that serve new calls, in the order given.
    pub components: Vec<String>,
    /// What the deployer said about it (who, why, from where).
    pub note: String,
}

impl Deployment {
    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        // A struct of strings and numbers always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads the stored form.
    pub fn decode(bytes: &[u8]) -> Result<Self, Invalid> {
        serde_json::from_slice(bytes)
            .map_err(|e| Invalid::new(format!("a stored deployment is unreadable: {e}")))
    }
}

/// What the store knows of one stored component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentInfo {
    /// SHA-256 of its bytes, lower-case hex.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was first stored.
    pub stored_at: Timestamp,
    /// When the current deployment stopped naming it (or, for one never deployed, when it
    /// was stored); `None` while the current deployment names it.
    pub retired_at: Option<Timestamp>,
    /// Live tasks pinned to it.
    pub pinned: u64,
    /// Whether a signature is stored with it.
    pub signed: bool,
}

/// A stored component: its bytes, and the signature stored with them, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredComponent {
    /// The component.
    pub bytes: Vec<u8>,
    /// A signature over the bytes (checked by whoever loads them, against their keys).
    pub signature: Option<Vec<u8>>,
}

/// The longest signature stored with a component.
pub const MAX_SIGNATURE_BYTES: usize = 1024;

/// Checks a digest's form: 64 lower-case hex digits.
pub fn check_digest(digest: &str) -> Result<(), Invalid> {
    if digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(Invalid::new(format!(
            "a component digest is 64 lower-case hex digits (SHA-256), got {digest:?}"
        )))
    }
}

/// The digest of a component's bytes: SHA-256, lower-case hex.
pub fn component_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    crate::ids::hex(&Sha256::digest(bytes))
}

/// Checks what a new deployment names and says.
pub fn check_deployment(components: &[String], note: &str) -> Result<(), Invalid> {
    if components.len() > MAX_DEPLOYED_COMPONENTS {
        return Err(Invalid::new(format!(
            "a deployment names at most {MAX_DEPLOYED_COMPONENTS} components, got {}",
            components.len()
        )));
    }
    for (i, d) in components.iter().enumerate() {
        check_digest(d)?;
        if components[..i].contains(d) {
            return Err(Invalid::new(format!(
                "a deployment names component {d} twice"
            )));
        }
    }
    if note.len() > MAX_DEPLOYMENT_NOTE_BYTES {
        return Err(Invalid::new(format!(
            "a deployment note is at most {MAX_DEPLOYMENT_NOTE_BYTES} bytes, got {}",
            note.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_and_deployments_are_checked() {
        let d = component_digest(b"wasm");
        assert_eq!(d.len(), 64);
        assert!(check_digest(&d).is_ok());
        assert!(check_digest(&d.to_uppercase()).is_err());
        assert!(check_digest("sha256:abc").is_err());
        assert!(check_deployment(std::slice::from_ref(&d), "ok").is_ok());
        assert!(check_deployment(&[d.clone(), d.clone()], "").is_err());
        assert!(check_deployment(&[], &"n".repeat(1025)).is_err());
        let dep = Deployment {
            revision: 3,
            deployed_at: Timestamp(5),
            components: vec![d],
            note: "x".into(),
        };
        assert_eq!(Deployment::decode(&dep.encode()), Ok(dep));
    }
}
