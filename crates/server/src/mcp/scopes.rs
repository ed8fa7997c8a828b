//! Which OAuth scopes each operation needs ([`ScopePolicy`]), checked before a request is
//! served: a caller without one of them is answered 403 `insufficient_scope`, with every
//! scope the operation needs in one challenge, so a client can ask for all of them at once.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::request::Call;

/// The scopes each action needs; an empty list needs none beyond a valid token. It is the
/// `[auth.scopes]` section as written ([`check`](Self::check) it once read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScopePolicy {
    /// Needed by every MCP request, besides what its method needs.
    pub mcp: Vec<String>,
    /// `tools/call` of any tool.
    pub tools_call: Vec<String>,
    /// `tools/call` of the tools a pattern matches (a name, `prefix*`, or `*`): needed on
    /// top of `tools_call`, by every matching entry. Written as a table, read in the order
    /// of its keys.
    #[serde(deserialize_with = "by_pattern")]
    pub tools: Vec<(String, Vec<String>)>,
    /// `tasks/get` (and `subscriptions/listen`, which reads tasks as they change, and
    /// 2025-11-25's `tasks/result` and `tasks/list`).
    pub tasks_get: Vec<String>,
    /// `tasks/update`: answering a task's questions.
    pub tasks_update: Vec<String>,
    /// `tasks/cancel`.
    pub tasks_cancel: Vec<String>,
    /// `resources/read`.
    pub resources_read: Vec<String>,
    /// `prompts/get`.
    pub prompts_get: Vec<String>,
    /// The operator API.
    pub admin: Vec<String>,
}

/// `tools = { "pattern" = [scopes] }` as pairs, in the order of the patterns.
fn by_pattern<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, Vec<String>)>, D::Error> {
    Ok(BTreeMap::<String, Vec<String>>::deserialize(d)?
        .into_iter()
        .collect())
}

/// Whether the tool `name` matches `pattern`: equal, `*`, or a prefix ending in `*`.
pub fn tool_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

fn push_all(into: &mut Vec<String>, scopes: &[String]) {
    for s in scopes {
        if !into.contains(s) {
            into.push(s.clone());
        }
    }
}

impl ScopePolicy {
    /// Every scope it names is a scope token (printable ASCII without spaces, quotes or
    /// backslashes, as RFC 6749 and the challenge header need), or the first that is not.
    pub fn check(&self) -> Result<(), String> {
        for scope in self.all() {
            let ok = !scope.is_empty()
                && scope
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\');
            if !ok {
                return Err(format!(
                    "{scope:?} is not a scope (printable ASCII without spaces, quotes or backslashes)"
                ));
            }
        }
        Ok(())
    }

    /// Whether no operation needs any scope.
    pub fn is_empty(&self) -> bool {
        self.ordinary().is_empty() && self.admin.is_empty()
    }

    /// Every scope `call` needs, in configuration order, each once.
    pub(crate) fn needed(&self, call: &Call) -> Vec<String> {
        let own: &[String] = match call {
            Call::ToolsCall(_) => &self.tools_call,
            Call::ResourcesRead(_) => &self.resources_read,
            Call::PromptsGet(_) => &self.prompts_get,
            Call::TasksGet(_)
            | Call::TasksResult(_)
            | Call::TasksList(_)
            | Call::SubscriptionsListen(_) => &self.tasks_get,
            Call::TasksUpdate(_) => &self.tasks_update,
            Call::TasksCancel(_) => &self.tasks_cancel,
            Call::Discover
            | Call::ToolsList
            | Call::ResourcesList
            | Call::ResourceTemplatesList
            | Call::PromptsList
            | Call::Complete(_) => &[],
        };
        if self.mcp.is_empty() && own.is_empty() && self.tools.is_empty() {
            return Vec::new();
        }
        let mut needed = Vec::new();
        push_all(&mut needed, &self.mcp);
        push_all(&mut needed, own);
        if let Call::ToolsCall(c) = call {
            for (pattern, scopes) in &self.tools {
                if tool_matches(pattern, &c.name) {
                    push_all(&mut needed, scopes);
                }
            }
        }
        needed
    }

    /// The scopes of ordinary use (everything but `admin`): what a 401 asks a client to
    /// get.
    pub fn ordinary(&self) -> Vec<String> {
        let mut all = Vec::new();
        for s in [
            &self.mcp,
            &self.tools_call,
            &self.tasks_get,
            &self.tasks_update,
            &self.tasks_cancel,
            &self.resources_read,
            &self.prompts_get,
        ] {
            push_all(&mut all, s);
        }
        for (_, s) in &self.tools {
            push_all(&mut all, s);
        }
        all
    }

    /// Every scope the server checks (the metadata's `scopes_supported`).
    pub fn all(&self) -> Vec<String> {
        let mut all = self.ordinary();
        push_all(&mut all, &self.admin);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::request::{Answers, TaskRef, ToolsCall};

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    fn call(name: &str) -> Call {
        Call::ToolsCall(ToolsCall {
            name: name.into(),
            arguments: Default::default(),
            answers: Answers::default(),
            as_task: false,
        })
    }

    #[test]
    fn a_tool_call_needs_the_base_the_method_and_every_matching_pattern() {
        let p = ScopePolicy {
            mcp: s(&["mcp"]),
            tools_call: s(&["tools:call"]),
            tools: vec![
                ("deploy_*".into(), s(&["ops"])),
                ("deploy_prod".into(), s(&["ops", "prod"])),
                ("greet".into(), s(&["friendly"])),
            ],
            tasks_get: s(&["tasks:read"]),
            admin: s(&["admin"]),
            ..ScopePolicy::default()
        };
        assert_eq!(
            p.needed(&call("deploy_prod")),
            s(&["mcp", "tools:call", "ops", "prod"])
        );
        assert_eq!(
            p.needed(&call("deploy_dev")),
            s(&["mcp", "tools:call", "ops"])
        );
        assert_eq!(p.needed(&call("other")), s(&["mcp", "tools:call"]));
        assert_eq!(
            p.needed(&Call::TasksGet(TaskRef {
                task_id: "x".into()
            })),
            s(&["mcp", "tasks:read"])
        );
        assert_eq!(p.needed(&Call::ToolsList), s(&["mcp"]));
        assert!(!p.ordinary().contains(&"admin".to_owned()));
        assert!(p.all().contains(&"admin".to_owned()));
        assert!(ScopePolicy::default().needed(&call("x")).is_empty());
        assert!(ScopePolicy::default().is_empty());
    }
}
