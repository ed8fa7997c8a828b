//! Helpers for tests of this crate and of the crates above it (cargo feature `testing`):
//! waiting for a state without sleeping, holding store operations at a gate, answering a
//! stored question, and one answer to whether the machine's PostgreSQL is there.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::model::{EventId, Principal, Task, TaskId};
use crate::store::{Access, Action, Committed, Store};

/// Probes until it returns `Some`, re-probing every [`tick`]; fails the test after a
/// minute naming `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            tick().await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Awaits the stored task `id` satisfying `pred`, re-reading it every [`tick`]; fails the
/// test after a minute naming `what`.
pub async fn await_stored(
    store: &dyn Store,
    id: &TaskId,
    what: &str,
    pred: impl Fn(&Task) -> bool,
) -> Task {
    eventually(what, || async {
        let (t, _) = store.inspect(id).await.expect("inspect").expect("present");
        pred(&t).then_some(t)
    })
    .await
}

/// Awaits what the spawned `handle` returns; fails the test, saying `what`, if it has not
/// ended within twenty seconds.
pub async fn join_soon<T>(handle: tokio::task::JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(20), handle)
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .expect("join")
}

/// The pace of re-probing a state that has no event of its own. The test waits for the
/// state, never for time: the tick only keeps the wait from spinning against the guests it
/// waits for on a machine with two cores.
pub async fn tick() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// A gate that a test's store layer holds operations at: each [`Gate::hold`] counts itself
/// and waits until the test opens the gate, which then stays open.
#[derive(Default, Clone)]
pub struct Gate {
    open: Arc<tokio::sync::Notify>,
    opened: Arc<AtomicBool>,
    held: Arc<AtomicU64>,
    arrived: Arc<tokio::sync::Notify>,
}

impl Gate {
    /// Waits here until the gate is open.
    pub async fn hold(&self) {
        let opened = self.open.notified();
        self.held.fetch_add(1, Ordering::AcqRel);
        self.arrived.notify_waiters();
        if !self.opened.load(Ordering::Acquire) {
            opened.await;
        }
    }

    /// Waits until `n` operations were held, or fails the test after a minute.
    pub async fn until_held(&self, n: u64) {
        let reached = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let arrived = self.arrived.notified();
                if self.held.load(Ordering::Acquire) >= n {
                    return;
                }
                arrived.await;
            }
        })
        .await;
        reached.unwrap_or_else(|_| panic!("{n} operations were never held at the gate"));
    }

    /// Lets every held operation, and every later one, through.
    pub fn open(&self) {
        self.opened.store(true, Ordering::Release);
        self.open.notify_waiters();
    }
}

/// What a client of tenant `acme` may do to task `id` by `action`, as its request would
/// be authorized.
pub async fn acme_access(store: &dyn Store, id: &TaskId, action: Action) -> Access {
    store
        .authorize(&Principal::new("acme", "u"), action, &id.to_string())
        .await
        .expect("authorize")
}

/// Answers the `confirm` question of task `id` (tenant `acme`) with yes, as a client's
/// `tasks/update` would: the store accepts it; waking a waiter is the caller's business.
pub async fn confirm(store: &dyn Store, id: &TaskId) -> Committed {
    confirm_key(store, id, "confirm").await
}

/// Answers the input `key` of the `acme` task `id` with an accepted confirmation.
pub async fn confirm_key(store: &dyn Store, id: &TaskId, key: &str) -> Committed {
    let access = acme_access(store, id, Action::Update).await;
    let answer = serde_json::Map::from_iter([(
        key.to_owned(),
        serde_json::json!({"action": "accept", "content": {"confirm": true}}),
    )]);
    store
        .accept_input(&access, EventId::random(), answer)
        .await
        .expect("accept")
}

/// Whether the PostgreSQL server of the machine answers at 127.0.0.1:5432. Where it does
/// not, the test fails under `CI=true` (which requires it) and otherwise says loudly that
/// `what` did not run.
pub fn postgres_reachable(what: &str) -> bool {
    let up = std::net::TcpStream::connect_timeout(
        &"127.0.0.1:5432".parse().expect("address"),
        Duration::from_secs(2),
    )
    .is_ok();
    if !up {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "PostgreSQL is required under CI=true and 127.0.0.1:5432 does not answer"
        );
        eprintln!("SKIPPED: PostgreSQL is not reachable; {what} did not run");
    }
    up
}
