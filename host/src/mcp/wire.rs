//! Tasks-extension wire shapes built from stored tasks.

use serde_json::{Map, Value, json};

use crate::model::{Outcome, Task, TaskStatus};
use crate::protocol::rfc3339;

/// The `Task` fields every task shape shares.
fn base(t: &Task) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("taskId".into(), json!(t.id.to_string()));
    m.insert("status".into(), json!(t.status.as_str()));
    if let Some(msg) = &t.status_message {
        m.insert("statusMessage".into(), json!(msg));
    }
    m.insert("createdAt".into(), json!(rfc3339(t.created_at)));
    m.insert("lastUpdatedAt".into(), json!(rfc3339(t.last_updated_at)));
    m.insert("ttlMs".into(), t.ttl_ms.map_or(Value::Null, |v| json!(v)));
    if let Some(p) = t.poll_interval_ms {
        m.insert("pollIntervalMs".into(), json!(p));
    }
    m
}

/// The flat `CreateTaskResult`.
pub(crate) fn create_task_result(t: &Task) -> Value {
    let mut m = base(t);
    m.insert("resultType".into(), json!("task"));
    Value::Object(m)
}

/// The `DetailedTask` (for `tasks/get` and `notifications/tasks`): only the field that
/// matches the status is inlined.
pub(crate) fn detailed_task(t: &Task) -> Map<String, Value> {
    let mut m = base(t);
    match (t.status, &t.outcome) {
        (TaskStatus::InputRequired, _) => {
            let requests: Map<String, Value> = t
                .outstanding_inputs()
                .map(|(k, r)| (k.to_owned(), r.clone()))
                .collect();
            m.insert("inputRequests".into(), Value::Object(requests));
        }
        (TaskStatus::Completed, Some(Outcome::Result(r))) => {
            m.insert("result".into(), r.clone());
        }
        (TaskStatus::Failed, Some(Outcome::Error(e))) => {
            m.insert(
                "error".into(),
                serde_json::to_value(e)
                    .unwrap_or_else(|_| json!({"code": -32603, "message": "internal error"})),
            );
        }
        _ => {}
    }
    m
}

/// The `tasks/get` result.
pub(crate) fn get_task_result(t: &Task) -> Value {
    let mut m = detailed_task(t);
    m.insert("resultType".into(), json!("complete"));
    Value::Object(m)
}
