//! What operators do to webhook subscriptions (list, show, declare, remove, pause, resume,
//! rotate the secret, redeliver dead letters) and read of the outbox (the events after a
//! cursor), each within the operator's reach: a subscription and its events belong to the
//! tenant whose tasks they report.

use serde::{Deserialize, Serialize};

use snodo_core::model::{OutboxEvent, ScheduleOrigin, Webhook};

use super::{AdminError, Operator, Operators};
use crate::WebhookDeclaration;
use crate::webhooks::Webhooks;

/// The most events one page of the outbox holds.
pub const MAX_EVENTS_PAGE: usize = 500;

/// What an operator sees of one subscription: the row without its secrets (their first
/// characters only), and the new secret once, when a declaration made it or a rotation did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookView {
    /// The row as the store keeps it, its secrets cut to a hint.
    #[serde(flatten)]
    pub webhook: Webhook,
    /// The current secret, whole: only in the answer that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl WebhookView {
    fn of(mut webhook: Webhook, reveal: bool) -> Self {
        let secret = reveal
            .then(|| webhook.secrets.first().map(|s| s.secret.clone()))
            .flatten();
        for s in &mut webhook.secrets {
            let hint: String = s.secret.chars().take(10).collect();
            s.secret = format!("{hint}…");
        }
        Self { webhook, secret }
    }
}

/// A page of the outbox: the events after the cursor asked for, and the cursor to ask next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    /// The events, in commit order, each with its payload as receivers get it.
    pub events: Vec<EventEntry>,
    /// The `after` of the next page: the last event's number (the one asked, when none).
    pub next: u64,
}

/// One event of a page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEntry {
    /// Its number.
    pub seq: u64,
    /// Its id (`webhook-id`).
    pub id: String,
    /// The subscriptions it goes to.
    pub to: Vec<String>,
    /// The body receivers get.
    pub payload: serde_json::Value,
}

impl Operators {
    fn webhooks_here(&self) -> Result<&Webhooks, AdminError> {
        self.webhooks
            .as_ref()
            .ok_or_else(|| AdminError::Invalid("this server delivers no webhooks".into()))
    }

    /// The row `name` within the operator's reach (another tenant's is unknown).
    async fn reachable_webhook(&self, op: &Operator, name: &str) -> Result<Webhook, AdminError> {
        let row = self.webhooks_here()?.get(name).await?;
        if op.reaches(&row.spec.tenant) {
            Ok(row)
        } else {
            Err(AdminError::NoWebhook(name.to_owned()))
        }
    }

    /// Every subscription within the operator's reach, by name.
    pub(crate) async fn webhooks(&self, op: &Operator) -> Result<Vec<WebhookView>, AdminError> {
        let rows = self.webhooks_here()?.list().await?;
        Ok(rows
            .into_iter()
            .filter(|r| op.reaches(&r.spec.tenant))
            .map(|r| WebhookView::of(r, false))
            .collect())
    }

    /// One subscription.
    pub(crate) async fn webhook(
        &self,
        op: &Operator,
        name: &str,
    ) -> Result<WebhookView, AdminError> {
        Ok(WebhookView::of(
            self.reachable_webhook(op, name).await?,
            false,
        ))
    }

    /// Declares a subscription for a tenant within the operator's reach; a new one's answer
    /// holds its secret.
    pub(crate) async fn declare_webhook(
        &self,
        op: &Operator,
        declared: WebhookDeclaration,
    ) -> Result<WebhookView, AdminError> {
        op.tenant(Some(declared.tenant.clone()))?;
        let existing = self.webhooks_here()?.get(&declared.name).await.ok();
        if existing
            .as_ref()
            .is_some_and(|row| !op.reaches(&row.spec.tenant))
        {
            return Err(AdminError::Conflict(format!(
                "the name {:?} is taken",
                declared.name
            )));
        }
        let reveal = existing.is_none() || declared.secret.is_some();
        let row = self
            .webhooks_here()?
            .declare(declared, ScheduleOrigin::Api)
            .await?;
        Ok(WebhookView::of(row, reveal))
    }

    /// Removes a subscription the API declared.
    pub(crate) async fn remove_webhook(&self, op: &Operator, name: &str) -> Result<(), AdminError> {
        self.reachable_webhook(op, name).await?;
        Ok(self.webhooks_here()?.remove(name).await?)
    }

    /// Pauses or resumes deliveries.
    pub(crate) async fn pause_webhook(
        &self,
        op: &Operator,
        name: &str,
        paused: bool,
    ) -> Result<WebhookView, AdminError> {
        self.reachable_webhook(op, name).await?;
        let row = self.webhooks_here()?.pause(name, paused).await?;
        Ok(WebhookView::of(row, false))
    }

    /// A new secret; the answer holds it.
    pub(crate) async fn rotate_webhook(
        &self,
        op: &Operator,
        name: &str,
    ) -> Result<WebhookView, AdminError> {
        self.reachable_webhook(op, name).await?;
        let row = self.webhooks_here()?.rotate(name).await?;
        Ok(WebhookView::of(row, true))
    }

    /// Sends dead letters again: the one with `event` as its id, or every one.
    pub(crate) async fn redeliver_webhook(
        &self,
        op: &Operator,
        name: &str,
        event: Option<&str>,
    ) -> Result<(WebhookView, usize), AdminError> {
        self.reachable_webhook(op, name).await?;
        let (row, n) = self.webhooks_here()?.redeliver(name, event).await?;
        Ok((WebhookView::of(row, false), n))
    }

    /// The events after `after` of the tenants within reach (of `tenant` alone, when
    /// named), at most `limit`: what a receiver that was down reads to catch up.
    pub(crate) async fn events_after(
        &self,
        op: &Operator,
        tenant: Option<String>,
        after: u64,
        limit: usize,
    ) -> Result<EventPage, AdminError> {
        let tenant = op.tenant(tenant)?;
        let limit = limit.clamp(1, MAX_EVENTS_PAGE);
        let store = self.tasks().store();
        let mut events: Vec<OutboxEvent> = Vec::new();
        let mut next = after;
        // Other tenants' events are skipped, so a page may take several reads to fill.
        for _ in 0..8 {
            let read = store.events_after(next, MAX_EVENTS_PAGE).await?;
            let Some(last) = read.last() else { break };
            let end = last.seq;
            for e in read {
                if events.len() == limit {
                    break;
                }
                next = e.seq;
                if tenant.as_ref().is_none_or(|t| *t == e.tenant) {
                    events.push(e);
                }
            }
            if events.len() == limit || next < end {
                break;
            }
        }
        Ok(EventPage {
            events: events
                .into_iter()
                .map(|e| EventEntry {
                    seq: e.seq,
                    id: e.id.clone(),
                    to: e.to.clone(),
                    payload: e.payload(),
                })
                .collect(),
            next,
        })
    }
}
