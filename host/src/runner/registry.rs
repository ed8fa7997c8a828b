//! Resolving a work descriptor to the component and tool that run it.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::model::{TaskId, Work};
use crate::wasm::{Component, WasiGrants};

/// The work type of an MCP tool call. Its input is `{"tool": name, "arguments": {...}}`.
pub const TOOL_CALL: &str = "snodo/tool-call";

/// The work descriptor for calling `tool` with `arguments` as task `id`; the idempotency
/// key is the task id, so every attempt shares one dedupe identity.
pub fn tool_call_work(id: &TaskId, tool: &str, arguments: Value) -> Work {
    Work::new(
        TOOL_CALL,
        json!({"tool": tool, "arguments": arguments}),
        id.to_string(),
    )
}

/// What runs a piece of work.
#[derive(Clone)]
pub struct Resolved {
    /// The component.
    pub component: Arc<Component>,
    /// The tool within it.
    pub tool: String,
    /// The tool's arguments.
    pub arguments: Value,
    /// What the tool may reach.
    pub grants: WasiGrants,
    /// The digest the work was pinned to, when the latest component runs in its place
    /// ([`ComponentPolicy::Latest`]).
    pub replaced: Option<String>,
}

/// Why work cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// For the task's error and the log.
    pub reason: String,
    /// The work was pinned to a component version that is no longer deployed.
    pub pinned_gone: bool,
}

/// What recovery does with work pinned to a component version that is no longer deployed
/// (the tool is still served, by another version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComponentPolicy {
    /// Fail the task (`component_missing`): a task never runs code other than the code it
    /// was created against.
    #[default]
    Pinned,
    /// Run the deployed version under the same task and idempotency key (an upgrade).
    Latest,
}

impl ComponentPolicy {
    /// `"pinned"` or `"latest"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentPolicy::Pinned => "pinned",
            ComponentPolicy::Latest => "latest",
        }
    }
}

/// Maps work to executors. Rebuilt by the application on every start; never stored.
pub trait Executors: Send + Sync + 'static {
    /// The executor for `work`, or why there is none (the task then fails with
    /// `component_missing`).
    fn resolve(&self, work: &Work) -> Result<Resolved, Unresolved>;
}

/// Executors by tool name, for `snodo/tool-call` work.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: HashMap<String, (Arc<Component>, WasiGrants)>,
    policy: ComponentPolicy,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers every tool `component` describes, with `grants`. A later registration of
    /// the same name replaces the earlier one.
    pub fn add_component(&mut self, component: Arc<Component>, grants: WasiGrants) {
        for t in component.tools() {
            self.tools
                .insert(t.name.clone(), (component.clone(), grants.clone()));
        }
    }

    /// Sets what happens to work pinned to a component version no longer deployed.
    pub fn set_component_policy(&mut self, policy: ComponentPolicy) {
        self.policy = policy;
    }

    /// Sets what `tool` may reach (it keeps its component).
    pub fn set_grants(&mut self, tool: &str, grants: WasiGrants) {
        if let Some(entry) = self.tools.get_mut(tool) {
            entry.1 = grants;
        }
    }

    /// The component providing `tool`.
    pub fn component(&self, tool: &str) -> Option<&Arc<Component>> {
        self.tools.get(tool).map(|(c, _)| c)
    }

    /// Tool names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut n: Vec<&str> = self.tools.keys().map(String::as_str).collect();
        n.sort_unstable();
        n
    }
}

impl Executors for ToolRegistry {
    fn resolve(&self, work: &Work) -> Result<Resolved, Unresolved> {
        let missing = |reason: String| Unresolved {
            reason,
            pinned_gone: false,
        };
        if work.kind != TOOL_CALL {
            return Err(missing(format!(
                "no executor handles work of type {:?}",
                work.kind
            )));
        }
        let tool = work.input["tool"]
            .as_str()
            .ok_or_else(|| missing("the work input names no tool".into()))?;
        let (component, grants) = self
            .tools
            .get(tool)
            .ok_or_else(|| missing(format!("tool {tool:?} is not deployed on this host")))?;
        let mut replaced = None;
        if let Some(digest) = &work.component_digest
            && *digest != component.info().digest
        {
            match self.policy {
                ComponentPolicy::Pinned => {
                    return Err(Unresolved {
                        reason: format!(
                            "tool {tool:?} was created against component {digest}, which is no longer deployed (runner.component_policy = \"pinned\")"
                        ),
                        pinned_gone: true,
                    });
                }
                ComponentPolicy::Latest => replaced = Some(digest.clone()),
            }
        }
        Ok(Resolved {
            replaced,
            component: component.clone(),
            tool: tool.to_owned(),
            arguments: work
                .input
                .get("arguments")
                .cloned()
                .unwrap_or_else(|| json!({})),
            grants: grants.clone(),
        })
    }
}
