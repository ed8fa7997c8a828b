//! Webhooks: tenants' subscriptions to task events, the events the outbox keeps, and where
//! each subscription's deliveries stand. Pure rules; the store keeps the rows and the events,
//! and the server delivers.
//!
//! An event is written in the commit of the transition it reports (the store does it when a
//! task that names subscriptions in [`Task::notify`](super::Task::notify) reaches a status a
//! subscription can hear), so no transition is reported that did not commit and none that
//! committed goes unreported. Events take a sequence number in commit order; a
//! subscription's row keeps a cursor into them, the events waiting for a retry on its exact
//! schedule, and the dead letters. A row changes only by a compare-and-set on its revision,
//! and one node at a time delivers a subscription (its lease, in the row), so a crash
//! repeats deliveries (with the same event id) and never loses one.

use serde::{Deserialize, Serialize};

use super::{RetryPolicy, TaskStatus, Timestamp};

/// Most subscriptions one store keeps.
pub const MAX_WEBHOOKS: usize = 256;
/// Longest subscription name, in bytes.
pub const MAX_WEBHOOK_NAME: usize = 64;
/// Longest endpoint URL, in bytes.
pub const MAX_WEBHOOK_URL: usize = 2_048;
/// Most events of one subscription waiting for a retry: past it, the subscription takes no
/// new event until one settles (the events wait in the outbox; none is dropped).
pub const MAX_RETRYING: usize = 256;
/// Most dead letters one subscription keeps: past it, the subscription takes no new event
/// until an operator redelivers or discards some (none is dropped).
pub const MAX_DEAD_LETTERS: usize = 1_000;
/// Most secrets one subscription signs with at once: the current one and those being
/// rotated out.
pub const MAX_SECRETS: usize = 4;
/// The prefix of a Standard Webhooks secret; the rest is the key, base64.
pub const SECRET_PREFIX: &str = "whsec_";

/// A task event a subscription can hear: a status a task reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// The task finished with a result.
    Completed,
    /// The task finished with an error.
    Failed,
    /// The task was cancelled.
    Cancelled,
    /// The task waits for an answer.
    InputRequired,
}

impl HookEvent {
    /// Every event, in the order the documentation lists them.
    pub const ALL: [HookEvent; 4] = [
        HookEvent::Completed,
        HookEvent::Failed,
        HookEvent::Cancelled,
        HookEvent::InputRequired,
    ];

    /// The event a task reaching `status` makes, if any.
    pub fn of(status: TaskStatus) -> Option<Self> {
        match status {
            TaskStatus::Completed => Some(Self::Completed),
            TaskStatus::Failed => Some(Self::Failed),
            TaskStatus::Cancelled => Some(Self::Cancelled),
            TaskStatus::InputRequired => Some(Self::InputRequired),
            TaskStatus::Working => None,
        }
    }

    /// The name subscriptions use (`completed`, `input_required`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::InputRequired => "input_required",
        }
    }

    /// The event named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// The payload's `type`: `task.completed`, `task.input_required`.
    pub fn wire_type(self) -> String {
        format!("task.{}", self.as_str())
    }
}

/// What a subscription hears and where it sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSpec {
    /// Unique within the store: letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// The tenant whose tasks it hears.
    pub tenant: String,
    /// The endpoint, `https://` (or `http://` where the delivery allow-list names it).
    pub url: String,
    /// The events it hears; empty: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<HookEvent>,
    /// The tools whose tasks it hears; empty: every tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Heard only by calls that ask for it (the `_meta` key `io.snodo/webhook` naming its
    /// URL), never by every call of the tenant.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_request: bool,
}

