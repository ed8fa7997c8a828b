//! The catalog: every tool, resource and prompt this host serves, in one place. MCP lists
//! and calls from it, the runner resolves work with it, `serve`, tests and benches build
//! it. A tool entry is the component, what the tool described, and the settings the
//! operator gave it; resources and prompts are found through the component serving them.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use serde_json::{Value, json};

use snodo_core::model::{ExecutionLimits, RetryPolicy, TaskId, Work};
use snodo_wasm::{Component, Executable, PromptInfo, TaskMode, ToolInfo, WasiGrants};

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
    /// What executes it (the tool's component).
    pub component: Arc<dyn Executable>,
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

/// One served tool: its component, what it described, and the operator's settings.
#[derive(Clone)]
pub struct CatalogTool {
    /// The component providing it.
    pub component: Arc<Component>,
    /// What it described.
    pub info: ToolInfo,
    /// A task mode pinned by configuration (overrides the tool's own and its rule).
    pub mode: Option<TaskMode>,
    /// Retry policy for tasks of this tool.
    pub retry_policy: RetryPolicy,
    /// Task TTL; `None` unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
    /// Per-execution limits of its tasks and calls.
    pub limits: ExecutionLimits,
    /// What it may reach.
    pub grants: WasiGrants,
    /// The token claims its guest is shown (those the resource server forwards).
    pub claims: Vec<String>,
    /// How long a call from a client without tasks waits for the tool's task before it is
    /// answered with a handle to it ([`TASK_RESULT_TOOL`]); `None`: such a client's call
    /// runs on the request, as the tool's mode says.
    pub handle_after_ms: Option<u64>,
}

/// The built-in tool a client without tasks follows a handle with, served while any tool
/// sets `handle_after_ms`.
pub const TASK_RESULT_TOOL: &str = "task_result";

impl CatalogTool {
    /// `info` from `component` with default settings: no pinned mode, no retries, the
    /// default TTL, a one-second poll interval, the engine's limits, no grants.
    pub fn new(component: Arc<Component>, info: ToolInfo) -> Self {
        Self {
            component,
            info,
            mode: None,
            retry_policy: RetryPolicy::default(),
            ttl_ms: Some(DEFAULT_TTL_MS),
            poll_interval_ms: 1_000,
            limits: ExecutionLimits::default(),
            grants: WasiGrants::default(),
            claims: Vec::new(),
            handle_after_ms: None,
        }
    }
}

/// The default task TTL: one day, far longer than the default retry schedule (none) and
/// park time (30 s), so a default never reaps a task that is still running or waiting for
/// a prompt answer. A task the TTL does cut off is counted
/// (`snodo_tasks_reaped_active_total`) and logged.
pub const DEFAULT_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A component serving resources or prompts, and what its reads and renders run under.
#[derive(Clone)]
pub struct CatalogSource {
    /// The component.
    pub component: Arc<Component>,
    /// Per-execution limits of its reads and renders.
    pub limits: ExecutionLimits,
    /// What they may reach.
    pub grants: WasiGrants,
}

/// Why a catalog refused a tool or a component's resources and prompts: two components
/// would serve the same name, and a call or a read must mean one thing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatalogConflict {
    /// A tool name another component provides.
    Tool(String),
    /// A resource URI another component serves.
    Resource(String),
    /// A resource template another component serves.
    Template(String),
    /// A prompt name another component serves.
    Prompt(String),
    /// A tool named as a built-in tool served beside it.
    Reserved(&'static str),
}

impl std::fmt::Display for CatalogConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tool(name) => write!(f, "tool {name:?} is provided by two components"),
            Self::Resource(uri) => write!(f, "resource {uri:?} is served by two components"),
            Self::Template(t) => write!(f, "resource template {t:?} is served by two components"),
            Self::Prompt(name) => write!(f, "prompt {name:?} is served by two components"),
            Self::Reserved(name) => write!(
                f,
                "a component provides a tool named {name:?}, the built-in tool that follows the \
                 handles handle_after_ms gives: rename the tool, or unset handle_after_ms"
            ),
        }
    }
}

impl std::error::Error for CatalogConflict {}

/// Where work finds its tool when the catalog does not list it: tools served by names
/// not known yet (an upstream server's, before it could be listed), so that work created
/// for them before a restart still runs. Never consulted for `tools/list` or a new call.
pub type Fallback = Arc<dyn Fn(&str) -> Option<CatalogTool> + Send + Sync>;

