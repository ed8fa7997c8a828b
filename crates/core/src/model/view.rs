//! `TaskView`: what a client may see of a task, read without what only the runner needs.
//!
//! A lookup (`tasks/get`, a subscription's notification) shows the task's status, its
//! timestamps, the input requests still waiting and the outcome. The stored task also holds
//! the claim, the retry state, answered inputs, the creating client's capabilities and the
//! ids of committed events; decoding those on every lookup would make a poll cost more as a
//! task grows. A view is decoded straight from a stored task's JSON, skipping every other
//! field without building it, and keeps the JSON a client sees (input requests, the result
//! or error) as the stored text, which is written out again without being parsed into a tree.

use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{Outcome, Scope, Task, TaskId, TaskStatus, Timestamp};

/// A JSON value kept as its text: validated when read, written out verbatim.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// The JSON text of `value`.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Self {
        // Serializing a value that came from JSON into JSON cannot fail; `null` stands in for
        // a type whose `Serialize` refuses (none here does).
        Self(serde_json::value::to_raw_value(value).unwrap_or_default())
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The value as a tree (for callers that edit it; a lookup never needs this).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.0.get()).unwrap_or_default()
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.get())
    }
}

/// Equal when the JSON values are equal, whatever the spacing or key order of their text.
impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get() || self.to_value() == other.to_value()
    }
}

/// How a terminal task ended, as its JSON text.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ViewOutcome {
    /// The tool's result (a `CallToolResult`).
    Result(RawJson),
    /// The JSON-RPC error object the task failed with.
    Error(RawJson),
}

/// What a client may see of a task. Decoded from a stored task's JSON (every field the
/// view does not name is skipped) or built from a [`Task`] with [`TaskView::of`]; both give
/// the same view of the same task.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    /// The id.
    pub id: TaskId,
    /// The scope (tenant) it belongs to.
    pub scope: Scope,
    /// Lifecycle state.
    pub status: TaskStatus,
    /// Human-readable status.
    #[serde(default)]
    pub status_message: Option<String>,
    /// When the store created it.
    pub created_at: Timestamp,
    /// When a committed event last changed it.
    pub last_updated_at: Timestamp,
    /// Lifetime from creation; `None` is unlimited.
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    #[serde(default)]
    pub poll_interval_ms: Option<u64>,
    /// The input requests still waiting for an answer, by key, in key order.
    #[serde(default, rename = "inputs", deserialize_with = "outstanding")]
    pub input_requests: Vec<(String, RawJson)>,
    /// The result or error of a terminal task.
    #[serde(default)]
    pub outcome: Option<ViewOutcome>,
    /// The task's span, when it keeps its caller's trace context.
    #[serde(default)]
    pub span: Option<super::TaskSpan>,
}

impl TaskView {
    /// The view of `task`.
    pub fn of(task: &Task) -> Self {
        Self {
            id: task.id,
            scope: task.scope.clone(),
            status: task.status,
            status_message: task.status_message.clone(),
            created_at: task.created_at,
            last_updated_at: task.last_updated_at,
            ttl_ms: task.ttl_ms,
            poll_interval_ms: task.poll_interval_ms,
            input_requests: task
                .outstanding_inputs()
                .map(|(k, r)| (k.to_owned(), RawJson::of(r)))
                .collect(),
            outcome: task.outcome.as_ref().map(|o| match o {
                Outcome::Result(r) => ViewOutcome::Result(RawJson::of(r)),
                Outcome::Error(e) => ViewOutcome::Error(RawJson::of(e)),
            }),
            span: task.span.clone(),
        }
    }

    /// Whether the TTL has run out at `now` (as [`Task::is_expired`]).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        super::task::expiry(self.created_at, self.ttl_ms).is_some_and(|at| at <= now)
    }
}

/// The stored `inputs` map (`{key: {request, response?}}`), keeping the requests of the
/// entries without a response.
fn outstanding<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, RawJson)>, D::Error> {
    #[derive(Deserialize)]
    struct Entry {
        request: RawJson,
        #[serde(default)]
        response: Option<IgnoredAny>,
    }
    struct Inputs;
    impl<'de> Visitor<'de> for Inputs {
        type Value = Vec<(String, RawJson)>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of input entries")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((key, entry)) = map.next_entry::<String, Entry>()? {
                if entry.response.is_none() {
                    out.push((key, entry.request));
                }
            }
            // Stored maps are written in key order; a view lists them the same way whatever
            // wrote the record.
            if !out.is_sorted_by(|a, b| a.0 <= b.0) {
                out.sort_by(|a, b| a.0.cmp(&b.0));
            }
            Ok(out)
        }
    }
    d.deserialize_map(Inputs)
}