impl WebhookSpec {
    /// Checks the name, the tenant, the URL's form and the tool names; the error names the
    /// field. Whether the URL may be reached is the delivery allow-list's to say.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.name;
        if name.is_empty()
            || name.len() > MAX_WEBHOOK_NAME
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(format!(
                "name {name:?}: 1 to {MAX_WEBHOOK_NAME} letters, digits, '-', '_' or '.'"
            ));
        }
        if self.tenant.is_empty() {
            return Err("tenant: must not be empty".into());
        }
        let url = &self.url;
        if url.len() > MAX_WEBHOOK_URL {
            return Err(format!("url: longer than {MAX_WEBHOOK_URL} bytes"));
        }
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(format!("url {url:?}: must start with https:// or http://"));
        }
        if let Some(t) = self.tools.iter().find(|t| t.is_empty()) {
            return Err(format!("tools: {t:?} is not a tool name"));
        }
        Ok(())
    }

    /// Whether a task of `tenant` running `tool` that asked for `asked` (the URLs of its
    /// call's `_meta`) is heard by this subscription.
    pub fn hears(&self, tenant: &str, tool: &str, asked: &[String]) -> bool {
        self.tenant == tenant
            && (self.tools.is_empty() || self.tools.iter().any(|t| t == tool))
            && (!self.on_request || asked.contains(&self.url))
    }

    /// Whether it hears `event`.
    pub fn wants(&self, event: HookEvent) -> bool {
        self.events.is_empty() || self.events.contains(&event)
    }
}

/// A signing secret and, once rotated out, until when it still signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SigningSecret {
    /// `whsec_` and the key, base64.
    pub secret: String,
    /// Until when a rotated-out secret still signs; `None`: the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Timestamp>,
}

/// Checks the form of a Standard Webhooks secret: `whsec_` and 24 to 64 bytes, base64.
pub fn check_secret(secret: &str) -> Result<(), String> {
    let Some(key) = secret.strip_prefix(SECRET_PREFIX) else {
        return Err(format!("a secret starts with {SECRET_PREFIX:?}"));
    };
    let ok = (32..=88).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a secret is {SECRET_PREFIX:?} and 24 to 64 random bytes in standard base64"
        ))
    }
}

/// One event in the outbox: a task reached a status its subscriptions hear.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxEvent {
    /// Its place in commit order, set by the store as it commits (0 before).
    #[serde(default)]
    pub seq: u64,
    /// Unique, random, repeated by every delivery of it (`webhook-id`).
    pub id: String,
    /// What happened.
    pub event: HookEvent,
    /// When it committed (store clock).
    pub at: Timestamp,
    /// The task's tenant.
    pub tenant: String,
    /// The task.
    pub task_id: String,
    /// The task's tool, when it runs one.
    pub tool: String,
    /// The task's status message then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// The subscriptions it goes to.
    pub to: Vec<String>,
}

impl OutboxEvent {
    /// The body a receiver gets (Standard Webhooks' `type`, `timestamp`, `data`).
    pub fn payload(&self) -> serde_json::Value {
        let mut data = serde_json::json!({
            "eventId": self.id,
            "taskId": self.task_id,
            "tool": self.tool,
            "tenant": self.tenant,
            "status": self.event.as_str(),
        });
        if let Some(m) = &self.status_message {
            data["statusMessage"] = m.clone().into();
        }
        serde_json::json!({
            "type": self.event.wire_type(),
            "timestamp": self.at.rfc3339(),
            "data": data,
        })
    }
}

/// A subscription a task's transitions are reported to, and the events it hears: fixed
/// when the task is created ([`Task::notify`](super::Task::notify)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notify {
    /// The subscription's name.
    pub to: String,
    /// The events it hears; empty: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<HookEvent>,
}

impl Notify {
    /// What `spec` hears of a task.
    pub fn of(spec: &WebhookSpec) -> Self {
        Self {
            to: spec.name.clone(),
            events: spec.events.clone(),
        }
    }
}