/// Every served tool, by name, in the order they were added (the `tools/list` order), and
/// every component serving resources or prompts.
#[derive(Default, Clone)]
pub struct Catalog {
    tools: Vec<CatalogTool>,
    by_name: HashMap<String, usize>,
    sources: Vec<CatalogSource>,
    policy: ComponentPolicy,
    /// Whether any tool sets `handle_after_ms`.
    handles: bool,
    /// Tools found by name for work only.
    fallback: Option<Fallback>,
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool. Two tools with one name are refused: a call must mean one thing; so is
    /// a tool named [`TASK_RESULT_TOOL`] beside handles, which serve a tool of that name.
    pub fn add(&mut self, tool: CatalogTool) -> Result<(), CatalogConflict> {
        let name = tool.info.name.clone();
        if self.by_name.contains_key(&name) {
            return Err(CatalogConflict::Tool(name));
        }
        let handles = self.handles || tool.handle_after_ms.is_some();
        if handles && (name == TASK_RESULT_TOOL || self.by_name.contains_key(TASK_RESULT_TOOL)) {
            return Err(CatalogConflict::Reserved(TASK_RESULT_TOOL));
        }
        self.handles = handles;
        self.by_name.insert(name, self.tools.len());
        self.tools.push(tool);
        Ok(())
    }

    /// Whether any tool sets `handle_after_ms`, so that [`TASK_RESULT_TOOL`] is served.
    pub fn handles(&self) -> bool {
        self.handles
    }

    /// Adds the resources, templates and prompts `source` serves (nothing for a component
    /// that serves none). A URI, template or prompt name served twice is refused: a read
    /// must mean one thing.
    pub fn add_source(&mut self, source: CatalogSource) -> Result<(), CatalogConflict> {
        let new = source.component.catalog();
        if new.resources.is_empty() && new.templates.is_empty() && new.prompts.is_empty() {
            return Ok(());
        }
        for other in &self.sources {
            let old = other.component.catalog();
            if let Some(r) = new.resources.iter().find(|r| old.serves_uri(&r.uri)) {
                return Err(CatalogConflict::Resource(r.uri.clone()));
            }
            if let Some(t) = new.templates.iter().find(|t| {
                old.templates
                    .iter()
                    .any(|o| o.template.as_str() == t.template.as_str())
            }) {
                return Err(CatalogConflict::Template(t.template.as_str().to_owned()));
            }
            if let Some(p) = new.prompts.iter().find(|p| old.prompt(&p.name).is_some()) {
                return Err(CatalogConflict::Prompt(p.name.clone()));
            }
        }
        self.sources.push(source);
        Ok(())
    }

    /// Adds every tool `component` describes, and its resources and prompts, with default
    /// settings (tests and benches).
    pub fn with_component(mut self, component: &Arc<Component>) -> Result<Self, CatalogConflict> {
        for info in component.tools() {
            self.add(CatalogTool::new(component.clone(), info.clone()))?;
        }
        self.add_source(CatalogSource {
            component: component.clone(),
            limits: ExecutionLimits::default(),
            grants: WasiGrants::default(),
        })?;
        Ok(self)
    }

    /// The engine the catalog's components run on (they share one), if it has any.
    pub fn engine(&self) -> Option<&snodo_wasm::WasmEngine> {
        (self.tools.first().map(|t| &t.component))
            .or_else(|| self.sources.first().map(|s| &s.component))
            .map(|c| c.engine())
    }

    /// Every component serving resources or prompts, in the order added.
    pub fn sources(&self) -> &[CatalogSource] {
        &self.sources
    }

    /// The component serving `uri` (a listed resource first, then a template match).
    pub fn resource_source(&self, uri: &str) -> Option<&CatalogSource> {
        self.sources
            .iter()
            .find(|s| s.component.catalog().resources.iter().any(|r| r.uri == uri))
            .or_else(|| {
                self.sources
                    .iter()
                    .find(|s| s.component.catalog().serves_uri(uri))
            })
    }

    /// The prompt named `name` and the component serving it.
    pub fn prompt(&self, name: &str) -> Option<(&CatalogSource, &PromptInfo)> {
        self.sources
            .iter()
            .find_map(|s| s.component.catalog().prompt(name).map(|p| (s, p)))
    }

    /// The component serving the resource template `template`.
    pub fn template_source(&self, template: &str) -> Option<&CatalogSource> {
        self.sources.iter().find(|s| {
            s.component
                .catalog()
                .templates
                .iter()
                .any(|t| t.template.as_str() == template)
        })
    }

    /// Sets where work finds a tool this catalog does not list ([`Fallback`]).
    pub fn set_fallback(&mut self, fallback: Fallback) {
        self.fallback = Some(fallback);
    }

