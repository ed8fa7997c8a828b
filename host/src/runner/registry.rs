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
}

/// Maps work to executors. Rebuilt by the application on every start; never stored.
pub trait Executors: Send + Sync + 'static {
    /// The executor for `work`, or why there is none (the task then fails with
    /// `component_missing`).
    fn resolve(&self, work: &Work) -> Result<Resolved, String>;
}

/// Executors by tool name, for `snodo/tool-call` work.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: HashMap<String, (Arc<Component>, WasiGrants)>,
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
    fn resolve(&self, work: &Work) -> Result<Resolved, String> {
        if work.kind != TOOL_CALL {
            return Err(format!("no executor handles work of type {:?}", work.kind));
        }
        let tool = work.input["tool"]
            .as_str()
            .ok_or("the work input names no tool")?;
        let (component, grants) = self
            .tools
            .get(tool)
            .ok_or_else(|| format!("tool {tool:?} is not deployed on this host"))?;
        if let Some(digest) = &work.component_digest
            && *digest != component.info().digest
        {
            // Decision: a pinned digest that is no longer deployed fails the task rather
            // than run different code under the same task.
            return Err(format!(
                "tool {tool:?} was created against component {digest}, which is no longer deployed"
            ));
        }
        Ok(Resolved {
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
