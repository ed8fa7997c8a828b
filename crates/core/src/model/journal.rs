//! The journal of a task's outbound effects: for each request a guest sent, what it asked
//! and what came back, recorded before the guest saw the answer.
//!
//! An entry sits at a position (the request's sequence number within an attempt: the
//! guest's order of requests). A replayed attempt is answered at each position from the
//! entry there, after checking that it asks the same thing ([`JournalRequest`]); a position
//! without an entry (the request got no response) is sent again.
//!
//! A durable sleep takes a position in the same journal ([`SleepAsk`]), so a replay that
//! sleeps where it once sent a request, or the other way round, is told apart.

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

/// What a sleep asked the host for: a time to sleep until, or a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepAsk {
    /// Until this many milliseconds after the Unix epoch.
    Until(u64),
    /// For this many milliseconds.
    For(u64),
}

impl SleepAsk {
    /// When a sleep asked at `now` (ms since the epoch) ends.
    pub fn ends(self, now: u64) -> u64 {
        match self {
            SleepAsk::Until(at) => at,
            SleepAsk::For(ms) => now.saturating_add(ms),
        }
    }
}

impl std::fmt::Display for SleepAsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SleepAsk::Until(at) => {
                write!(f, "a sleep until {}", super::rfc3339(super::Timestamp(*at)))
            }
            SleepAsk::For(ms) => write!(f, "a sleep of {ms} ms"),
        }
    }
}

/// The method a sleep's entry is recorded under. Its URL's scheme, `snodo:`, is one no
/// outbound request can have (only `http` and `https` are sent), so an entry is a sleep's
/// exactly when its URL says so.
const SLEEP_METHOD: &str = "SLEEP";
const SLEEP_UNTIL: &str = "snodo:sleep?until=";
const SLEEP_FOR: &str = "snodo:sleep?for=";
const WAKE_AT: &str = "wake-at";

impl JournalEntry {
    /// The entry of a sleep at position `seq` that asked `ask` and ends at `until` (ms
    /// since the epoch): an entry like a request's, so every store keeps it unchanged.
    pub fn sleep(seq: u32, ask: SleepAsk, until: u64) -> Self {
        let url = match ask {
            SleepAsk::Until(at) => format!("{SLEEP_UNTIL}{at}"),
            SleepAsk::For(ms) => format!("{SLEEP_FOR}{ms}"),
        };
        JournalEntry {
            seq,
            request: JournalRequest {
                method: SLEEP_METHOD.to_owned(),
                url,
                body_sha256: String::new(),
            },
            response: JournalResponse {
                status: 0,
                headers: vec![(WAKE_AT.to_owned(), until.to_string())],
                body: Vec::new(),
            },
        }
    }

    /// What a sleep's entry asked and when that sleep ends; `None` for a request's entry.
    pub fn as_sleep(&self) -> Option<(SleepAsk, u64)> {
        if self.request.method != SLEEP_METHOD {
            return None;
        }
        let url = &self.request.url;
        let ask = if let Some(at) = url.strip_prefix(SLEEP_UNTIL) {
            SleepAsk::Until(at.parse().ok()?)
        } else {
            SleepAsk::For(url.strip_prefix(SLEEP_FOR)?.parse().ok()?)
        };
        let until = self
            .response
            .headers
            .iter()
            .find(|(name, _)| name == WAKE_AT)?
            .1
            .parse()
            .ok()?;
        Some((ask, until))
    }

    /// The entry in a few words, for a divergence's message: the sleep, or the request's
    /// method and URL.
    pub fn describe(&self) -> String {
        match self.as_sleep() {
            Some((ask, _)) => ask.to_string(),
            None => format!("{} {}", self.request.method, self.request.url),
        }
    }
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
    fn a_sleep_is_an_entry_only_a_sleep_reads_back() {
        for ask in [SleepAsk::Until(1_800_000_000_000), SleepAsk::For(90_000)] {
            let entry = JournalEntry::sleep(4, ask, 1_800_000_000_000);
            let back = JournalEntry::decode(&entry.encode()).expect("decodes");
            assert_eq!(back.as_sleep(), Some((ask, 1_800_000_000_000)));
        }
        let request = JournalEntry {
            seq: 4,
            request: JournalRequest {
                method: "SLEEP".into(),
                url: "https://api.example.com/snodo:sleep?for=1".into(),
                body_sha256: String::new(),
            },
            response: JournalResponse {
                status: 200,
                headers: vec![("wake-at".into(), "1".into())],
                body: Vec::new(),
            },
        };
        assert_eq!(
            request.as_sleep(),
            None,
            "a request is never read as a sleep"
        );
        assert_eq!(SleepAsk::For(500).ends(1_000), 1_500);
        assert_eq!(SleepAsk::Until(7).ends(1_000), 7);
    }

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
