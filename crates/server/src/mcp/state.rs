//! MRTR `requestState`: sealed (XChaCha20-Poly1305) with a key derived from the store's
//! server key, so a state survives restarts and opens on every node that shares the store.
//!
//! A state carries the answers of earlier rounds. Sealing keeps them confidential (they may
//! hold what a user typed into a form) and authenticates the rest: the tool, the principal
//! it was issued to, and its expiry. A state given to another tool, presented by another
//! principal, past its expiry, or altered in any byte is refused. Stores without
//! persistence create a new key at each start, so a restart invalidates their states.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use snodo_core::model::Principal;

/// How long an issued state can be answered.
pub(crate) const STATE_TTL: Duration = Duration::from_secs(15 * 60);
const NONCE_LEN: usize = 24;

/// What a sealed token is for: each purpose derives its own key and binds its own
/// associated data, so a token sealed for one purpose never opens as another.
pub(crate) struct Purpose {
    key_label: &'static [u8],
    aad: &'static [u8],
}

/// MRTR `requestState`.
const REQUEST_STATE: Purpose = Purpose {
    key_label: b"snodo request-state key v2\0",
    aad: b"snodo/request-state/v2",
};

impl Purpose {
    /// A purpose named by its key label and associated data (both fixed per purpose).
    pub(crate) const fn new(key_label: &'static [u8], aad: &'static [u8]) -> Self {
        Self { key_label, aad }
    }

    /// The purpose's cipher: its key is HKDF-SHA256 of the server key, with the purpose's
    /// label as the context (`info`).
    fn cipher(&self, key: &[u8; 32]) -> XChaCha20Poly1305 {
        let mut derived = [0u8; 32];
        // HKDF expands up to 255 blocks; 32 bytes is one.
        let _ = hkdf::Hkdf::<Sha256>::new(None, key).expand(self.key_label, &mut derived);
        XChaCha20Poly1305::new(&derived.into())
    }

    /// The cipher of tokens sealed before keys were derived with HKDF (one SHA-256 over the
    /// label and the key). Tokens are only opened with it, never sealed: session ids issued
    /// then stay readable.
    fn earlier_cipher(&self, key: &[u8; 32]) -> XChaCha20Poly1305 {
        let derived = Sha256::new()
            .chain_update(self.key_label)
            .chain_update(key)
            .finalize();
        XChaCha20Poly1305::new(&derived)
    }

    /// `body`, encrypted and authenticated, as URL-safe base64.
    pub(crate) fn seal(&self, key: &[u8; 32], body: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        snodo_core::ids::fill_random(&mut nonce);
        self.seal_with(&self.cipher(key), nonce, body)
    }

    /// `body` sealed by `cipher` under `nonce`: the nonce, then the ciphertext.
    fn seal_with(&self, cipher: &XChaCha20Poly1305, nonce: [u8; NONCE_LEN], body: &[u8]) -> String {
        let payload = Payload {
            msg: body,
            aad: self.aad,
        };
        // Encryption fails only for messages over 256 GiB.
        let sealed = cipher
            .encrypt(&XNonce::from(nonce), payload)
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// The body of a token [`seal`](Self::seal) made with the same key; `None` for anything
    /// else, altered in any byte included.
    pub(crate) fn open(&self, key: &[u8; 32], token: &str) -> Option<Vec<u8>> {
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = XNonce::try_from(nonce).ok()?;
        let payload = || Payload {
            msg: sealed,
            aad: self.aad,
        };
        self.cipher(key)
            .decrypt(&nonce, payload())
            .or_else(|_| self.earlier_cipher(key).decrypt(&nonce, payload()))
            .ok()
    }

    /// `seal` with the cipher of earlier builds, for the test that they still open.
    #[cfg(test)]
    fn seal_as_earlier(&self, key: &[u8; 32], body: &[u8]) -> String {
        self.seal_with(&self.earlier_cipher(key), [3u8; NONCE_LEN], body)
    }
}

/// The wall clock in milliseconds since the epoch (sealed states and sessions expire by it).
pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A `requestState` for `tool` and `principal` carrying the answers given so far, so the
/// next round (which may send only the new answers) can replay every earlier one.
pub(crate) fn issue(
    key: &[u8; 32],
    tool: &str,
    principal: &Principal,
    answers: &Map<String, Value>,
) -> String {
    issue_at(key, tool, principal, answers, now_ms())
}

fn issue_at(
    key: &[u8; 32],
    tool: &str,
    principal: &Principal,
    answers: &Map<String, Value>,
    now: u64,
) -> String {
    let body = json!({
        "tool": tool,
        "tenant": principal.tenant,
        "subject": principal.subject,
        "exp": now + STATE_TTL.as_millis() as u64,
        "answers": answers,
    })
    .to_string();
    REQUEST_STATE.seal(key, body.as_bytes())
}

/// Opens a `requestState` presented by `principal` for `tool` and returns the answers it
/// carries. Every refusal reads the same to the client except expiry, which it can act on.
pub(crate) fn verify(
    key: &[u8; 32],
    tool: &str,
    principal: &Principal,
    state: &str,
) -> Result<Map<String, Value>, &'static str> {
    verify_at(key, tool, principal, state, now_ms())
}

