//! MCP 2025-11-25 sessions, kept out of the server's state.
//!
//! The `initialize` handshake declares what the rest of a session relies on: the protocol
//! version and the client's capabilities. Both go into the `Mcp-Session-Id` itself, sealed
//! with the store's server key and bound to the principal, so every node that shares the
//! store, and this one after a restart, reads a session from its id alone: no session is
//! ever "unknown" and 2026-07-28 clients never touch any of this.
//!
//! A session ended with DELETE is revoked in the store until the time its id would have
//! expired anyway, so every node, and this one after a restart, refuses it; each node also
//! remembers the ends it has seen, to skip the store's read for them.
//!
//! Two things are per node and best effort, and say so: the log level a session set with
//! `logging/setLevel` (bounded; forgotten at restart, which means the default again), and
//! the server requests a 2025-11-25 call is waiting on (an answer must reach the node whose
//! stream asked; a load balancer keeps a session on one node by `Mcp-Session-Id`).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use snodo_core::model::{Principal, Timestamp};

use crate::protocol::{LogLevel, RpcError};

use super::state::Purpose;

/// The revisions served through the `initialize` handshake, newest first. A client asking
/// for one of them gets it; any other request is answered with the newest.
pub(crate) const HANDSHAKE_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

const SESSION: Purpose = Purpose::new(b"snodo session key v1\0", b"snodo/session/v1");

/// How long a session id opens after `initialize` issued it. A client past it is told
/// the session is unknown (404) and starts a new one, as the transport says.
pub(crate) const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Capabilities larger than this are kept to their first two levels of keys in a session
/// id (what input checks read), so the header stays small whatever a client declares.
const MAX_CAPABILITY_BYTES: usize = 1024;

/// What a session declared at `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Session {
    /// The negotiated revision.
    pub(crate) version: String,
    /// The client's capabilities.
    pub(crate) capabilities: Value,
}

impl Session {
    /// The session's `Mcp-Session-Id`, opening for [`SESSION_TTL`].
    pub(crate) fn issue(&self, key: &[u8; 32], principal: &Principal) -> String {
        self.issue_at(key, principal, super::state::now_ms())
    }

    fn issue_at(&self, key: &[u8; 32], principal: &Principal, now: u64) -> String {
        let mut capabilities = self.capabilities.clone();
        if capabilities.to_string().len() > MAX_CAPABILITY_BYTES {
            capabilities = outline(&capabilities);
        }
        let body = json!({
            "v": self.version,
            "c": capabilities,
            "t": principal.tenant,
            "s": principal.subject,
            "e": now + SESSION_TTL.as_millis() as u64,
        });
        SESSION.seal(key, body.to_string().as_bytes())
    }

    /// The session an id names, if this server issued it to `principal` and it has not
    /// expired. Ids issued before sessions carried an expiry do not open: their clients
    /// start a new session once.
    pub(crate) fn open(key: &[u8; 32], principal: &Principal, id: &str) -> Option<Session> {
        Self::open_until(key, principal, id).map(|(s, _)| s)
    }

    /// As [`Session::open`], with the time (Unix milliseconds) the id stops opening.
    pub(crate) fn open_until(
        key: &[u8; 32],
        principal: &Principal,
        id: &str,
    ) -> Option<(Session, u64)> {
        Self::open_at(key, principal, id, super::state::now_ms())
    }

    fn open_at(
        key: &[u8; 32],
        principal: &Principal,
        id: &str,
        now: u64,
    ) -> Option<(Session, u64)> {
        let body = SESSION.open(key, id)?;
        let v: Value = serde_json::from_slice(&body).ok()?;
        if v["t"] != principal.tenant || v["s"] != principal.subject {
            return None;
        }
        let expires = v["e"].as_u64().filter(|e| now < *e)?;
        Some((
            Session {
                version: v["v"].as_str()?.to_owned(),
                capabilities: v["c"].clone(),
            },
            expires,
        ))
    }
}

/// The key a session's end is revoked under in the store: a digest of its id (ids carry
/// capabilities and can be long; 128 bits keep distinct ids apart).
pub(crate) fn revocation_key(id: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(id.as_bytes());
    format!("session/{}", snodo_core::ids::hex(&d[..16]))
}

/// `{a: {b: {…}, c: true}}` as `{a: {b: {}, c: true}}`.
fn outline(capabilities: &Value) -> Value {
    let Some(top) = capabilities.as_object() else {
        return json!({});
    };
    let out: Map<String, Value> = top
        .iter()
        .map(|(k, v)| {
            let inner: Map<String, Value> = v
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| {
                            (k.clone(), if v.is_object() { json!({}) } else { v.clone() })
                        })
                        .collect()
                })
                .unwrap_or_default();
            (k.clone(), Value::Object(inner))
        })
        .collect();
    Value::Object(out)
}

