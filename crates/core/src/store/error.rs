//! StoreError: the failures a store caller can branch on.

use std::sync::Arc;

use crate::model::{Invalid, TaskStatus, Timestamp};

use super::Action;

/// Why a store operation did not commit.
///
/// Variants mean something to the caller; backend details are in the message only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No such task, or not visible to this caller (another scope, expired, reaped).
    #[error("task not found")]
    NotFound,
    /// The id is already taken.
    #[error("a task with this id already exists")]
    AlreadyExists,
    /// The task is terminal; nothing changes it any more.
    #[error("the task is already {status}; terminal tasks never change")]
    Terminal {
        /// Its terminal status.
        status: TaskStatus,
    },
    /// `expected_revision` did not match.
    #[error("revision conflict: the task is at revision {current}")]
    Conflict {
        /// The current revision.
        current: u64,
    },
    /// A schedule's row was not where a change expected it: another node fired it, or
    /// someone changed, made or removed it meanwhile.
    #[error("schedule {name:?} changed meanwhile: {}", match current {
        Some(r) => format!("it is at revision {r}"),
        None => "it does not exist".to_owned(),
    })]
    ScheduleConflict {
        /// The schedule.
        name: String,
        /// Its revision now; `None` when there is none.
        current: Option<u64>,
    },
    /// A webhook subscription's row was not where a change expected it: a delivery
    /// settled, another node took it over, or an operator changed it meanwhile.
    #[error("webhook {name:?} changed meanwhile: {}", match current {
        Some(r) => format!("it is at revision {r}"),
        None => "it does not exist".to_owned(),
    })]
    WebhookConflict {
        /// The subscription.
        name: String,
        /// Its revision now; `None` when there is none.
        current: Option<u64>,
    },
    /// An event id was reused for a different event.
    #[error("event id {id:?} was already committed with different content")]
    EventIdReused {
        /// The id.
        id: String,
    },
    /// The lease is not the task's live claim any more: it expired, was released, was
    /// superseded by a newer claim, or predates a store restart. Stop the attempt.
    #[error("the lease is no longer valid; stop this attempt")]
    LeaseLost,
    /// Another worker's lease is live.
    #[error("the task is claimed by another worker until {until:?}")]
    Busy {
        /// When that lease runs out.
        until: Timestamp,
    },
    /// The task is parked on a question nobody has answered: it is not due until an answer
    /// (or a cancel) comes.
    #[error("the task waits for an answer to its question")]
    Parked,
    /// A retry backoff or a sleep is running.
    #[error("the task is not due until {retry_at:?} (its retry delay or its sleep)")]
    NotDue {
        /// When it is due.
        retry_at: Timestamp,
    },
    /// The access value was issued for another action (or by another store).
    #[error("access was granted for {granted:?}, not for this operation")]
    WrongAction {
        /// The action it was issued for.
        granted: Action,
    },
    /// The same input key was requested with a different request.
    #[error(
        "input key {key:?} was already used for a different request; keys are unique for the task's lifetime"
    )]
    InputConflict {
        /// The key.
        key: String,
    },
    /// The scope already holds as many live (non-terminal) tasks as the creation allowed.
    #[error("the scope already has {max} live tasks")]
    LiveLimit {
        /// The cap given with the creation.
        max: u64,
    },
    /// The scope already holds as many stored tasks (terminal ones included) as the
    /// creation allowed.
    #[error("the scope already has {max} stored tasks")]
    StoredLimit {
        /// The cap given with the creation.
        max: u64,
    },
    /// Storing this would take the scope's stored bytes (its tasks' records and journals)
    /// past the cap the creation or journal append was given.
    #[error(
        "the scope's tasks and journals would hold more than {max} bytes \
         (limits.stored_bytes_per_tenant)"
    )]
    StoredBytesLimit {
        /// The cap given with the creation or the journal append.
        max: u64,
    },
    /// A value broke a rule; the message says which.
    #[error("invalid: {0}")]
    Invalid(#[from] Invalid),
    /// The store was written by a newer build.
    #[error("{0}")]
    IncompatibleSchema(Arc<str>),
    /// Stored data is damaged; it is reported, never silently reset.
    #[error("the store is corrupted: {0}")]
    Corrupt(Arc<str>),
    /// The backend failed (I/O, lock, closed); the operation did not commit.
    #[error("the store is unavailable: {0}")]
    Unavailable(Arc<str>),
}

impl StoreError {
    /// The variant's name in snake_case: what a span or a metric may say about the error
    /// (never its text).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::Terminal { .. } => "terminal",
            Self::Conflict { .. } => "conflict",
            Self::ScheduleConflict { .. } => "schedule_conflict",
            Self::WebhookConflict { .. } => "webhook_conflict",
            Self::EventIdReused { .. } => "event_id_reused",
            Self::LeaseLost => "lease_lost",
            Self::Busy { .. } => "busy",
            Self::NotDue { .. } => "not_due",
            Self::Parked => "parked",
            Self::WrongAction { .. } => "wrong_action",
            Self::InputConflict { .. } => "input_conflict",
            Self::LiveLimit { .. } => "live_limit",
            Self::StoredLimit { .. } => "stored_limit",
            Self::StoredBytesLimit { .. } => "stored_bytes_limit",
            Self::Invalid(_) => "invalid",
            Self::IncompatibleSchema(_) => "incompatible_schema",
            Self::Corrupt(_) => "corrupt",
            Self::Unavailable(_) => "unavailable",
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::Invalid(Invalid::new(msg))
    }

    /// [`StoreError::Unavailable`] saying `msg`: the store (or the way to it) cannot answer
    /// now; the caller may try again.
    pub fn unavailable(msg: impl std::fmt::Display) -> Self {
        Self::Unavailable(msg.to_string().into())
    }

    pub(crate) fn corrupt(msg: impl std::fmt::Display) -> Self {
        Self::Corrupt(msg.to_string().into())
    }
}
