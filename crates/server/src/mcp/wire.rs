//! Tasks-extension wire shapes, written straight from a task's view: a lookup's reply is
//! serialized once, from the stored text of its result, with no JSON tree in between.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;

use crate::protocol::rfc3339;
use snodo_core::model::{RawJson, TaskStatus, TaskView, ViewOutcome};

/// Which task shape to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The flat `CreateTaskResult`: the shared fields and `resultType: "task"`.
    Created,
    /// The `DetailedTask` (`notifications/tasks`): the shared fields and the one field
    /// that matches the status.
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
                    m.serialize_entry("result", r)?;
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