/// The event `task` (running `tool`) makes by reaching its status, if any of its
/// subscriptions hears it: what the store writes in the commit of the transition, with
/// the random `id` every delivery of it repeats.
pub fn event_of(task: &super::Task, tool: &str, id: String) -> Option<OutboxEvent> {
    let event = HookEvent::of(task.status)?;
    let to: Vec<String> = task
        .notify
        .iter()
        .filter(|n| n.events.is_empty() || n.events.contains(&event))
        .map(|n| n.to.clone())
        .collect();
    if to.is_empty() {
        return None;
    }
    Some(OutboxEvent {
        seq: 0,
        id,
        event,
        at: task.last_updated_at,
        tenant: task.scope.tenant().to_owned(),
        task_id: task.id.to_string(),
        tool: tool.to_owned(),
        status_message: task.status_message.clone(),
        to,
    })
}

/// An event waiting for its next try.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retrying {
    /// The event's sequence number.
    pub seq: u64,
    /// Tries so far.
    pub attempts: u32,
    /// When the next one is due (store clock).
    pub next_at: Timestamp,
    /// Why the last one failed.
    pub error: String,
}

/// An event whose tries are used up: kept until an operator redelivers or discards it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    /// The event, whole: it outlives the outbox's retention.
    pub event: OutboxEvent,
    /// Tries made.
    pub attempts: u32,
    /// Why the last one failed.
    pub error: String,
    /// When it was given up (store clock).
    pub at: Timestamp,
}

/// The node delivering a subscription, and until when its claim holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryLease {
    /// The node's name.
    pub node: String,
    /// The round that holds it (random): only that round settles under it, so two rounds
    /// of one node never deliver a subscription at once.
    #[serde(default)]
    pub round: String,
    /// Until when (store clock); another node may take over after.
    pub until: Timestamp,
}

/// A subscription's stored row: what it hears, how it signs, and where its deliveries
/// stand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Webhook {
    /// What it hears and where it sends it.
    pub spec: WebhookSpec,
    /// Who declared it.
    pub origin: super::ScheduleOrigin,
    /// The secrets it signs with, the current one first.
    pub secrets: Vec<SigningSecret>,
    /// The exact delays between tries of one event, in milliseconds (a checked
    /// [`RetryPolicy`]'s); once used up, the event is a dead letter.
    pub retry_ms: Vec<u64>,
    /// Paused: nothing is delivered (events wait in the outbox).
    #[serde(default)]
    pub paused: bool,
    /// The last event sequence number it has taken (delivered, retrying or dead).
    pub cursor: u64,
    /// Events waiting for a retry, the earliest due first.
    #[serde(default)]
    pub retrying: Vec<Retrying>,
    /// Events given up.
    #[serde(default)]
    pub dead: Vec<DeadLetter>,
    /// Dead letters an operator sent again, waiting for their one more try (one that fails
    /// is a dead letter again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replayed: Vec<DeadLetter>,
    /// The node delivering it now, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<DeliveryLease>,
    /// Events delivered (a receiver answered 2xx).
    #[serde(default)]
    pub delivered: u64,
    /// Tries that failed.
    #[serde(default)]
    pub failures: u64,
    /// When the last delivery was received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivered_at: Option<Timestamp>,
    /// Why the last try failed, or why the subscription is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When it was made.
    pub created_at: Timestamp,
    /// Grows by one with every change: the compare-and-set's witness.
    pub revision: u64,
}

/// How one try of one event ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tried {
    /// The receiver answered 2xx.
    Delivered,
    /// It did not; why.
    Failed(String),
}

impl Webhook {
    /// A new row for `spec`, signing with `secret`, retried on `retry`, taking events after
    /// `cursor` (the outbox's last at its creation: a new subscription hears what commits
    /// from then on).
    pub fn new(
        spec: WebhookSpec,
        origin: super::ScheduleOrigin,
        secret: String,
        retry: RetryPolicy,
        cursor: u64,
        now: Timestamp,
    ) -> Self {
        Self {
            spec,
            origin,
            secrets: vec![SigningSecret {
                secret,
                until: None,
            }],
            retry_ms: retry.delays_ms().to_vec(),
            paused: false,
            cursor,
            retrying: Vec::new(),
            dead: Vec::new(),
            replayed: Vec::new(),
            lease: None,
            delivered: 0,
            failures: 0,
            last_delivered_at: None,
            last_error: None,
            created_at: now,
            revision: 0,
        }
    }