    /// Sets what happens to work pinned to a component version no longer deployed.
    pub fn set_component_policy(&mut self, policy: ComponentPolicy) {
        self.policy = policy;
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&CatalogTool> {
        self.by_name.get(name).map(|i| &self.tools[*i])
    }

    /// The tool named `name`, to change its settings.
    pub fn tool_mut(&mut self, name: &str) -> Option<&mut CatalogTool> {
        self.by_name.get(name).map(|i| &mut self.tools[*i])
    }

    /// Every tool, in the order added.
    pub fn tools(&self) -> &[CatalogTool] {
        &self.tools
    }
}

impl Executors for Catalog {
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
        let found;
        let entry = match self.tool(tool) {
            Some(entry) => entry,
            None => {
                found = (self.fallback.as_ref())
                    .and_then(|f| f(tool))
                    .ok_or_else(|| {
                        missing(format!("tool {tool:?} is not deployed on this host"))
                    })?;
                &found
            }
        };
        let (component, grants) = (&entry.component, &entry.grants);
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
            component: component.clone() as Arc<dyn Executable>,
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

/// How many catalogs before the current one are kept for the tasks pinned to their
/// components, at most.
pub const RETAINED_CATALOGS: usize = 16;

/// The catalog serving now, replaced whole when the deployment changes, and the catalogs
/// before it, kept so that a task pinned to a component they hold runs on that component
/// (with the settings it was created under) instead of failing.
///
/// A request takes one snapshot ([`Catalogs::current`]) and uses it to the end, so a call
/// in flight finishes on the version it started with whatever is swapped meanwhile.
pub struct Catalogs {
    current: RwLock<Arc<Catalog>>,
    /// Newest first.
    retained: RwLock<Vec<Arc<Catalog>>>,
}

impl Catalogs {
    /// Serving `catalog`, with nothing retained.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self {
            current: RwLock::new(catalog),
            retained: RwLock::new(Vec::new()),
        }
    }

    /// The catalog serving now.
    pub fn current(&self) -> Arc<Catalog> {
        self.current.read().clone()
    }

    /// Serves `next` from now on; the catalog it replaces is retained (the oldest beyond
    /// [`RETAINED_CATALOGS`] are dropped).
    pub fn swap(&self, next: Arc<Catalog>) {
        let before = std::mem::replace(&mut *self.current.write(), next);
        let mut retained = self.retained.write();
        retained.insert(0, before);
        retained.truncate(RETAINED_CATALOGS);
    }

    /// Serves `next` from now on in place of the current catalog, which is not retained:
    /// for a catalog of the same components built again (the tools of an upstream changed).
    pub fn replace(&self, next: Arc<Catalog>) {
        *self.current.write() = next;
    }

    /// Keeps `catalog` for pinned work without serving it (components a restarted node
    /// loads for the tasks still pinned to them).
    pub fn retain(&self, catalog: Arc<Catalog>) {
        let mut retained = self.retained.write();
        retained.push(catalog);
        retained.truncate(RETAINED_CATALOGS);
    }

    /// Drops the retained catalogs none of whose components `pinned` says is needed.
    pub fn prune(&self, pinned: impl Fn(&str) -> bool) {
        self.retained
            .write()
            .retain(|c| c.digests().iter().any(|d| pinned(d)));
    }

    /// The digests of every component held, current and retained.
    pub fn digests(&self) -> Vec<String> {
        let mut all = self.current().digests();
        for c in self.retained.read().iter() {
            for d in c.digests() {
                if !all.contains(&d) {
                    all.push(d);
                }
            }
        }
        all
    }
}

impl Catalog {
    /// The components serving this catalog, each once, in the order added.
    pub fn components(&self) -> Vec<Arc<Component>> {
        let mut out: Vec<Arc<Component>> = Vec::new();
        let all = self
            .tools
            .iter()
            .map(|t| &t.component)
            .chain(self.sources.iter().map(|s| &s.component));
        for c in all {
            if !out.iter().any(|o| Arc::ptr_eq(o, c)) {
                out.push(c.clone());
            }
        }
        out
    }

    /// The digests of the components serving this catalog, each once.
    pub fn digests(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.components() {
            let d = &c.info().digest;
            if !out.contains(d) {
                out.push(d.clone());
            }
        }
        out
    }
}

impl Executors for Catalogs {
    /// The current catalog decides; work pinned to a component it does not hold goes to
    /// the newest retained catalog that holds it, and otherwise follows the policy.
    fn resolve(&self, work: &Work) -> Result<Resolved, Unresolved> {
        match self.current().resolve(work) {
            // Pinned to a version the current catalog does not hold (or to a tool it no
            // longer has): the version it started with, if this node still holds it.
            Err(gone) if work.component_digest.is_some() => {
                let digest = work.component_digest.as_deref().unwrap_or_default();
                let tool = work.input["tool"].as_str().unwrap_or_default();
                let retained = self.retained.read();
                let holder = retained.iter().find(|c| {
                    c.tool(tool)
                        .is_some_and(|t| t.component.info().digest == digest)
                });
                match holder {
                    Some(c) => c.resolve(work),
                    None => Err(gone),
                }
            }
            other => other,
        }
    }
}
