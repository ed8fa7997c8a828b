//! Tasks-extension wire shapes, written straight from a task's view: a lookup's reply is
//! serialized once, from the stored text of its result, with no JSON tree in between.
//!
//! These shapes are 2026-07-28's, so an inlined result is written as that revision's
//! `tools/call` would have answered it, with `"resultType": "complete"`; the store keeps the
//! result as the tool gave it, and each revision's writer decides what it adds.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::protocol::rfc3339;
use snodo_core::model::{RawJson, TaskStatus, TaskView, ViewOutcome};

/// Which task shape to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The flat `CreateTaskResult`: the shared fields and `resultType: "task"`.
    Created,
    /// The `DetailedTask` (`notifications/tasks`): the shared fields and the one field
    /// that matches the status (a result as a [`Complete`] one).
    Detailed,
    /// The `tasks/get` result: a `DetailedTask` with `resultType: "complete"`.
    Get,
}

/// A task in one of its wire shapes, with an optional `_meta`.
pub(crate) struct TaskMessage<'a> {
    task: &'a TaskView,
    shape: Shape,
    meta: Option<&'a Value>,
}

/// The flat `CreateTaskResult`.
pub(crate) fn create_task_result(t: &TaskView) -> TaskMessage<'_> {
    TaskMessage {
        task: t,
        shape: Shape::Created,
        meta: None,
    }
}

/// The `DetailedTask` of `notifications/tasks`, with the notification's `_meta`: only the
/// field that matches the status is inlined.
pub(crate) fn detailed_task<'a>(t: &'a TaskView, meta: &'a Value) -> TaskMessage<'a> {
    TaskMessage {
        task: t,
        shape: Shape::Detailed,
        meta: Some(meta),
    }
}

/// The `tasks/get` result.
pub(crate) fn get_task_result(t: &TaskView) -> TaskMessage<'_> {
    TaskMessage {
        task: t,
        shape: Shape::Get,
        meta: None,
    }
}

/// Outstanding input requests as the wire's object, by key.
struct Requests<'a>(&'a [(String, RawJson)]);

impl Serialize for Requests<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// A stored `CallToolResult` as a complete 2026-07-28 result: its own fields and
/// `"resultType": "complete"`, which that revision requires of every result (the official
/// Tasks client parses a completed task's result with that schema). The stored text is read
/// one level deep; each field's value is written back as its text.
struct Complete<'a>(&'a RawJson);

impl Serialize for Complete<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Ok(fields) = serde_json::from_str::<BTreeMap<String, &RawValue>>(self.0.get()) else {
            // Not an object: written as stored (a stored result always is one).
            return self.0.serialize(s);
        };
        let mut m = s.serialize_map(Some(fields.len() + 1))?;
        for (k, v) in fields.iter().filter(|(k, _)| *k != "resultType") {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("resultType", "complete")?;
        m.end()
    }
}

impl Serialize for TaskMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.task;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("taskId", &t.id)?;
        m.serialize_entry("status", t.status.as_str())?;
        if let Some(msg) = &t.status_message {
            m.serialize_entry("statusMessage", msg)?;
        }
        m.serialize_entry("createdAt", &rfc3339(t.created_at))?;
        m.serialize_entry("lastUpdatedAt", &rfc3339(t.last_updated_at))?;
        m.serialize_entry("ttlMs", &t.ttl_ms)?;
        if let Some(p) = t.poll_interval_ms {
            m.serialize_entry("pollIntervalMs", &p)?;
        }
        if self.shape != Shape::Created {
            match (t.status, &t.outcome) {
                (TaskStatus::InputRequired, _) => {
                    m.serialize_entry("inputRequests", &Requests(&t.input_requests))?;
                }
                (TaskStatus::Completed, Some(ViewOutcome::Result(r))) => {
                    m.serialize_entry("result", &Complete(r))?;
                }
                (TaskStatus::Failed, Some(ViewOutcome::Error(e))) => {
                    m.serialize_entry("error", e)?;
                }
                _ => {}
            }
        }
        match self.shape {
            Shape::Created => m.serialize_entry("resultType", "task")?,
            Shape::Get => m.serialize_entry("resultType", "complete")?,
            Shape::Detailed => {}
        }
        if let Some(meta) = self.meta {
            m.serialize_entry("_meta", meta)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A completed task's view whose stored result is `result`.
    fn completed(result: Value) -> TaskView {
        serde_json::from_value(json!({
            "id": "019ade3f4c2a7b8e91f0c3d2a4b5e6f7", "scope": "default", "status": "completed",
            "createdAt": 1764686400123_u64, "lastUpdatedAt": 1764686400131_u64,
            "ttlMs": 86400000, "outcome": {"result": result},
        }))
        .expect("a view")
    }

    #[test]
    fn an_inlined_result_is_complete_and_otherwise_as_stored() {
        let stored = json!({"content": [{"type": "text", "text": "hi"}], "isError": true,
                            "structuredContent": {"resultType": "kept"}});
        let t = completed(stored.clone());
        let get = serde_json::to_value(get_task_result(&t)).expect("json");
        let mut want = stored;
        want["resultType"] = json!("complete");
        assert_eq!(get["result"], want);
        assert_eq!(get["resultType"], "complete");
        let meta = json!({"io.modelcontextprotocol/subscriptionId": 3});
        let note = serde_json::to_value(detailed_task(&t, &meta)).expect("json");
        assert_eq!(note["result"], want);
        assert!(
            note.get("resultType").is_none(),
            "a notification is no result"
        );
        // The store keeps the result as the tool gave it.
        assert!(
            matches!(&t.outcome, Some(ViewOutcome::Result(r)) if !r.get().contains("complete"))
        );
    }

    #[test]
    fn a_results_own_result_type_gives_way() {
        let t = completed(json!({"content": [], "resultType": "input_required"}));
        let get = serde_json::to_value(get_task_result(&t)).expect("json");
        assert_eq!(
            get["result"],
            json!({"content": [], "resultType": "complete"})
        );
    }
}
