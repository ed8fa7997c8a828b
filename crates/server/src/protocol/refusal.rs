//! Refusals for a missing client capability (-32021), worded for the person reading them:
//! many clients show a JSON-RPC error's `message` and nothing else, so the message names the
//! tool or method refused, why it needs the capability, and what would change the answer (the
//! capability or extension to declare, or the operator's `mode`). The `data` stays the
//! machine-readable `requiredCapabilities` every client can act on.

use serde_json::Value;
use snodo_core::model::ClientCapabilities;

use super::{PROTOCOL_VERSION, RequestMeta, RpcError, TASKS_EXTENSION};

/// Where a request of `meta`'s revision declares its client capabilities.
fn where_declared(meta: &RequestMeta) -> String {
    if meta.protocol_version == PROTOCOL_VERSION {
        "_meta[\"io.modelcontextprotocol/clientCapabilities\"]".to_owned()
    } else {
        "the capabilities of the client's initialize request".to_owned()
    }
}

/// -32021 for tool `tool`, which runs only as a durable task, called by a request that cannot
/// have one: `lacking` says what the request lacks, `remedy` what the client would do instead.
pub(crate) fn task_only(tool: &str, lacking: &str, remedy: &str) -> RpcError {
    RpcError {
        message: format!(
            "tool {tool:?} runs only as a durable task, and {lacking}: {remedy} to call it, \
             or ask the server's operator to set mode = \"optional\" under [tools.{tool}] so \
             that it also runs without a task"
        ),
        ..RpcError::tasks_required()
    }
}

/// -32021 for tool `tool`, which runs only as a durable task, called by a 2026-07-28 request
/// that did not declare the tasks extension.
pub(crate) fn task_only_undeclared(tool: &str) -> RpcError {
    task_only(
        tool,
        &format!("this request did not declare the {TASKS_EXTENSION} extension"),
        &format!(
            "declare it as {{}} under _meta[\"io.modelcontextprotocol/clientCapabilities\"]\
             .extensions[\"{TASKS_EXTENSION}\"] (the reply is then a task to poll with tasks/get)"
        ),
    )
}

/// -32021 for tool `tool`, which asks its first questions before its task exists (its
/// prepare phase), called as a 2025-11-25 task: that call is answered with a plain
/// `CreateTaskResult`, which cannot carry a question.
pub(crate) fn asks_before_its_task(tool: &str) -> RpcError {
    RpcError {
        message: format!(
            "tool {tool:?} asks its first questions before its task is created, which a \
             2025-11-25 call with params.task cannot carry: connect with MCP 2026-07-28 and \
             declare the {TASKS_EXTENSION} extension to call it as a task, or, if the tool \
             allows it, call it without params.task (it then runs on the call, asking on its \
             event stream)"
        ),
        ..RpcError::tasks_required()
    }
}

/// -32021 for `method`, one of the tasks extension's own methods, from a request that did not
/// declare the extension.
pub(crate) fn tasks_method(method: &str) -> RpcError {
    RpcError {
        message: format!(
            "{method} belongs to the {TASKS_EXTENSION} extension, which this request did not \
             declare: declare it as {{}} under \
             _meta[\"io.modelcontextprotocol/clientCapabilities\"].extensions[\"{TASKS_EXTENSION}\"] \
             on every tasks/* request"
        ),
        ..RpcError::tasks_required()
    }
}

/// -32021 for a `subscriptions/listen` that asks for task notifications (`taskIds`) without
/// declaring the tasks extension.
pub(crate) fn task_notifications() -> RpcError {
    RpcError {
        message: format!(
            "task status notifications (notifications.taskIds) belong to the {TASKS_EXTENSION} \
             extension, which this request did not declare: declare it as {{}} under \
             _meta[\"io.modelcontextprotocol/clientCapabilities\"].extensions[\"{TASKS_EXTENSION}\"], \
             or leave taskIds out to listen for list changes only"
        ),
        ..RpcError::tasks_required()
    }
}

/// What a client capability lets the server ask of the client, for a message.
fn kind_of(capability: &str) -> String {
    match capability {
        "elicitation" => "questions to the user (elicitation)".to_owned(),
        "sampling" => "completions from the client's model (sampling)".to_owned(),
        "roots" => "the client's roots (roots)".to_owned(),
        other => format!("the client capability {other:?}"),
    }
}