/// How many sessions a node remembers something about (a log level, an end); past it an
/// arbitrary entry is forgotten: that session falls back to the default level, or an ended
/// one is looked up in the store again.
const MAX_REMEMBERED: usize = 10_000;

/// What this node remembers of 2025-11-25 sessions: the level each set with
/// `logging/setLevel`, and which were ended with DELETE.
#[derive(Default)]
pub(crate) struct SessionMemory(Mutex<Remembered>);

#[derive(Default)]
struct Remembered {
    levels: HashMap<String, LogLevel>,
    ended: HashSet<String>,
}

fn bounded_insert<V>(m: &mut HashMap<String, V>, id: &str, v: V) {
    if m.len() >= MAX_REMEMBERED
        && !m.contains_key(id)
        && let Some(k) = m.keys().next().cloned()
    {
        m.remove(&k);
    }
    m.insert(id.to_owned(), v);
}

impl SessionMemory {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Remembered> {
        self.0.lock()
    }

    /// Remembers `level` for the session `id`.
    pub(crate) fn set_level(&self, id: &str, level: LogLevel) {
        bounded_insert(&mut self.lock().levels, id, level);
    }

    /// The level the session `id` set, if this node remembers one.
    pub(crate) fn level(&self, id: &str) -> Option<LogLevel> {
        self.lock().levels.get(id).copied()
    }

    /// Remembers that the session `id` has ended (it is revoked in the store).
    pub(crate) fn end(&self, id: &str) {
        let mut r = self.lock();
        r.levels.remove(id);
        if r.ended.len() >= MAX_REMEMBERED
            && let Some(k) = r.ended.iter().next().cloned()
        {
            r.ended.remove(&k);
        }
        r.ended.insert(id.to_owned());
    }

    /// Whether this node knows the session `id` has ended.
    pub(crate) fn ended(&self, id: &str) -> bool {
        self.lock().ended.contains(id)
    }
}

type Answer = Result<Value, Value>;

/// Who may answer a server request: the principal it was asked of, in the session (its
/// `Mcp-Session-Id`, when the client keeps one) whose call asked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Party {
    /// The caller.
    pub(crate) principal: Principal,
    /// The call's session id.
    pub(crate) session: Option<String>,
}

/// Server requests a 2025-11-25 call sent on its stream and is waiting on. Ids are random
/// and tied to the principal and the session, so no other client, nor another session of
/// the same one, can answer them; an entry lives only as long as the call that waits on it
/// (each holds a synchronous-call slot, which bounds them).
#[derive(Default)]
pub(crate) struct Outstanding(Mutex<HashMap<String, (Party, oneshot::Sender<Answer>)>>);

impl Outstanding {
    /// A fresh request id for `party`, and where its answer will arrive.
    pub(crate) fn open(&self, party: &Party) -> (String, oneshot::Receiver<Answer>) {
        let id = format!(
            "snodo-{}",
            snodo_core::ids::hex(&snodo_core::ids::random_bytes::<16>())
        );
        (id.clone(), self.open_as(id, party))
    }

    /// Where the answer to the request `id` (unique: random, or sealed with a nonce) of
    /// `party` will arrive.
    pub(crate) fn open_as(&self, id: String, party: &Party) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        self.0.lock().insert(id, (party.clone(), tx));
        rx
    }

    /// How many server requests are waited on.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// Stops waiting on `id`.
    pub(crate) fn forget(&self, id: &str) {
        self.0.lock().remove(id);
    }

    /// Delivers a client's response; false if nothing of `party`'s waits on `id`.
    pub(crate) fn answer(&self, party: &Party, id: &Value, outcome: Answer) -> bool {
        let Some(id) = id.as_str() else {
            return false;
        };
        let mut m = self.0.lock();
        match m.get(id) {
            Some((p, _)) if p == party => {}
            _ => return false,
        }
        m.remove(id).is_some_and(|(_, tx)| tx.send(outcome).is_ok())
    }
}

