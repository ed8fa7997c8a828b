//! The journal of a task's outbound effects: for each request a guest sent, what it asked
//! and what came back, recorded before the guest saw the answer.
//!
//! An entry sits at a position (the request's sequence number within an attempt: the
//! guest's order of requests). A replayed attempt is answered at each position from the
//! entry there, after checking that it asks the same thing ([`JournalRequest`]); a position
//! without an entry (the request got no response) is sent again.

use serde::{Deserialize, Serialize};

/// What a request asked: enough to tell a replay that asks something else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JournalRequest {
    /// The method, e.g. `POST`.
    pub method: String,
    /// The URL the guest asked for (scheme, authority, path and query).
    pub url: String,
    /// SHA-256 of the request body, hex.
    pub body_sha256: String,
}

/// What came back, as the guest saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JournalResponse {
    /// The status code.
    pub status: u16,
    /// Header names (lower case) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body (kept outside the JSON part of an encoded entry).
    #[serde(skip)]
    pub body: Vec<u8>,
}

/// One recorded request and its response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JournalEntry {
    /// The position.
    pub seq: u32,
    /// What was asked.
    pub request: JournalRequest,
    /// What came back.
    pub response: JournalResponse,
}

/// The encoding's version byte.
const JOURNAL_FORMAT: u8 = 1;

impl JournalEntry {
    /// The stored form: a version byte, the length of the JSON part (u32, big-endian), the
    /// JSON part, then the body's bytes as they are.
    pub fn encode(&self) -> Vec<u8> {
        // Strings and numbers only: serializing cannot fail.
        let json = serde_json::to_vec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(5 + json.len() + self.response.body.len());
        out.push(JOURNAL_FORMAT);
        out.extend_from_slice(&(json.len() as u32).to_be_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(&self.response.body);
        out
    }

    /// Reads the stored form back.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let damaged = |why: &str| format!("a journal entry is damaged: {why}");
        let (&version, rest) = bytes.split_first().ok_or_else(|| damaged("empty"))?;
        if version != JOURNAL_FORMAT {
            return Err(damaged(&format!("unknown format {version}")));
        }
        if rest.len() < 4 {
            return Err(damaged("too short"));
        }
        let (len, rest) = rest.split_at(4);
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if rest.len() < len {
            return Err(damaged("truncated"));
        }
        let (json, body) = rest.split_at(len);
        let mut entry: JournalEntry =
            serde_json::from_slice(json).map_err(|e| damaged(&e.to_string()))?;
        entry.response.body = body.to_vec();
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_survives_its_encoding_and_damage_is_reported() {
        let entry = JournalEntry {
            seq: 3,
            request: JournalRequest {
                method: "POST".into(),
                url: "https://api.example.com/tickets?x=1".into(),
                body_sha256: "ab".repeat(32),
            },
            response: JournalResponse {
                status: 201,
                headers: vec![("content-type".into(), "application/json".into())],
                body: vec![0, 159, 146, 150, b'{'],
            },
        };
        let bytes = entry.encode();
        assert_eq!(JournalEntry::decode(&bytes), Ok(entry));
        assert!(JournalEntry::decode(&bytes[..8]).is_err());
        assert!(JournalEntry::decode(&[]).is_err());
        let mut other = bytes.clone();
        other[0] = 9;
        assert!(
            JournalEntry::decode(&other)
                .unwrap_err()
                .contains("format 9")
        );
    }
}