    /// The row one revision on.
    pub fn next(&self) -> Self {
        let mut n = self.clone();
        n.revision += 1;
        n
    }

    /// The secrets that sign at `now`: the current one and those rotated out whose grace
    /// has not run out.
    pub fn signing(&self, now: Timestamp) -> impl Iterator<Item = &str> {
        self.secrets
            .iter()
            .filter(move |s| s.until.is_none_or(|u| u > now))
            .map(|s| s.secret.as_str())
    }

    /// Rotates to `secret`: the current one keeps signing until `until` (receivers verify
    /// either meanwhile, so a rotation has no gap); secrets past their grace are dropped.
    pub fn rotate(&mut self, secret: String, now: Timestamp, until: Timestamp) {
        self.secrets.retain(|s| s.until.is_none_or(|u| u > now));
        for s in &mut self.secrets {
            s.until.get_or_insert(until);
        }
        self.secrets.insert(
            0,
            SigningSecret {
                secret,
                until: None,
            },
        );
        self.secrets.truncate(MAX_SECRETS);
    }

    /// Whether a lease holds at `now`: whoever holds it delivers, nobody else.
    pub fn leased(&self, now: Timestamp) -> bool {
        self.lease.as_ref().is_some_and(|l| l.until > now)
    }

    /// How many new events it may take now: none while paused, or while its retries or
    /// dead letters are full.
    pub fn room(&self) -> usize {
        if self.paused || self.dead.len() + self.replayed.len() >= MAX_DEAD_LETTERS {
            return 0;
        }
        MAX_RETRYING.saturating_sub(self.retrying.len())
    }

    /// Its retries due at `now`, by sequence number.
    pub fn due_retries(&self, now: Timestamp) -> Vec<u64> {
        if self.paused {
            return Vec::new();
        }
        self.retrying
            .iter()
            .filter(|r| r.next_at <= now)
            .map(|r| r.seq)
            .collect()
    }

    /// The earliest retry's time, if one waits.
    pub fn next_retry(&self) -> Option<Timestamp> {
        self.retrying.iter().map(|r| r.next_at).min()
    }

    /// Settles the tries of one delivery round at `now`: `tried` holds each event tried
    /// with how it ended; the cursor moves to `scanned` (every event up to it was taken:
    /// tried, or not this subscription's). A failed try waits the next delay of the retry
    /// list, or becomes a dead letter once the list is used up. Applied to whatever
    /// revision of the row is current, so an operator's change meanwhile is kept.
    pub fn settle(&mut self, tried: &[(OutboxEvent, Tried)], scanned: u64, now: Timestamp) {
        self.cursor = self.cursor.max(scanned);
        for (event, outcome) in tried {
            if let Some(i) = self.replayed.iter().position(|d| d.event.id == event.id) {
                let mut letter = self.replayed.remove(i);
                letter.attempts += 1;
                match outcome {
                    Tried::Delivered => self.delivered_at(now),
                    Tried::Failed(error) => {
                        self.failed_with(error);
                        letter.error = error.clone();
                        letter.at = now;
                        self.dead.push(letter);
                    }
                }
                continue;
            }
            let before = self.retrying.iter().position(|r| r.seq == event.seq);
            let attempts = before.map_or(0, |i| self.retrying[i].attempts) + 1;
            if let Some(i) = before {
                self.retrying.remove(i);
            }
            match outcome {
                Tried::Delivered => self.delivered_at(now),
                Tried::Failed(error) => {
                    self.failed_with(error);
                    match self.retry_ms.get(attempts as usize - 1) {
                        Some(delay) => self.retrying.push(Retrying {
                            seq: event.seq,
                            attempts,
                            next_at: now.plus_ms(*delay),
                            error: error.clone(),
                        }),
                        None => self.dead.push(DeadLetter {
                            event: event.clone(),
                            attempts,
                            error: error.clone(),
                            at: now,
                        }),
                    }
                }
            }
        }
        self.retrying.sort_by_key(|r| (r.next_at, r.seq));
    }

