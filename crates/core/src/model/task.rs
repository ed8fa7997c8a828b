//! The Task aggregate: status, timestamps, revision, retry state, inputs, outcome and claim.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use serde_json::json;

use super::codes;
use super::history::History;
use super::{Invalid, Scope, TASKS_EXTENSION, TaskId, Timestamp};

/// The longest input-request key, in bytes.
pub const MAX_INPUT_KEY_LEN: usize = 256;

/// A task's lifecycle state.
///
/// ```text
/// working        -> input_required | completed | failed | cancelled
/// input_required -> working | completed | failed | cancelled
/// completed | failed | cancelled: terminal, never change
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running, queued, or waiting for a retry.
    Working,
    /// Waiting for the client to answer at least one input request.
    InputRequired,
    /// Finished with a result (a tool result with `isError: true` included).
    Completed,
    /// Finished with a JSON-RPC error.
    Failed,
    /// Cancelled on request.
    Cancelled,
}

impl TaskStatus {
    /// Whether the status can never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The status named `name` (its wire name).
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::Working,
            Self::InputRequired,
            Self::Completed,
            Self::Failed,
            Self::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JSON-RPC error object: the outcome of a failed task, or the error an executor gives
/// with a retry request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonRpcError {
    /// The error code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Optional detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl JsonRpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        if self.message.is_empty() {
            return Err(Invalid::new("a JSON-RPC error needs a non-empty message"));
        }
        Ok(())
    }
}

impl JsonRpcError {
    /// -32602.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    /// -32020.
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(codes::HEADER_MISMATCH, message)
    }

    /// -32601.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    /// -32603.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }

    /// -32021 naming the capabilities required.
    pub fn missing_capability(required: Value) -> Self {
        Self::new(
            codes::MISSING_CAPABILITY,
            "Missing required client capability",
        )
        .with_data(json!({"requiredCapabilities": required}))
    }

    /// -32021 for the tasks extension.
    pub fn tasks_required() -> Self {
        Self::missing_capability(json!({"extensions": {TASKS_EXTENSION: {}}}))
    }

    /// The error object.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            v["data"] = d.clone();
        }
        v
    }
}

/// How a terminal task ended (absent for cancelled tasks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// The tool's result (a `CallToolResult`).
    Result(Value),
    /// The JSON-RPC error the task failed with.
    Error(JsonRpcError),
}

/// One input request made by the task, and its accepted answer once there is one.
///
/// Keys are unique for the task's whole lifetime: an answered entry stays, so a replayed
/// guest that repeats the same key and request gets the stored answer back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputEntry {
    /// The MCP input request (`{"method": ..., "params": ...}`).
    pub request: Value,
    /// The accepted response, once one arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Value>,
}

/// A worker's claim on a task: whoever holds the matching lease may commit lifecycle events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// The fencing token: the task's generation when this claim was made.
    pub generation: u64,
    /// Secret half of the lease, so a lease cannot be forged from the generation alone.
    pub token: u64,
    /// The store boot epoch the claim was made in.
    pub epoch: u64,
    /// When the lease runs out (store clock).
    pub expires_at: Timestamp,
    /// Who holds it, for operators.
    pub owner: String,
}

/// An event id that was committed, kept so a repeated event returns its first commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedEvent {
    /// The event id.
    pub id: String,
    /// The revision it produced.
    pub revision: u64,
    /// A digest of the event's content, so reuse of an id for a different event is caught.
    pub digest: u64,
    /// The claim generation that committed it (worker events only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// A status message: only the newest few of these are remembered (see
    /// [`super::REMEMBERED_STATUS_EVENTS`]), so a guest cannot grow its record
    /// without bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub status: bool,
    /// What a `retry_requested` scheduled (none when it ended the task): its replay reports
    /// this schedule, whatever the task holds by then, so a commit tried again after an
    /// unknown reply arms the same retry as the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<ScheduledRetry>,
}

/// The retry an applied `retry_requested` scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledRetry {
    /// When the retry may run (store clock).
    pub at: Timestamp,
    /// Retries consumed by then, this one included.
    pub count: u32,
}

