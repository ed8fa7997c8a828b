//! 2025-11-25's task shapes (SEP-1686), written from the same stored task 2026-07-28 reads:
//! the flat `Task` (`ttl` and `pollInterval` in integer milliseconds), its status as that
//! revision reads it, the `_meta` that relates a message to its task, and the `tasks/result`
//! payload.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::protocol::{self, RpcError, codes, rfc3339};
use snodo_core::model::{TaskStatus, TaskView, ViewOutcome};

use super::super::follow::finished_call;

/// Whether a stored result says `isError: true` (read one level deep).
fn is_tool_error(result: &snodo_core::model::RawJson) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default, rename = "isError")]
        is_error: bool,
    }
    serde_json::from_str::<Probe>(result.get()).is_ok_and(|p| p.is_error)
}

/// The status this revision shows: a result with `isError: true` is `failed` here (its
/// clients read `completed` as success and fetch no result of a failed task otherwise),
/// while the stored task, and 2026-07-28, say `completed`.
pub(in crate::mcp) fn status(t: &TaskView) -> &'static str {
    match (t.status, &t.outcome) {
        (TaskStatus::Completed, Some(ViewOutcome::Result(r))) if is_tool_error(r) => "failed",
        (s, _) => s.as_str(),
    }
}

/// The flat `Task`.
pub(in crate::mcp) fn task(t: &TaskView) -> Value {
    let mut v = json!({
        "taskId": t.id.to_string(),
        "status": status(t),
        "createdAt": rfc3339(t.created_at),
        "lastUpdatedAt": rfc3339(t.last_updated_at),
        "ttl": t.ttl_ms,
    });
    if let Some(m) = &t.status_message {
        v["statusMessage"] = json!(m);
    }
    if let Some(p) = t.poll_interval_ms {
        v["pollInterval"] = json!(p);
    }
    v
}

/// The `tasks/result` response to request `id` for the finished task `t`: exactly what its
/// `tools/call` would have answered (the result, or the JSON-RPC error), a result carrying
/// the related-task `_meta` beside its own. A cancelled task has no result: it is an
/// error that says so.
pub(super) fn payload(id: &Value, t: &TaskView) -> Value {
    if let Some((_, message)) = finished_call(&super::HANDSHAKE, id, t) {
        return message;
    }
    let why = t.status_message.as_deref().unwrap_or("cancelled");
    let e = RpcError::new(
        codes::INVALID_REQUEST,
        format!("task {} was cancelled ({why}): it has no result", t.id),
    );
    protocol::error_response(id, &e)
}

#[cfg(test)]
mod tests {
    use super::super::super::follow::RELATED_TASK;
    use super::*;

    fn view(status: &str, outcome: Value) -> TaskView {
        serde_json::from_value(json!({
            "id": "019ade3f4c2a7b8e91f0c3d2a4b5e6f7", "scope": "default", "status": status,
            "createdAt": 1764686400123_u64, "lastUpdatedAt": 1764686400131_u64,
            "ttlMs": 86400000, "pollIntervalMs": 1000, "outcome": outcome,
        }))
        .expect("a view")
    }

    #[test]
    fn a_task_is_flat_with_integer_milliseconds_and_no_2026_names() {
        let t = view("working", Value::Null);
        let v = task(&t);
        assert_eq!(v["taskId"], "019ade3f4c2a7b8e91f0c3d2a4b5e6f7");
        assert_eq!(v["status"], "working");
        assert_eq!(v["ttl"], 86_400_000);
        assert_eq!(v["pollInterval"], 1_000);
        assert_eq!(v["createdAt"], "2025-12-02T14:40:00.123Z");
        for absent in [
            "ttlMs",
            "pollIntervalMs",
            "resultType",
            "result",
            "statusMessage",
        ] {
            assert!(v.get(absent).is_none(), "{absent} in {v}");
        }
    }

    #[test]
    fn a_tool_error_reads_failed_and_its_payload_is_the_result_with_the_related_task() {
        let t = view(
            "completed",
            json!({"result": {"content": [], "isError": true, "_meta": {"k": 1}}}),
        );
        assert_eq!(status(&t), "failed");
        let p = payload(&json!(7), &t);
        assert_eq!(p["id"], 7);
        assert_eq!(p["result"]["isError"], true);
        assert_eq!(p["result"]["_meta"]["k"], 1, "its own _meta is kept");
        assert_eq!(
            p["result"]["_meta"][RELATED_TASK]["taskId"],
            "019ade3f4c2a7b8e91f0c3d2a4b5e6f7"
        );
        let ok = view("completed", json!({"result": {"content": []}}));
        assert_eq!(status(&ok), "completed");
        let failed = view(
            "failed",
            json!({"error": {"code": -32603, "message": "boom"}}),
        );
        assert_eq!(status(&failed), "failed");
        let p = payload(&json!(8), &failed);
        assert_eq!(p["error"]["message"], "boom");
        let cancelled = view("cancelled", Value::Null);
        assert_eq!(payload(&json!(9), &cancelled)["error"]["code"], -32600);
    }
}
