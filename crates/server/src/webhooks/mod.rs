//! Webhooks: tenants' subscriptions to task events, delivered from the store's outbox,
//! signed per Standard Webhooks, retried on an exact persisted schedule, then kept as dead
//! letters an operator can redeliver.
//!
//! The store writes an event in the commit of each transition a task's subscriptions hear
//! (the task names them from its creation: [`TaskService::hear`] picks the tenant's
//! subscriptions for the tool, and the one a call's `_meta` asks for). Every node runs the
//! same loop ([`run`]): for each subscription no other node holds, it takes the row's
//! lease (a compare-and-set on the row), sends the events after the row's cursor and the
//! retries now due, and settles them on the row (a compare-and-set again). A node that dies
//! holding a lease leaves it to run out; the next node sends again what was not settled,
//! with the same event ids. So the promise is at least once, one id per event: receivers
//! drop what they have seen.
//!
//! Deliveries go through the outbound sender's host path ([`snodo_wasm::outbound`]): the
//! allow-list `webhooks.allowed_hosts`, the address rules, TLS, no redirects, bounded
//! times and sizes.

mod config;
mod sign;

pub use config::{WebhookDeclaration, WebhookSettings};
pub(crate) use sign::{new_secret, signature};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use snodo_core::model::{
    DeliveryLease, OutboxEvent, ScheduleOrigin, Timestamp, Tried, Webhook, WebhookSpec,
};
use snodo_core::store::{Changed, Store, StoreError};
use snodo_wasm::outbound::{AllowList, Outbound, PostLimits};
use tokio_util::sync::CancellationToken;

use crate::tasks::TaskService;

/// The longest the loop sleeps between two looks at the outbox.
pub(crate) const POLL: Duration = Duration::from_millis(500);
/// The least time between two looks a task change wakes: changes come in bursts, and one
/// look covers every event committed before it.
const CHANGE_GAP: Duration = Duration::from_millis(5);
/// Most events one look reads from the outbox.
const SCAN: usize = 512;
/// Most events of one subscription sent at once.
const WINDOW: usize = 32;
/// How many times a change is tried against a row that keeps moving.
const TRIES: usize = 8;
/// Events swept per look, at most.
const SWEEP: usize = 1_000;
/// How often a look sweeps the outbox, in looks.
const SWEEP_EVERY: u64 = 64;

/// Why a webhook operation failed, in terms an edge can say.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No subscription has the name.
    #[error("no webhook subscription is named {0:?}")]
    NotFound(String),
    /// The declaration is wrong; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The configuration declares it: change it there.
    #[error(
        "webhook {0:?} is declared in the configuration's [[webhooks.subscriptions]]: change or remove it there"
    )]
    Configured(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one look did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Events a receiver took (2xx).
    pub delivered: u64,
    /// Tries that failed.
    pub failed: u64,
    /// Events given up as dead letters.
    pub dead: u64,
    /// Events swept from the outbox.
    pub swept: u64,
    /// How long until the earliest retry, if one waits.
    pub next_in: Option<Duration>,
    /// A subscription had more to send than one round takes: look again at once.
    pub more: bool,
    /// Subscriptions in the store: with none, task changes do not wake the loop.
    pub subscriptions: usize,
}

/// The webhooks of one server. A cheap handle: the loop holds one, the admin routes another.
#[derive(Clone)]
pub(crate) struct Webhooks {
    pub(crate) tasks: TaskService,
    pub(crate) outbound: Arc<Outbound>,
    pub(crate) settings: Arc<WebhookSettings>,
    pub(crate) allowed: Arc<AllowList>,
    /// This node's name, in the leases it takes.
    pub(crate) node: Arc<str>,
    /// Woken when a subscription changes on this node.
    pub(crate) wake: Arc<tokio::sync::Notify>,
    /// Looks so far (for the sweep's turn).
    pub(crate) looks: Arc<std::sync::atomic::AtomicU64>,
}

impl Webhooks {
    fn store(&self) -> &Arc<dyn Store> {
        self.tasks.store()
    }

    /// Every subscription, by name.
    pub(crate) async fn list(&self) -> Result<Vec<Webhook>, WebhookError> {
        Ok(self.store().webhooks().await?)
    }

    /// The subscription `name`.
    pub(crate) async fn get(&self, name: &str) -> Result<Webhook, WebhookError> {
        self.store()
            .webhook(name)
            .await?
            .ok_or_else(|| WebhookError::NotFound(name.to_owned()))
    }

