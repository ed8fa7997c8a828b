//! The domain model: the Task aggregate, the Work descriptor, retry policies,
//! state-transition events and the state machine that applies them. Everything here is plain data plus pure rules; nothing does I/O.
//!
//! Every type serializes to JSON (camelCase keys) and the stored forms carry a schema
//! version, so a record written today can be read, or refused with a clear error, by a later
//! build.

mod audit;
mod capabilities;
mod deployment;
mod event;
mod history;
mod id;
mod journal;
mod retry;
mod schedule;
mod task;
mod time;
mod trace;
mod transition;
mod view;
mod webhook;
mod work;

pub use audit::{AUDIT_RETENTION_MS, AuditPage, AuditRecord, MAX_AUDIT_PAGE};
pub use capabilities::ClientCapabilities;
pub use deployment::{
    ComponentInfo, Deployment, MAX_COMPONENT_BYTES, MAX_DEPLOYED_COMPONENTS,
    MAX_DEPLOYMENT_NOTE_BYTES, MAX_SIGNATURE_BYTES, StoredComponent, check_deployment,
    check_digest, component_digest,
};

/// The tasks extension's identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// JSON-RPC and MCP error codes.
pub mod codes {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown or removed method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad params (including unknown task ids).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// An HTTP header disagrees with the body.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// The request lacks a client capability the server needs.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// The protocol version is not supported.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
    /// A budget refused the request (JSON-RPC's implementation-defined server-error range,
    /// below the -32020..-32099 block MCP reserves).
    pub const LIMIT_REACHED: i64 = -32000;
}

pub(crate) use event::check_message;
pub use event::{
    EVENT_SCHEMA_VERSION, EventId, EventKind, MAX_STATUS_MESSAGE_BYTES, TaskEvent,
    truncate_status_message,
};
pub use history::{
    HISTORY_HEAD, History, HistoryEntry, HistoryKind, MAX_HISTORY, MAX_HISTORY_TEXT, history_text,
};
pub use id::{Isolation, Principal, Scope, TaskId};
pub use journal::{JournalEntry, JournalRequest, JournalResponse, SleepAsk};
pub use retry::{MAX_RETRY_DELAY_MS, MAX_RETRY_ENTRIES, RetryPolicy, RetryPolicyError};
pub use schedule::{
    Cadence, DEFAULT_CATCH_UP, DEFAULT_MISSED_AFTER_MS, Firing, Firings, MAX_CATCH_UP,
    MAX_SCHEDULE_NAME, MAX_SCHEDULES, MIN_INTERVAL_MS, Missed, Plan, Schedule, ScheduleDeclaration,
    ScheduleOrigin, ScheduleSpec, check_schedule_name, firing_id,
};
pub use task::{
    AppliedEvent, Claim, InputEntry, JsonRpcError, MAX_INPUT_KEY_LEN, Outcome, ScheduledRetry,
    Task, TaskStatus,
};
pub use time::{Clock, ManualClock, SystemClock, Timestamp, rfc3339, wall_millis};
pub use trace::{
    IncomingTrace, MAX_BAGGAGE_BYTES, MAX_TRACESTATE_BYTES, TaskSpan, TraceContext, TraceParent,
};
pub use transition::{Effect, InputReply, REMEMBERED_STATUS_EVENTS, Rejected, Step};
pub use view::{RawJson, TaskView, ViewOutcome};
pub use webhook::{
    DeadLetter, DeliveryLease, HookEvent, MAX_DEAD_LETTERS, MAX_RETRYING, MAX_SECRETS,
    MAX_WEBHOOK_NAME, MAX_WEBHOOK_URL, MAX_WEBHOOKS, Notify, OutboxEvent, Retrying, SECRET_PREFIX,
    SigningSecret, Tried, Webhook, WebhookSpec, check_secret, event_of,
};
pub use work::{ExecutionLimits, Grant, WORK_SCHEMA_VERSION, Work, WorkError};

/// A validation failure in a value that came from outside (a caller, a guest, a file).
///
/// The message names the field and the rule it broke, so it can be shown to whoever sent
/// the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl Invalid {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}
