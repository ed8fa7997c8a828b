//! A webhook receiver for the stress and bench runs: takes every POST on a free loopback
//! port, keeps what it got (the event id, the payload's type and task, when it arrived), and
//! answers 503 to a seeded share of requests so that retries are exercised.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderMap, StatusCode};
use parking_lot::Mutex;
use serde_json::Value;

/// One delivery the receiver took (answered 2xx).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// `webhook-id`.
    pub id: String,
    /// The payload's `type` (`task.completed`).
    pub kind: String,
    /// The payload's `data.taskId`.
    pub task: String,
    /// The payload's `timestamp` (the transition's commit, RFC 3339).
    pub committed: String,
    /// When it arrived (wall clock, ms).
    pub at_ms: u64,
}

/// What the receiver has seen so far.
#[derive(Debug, Default)]
pub struct Seen {
    /// Deliveries taken, in arrival order.
    pub taken: Vec<Taken>,
    /// Requests refused (the seeded 503s).
    pub refused: u64,
}

impl Seen {
    /// The ids taken per (task, payload type): one id each is the promise.
    pub fn ids(&self) -> BTreeMap<(String, String), BTreeSet<String>> {
        let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for t in &self.taken {
            out.entry((t.task.clone(), t.kind.clone()))
                .or_default()
                .insert(t.id.clone());
        }
        out
    }
}

/// A running receiver.
pub struct Receiver {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it has seen.
    pub seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Listens on a free loopback port; one request in `refuse_one_in` (0: none) is answered
    /// 503, chosen by a counter seeded with `seed`.
    pub async fn start(refuse_one_in: u64, seed: u64) -> std::io::Result<Self> {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let counter = Arc::new(AtomicU64::new(seed));
        let s = seen.clone();
        let app = axum::Router::new().fallback(axum::routing::post(
            move |headers: HeaderMap, body: axum::body::Bytes| {
                let (seen, counter) = (s.clone(), counter.clone());
                async move {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    if refuse_one_in > 0 && n % refuse_one_in == 0 {
                        seen.lock().refused += 1;
                        return StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let payload: Value = serde_json::from_slice(&body).unwrap_or_default();
                    let id = headers
                        .get("webhook-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                    seen.lock().taken.push(Taken {
                        id,
                        kind: text(&payload["type"]),
                        task: text(&payload["data"]["taskId"]),
                        committed: text(&payload["timestamp"]),
                        at_ms: crate::model::wall_millis(),
                    });
                    StatusCode::NO_CONTENT
                }
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, seen, task })
    }

    /// The `[webhooks]` section that subscribes this receiver to every event of `tenant`:
    /// tried again after 0.2, 0.5, 1, 2, 4 and 8 s, each answer awaited 5 s, so that a
    /// machine loaded by the rest of a test run does not use the tries up (a dead letter is
    /// not a delivery).
    pub fn config_toml(&self, tenant: &str) -> String {
        format!(
            "\n[webhooks]\nallowed_hosts = [\"http://{addr}\"]\nretry_ms = [200, 500, 1000, 2000, 4000, 8000]\n\
             lease_ms = 10000\nconnect_timeout_ms = 2000\nanswer_timeout_ms = 5000\n\n\
             [[webhooks.subscriptions]]\nname = \"receiver\"\ntenant = \"{tenant}\"\n\
             url = \"http://{addr}/hook\"\nsecret = \"whsec_{key}\"\n",
            addr = self.addr,
            key = "c25vZG8tc3RyZXNzLXJlY2VpdmVyLXNlY3JldC0wMDA="
        )
    }
}