    /// Checks `spec` against the delivery allow-list (its URL must be reachable).
    fn check(&self, spec: &WebhookSpec) -> Result<(), WebhookError> {
        spec.check().map_err(WebhookError::Invalid)?;
        self.settings
            .reachable(&self.allowed, &spec.url)
            .map_err(WebhookError::Invalid)
    }

    /// Declares a subscription from `origin`: a new one (signing with the declared secret,
    /// or a new random one), or a new declaration of one (its deliveries stand; a declared
    /// secret that differs is a rotation). Declaring what is declared writes nothing.
    pub(crate) async fn declare(
        &self,
        decl: WebhookDeclaration,
        origin: ScheduleOrigin,
    ) -> Result<Webhook, WebhookError> {
        let (spec, secret) = decl.into_parts().map_err(WebhookError::Invalid)?;
        self.check(&spec)?;
        let store = self.store();
        for _ in 0..TRIES {
            let now = store.now().await?;
            let current = store.webhook(&spec.name).await?;
            let (expected, after) = match &current {
                None => {
                    let cursor = store.last_event().await?;
                    let secret = secret.clone().unwrap_or_else(new_secret);
                    let retry = self.settings.retry_policy();
                    let row = Webhook::new(spec.clone(), origin, secret, retry, cursor, now);
                    (None, row)
                }
                Some(row)
                    if row.origin == ScheduleOrigin::Config && origin == ScheduleOrigin::Api =>
                {
                    return Err(WebhookError::Configured(spec.name));
                }
                Some(row) => {
                    let same_secret = secret
                        .as_ref()
                        .is_none_or(|s| row.secrets.first().is_some_and(|c| c.secret == *s));
                    if row.spec == spec && row.origin == origin && same_secret {
                        return Ok(row.clone());
                    }
                    let mut next = row.next();
                    next.spec = spec.clone();
                    next.origin = origin;
                    if !same_secret && let Some(s) = &secret {
                        next.rotate(s.clone(), now, now.plus_ms(self.settings.rotation_grace_ms));
                    }
                    (Some(row.revision), next)
                }
            };
            if self.swapped(&spec.name, expected, Some(&after)).await? {
                return Ok(after);
            }
        }
        Err(busy(&spec.name))
    }