/// -32021 for tool `tool`, which asks the client for what `required` names (its declared
/// `requiredCapabilities`), called by a request (`meta`) that did not declare all of it.
pub(crate) fn tool_needs(tool: &str, required: &Value, meta: &RequestMeta) -> RpcError {
    let declared = ClientCapabilities::of(&meta.client_capabilities);
    let missing: Vec<(String, String)> = required
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| {
            let one = serde_json::Map::from_iter([((*k).clone(), (*v).clone())]);
            !declared.covers(&Value::Object(one))
        })
        .flat_map(|(k, v)| match (k.as_str(), v.as_object()) {
            ("extensions", Some(exts)) => exts
                .keys()
                .filter(|e| !declared.declares_extension(e))
                .map(|e| (format!("the {e} extension"), format!("extensions[{e:?}]")))
                .collect(),
            _ => vec![(kind_of(k), k.clone())],
        })
        .collect();
    let (kinds, keys): (Vec<_>, Vec<_>) = missing.into_iter().unzip();
    RpcError {
        message: format!(
            "tool {tool:?} asks the client for {}, which this client did not declare: declare {} \
             in {} to call it",
            kinds.join(" and "),
            keys.join(" and "),
            where_declared(meta),
        ),
        ..RpcError::missing_capability(required.clone())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn meta(version: &str, capabilities: Value) -> RequestMeta {
        RequestMeta {
            protocol_version: version.to_owned(),
            client_capabilities: capabilities,
            progress_token: None,
            log_level: None,
            trace: None,
            webhook: None,
        }
    }

    #[test]
    fn a_task_only_refusal_names_the_tool_the_extension_and_the_mode() {
        let e = task_only_undeclared("export");
        assert_eq!(e.code, -32021);
        assert_eq!(
            e.data,
            Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}))
        );
        for part in [
            "tool \"export\" runs only as a durable task",
            "did not declare the io.modelcontextprotocol/tasks extension",
            "clientCapabilities",
            "mode = \"optional\" under [tools.export]",
        ] {
            assert!(e.message.contains(part), "{part:?} in {}", e.message);
        }
    }

    #[test]
    fn a_question_before_a_2025_task_names_the_tool_and_both_ways_out() {
        let e = asks_before_its_task("export");
        assert_eq!(e.code, -32021);
        for part in [
            "tool \"export\" asks its first questions before its task is created",
            "2026-07-28",
            "without params.task",
        ] {
            assert!(e.message.contains(part), "{part:?} in {}", e.message);
        }
    }

    #[test]
    fn method_and_notification_refusals_say_what_to_declare() {
        let e = tasks_method("tasks/get");
        assert!(
            e.message
                .starts_with("tasks/get belongs to the io.modelcontextprotocol/tasks")
        );
        assert_eq!(e.data, RpcError::tasks_required().data);
        let e = task_notifications();
        assert!(
            e.message.contains("notifications.taskIds") && e.message.contains("leave taskIds out")
        );
        assert_eq!(e.code, -32021);
    }

    #[test]
    fn a_tool_needing_a_capability_is_told_which_kind_and_where_to_declare_it() {
        let required =
            json!({"sampling": {}, "elicitation": {}, "extensions": {"x/y": {}, "a/b": {}}});
        let declared = json!({"elicitation": {}, "extensions": {"a/b": {}}});
        let e = tool_needs("summarize", &required, &meta(PROTOCOL_VERSION, declared));
        assert_eq!(e.code, -32021);
        assert_eq!(e.data, Some(json!({"requiredCapabilities": required})));
        for part in [
            "tool \"summarize\" asks the client for ",
            "the x/y extension",
            "completions from the client's model (sampling)",
            "which this client did not declare: declare ",
            "extensions[\"x/y\"]",
            " in _meta[\"io.modelcontextprotocol/clientCapabilities\"] to call it",
        ] {
            assert!(e.message.contains(part), "{part:?} in {}", e.message);
        }
        assert!(
            !e.message.contains("a/b") && !e.message.contains("elicitation"),
            "{}",
            e.message
        );
        let e = tool_needs(
            "summarize",
            &json!({"sampling": {}}),
            &meta("2025-11-25", json!({})),
        );
        assert!(
            e.message.ends_with(
                "declare sampling in the capabilities of the client's initialize request to call it"
            ),
            "{}",
            e.message
        );
    }
}