/// The Task aggregate, as stored.
///
/// Snapshots handed out by a store are copies: changing one changes nothing. Every change
/// goes through a store operation, which keeps the invariants (terminal states never change,
/// the revision grows by one per committed event, the generation grows with every claim).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The unguessable id.
    pub id: TaskId,
    /// The scope (tenant) the task belongs to.
    pub scope: Scope,
    /// Lifecycle state.
    pub status: TaskStatus,
    /// Human-readable status, shown to users and models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the store created it.
    pub created_at: Timestamp,
    /// When a committed event last changed it.
    pub last_updated_at: Timestamp,
    /// Lifetime from creation; `None` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Grows by one with every committed event; the compare-and-set version.
    pub revision: u64,
    /// Executions started.
    pub attempt: u32,
    /// Retries consumed from the retry policy (never on the wire).
    pub retry_count: u32,
    /// When the pending retry may run (store clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<Timestamp>,
    /// When a sleeping task wakes (store clock): its attempt slept past the runner's
    /// threshold and gave up its claim until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Timestamp>,
    /// Every input request made, by key, with its answer once accepted.
    #[serde(default)]
    pub inputs: BTreeMap<String, InputEntry>,
    /// The result or error of a terminal task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The highest claim generation issued; survives releases.
    pub generation: u64,
    /// Claims that ended without the worker letting go: the lease ran out or its process
    /// was gone at the next boot. A task that takes its attempt down every time grows this,
    /// and the runner fails it past its cap instead of replaying it forever.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recoveries: u32,
    /// Entries in the task's outbound journal, and their encoded bytes: what its bound
    /// is checked against without reading the journal.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub journal_entries: u32,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    #[doc = "The journal's encoded bytes."]
    pub journal_bytes: u64,
    /// What the task counts under its scope's stored bytes: its record's JSON length
    /// (this field left out) as of the last change of status or inputs, plus its journal's
    /// bytes. The store moves the scope's count by this value's changes in the same
    /// commit, and gives it back when the task is removed, so the count is the exact sum
    /// of its tasks' values whatever the measure was when each was taken.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub stored_bytes: u64,
    /// The live claim, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<Claim>,
    /// The client capabilities declared by the request that created the task (the
    /// capability set only), so input requests can be checked against what it supports.
    #[serde(default)]
    pub client_capabilities: Value,
    /// Committed event ids, for idempotent replays.
    #[serde(default)]
    pub events: Vec<AppliedEvent>,
    /// What happened to the task and when, for operators (bounded: [`History`]).
    #[serde(default, skip_serializing_if = "History::is_empty")]
    pub history: History,
    /// The task's place in its trace, when its work keeps the caller's trace context
    /// (docs/observability.md); kept here too so that whoever ends or reads the task can
    /// name its span without reading the work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<super::TaskSpan>,
    /// The webhook subscriptions told of its transitions, fixed at creation: the store
    /// writes an event to the outbox in the commit of each transition one of them hears.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<super::Notify>,
}

impl Task {
    /// Input requests still waiting for an answer, by key.
    pub fn outstanding_inputs(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.inputs
            .iter()
            .filter(|(_, e)| e.response.is_none())
            .map(|(k, e)| (k.as_str(), &e.request))
    }

    /// Whether any input request waits for an answer.
    pub fn has_outstanding_inputs(&self) -> bool {
        self.inputs.values().any(|e| e.response.is_none())
    }

    /// When the task's TTL runs out, if it has one.
    pub fn expires_at(&self) -> Option<Timestamp> {
        expiry(self.created_at, self.ttl_ms)
    }

    /// Whether the TTL has run out at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|at| at <= now)
    }

    /// The claim if it is still live at `now` in boot epoch `epoch`.
    pub fn live_claim(&self, now: Timestamp, epoch: u64) -> Option<&Claim> {
        self.claim
            .as_ref()
            .filter(|c| c.epoch == epoch && c.expires_at > now)
    }

    /// When a runner may next claim this task, or `None` if no runner should (terminal, or
    /// parked on an unanswered input request with no live guest).
    ///
    /// This is the one definition of "due" every store indexes: an unclaimed task is due
    /// at once (its last update orders the queue), a claimed one when its lease runs out,
    /// a backing-off one at `retry_at`, a sleeping one at `wake_at`.
    pub fn due_at(&self) -> Option<Timestamp> {
        if self.status.is_terminal() {
            return None;
        }
        if let Some(c) = &self.claim {
            return Some(c.expires_at);
        }
        if self.has_outstanding_inputs() {
            return None;
        }
        Some(self.held_until().unwrap_or(self.last_updated_at))
    }

    /// Until when an unclaimed task may not be claimed: its retry delay or its sleep.
    pub fn held_until(&self) -> Option<Timestamp> {
        self.retry_at.or(self.wake_at)
    }
}

/// When a task created at `created_at` with `ttl_ms` expires: the one definition a task and
/// its view share.
pub(crate) fn expiry(created_at: Timestamp, ttl_ms: Option<u64>) -> Option<Timestamp> {
    ttl_ms.map(|ttl| created_at.plus_ms(ttl))
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_wire_names() {
        let v = serde_json::to_value(TaskStatus::InputRequired).unwrap_or_default();
        assert_eq!(v, "input_required");
        assert!(TaskStatus::Cancelled.is_terminal());
        assert!(!TaskStatus::InputRequired.is_terminal());
    }
}
