//! Typed requests: each served method's parameters, parsed once into one type per method.
//!
//! [`Call::parse`] is the only place a malformed parameter becomes -32602; handlers receive
//! fields of the right types and never read `params` themselves. Both revisions parse into
//! the same types (the 2025-11-25 adapter in `legacy` adds the methods only it has), so a
//! handler serves them alike.
//!
//! What a parameter means (a tool that exists, a task the caller may see, a `requestState`
//! that verifies) is the handler's to decide: parsing checks shape, never the store.

use serde_json::{Map, Value};

use crate::protocol::RpcError;

use super::method::Method;

/// A request of a served method, with its parameters.
#[derive(Debug)]
pub(crate) enum Call {
    /// `server/discover`.
    Discover,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`.
    ToolsCall(ToolsCall),
    /// `resources/list`.
    ResourcesList,
    /// `resources/templates/list`.
    ResourceTemplatesList,
    /// `resources/read`.
    ResourcesRead(ResourcesRead),
    /// `prompts/list`.
    PromptsList,
    /// `prompts/get`.
    PromptsGet(PromptsGet),
    /// `completion/complete`.
    Complete(Complete),
    /// `tasks/get`.
    TasksGet(TaskRef),
    /// `tasks/update`.
    TasksUpdate(TasksUpdate),
    /// `tasks/cancel`.
    TasksCancel(TaskRef),
    /// `subscriptions/listen`.
    SubscriptionsListen(Listen),
    /// `tasks/result` (2025-11-25).
    TasksResult(TaskRef),
    /// `tasks/list` (2025-11-25).
    TasksList(TasksList),
}

/// The answers an MRTR round carries: `inputResponses` (each an MCP input result object)
/// and the `requestState` an earlier round was given, still sealed.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    /// `inputResponses`, by input request key.
    pub(crate) responses: Map<String, Value>,
    /// `requestState`, as the client sent it back.
    pub(crate) state: Option<String>,
}

/// `tools/call`.
#[derive(Debug)]
pub(crate) struct ToolsCall {
    /// The tool.
    pub(crate) name: String,
    /// Its arguments (absent or null is empty).
    pub(crate) arguments: Map<String, Value>,
    /// MRTR answers.
    pub(crate) answers: Answers,
    /// Whether the call asked to run as a task by its own parameters (2025-11-25's
    /// `params.task`; 2026-07-28 asks by the declared extension instead).
    pub(crate) as_task: bool,
}

/// `resources/read`.
#[derive(Debug)]
pub(crate) struct ResourcesRead {
    /// The resource.
    pub(crate) uri: String,
    /// MRTR answers.
    pub(crate) answers: Answers,
}

/// `prompts/get`.
#[derive(Debug)]
pub(crate) struct PromptsGet {
    /// The prompt.
    pub(crate) name: String,
    /// Its arguments: strings only.
    pub(crate) arguments: Map<String, Value>,
    /// MRTR answers.
    pub(crate) answers: Answers,
}

/// What `completion/complete` completes.
#[derive(Debug)]
pub(crate) enum Completing {
    /// An argument of the prompt with this name (`ref/prompt`).
    Prompt(String),
    /// A variable of the resource template with this URI template (`ref/resource`).
    Template(String),
}

/// `completion/complete`.
#[derive(Debug)]
pub(crate) struct Complete {
    /// The prompt or template.
    pub(crate) target: Completing,
    /// The argument being completed.
    pub(crate) argument: String,
    /// What the user typed so far.
    pub(crate) value: String,
    /// The values of the other arguments (`context.arguments`), `{}` when absent.
    pub(crate) context: Value,
}

/// `tasks/get` and `tasks/cancel`: a task id, unparsed (a malformed id reads like an
/// unknown one, so that it tells a caller nothing).
#[derive(Debug)]
pub(crate) struct TaskRef {
    /// `taskId`.
    pub(crate) task_id: String,
}

/// `tasks/list`: absent parameters are the first page.
#[derive(Debug)]
pub(crate) struct TasksList {
    /// `cursor`, as an earlier page gave it.
    pub(crate) cursor: Option<String>,
}

/// `tasks/update`.
#[derive(Debug)]
pub(crate) struct TasksUpdate {
    /// `taskId`.
    pub(crate) task_id: String,
    /// The answers, by input request key.
    pub(crate) responses: Map<String, Value>,
}

/// `subscriptions/listen`.
#[derive(Debug)]
pub(crate) struct Listen {
    /// `notifications.taskIds`, when the client asked for task notifications: every string
    /// it listed, in order (other entries are ignored).
    pub(crate) task_ids: Option<Vec<String>>,
    /// `notifications.toolsListChanged` was `true`.
    pub(crate) tools_list_changed: bool,
    /// `notifications.resourcesListChanged` was `true`.
    pub(crate) resources_list_changed: bool,
    /// `notifications.promptsListChanged` was `true`.
    pub(crate) prompts_list_changed: bool,
}

impl Call {
    /// Parses `params` as the parameters of `method`.
    pub(crate) fn parse(method: Method, mut params: Map<String, Value>) -> Result<Self, RpcError> {
        let p = &mut params;
        Ok(match method {
            Method::Discover => Self::Discover,
            Method::ToolsList => Self::ToolsList,
            Method::ToolsCall => Self::ToolsCall(ToolsCall {
                name: take_string(p, "name")?,
                arguments: take_object(p, "arguments")?,
                answers: Answers::take(p)?,
                as_task: false,
            }),
            Method::ResourcesList => Self::ResourcesList,
            Method::ResourceTemplatesList => Self::ResourceTemplatesList,
            Method::ResourcesRead => Self::ResourcesRead(ResourcesRead {
                uri: take_string(p, "uri")?,
                answers: Answers::take(p)?,
            }),
            Method::PromptsList => Self::PromptsList,
            Method::PromptsGet => {
                let name = take_string(p, "name")?;
                let arguments = take_object(p, "arguments")?;
                if !arguments.values().all(Value::is_string) {
                    return Err(RpcError::invalid_params(
                        "params.arguments must be an object of strings",
                    ));
                }
                Self::PromptsGet(PromptsGet {
                    name,
                    arguments,
                    answers: Answers::take(p)?,
                })
            }
            Method::Complete => Self::Complete(Complete::take(p)?),
            Method::TasksGet => Self::TasksGet(TaskRef {
                task_id: take_string(p, "taskId")?,
            }),
            Method::TasksCancel => Self::TasksCancel(TaskRef {
                task_id: take_string(p, "taskId")?,
            }),
            Method::TasksUpdate => {
                let responses = match p.remove("inputResponses") {
                    Some(Value::Object(r)) => r,
                    _ => {
                        return Err(RpcError::invalid_params(
                            "params.inputResponses must be an object",
                        ));
                    }
                };
                Self::TasksUpdate(TasksUpdate {
                    task_id: take_string(p, "taskId")?,
                    responses,
                })
            }
            Method::SubscriptionsListen => Self::SubscriptionsListen(Listen::take(p)?),
            Method::TasksResult => Self::TasksResult(TaskRef {
                task_id: take_string(p, "taskId")?,
            }),
            Method::TasksList => Self::TasksList(TasksList {
                cursor: match p.remove("cursor") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(c)) => Some(c),
                    Some(_) => {
                        return Err(RpcError::invalid_params("params.cursor must be a string"));
                    }
                },
            }),
        })
    }
}

impl Answers {
    fn take(params: &mut Map<String, Value>) -> Result<Self, RpcError> {
        let responses = take_object(params, "inputResponses")?;
        // Every answer is an MCP result object (ElicitResult, CreateMessageResult,
        // ListRootsResult); anything else is a malformed round, not an answer.
        if let Some((k, _)) = responses.iter().find(|(_, v)| !v.is_object()) {
            return Err(RpcError::invalid_params(format!(
                "inputResponses[{k:?}] must be an object (an MCP input result)"
            )));
        }
        let state = match params.remove("requestState") {
            None => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => return Err(RpcError::invalid_params("requestState must be a string")),
        };
        Ok(Self { responses, state })
    }
}

impl Complete {
    fn take(params: &mut Map<String, Value>) -> Result<Self, RpcError> {
        let Some(Value::Object(mut reference)) = params.remove("ref") else {
            return Err(RpcError::invalid_params("params.ref must be an object"));
        };
        let Some(Value::Object(mut argument)) = params.remove("argument") else {
            return Err(RpcError::invalid_params(
                "params.argument must be an object",
            ));
        };
        let name = take_string(&mut argument, "name")?;
        let value = take_string(&mut argument, "value")?;
        let context = match params.remove("context") {
            Some(Value::Object(mut c)) => c.remove("arguments"),
            _ => None,
        }
        .unwrap_or_else(|| Value::Object(Map::new()));
        let target = match take_string(&mut reference, "type")?.as_str() {
            "ref/prompt" => Completing::Prompt(take_string(&mut reference, "name")?),
            "ref/resource" => Completing::Template(take_string(&mut reference, "uri")?),
            other => {
                return Err(RpcError::invalid_params(format!(
                    "params.ref.type {other:?} is neither ref/prompt nor ref/resource"
                )));
            }
        };
        Ok(Self {
            target,
            argument: name,
            value,
            context,
        })
    }
}

impl Listen {
    fn take(params: &mut Map<String, Value>) -> Result<Self, RpcError> {
        let mut filter = match params.remove("notifications") {
            None => Map::new(),
            Some(Value::Object(f)) => f,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "params.notifications must be an object",
                ));
            }
        };
        let task_ids = match filter.remove("taskIds") {
            None => None,
            Some(Value::Array(ids)) => Some(
                ids.into_iter()
                    .filter_map(|id| match id {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .collect(),
            ),
            Some(_) => return Err(RpcError::invalid_params("taskIds must be an array")),
        };
        Ok(Self {
            task_ids,
            tools_list_changed: filter.get("toolsListChanged") == Some(&Value::Bool(true)),
            resources_list_changed: filter.get("resourcesListChanged") == Some(&Value::Bool(true)),
            prompts_list_changed: filter.get("promptsListChanged") == Some(&Value::Bool(true)),
        })
    }
}

/// A required string parameter, moved out of `params`.
pub(crate) fn take_string(params: &mut Map<String, Value>, key: &str) -> Result<String, RpcError> {
    match params.remove(key) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(RpcError::invalid_params(format!(
            "params.{key} must be a string"
        ))),
    }
}

/// An optional object parameter, moved out of `params`: absent or null is an empty object.
pub(crate) fn take_object(
    params: &mut Map<String, Value>,
    key: &str,
) -> Result<Map<String, Value>, RpcError> {
    match params.remove(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(RpcError::invalid_params(format!(
            "params.{key} must be an object"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(method: Method, params: Value) -> Result<Call, RpcError> {
        let Value::Object(p) = params else {
            panic!("params must be an object")
        };
        Call::parse(method, p)
    }

    fn refused(method: Method, params: Value) -> String {
        let e = parse(method, params).expect_err("malformed parameters are refused");
        assert_eq!(e.code, crate::protocol::codes::INVALID_PARAMS, "{e:?}");
        e.message
    }

    #[test]
    fn a_tool_call_takes_its_name_arguments_and_answers() {
        let Ok(Call::ToolsCall(c)) = parse(
            Method::ToolsCall,
            json!({"name": "t", "arguments": {"a": 1}, "inputResponses": {"k": {"action": "accept"}},
                   "requestState": "s"}),
        ) else {
            panic!("a tool call")
        };
        assert_eq!(c.name, "t");
        assert_eq!(c.arguments["a"], 1);
        assert_eq!(c.answers.responses["k"]["action"], "accept");
        assert_eq!(c.answers.state.as_deref(), Some("s"));
        let Ok(Call::ToolsCall(c)) =
            parse(Method::ToolsCall, json!({"name": "t", "arguments": null}))
        else {
            panic!("a tool call")
        };
        assert!(c.arguments.is_empty() && c.answers.responses.is_empty());
    }

    #[test]
    fn each_malformed_parameter_is_invalid_params_naming_it() {
        assert!(refused(Method::ToolsCall, json!({})).contains("params.name"));
        assert!(
            refused(Method::ToolsCall, json!({"name": "t", "arguments": []})).contains("arguments")
        );
        assert!(
            refused(
                Method::ToolsCall,
                json!({"name": "t", "inputResponses": {"k": 1}})
            )
            .contains("inputResponses[\"k\"]")
        );
        assert!(
            refused(
                Method::ResourcesRead,
                json!({"uri": "u", "requestState": 7})
            )
            .contains("requestState")
        );
        assert!(
            refused(
                Method::PromptsGet,
                json!({"name": "p", "arguments": {"a": 1}})
            )
            .contains("object of strings")
        );
        assert!(refused(Method::TasksGet, json!({"taskId": 5})).contains("taskId"));
        assert!(refused(Method::TasksUpdate, json!({"taskId": "x"})).contains("inputResponses"));
        assert!(
            refused(
                Method::Complete,
                json!({"ref": {"type": "ref/x"}, "argument": {"name": "a", "value": ""}})
            )
            .contains("ref/x")
        );
        assert!(
            refused(
                Method::Complete,
                json!({"ref": {"type": "ref/prompt", "name": "p"}})
            )
            .contains("params.argument")
        );
        assert!(
            refused(
                Method::SubscriptionsListen,
                json!({"notifications": {"taskIds": "x"}})
            )
            .contains("taskIds")
        );
    }

    #[test]
    fn a_completion_reads_its_reference_and_context() {
        let Ok(Call::Complete(c)) = parse(
            Method::Complete,
            json!({"ref": {"type": "ref/resource", "uri": "file:///{p}"},
                   "argument": {"name": "p", "value": "a"}, "context": {"arguments": {"q": "1"}}}),
        ) else {
            panic!("a completion")
        };
        assert!(matches!(c.target, Completing::Template(ref u) if u == "file:///{p}"));
        assert_eq!((c.argument.as_str(), c.value.as_str()), ("p", "a"));
        assert_eq!(c.context, json!({"q": "1"}));
    }

    #[test]
    fn a_listen_keeps_the_string_task_ids_in_order() {
        let Ok(Call::SubscriptionsListen(l)) = parse(
            Method::SubscriptionsListen,
            json!({"notifications": {"taskIds": ["b", 3, "a"], "toolsListChanged": true}}),
        ) else {
            panic!("a listen")
        };
        assert_eq!(l.task_ids, Some(vec!["b".to_owned(), "a".to_owned()]));
        assert!(l.tools_list_changed);
        let Ok(Call::SubscriptionsListen(l)) = parse(Method::SubscriptionsListen, json!({})) else {
            panic!("a listen")
        };
        assert!(l.task_ids.is_none() && !l.tools_list_changed);
    }
}