fn verify_at(
    key: &[u8; 32],
    tool: &str,
    principal: &Principal,
    state: &str,
    now: u64,
) -> Result<Map<String, Value>, &'static str> {
    const INVALID: &str = "requestState is not valid for this request";
    let body = REQUEST_STATE.open(key, state).ok_or(INVALID)?;
    let v: Value = serde_json::from_slice(&body).map_err(|_| INVALID)?;
    if v["tool"] != tool || v["tenant"] != principal.tenant || v["subject"] != principal.subject {
        return Err(INVALID);
    }
    if v["exp"].as_u64().is_none_or(|exp| exp < now) {
        return Err("requestState has expired; start the call again without it");
    }
    Ok(v["answers"].as_object().cloned().unwrap_or_default())
}

/// The `requestState` of an MRTR round that asks a handle's task's questions: it names the
/// task, so the round's retry answers that task instead of calling the tool again.
const HANDLE_STATE: Purpose = Purpose {
    key_label: b"snodo handle-state key v1\0",
    aad: b"snodo/handle-state/v1",
};

/// A `requestState` that names task `task_id` to `principal`, for as long as [`STATE_TTL`].
pub(crate) fn issue_handle(key: &[u8; 32], task_id: &str, principal: &Principal) -> String {
    let body = json!({
        "task": task_id,
        "tenant": principal.tenant,
        "subject": principal.subject,
        "exp": now_ms() + STATE_TTL.as_millis() as u64,
    })
    .to_string();
    HANDLE_STATE.seal(key, body.as_bytes())
}

/// The task a `requestState` from [`issue_handle`] names, presented by `principal`. `None`:
/// the state is not a handle's (it may be an ordinary round's); `Some(Err)`: it is, but
/// another principal's or expired.
pub(crate) fn open_handle(
    key: &[u8; 32],
    principal: &Principal,
    state: &str,
) -> Option<Result<String, String>> {
    let body = HANDLE_STATE.open(key, state)?;
    let v: Value = serde_json::from_slice(&body).ok()?;
    let task = v["task"].as_str()?.to_owned();
    if v["tenant"] != principal.tenant || v["subject"] != principal.subject {
        return Some(Err("requestState is not valid for this request".to_owned()));
    }
    if v["exp"].as_u64().is_none_or(|exp| exp < now_ms()) {
        return Some(Err(format!(
            "requestState has expired; call {} with {{\"taskId\": \"{task}\"}} to be asked again",
            snodo_runner::TASK_RESULT_TOOL
        )));
    }
    Some(Ok(task))
}

/// The id of a server request that asks a task's question on a 2025-11-25 stream.
const TASK_QUESTION: Purpose = Purpose {
    key_label: b"snodo task-question key v1\0",
    aad: b"snodo/task-question/v1",
};

/// How the id of a server request that asks a task's question begins.
pub(crate) const QUESTION_ID_PREFIX: &str = "snodo-q-";

/// The id of a server request asking the question under `input` of task `task_id` of
/// `party`: it names both, sealed, so that the client's answer commits to the task on
/// whichever node it is posted to, by that party only, for [`STATE_TTL`].
pub(crate) fn issue_question_id(
    key: &[u8; 32],
    task_id: &str,
    input: &str,
    party: &super::session::Party,
) -> String {
    let body = json!({
        "task": task_id,
        "input": input,
        "tenant": party.principal.tenant,
        "subject": party.principal.subject,
        "session": party.session,
        "exp": now_ms() + STATE_TTL.as_millis() as u64,
    })
    .to_string();
    format!(
        "{QUESTION_ID_PREFIX}{}",
        TASK_QUESTION.seal(key, body.as_bytes())
    )
}