    fn delivered_at(&mut self, now: Timestamp) {
        self.delivered += 1;
        self.last_delivered_at = Some(now);
        self.last_error = None;
    }

    fn failed_with(&mut self, error: &str) {
        self.failures += 1;
        self.last_error = Some(error.to_owned());
    }

    /// Sends the dead letters `pick` chooses once more, at the next look; how many.
    pub fn redeliver(&mut self, pick: impl Fn(&DeadLetter) -> bool) -> usize {
        let (back, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.dead)
            .into_iter()
            .partition(|d| pick(d));
        self.dead = kept;
        let n = back.len();
        self.replayed.extend(back);
        n
    }

    /// The lowest sequence number it still needs from the outbox: events at or past it may
    /// not be swept.
    pub fn needs_from(&self) -> u64 {
        let retry = self.retrying.iter().map(|r| r.seq).min();
        retry.map_or(self.cursor + 1, |s| s.min(self.cursor + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> WebhookSpec {
        WebhookSpec {
            name: "ops".into(),
            tenant: "acme".into(),
            url: "https://hooks.example.com/in".into(),
            events: vec![],
            tools: vec![],
            on_request: false,
        }
    }

    fn event(seq: u64) -> OutboxEvent {
        OutboxEvent {
            seq,
            id: format!("evt{seq}"),
            event: HookEvent::Completed,
            at: Timestamp(1),
            tenant: "acme".into(),
            task_id: "t".into(),
            tool: "echo".into(),
            status_message: None,
            to: vec!["ops".into()],
        }
    }

    fn row(delays: &[u64]) -> Webhook {
        let retry = RetryPolicy::new(delays.to_vec()).unwrap();
        Webhook::new(
            spec(),
            super::super::ScheduleOrigin::Api,
            format!("{SECRET_PREFIX}{}", "A".repeat(32)),
            retry,
            0,
            Timestamp(0),
        )
    }

    #[test]
    fn a_failed_event_waits_each_delay_of_its_list_then_is_a_dead_letter() {
        let mut w = row(&[1_000, 5_000]);
        let fail = Tried::Failed("503".into());
        w.settle(&[(event(1), fail.clone())], 1, Timestamp(10));
        assert_eq!(w.retrying[0].next_at.as_millis(), 1_010);
        assert!(w.due_retries(Timestamp(1_009)).is_empty());
        assert_eq!(w.due_retries(Timestamp(1_010)), vec![1]);
        w.settle(&[(event(1), fail.clone())], 1, Timestamp(1_010));
        assert_eq!(w.retrying[0].attempts, 2);
        assert_eq!(w.retrying[0].next_at.as_millis(), 6_010);
        w.settle(&[(event(1), fail)], 1, Timestamp(6_010));
        assert!(w.retrying.is_empty());
        assert_eq!(w.dead.len(), 1);
        assert_eq!(w.dead[0].attempts, 3);
        assert_eq!(w.dead[0].event.id, "evt1");
        assert_eq!(w.failures, 3);
        assert_eq!(w.cursor, 1);
    }

    #[test]
    fn a_redelivered_dead_letter_gets_one_more_try_and_is_dead_again_if_it_fails() {
        let mut w = row(&[]);
        w.settle(&[(event(1), Tried::Failed("503".into()))], 1, Timestamp(0));
        w.settle(&[(event(2), Tried::Failed("503".into()))], 2, Timestamp(0));
        assert_eq!(w.redeliver(|d| d.event.id == "evt1"), 1);
        assert_eq!((w.dead.len(), w.replayed.len()), (1, 1));
        w.settle(&[(event(1), Tried::Failed("500".into()))], 2, Timestamp(5));
        assert_eq!(w.dead.len(), 2);
        assert_eq!((w.dead[1].attempts, w.dead[1].error.as_str()), (2, "500"));
        assert_eq!(w.redeliver(|_| true), 2);
        w.settle(
            &[(event(1), Tried::Delivered), (event(2), Tried::Delivered)],
            2,
            Timestamp(9),
        );
        assert!(w.dead.is_empty() && w.replayed.is_empty());
        assert_eq!(w.delivered, 2);
    }

    #[test]
    fn a_retry_that_gets_through_leaves_the_list_and_counts_once() {
        let mut w = row(&[1_000]);
        w.settle(
            &[
                (event(1), Tried::Failed("timeout".into())),
                (event(2), Tried::Delivered),
            ],
            3,
            Timestamp(0),
        );
        assert_eq!(w.cursor, 3);
        assert_eq!(w.needs_from(), 1);
        w.settle(&[(event(1), Tried::Delivered)], 0, Timestamp(1_000));
        assert!(w.retrying.is_empty());
        assert_eq!((w.delivered, w.cursor, w.needs_from()), (2, 3, 4));
        assert_eq!(w.last_error, None);
    }

    #[test]
    fn a_rotation_signs_with_both_secrets_until_the_grace_runs_out() {
        let mut w = row(&[]);
        let new = format!("{SECRET_PREFIX}{}", "B".repeat(32));
        w.rotate(new.clone(), Timestamp(0), Timestamp(100));
        let at = |ms| w.signing(Timestamp(ms)).count();
        assert_eq!((at(99), at(100)), (2, 1));
        assert_eq!(w.signing(Timestamp(100)).next(), Some(new.as_str()));
    }

    #[test]
    fn full_retries_or_dead_letters_hold_new_events_back_rather_than_drop_them() {
        let mut w = row(&[]);
        assert_eq!(w.room(), MAX_RETRYING);
        let tried: Vec<_> = (1..=MAX_DEAD_LETTERS as u64)
            .map(|s| (event(s), Tried::Failed("gone".into())))
            .collect();
        w.settle(&tried, MAX_DEAD_LETTERS as u64, Timestamp(0));
        assert_eq!(w.room(), 0);
        w.dead.pop();
        assert_eq!(w.room(), MAX_RETRYING);
    }

    #[test]
    fn a_subscription_hears_its_tenant_its_tools_and_on_request_only_when_asked() {
        let mut s = spec();
        assert!(s.hears("acme", "echo", &[]));
        assert!(!s.hears("other", "echo", &[]));
        s.tools = vec!["build".into()];
        assert!(!s.hears("acme", "echo", &[]));
        assert!(s.hears("acme", "build", &[]));
        s.on_request = true;
        assert!(!s.hears("acme", "build", &[]));
        assert!(s.hears("acme", "build", &[s.url.clone()]));
        s.events = vec![HookEvent::Failed];
        assert!(s.wants(HookEvent::Failed) && !s.wants(HookEvent::Completed));
    }

    #[test]
    fn specs_and_secrets_are_checked_by_field() {
        let mut s = spec();
        s.url = "ftp://x".into();
        assert!(s.check().unwrap_err().starts_with("url"));
        s = spec();
        s.name = "a b".into();
        assert!(s.check().unwrap_err().starts_with("name"));
        assert!(check_secret("whsec_short").is_err());
        assert!(check_secret(&format!("{SECRET_PREFIX}{}", "A".repeat(32))).is_ok());
        assert!(check_secret(&"A".repeat(40)).is_err());
    }
}