    /// Swaps the row `name` from `expected` to `after` and, once it is, refreshes what
    /// creations consult and wakes the loop; `false` when the row moved meanwhile.
    async fn swapped(
        &self,
        name: &str,
        expected: Option<u64>,
        after: Option<&Webhook>,
    ) -> Result<bool, WebhookError> {
        match self.store().swap_webhook(name, expected, after).await {
            Ok(()) => {
                self.refresh_hearing().await?;
                self.wake.notify_one();
                Ok(true)
            }
            Err(StoreError::WebhookConflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the store's configured subscriptions agree with `decls`: each declared, and
    /// those the configuration no longer declares removed.
    pub(crate) async fn declare_configured(
        &self,
        decls: &[WebhookDeclaration],
    ) -> Result<(), WebhookError> {
        let names: BTreeSet<&str> = decls.iter().map(|d| d.name.as_str()).collect();
        for d in decls {
            self.declare(d.clone(), ScheduleOrigin::Config).await?;
        }
        for row in self.list().await? {
            if row.origin == ScheduleOrigin::Config && !names.contains(row.spec.name.as_str()) {
                self.change(&row.spec.name, |_, _| Ok(None)).await?;
            }
        }
        self.refresh_hearing().await
    }

    /// Lets go of the leases this node's previous life held (node ids are unique among live
    /// nodes, as for task claims): its rounds ended with it, and their tries are sent again
    /// now rather than when the leases run out.
    pub(crate) async fn release_own_leases(&self) -> Result<(), WebhookError> {
        for row in self.list().await? {
            if row.lease.as_ref().is_some_and(|l| *l.node == *self.node) {
                let node = self.node.clone();
                self.change(&row.spec.name, move |current, _| {
                    let mut next = current.next();
                    if next.lease.as_ref().is_some_and(|l| *l.node == *node) {
                        next.lease = None;
                    }
                    Ok(Some(next))
                })
                .await?;
            }
        }
        Ok(())
    }

    /// Changes the row `name` by `f` (given the row and the store's time; `None`:
    /// removes it), tried again while the row keeps moving.
    async fn change(
        &self,
        name: &str,
        f: impl Fn(&Webhook, Timestamp) -> Result<Option<Webhook>, WebhookError>,
    ) -> Result<Option<Webhook>, WebhookError> {
        let store = self.store();
        for _ in 0..TRIES {
            let row = self.get(name).await?;
            let now = store.now().await?;
            let after = f(&row, now)?;
            if self
                .swapped(name, Some(row.revision), after.as_ref())
                .await?
            {
                return Ok(after);
            }
        }
        Err(busy(name))
    }

    /// Removes the subscription `name`; its events still in the outbox are swept in time.
    pub(crate) async fn remove(&self, name: &str) -> Result<(), WebhookError> {
        self.change(name, |row, _| {
            if row.origin == ScheduleOrigin::Config {
                return Err(WebhookError::Configured(name.to_owned()));
            }
            Ok(None)
        })
        .await
        .map(|_| ())
    }

    /// Pauses or resumes deliveries to `name` (events wait in the outbox meanwhile).
    pub(crate) async fn pause(&self, name: &str, paused: bool) -> Result<Webhook, WebhookError> {
        self.changed(name, |row, _| {
            let mut next = row.next();
            next.paused = paused;
            Ok(Some(next))
        })
        .await
    }

    /// A new signing secret for `name`; the old one keeps signing beside it for
    /// `webhooks.rotation_grace_ms`. The answer holds the new secret.
    pub(crate) async fn rotate(&self, name: &str) -> Result<Webhook, WebhookError> {
        let secret = new_secret();
        let grace = self.settings.rotation_grace_ms;
        self.changed(name, move |row, now| {
            let mut next = row.next();
            next.rotate(secret.clone(), now, now.plus_ms(grace));
            Ok(Some(next))
        })
        .await
    }

    /// Sends the dead letters of `name` again (the one with the event id `event`, or every
    /// one) at the next look: one more try each, and one that fails is a dead letter again.
    /// The answer holds the row and how many were sent back.
    pub(crate) async fn redeliver(
        &self,
        name: &str,
        event: Option<&str>,
    ) -> Result<(Webhook, usize), WebhookError> {
        let event = event.map(str::to_owned);
        let pick =
            |d: &snodo_core::model::DeadLetter| event.as_ref().is_none_or(|id| d.event.id == *id);
        let row = self
            .changed(name, |row, _| {
                let mut next = row.next();
                if next.redeliver(pick) == 0 {
                    return Err(WebhookError::NotFound(match &event {
                        Some(id) => format!("{name}: dead letter {id}"),
                        None => format!("{name}: any dead letter"),
                    }));
                }
                Ok(Some(next))
            })
            .await?;
        let n = row.replayed.len();
        Ok((row, n))
    }

    async fn changed(
        &self,
        name: &str,
        f: impl Fn(&Webhook, Timestamp) -> Result<Option<Webhook>, WebhookError>,
    ) -> Result<Webhook, WebhookError> {
        self.change(name, f)
            .await?
            .ok_or_else(|| WebhookError::NotFound(name.to_owned()))
    }

    /// Reads the subscriptions into what task creation consults ([`TaskService::hear`]).
    pub(crate) async fn refresh_hearing(&self) -> Result<(), WebhookError> {
        let rows = self.list().await?;
        self.tasks
            .set_hearing(rows.into_iter().map(|w| w.spec).collect());
        Ok(())
    }

    /// One look: every subscription this node may deliver gets its events after its
    /// cursor and its retries now due, sent and settled.
    pub(crate) async fn look(&self) -> Result<Round, WebhookError> {
        let store = self.store().clone();
        let now = store.now().await?;
        let rows = store.webhooks().await?;
        self.tasks
            .set_hearing(rows.iter().map(|w| w.spec.clone()).collect());
        let mut round = Round::default();
        let look = self
            .looks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        round.subscriptions = rows.len();
        if look.is_multiple_of(SWEEP_EVERY) {
            round.swept = self.sweep(&rows, now).await? as u64;
        }
        let mine: Vec<&Webhook> = rows
            .iter()
            .filter(|w| !w.paused && !w.leased(now))
            .collect();
        let Some(from) = mine.iter().map(|w| w.cursor).min() else {
            return Ok(round);
        };
        let events = store.events_after(from, SCAN).await?;
        let rounds =
            futures_util::future::join_all(mine.iter().map(|row| self.deliver(row, &events, now)))
                .await;
        for r in rounds {
            let r = r?;
            round.delivered += r.delivered;
            round.failed += r.failed;
            round.dead += r.dead;
            round.more |= r.more;
        }
        // Events the scan did not reach wait for the next look, at once while deliveries
        // flow (a subscription that can take nothing must not make the loop spin).
        round.more |= events.len() == SCAN && round.delivered + round.failed > 0;
        let next = self
            .store()
            .webhooks()
            .await?
            .iter()
            .filter(|w| !w.paused)
            .filter_map(Webhook::next_retry)
            .min();
        round.next_in =
            next.map(|t| Duration::from_millis(t.as_millis().saturating_sub(now.as_millis())));
        Ok(round)
    }

    /// Removes events every subscription is past, once older than `webhooks.retain_ms`.
    async fn sweep(&self, rows: &[Webhook], now: Timestamp) -> Result<usize, WebhookError> {
        let store = self.store();
        let below = match rows.iter().map(Webhook::needs_from).min() {
            Some(b) => b,
            None => store.last_event().await? + 1,
        };
        let before = Timestamp(now.as_millis().saturating_sub(self.settings.retain_ms));
        Ok(store.sweep_events(below, before, SWEEP).await?)
    }

    /// Sends `row`'s share of `events` (those after its cursor that name it, as many as it
    /// has room for) and its retries due at `now`, under its lease, then settles them.
    async fn deliver(
        &self,
        row: &Webhook,
        events: &[OutboxEvent],
        now: Timestamp,
    ) -> Result<Round, WebhookError> {
        let name = row.spec.name.as_str();
        let mut taken: Vec<OutboxEvent> = Vec::new();
        let mut scanned = row.cursor;
        let room = row.room().min(WINDOW);
        for e in events.iter().filter(|e| e.seq > row.cursor) {
            if e.to.iter().any(|t| t == name) {
                if taken.len() == room {
                    break;
                }
                taken.push(e.clone());
            }
            scanned = e.seq;
        }
        let mut due = row.due_retries(now);
        let more = (room > 0 && taken.len() == room) || due.len() > WINDOW;
        due.truncate(WINDOW);
        if taken.is_empty() && due.is_empty() && row.replayed.is_empty() {
            // Nothing of its own: the cursor moves only when it is far behind, so an idle
            // subscription does not cost a write per look.
            if scanned >= row.cursor + SCAN as u64 / 2 {
                self.settle(row, &[], scanned, None).await?;
            }
            return Ok(Round::default());
        }
        let store = self.store();
        let mut leased = row.next();
        let round_id = snodo_core::ids::hex(&snodo_core::ids::random_bytes::<8>());
        leased.lease = Some(DeliveryLease {
            node: self.node.to_string(),
            round: round_id.clone(),
            until: now.plus_ms(self.settings.lease_ms),
        });
        match store
            .swap_webhook(name, Some(row.revision), Some(&leased))
            .await
        {
            Ok(()) => {}
            Err(StoreError::WebhookConflict { .. }) => return Ok(Round::default()),
            Err(e) => return Err(e.into()),
        }
        let mut sending = taken;
        // A retry whose event the outbox no longer holds (the sweep keeps what a row needs,
        // so only a store changed by hand) is a failed try without a request.
        let mut gone = Vec::new();
        for seq in due {
            match store.events_after(seq - 1, 1).await?.pop() {
                Some(e) if e.seq == seq => sending.push(e),
                _ => gone.push((
                    missing(seq, name),
                    Tried::Failed(format!("event {seq} is no longer in the outbox")),
                )),
            }
        }
        sending.extend(leased.replayed.iter().map(|d| d.event.clone()));
        let tried =
            futures_util::future::join_all(sending.iter().map(|e| self.send(&leased, e, now)))
                .await;
        let mut tried: Vec<(OutboxEvent, Tried)> = sending.into_iter().zip(tried).collect();
        tried.extend(gone);
        let mut round = Round {
            more,
            ..Round::default()
        };
        for (_, t) in &tried {
            match t {
                Tried::Delivered => round.delivered += 1,
                Tried::Failed(_) => round.failed += 1,
            }
        }
        let before = leased.dead.len();
        let settled = self
            .settle(&leased, &tried, scanned, Some(&round_id))
            .await?;
        if let Some(after) = settled {
            round.dead = after.dead.len().saturating_sub(before) as u64;
        }
        self.tasks
            .metrics()
            .webhook_tries(round.delivered, round.failed, round.dead);
        Ok(round)
    }

    /// Applies `tried` and the cursor move to the row as it is now, releasing the lease of
    /// `round` when one is given (and only while that round still holds it: a lease that
    /// ran out and was taken over leaves the settling to its new holder, who sends again).
    async fn settle(
        &self,
        row: &Webhook,
        tried: &[(OutboxEvent, Tried)],
        scanned: u64,
        round: Option<&str>,
    ) -> Result<Option<Webhook>, WebhookError> {
        let store = self.store();
        let name = row.spec.name.as_str();
        for _ in 0..TRIES {
            let Some(current) = store.webhook(name).await? else {
                return Ok(None);
            };
            let holder = current.lease.as_ref().map(|l| l.round.as_str());
            if round.is_some() && holder != round {
                return Ok(None);
            }
            let now = store.now().await?;
            let mut next = current.next();
            next.settle(tried, scanned, now);
            if round.is_some() {
                next.lease = None;
            }
            match store
                .swap_webhook(name, Some(current.revision), Some(&next))
                .await
            {
                Ok(()) => return Ok(Some(next)),
                Err(StoreError::WebhookConflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(busy(name))
    }

    /// One try of `event` to `row`'s endpoint, signed with the secrets that sign at `now`
    /// (the store's time, which rotations are written in): 2xx is delivered, anything else
    /// a failure. `webhook-timestamp` is this node's wall clock, which receivers compare
    /// with their own.
    async fn send(&self, row: &Webhook, event: &OutboxEvent, now: Timestamp) -> Tried {
        let body = match serde_json::to_vec(&event.payload()) {
            Ok(b) => b,
            Err(e) => return Tried::Failed(format!("the event does not encode: {e}")),
        };
        let at = snodo_core::model::wall_millis() / 1_000;
        let mut headers = HeaderMap::new();
        let signatures: Vec<String> = row
            .signing(now)
            .filter_map(|s| signature(s, &event.id, at, &body))
            .collect();
        let values = [
            ("webhook-id", event.id.clone()),
            ("webhook-timestamp", at.to_string()),
            ("webhook-signature", signatures.join(" ")),
            ("content-type", "application/json".to_owned()),
            ("user-agent", format!("snodo/{}", env!("CARGO_PKG_VERSION"))),
        ];
        for (k, v) in values {
            match HeaderValue::from_str(&v) {
                Ok(v) => {
                    headers.insert(k, v);
                }
                Err(_) => return Tried::Failed(format!("the {k} header cannot be sent")),
            }
        }
        let limits = PostLimits {
            connect_timeout: Duration::from_millis(self.settings.connect_timeout_ms),
            answer_timeout: Duration::from_millis(self.settings.answer_timeout_ms),
            max_answer_bytes: 4 << 10,
        };
        match self
            .outbound
            .post(
                &self.allowed,
                "webhooks.allowed_hosts",
                &row.spec.url,
                headers,
                body,
                limits,
            )
            .await
        {
            Ok(a) if (200..300).contains(&a.status) => Tried::Delivered,
            Ok(a) => Tried::Failed(format!("the receiver answered {}", a.status)),
            Err(e) => Tried::Failed(e.to_string()),
        }
    }
}

/// An event a retry needs that the outbox no longer holds: tried as a failure so the row
/// keeps an account of it.
fn missing(seq: u64, name: &str) -> OutboxEvent {
    OutboxEvent {
        seq,
        id: format!("evt_missing_{seq}"),
        event: snodo_core::model::HookEvent::Failed,
        at: Timestamp(0),
        tenant: String::new(),
        task_id: String::new(),
        tool: String::new(),
        status_message: Some(format!("event {seq} of {name} was swept from the outbox")),
        to: vec![name.to_owned()],
    }
}

fn busy(name: &str) -> WebhookError {
    WebhookError::Store(StoreError::unavailable(format!(
        "webhook {name:?} kept changing; try again"
    )))
}

/// The loop every node runs until `stop`: a look, then a sleep until the next retry (at
/// most [`POLL`]), a subscription change on this node, or (while there are subscriptions)
/// a task change on this node or another, at most one look per [`CHANGE_GAP`] for those.
pub(crate) async fn run(
    webhooks: Webhooks,
    mut changes: Option<tokio::sync::broadcast::Receiver<Changed>>,
    stop: CancellationToken,
) {
    let wake = webhooks.wake.clone();
    loop {
        let began = tokio::time::Instant::now();
        let (wait, listen) = match webhooks.look().await {
            Ok(r) if r.more => (Duration::ZERO, true),
            Ok(r) => (r.next_in.map_or(POLL, |d| d.min(POLL)), r.subscriptions > 0),
            Err(e) => {
                tracing::warn!(error = %e, "a look at the webhooks' outbox failed; trying again");
                (POLL, false)
            }
        };
        let changed = async {
            match changes.as_mut().filter(|_| listen) {
                Some(rx) => {
                    let _ = rx.recv().await;
                    tokio::time::sleep_until(began + CHANGE_GAP).await;
                    // Every change waiting is covered by the next look.
                    while rx.try_recv().is_ok() {}
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = wake.notified() => {}
            () = changed => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}
