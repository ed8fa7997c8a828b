//! The domain model: the Task aggregate, the Work descriptor, retry policies,
//! state-transition events and the state machine that applies them. Everything here is plain data plus pure rules; nothing does I/O.
//!
//! Every type serializes to JSON (camelCase keys) and the stored forms carry a schema
//! version, so a record written today can be read, or refused with a clear error, by a later
//! build.

mod capabilities;
mod event;
mod id;
mod retry;
mod task;
mod time;
mod transition;
mod view;
mod work;

pub use capabilities::ClientCapabilities;
pub(crate) use event::check_message;
pub use event::{
    EVENT_SCHEMA_VERSION, EventId, EventKind, MAX_STATUS_MESSAGE_BYTES, TaskEvent,
    truncate_status_message,
};
pub use id::{Principal, Scope, TaskId};
pub use retry::{MAX_RETRY_DELAY_MS, MAX_RETRY_ENTRIES, RetryPolicy, RetryPolicyError};
pub use task::{
    AppliedEvent, Claim, InputEntry, JsonRpcError, MAX_INPUT_KEY_LEN, Outcome, Task, TaskStatus,
};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
pub use transition::{Effect, InputReply, REMEMBERED_STATUS_EVENTS, Rejected, Step};
pub use view::{RawJson, TaskView, ViewOutcome};
pub use work::{ExecutionLimits, WORK_SCHEMA_VERSION, Work, WorkError};

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