/// The task and the input key a server request id from [`issue_question_id`] names, when
/// `party` answers it in time; `None` for any other id, party or time.
pub(crate) fn open_question_id(
    key: &[u8; 32],
    id: &str,
    party: &super::session::Party,
) -> Option<(String, String)> {
    let body = TASK_QUESTION.open(key, id.strip_prefix(QUESTION_ID_PREFIX)?)?;
    let v: Value = serde_json::from_slice(&body).ok()?;
    let same = v["tenant"] == party.principal.tenant
        && v["subject"] == party.principal.subject
        && v["session"] == json!(party.session);
    if !same || v["exp"].as_u64().is_none_or(|exp| exp < now_ms()) {
        return None;
    }
    Some((
        v["task"].as_str()?.to_owned(),
        v["input"].as_str()?.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_state_opens_only_as_one_for_its_principal() {
        let key = [4u8; 32];
        let ada = Principal::new("t1", "ada");
        let state = issue_handle(&key, "019ade3f4c2a7b8e91f0c3d2a4b5e6f7", &ada);
        assert_eq!(
            open_handle(&key, &ada, &state),
            Some(Ok("019ade3f4c2a7b8e91f0c3d2a4b5e6f7".to_owned()))
        );
        assert!(matches!(
            open_handle(&key, &Principal::new("t1", "bob"), &state),
            Some(Err(_))
        ));
        assert!(matches!(
            open_handle(&key, &Principal::new("t2", "ada"), &state),
            Some(Err(_))
        ));
        assert_eq!(open_handle(&[5u8; 32], &ada, &state), None, "another key");
        let round = issue(&key, "greet", &ada, &Map::new());
        assert_eq!(
            open_handle(&key, &ada, &round),
            None,
            "an ordinary round's state"
        );
        assert!(
            verify(&key, "greet", &ada, &state).is_err(),
            "and the other way"
        );
    }

    #[test]
    fn a_question_id_opens_for_the_party_asked_only() {
        use super::super::session::Party;
        let key = [6u8; 32];
        let party = |subject: &str, session: Option<&str>| Party {
            principal: Principal::new("t1", subject),
            session: session.map(str::to_owned),
        };
        let ada = party("ada", Some("s1"));
        let id = issue_question_id(&key, "019ade3f4c2a7b8e91f0c3d2a4b5e6f7", "confirm", &ada);
        assert!(id.starts_with(QUESTION_ID_PREFIX));
        assert_eq!(
            open_question_id(&key, &id, &ada),
            Some(("019ade3f4c2a7b8e91f0c3d2a4b5e6f7".into(), "confirm".into()))
        );
        assert_eq!(open_question_id(&key, &id, &party("bob", Some("s1"))), None);
        assert_eq!(open_question_id(&key, &id, &party("ada", Some("s2"))), None);
        assert_eq!(open_question_id(&key, &id, &party("ada", None)), None);
        assert_eq!(open_question_id(&[7u8; 32], &id, &ada), None, "another key");
        let state = issue_handle(&key, "019ade3f4c2a7b8e91f0c3d2a4b5e6f7", &ada.principal);
        assert_eq!(
            open_question_id(&key, &format!("{QUESTION_ID_PREFIX}{state}"), &ada),
            None,
            "another purpose"
        );
    }

    #[test]
    fn tokens_sealed_by_earlier_builds_still_open_and_new_ones_use_the_derived_key() {
        let key = [9u8; 32];
        let earlier = REQUEST_STATE.seal_as_earlier(&key, b"issued before");
        assert_eq!(
            REQUEST_STATE.open(&key, &earlier).as_deref(),
            Some(&b"issued before"[..])
        );
        let sealed = REQUEST_STATE.seal(&key, b"issued now");
        let bytes = URL_SAFE_NO_PAD.decode(&sealed).expect("base64");
        let (nonce, body) = bytes.split_at(NONCE_LEN);
        let nonce = XNonce::try_from(nonce).expect("nonce");
        let payload = Payload {
            msg: body,
            aad: REQUEST_STATE.aad,
        };
        assert!(
            REQUEST_STATE
                .earlier_cipher(&key)
                .decrypt(&nonce, payload)
                .is_err(),
            "new tokens are sealed with the HKDF key only"
        );
        assert_eq!(
            REQUEST_STATE.open(&key, &sealed).as_deref(),
            Some(&b"issued now"[..])
        );
        assert_eq!(REQUEST_STATE.open(&[8u8; 32], &earlier), None);
    }

    #[test]
    fn states_open_only_for_their_tool_principal_and_time() {
        let key = [7u8; 32];
        let ada = Principal::new("acme", "ada");
        let answers: Map<String, Value> = [(
            "user_name".to_owned(),
            json!({"action": "accept", "content": {"name": "Ada Secret"}}),
        )]
        .into_iter()
        .collect();
        let s = issue_at(&key, "greet", &ada, &answers, 1_000);
        assert_eq!(verify_at(&key, "greet", &ada, &s, 2_000), Ok(answers));
        // The answers are not readable from the state.
        let raw = URL_SAFE_NO_PAD.decode(&s).expect("base64");
        assert!(!String::from_utf8_lossy(&raw).contains("Ada Secret"));
        assert!(verify_at(&key, "other", &ada, &s, 2_000).is_err());
        assert!(verify_at(&key, "greet", &Principal::new("acme", "bob"), &s, 2_000).is_err());
        assert!(verify_at(&key, "greet", &Principal::new("evil", "ada"), &s, 2_000).is_err());
        assert!(verify_at(&[8u8; 32], "greet", &ada, &s, 2_000).is_err());
        let late = 1_000 + STATE_TTL.as_millis() as u64 + 1;
        assert_eq!(
            verify_at(&key, "greet", &ada, &s, late),
            Err("requestState has expired; start the call again without it")
        );
        for i in [0, NONCE_LEN, raw.len() - 1] {
            let mut tampered = raw.clone();
            tampered[i] ^= 1;
            let t = URL_SAFE_NO_PAD.encode(tampered);
            assert!(
                verify_at(&key, "greet", &ada, &t, 2_000).is_err(),
                "byte {i}"
            );
        }
        assert!(verify_at(&key, "greet", &ada, "nonsense", 2_000).is_err());
        assert!(verify_at(&key, "greet", &ada, "", 2_000).is_err());
    }
}
