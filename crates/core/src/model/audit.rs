//! The audit record: one per operator action (who, what, when, through which door, how it
//! ended), kept in the store. It names its target (a task id, a schedule's or webhook's
//! name, a revision) and never holds the action's arguments, answers or secrets.

use serde::{Deserialize, Serialize};

use super::Timestamp;

/// How long audit records are kept (90 days): each record written sweeps a few older than
/// this.
pub const AUDIT_RETENTION_MS: u64 = 90 * 24 * 60 * 60 * 1000;
/// The most records one page of the audit answers.
pub const MAX_AUDIT_PAGE: usize = 500;

/// One operator action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// Its id (`aud_` and 32 hex digits).
    pub id: String,
    /// When the store recorded it (set by the store).
    pub at: Timestamp,
    /// The operator's tenant.
    pub tenant: String,
    /// The operator, within its tenant.
    pub subject: String,
    /// Whether the operator acts on every tenant.
    pub cross_tenant: bool,
    /// Through which door: `api`, `console` or `mcp`.
    pub via: String,
    /// What was done, e.g. `task.cancel`, `tasks.bulk_cancel`, `deployment.rollback`.
    pub action: String,
    /// What it was done to (a task id, a name, a revision), when one thing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `ok`, or the refusal's code (`forbidden`, `not_found`, `invalid`, `conflict`,
    /// `unavailable`, `unauthenticated`).
    pub outcome: String,
}

impl AuditRecord {
    /// A record of `action` on `target` by `tenant`/`subject` through `via`, ended with
    /// `outcome`; the store sets its time.
    pub fn new(
        tenant: &str,
        subject: &str,
        cross_tenant: bool,
        via: &str,
        action: &str,
        target: Option<String>,
        outcome: &str,
    ) -> Self {
        Self {
            id: format!("aud_{}", crate::ids::hex(&crate::ids::random_bytes::<16>())),
            at: Timestamp(0),
            tenant: tenant.to_owned(),
            subject: subject.to_owned(),
            cross_tenant,
            via: via.to_owned(),
            action: action.to_owned(),
            target,
            outcome: outcome.to_owned(),
        }
    }

    /// Its key in the store: newer records sort first (the time counted down), the id's
    /// bytes after it, so an ascending walk reads newest first and the oldest are last.
    pub fn key(&self) -> Vec<u8> {
        let mut k = (u64::MAX - self.at.as_millis()).to_be_bytes().to_vec();
        k.extend_from_slice(self.id.as_bytes());
        k
    }
}

/// A page of the audit, newest first, and the cursor of the next (older) page.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AuditPage {
    /// The records.
    pub records: Vec<AuditRecord>,
    /// Where the next page starts (`None`: this was the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}
