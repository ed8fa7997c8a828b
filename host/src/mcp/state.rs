//! Integrity-protected MRTR `requestState`: HMAC-SHA256 with the store's server key, so a
//! token survives restarts and verifies on every node that shares the store.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

fn hmac(key: &[u8; 32], msg: &[u8]) -> [u8; 32] {
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, k) in key.iter().enumerate() {
        ipad[i] ^= k;
        opad[i] ^= k;
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(msg)
        .finalize();
    let outer = Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize();
    let mut out = [0u8; 32];
    out.copy_from_slice(&outer);
    out
}

/// A `requestState` binding the round to `tool` and carrying the answers given so far, so
/// the next round (which may send only the new answers) can replay every earlier one.
pub(crate) fn issue(key: &[u8; 32], tool: &str, answers: &Map<String, Value>) -> String {
    let body = json!({"v": 1, "tool": tool, "answers": answers}).to_string();
    let tag = hmac(key, body.as_bytes());
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(body),
        URL_SAFE_NO_PAD.encode(tag)
    )
}

/// Checks a `requestState` for `tool` (untampered, issued by this server, for this tool)
/// and returns the answers it carries.
pub(crate) fn verify(
    key: &[u8; 32],
    tool: &str,
    state: &str,
) -> Result<Map<String, Value>, &'static str> {
    let (body, tag) = state.split_once('.').ok_or("malformed requestState")?;
    let body = URL_SAFE_NO_PAD
        .decode(body)
        .map_err(|_| "malformed requestState")?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| "malformed requestState")?;
    let expected = hmac(key, &body);
    // Constant-time comparison: the tag is a secret-derived value.
    if tag.len() != expected.len()
        || tag
            .iter()
            .zip(expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            != 0
    {
        return Err("requestState failed its integrity check");
    }
    let v: Value = serde_json::from_slice(&body).map_err(|_| "malformed requestState")?;
    if v["tool"] != tool {
        return Err("requestState was issued for another tool");
    }
    Ok(v["answers"].as_object().cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_verify_and_tampering_is_caught() {
        let key = [7u8; 32];
        let answers: Map<String, Value> = [("user_name".to_owned(), json!({"action": "accept"}))]
            .into_iter()
            .collect();
        let s = issue(&key, "greet", &answers);
        assert_eq!(verify(&key, "greet", &s), Ok(answers));
        assert!(verify(&key, "other", &s).is_err());
        assert!(verify(&[8u8; 32], "greet", &s).is_err());
        let mut tampered = s.clone().into_bytes();
        tampered[3] ^= 1;
        assert!(verify(&key, "greet", &String::from_utf8_lossy(&tampered)).is_err());
        assert!(verify(&key, "greet", "nonsense").is_err());
        // RFC 4231 test case 2 shape: HMAC differs from a plain hash.
        assert_ne!(hmac(&key, b"x").to_vec(), Sha256::digest(b"x").to_vec());
    }
}