impl super::McpServer {
    /// Ends a 2025-11-25 session (its DELETE): it is revoked in the store until its id
    /// would have expired, for every node. False when `id` names no live session this
    /// server issued to `principal`.
    pub async fn end_session(&self, principal: &Principal, id: &str) -> Result<bool, RpcError> {
        let key = self.server_key().await?;
        let Some((_, until)) = Session::open_until(&key, principal, id) else {
            return Ok(false);
        };
        if self.session_ended(id).await? {
            return Ok(false);
        }
        self.tasks
            .store()
            .revoke(&revocation_key(id), Timestamp(until))
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "a session's end could not be stored");
                RpcError::internal("the task store is unavailable; try again")
            })?;
        self.sessions.end(id);
        Ok(true)
    }

    /// Whether the session `id` has ended: remembered here, or revoked in the store.
    pub(crate) async fn session_ended(&self, id: &str) -> Result<bool, RpcError> {
        if self.sessions.ended(id) {
            return Ok(true);
        }
        let ended = self
            .tasks
            .store()
            .revoked(&revocation_key(id))
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "a session's end could not be read");
                RpcError::internal("the task store is unavailable; try again")
            })?;
        if ended {
            self.sessions.end(id);
        }
        Ok(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_sessions_and_levels_are_remembered() {
        let m = SessionMemory::default();
        m.set_level("a", LogLevel::Debug);
        assert_eq!(m.level("a"), Some(LogLevel::Debug));
        assert!(!m.ended("a"));
        m.end("a");
        assert!(m.ended("a"));
        assert_eq!(m.level("a"), None);
    }

    #[test]
    fn a_session_id_opens_only_for_its_principal_and_key() {
        let key = [3u8; 32];
        let ada = Principal::new("acme", "ada");
        let s = Session {
            version: "2025-11-25".into(),
            capabilities: json!({"elicitation": {"form": {}}, "sampling": {}}),
        };
        let id = s.issue(&key, &ada);
        assert!(
            id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "visible ASCII"
        );
        assert_eq!(Session::open(&key, &ada, &id), Some(s));
        assert_eq!(
            Session::open(&key, &Principal::new("evil", "ada"), &id),
            None
        );
        assert_eq!(Session::open(&[4u8; 32], &ada, &id), None);
        assert_eq!(Session::open(&key, &ada, "not-a-session"), None);
    }

    #[test]
    fn a_session_id_expires() {
        let key = [3u8; 32];
        let ada = Principal::new("acme", "ada");
        let s = Session {
            version: "2025-11-25".into(),
            capabilities: json!({}),
        };
        let ttl = SESSION_TTL.as_millis() as u64;
        let id = s.issue_at(&key, &ada, 1_000);
        assert_eq!(
            Session::open_at(&key, &ada, &id, 1_000 + ttl - 1).map(|(s, _)| s),
            Some(s)
        );
        assert_eq!(Session::open_at(&key, &ada, &id, 1_000 + ttl), None);
        // An id sealed without an expiry (as earlier builds issued them) does not open.
        let old = SESSION.seal(&key, br#"{"v":"2025-11-25","c":{},"t":"acme","s":"ada"}"#);
        assert_eq!(Session::open(&key, &ada, &old), None);
    }

    #[test]
    fn large_capabilities_keep_their_outline() {
        let key = [3u8; 32];
        let ada = Principal::new("acme", "ada");
        let big = "x".repeat(4096);
        let s = Session {
            version: "2025-11-25".into(),
            capabilities: json!({"elicitation": {"form": {"huge": big}}, "roots": {"listChanged": true}}),
        };
        let id = s.issue(&key, &ada);
        assert!(id.len() < 600, "{} bytes", id.len());
        let opened = Session::open(&key, &ada, &id).expect("opens");
        assert_eq!(
            opened.capabilities,
            json!({"elicitation": {"form": {}}, "roots": {"listChanged": true}})
        );
    }

    #[test]
    fn answers_reach_only_their_principal_and_once() {
        let out = Outstanding::default();
        let party = |subject: &str, session: &str| Party {
            principal: Principal::new("acme", subject),
            session: Some(session.into()),
        };
        let ada = party("ada", "s1");
        let (id, mut rx) = out.open(&ada);
        let id_v = json!(id);
        assert!(!out.answer(&party("bob", "s1"), &id_v, Ok(json!(1))));
        assert!(
            !out.answer(&party("ada", "s2"), &id_v, Ok(json!(1))),
            "another session"
        );
        assert!(rx.try_recv().is_err());
        assert!(out.answer(&ada, &id_v, Ok(json!({"action": "accept"}))));
        assert_eq!(rx.try_recv().unwrap(), Ok(json!({"action": "accept"})));
        assert!(!out.answer(&ada, &id_v, Ok(json!(2))), "answered once");
    }
}
