//! Operators: who may act on tasks outside MCP, and what they may do (the admin API under
//! `/admin/v1/…`, the console at `/console` and `snodo tasks` all go through here).
//!
//! An operator is a caller holding the admin scopes (`[auth.scopes] admin`) or presenting
//! an admin token (`[[admin.tokens]]`); a loopback-only server without authentication
//! treats its local caller as an operator of every tenant. An operator sees and acts on its
//! own tenant's tasks only, unless its tenant is listed in `admin.cross_tenant` (or its
//! token says `cross_tenant`): another tenant's task is reported exactly like an unknown
//! one. Every action goes through the task service the MCP methods use (`crate::tasks`),
//! with the same hand-offs to the runner, so a cancel stops the attempt and an answer
//! resumes the task.
//!
//! - `config`: the `[admin]` section ([`AdminConfig`], [`SignIn`]) and its checks.
//! - `operator`: who is an operator ([`Operator`], `Admin`: admin tokens, admin scopes).
//! - `actions`: what operators do to tasks (`Operators`), and what they see ([`TaskDetail`]).
//! - `query`: a listing's query string.
//! - `schedules`: what operators do to schedules, and what they see ([`ScheduleView`]).
//! - `audit`: the record every operator action leaves in the store, and its reads.
//! - `backup`: an online backup of the store the server holds.
//! - `deployments`: what operators do to deployments through a running server.
//! - `webhooks`: what operators do to webhook subscriptions, and the outbox's events after
//!   a cursor ([`WebhookView`], [`EventPage`]).
//! - `mcp`: the admin operations as MCP tools at `/admin/mcp`, for an operator's own MCP
//!   client.
//! - `api`: the JSON API under `/admin/v1`; `console`: the HTML console; `session`: its
//!   sealed sign-in cookie; `answer`: an operator's answer checked against its question.

mod actions;
mod answer;
pub(crate) mod api;
pub(crate) mod audit;
mod backup;
mod config;
pub(crate) mod console;
mod deployments;
mod mcp;
mod operator;
mod query;
mod schedules;
mod session;
mod webhooks;

use serde_json::{Value, json};

use snodo_core::store::StoreError;

pub(crate) use actions::Operators;
pub use actions::{BulkFailure, BulkOutcome, Question, TaskDetail};
pub use api::{AnswerBody, BulkBody, CancelBody, SIGNATURE_HEADER};
pub use backup::BackupBody;
pub use config::{AdminConfig, AdminToken, DEFAULT_SESSION_MS, SignIn};
pub use deployments::{DeployBody, RollbackBody, RolledBack, Uploaded};
pub(crate) use operator::Admin;
pub use operator::Operator;
pub use schedules::{LastTask, ScheduleRun, ScheduleView};
pub use session::{SECURE_SESSION_COOKIE, SESSION_COOKIE};
pub use webhooks::{EventEntry, EventPage, MAX_EVENTS_PAGE, WebhookView};

/// The most tasks one bulk cancel acts on, unless the request asks for fewer.
pub const DEFAULT_BULK_CAP: usize = 1_000;
/// The largest cap a bulk cancel may ask for.
pub const MAX_BULK_CAP: usize = 10_000;
/// The most listing pages one bulk cancel (or preview) walks, each at most
/// [`snodo_core::store::LIST_SCAN`] entries: a filter that matches little cannot make it
/// walk the whole store. Past it the outcome says `incomplete`.
pub const MAX_BULK_PAGES: usize = 40;

/// Why an operator's request failed; each maps to one HTTP status and a JSON body
/// `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// 401: no credential, or not a valid one.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: authenticated, but not an operator (or not of that tenant).
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such task (or another tenant's).
    #[error("no such task")]
    NotFound,
    /// 404: no such schedule (or another tenant's).
    #[error("no schedule is named {0:?}")]
    NoSchedule(String),
    /// 404: no such webhook subscription (or another tenant's).
    #[error("no webhook subscription is named {0:?}")]
    NoWebhook(String),
    /// 400: the request is malformed or asks for what cannot be.
    #[error("{0}")]
    Invalid(String),
    /// 409: the task's state does not allow it (finished, not waiting).
    #[error("{0}")]
    Conflict(String),
    /// 503: the store cannot answer now.
    #[error("{0}")]
    Unavailable(String),
}

impl AdminError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Self::Unauthenticated(_) => 401,
            Self::Forbidden(_) => 403,
            Self::NotFound | Self::NoSchedule(_) | Self::NoWebhook(_) => 404,
            Self::Invalid(_) => 400,
            Self::Conflict(_) => 409,
            Self::Unavailable(_) => 503,
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "unauthenticated",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound | Self::NoSchedule(_) | Self::NoWebhook(_) => "not_found",
            Self::Invalid(_) => "invalid",
            Self::Conflict(_) => "conflict",
            Self::Unavailable(_) => "unavailable",
        }
    }

    pub(crate) fn body(&self) -> Value {
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::NotFound,
            StoreError::Invalid(m) => Self::Invalid(m.to_string()),
            StoreError::Terminal { status } => {
                Self::Conflict(format!("the task has already finished ({status})"))
            }
            StoreError::Unavailable(m) => Self::Unavailable(m.to_string()),
            other => Self::Unavailable(other.to_string()),
        }
    }
}

impl From<crate::WebhookError> for AdminError {
    fn from(e: crate::WebhookError) -> Self {
        use crate::WebhookError as E;
        match e {
            E::NotFound(name) => Self::NoWebhook(name),
            E::Invalid(m) => Self::Invalid(m),
            E::Configured(_) => Self::Conflict(e.to_string()),
            E::Store(e) => e.into(),
        }
    }
}

impl From<crate::ScheduleError> for AdminError {
    fn from(e: crate::ScheduleError) -> Self {
        use crate::ScheduleError as E;
        match e {
            E::NotFound(name) => Self::NoSchedule(name),
            E::Invalid(m) => Self::Invalid(m),
            E::Configured(_) | E::Refused(_) => Self::Conflict(e.to_string()),
            E::Store(e) => e.into(),
        }
    }
}
