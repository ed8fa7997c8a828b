//! Loading components: compile once per content digest, cache on disk, validate the world
//! and what `describe` returns, and keep an `InstancePre` for fast instantiation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use wasmtime::component::Linker;

use snodo_core::model::ExecutionLimits;

use super::bindings::catalog_types::ResourceRequest;
use super::bindings::{
    CatalogIndices, ExecutionIndices, Executor, ExecutorIndices, ModesIndices, modes, types,
};
use super::caller::GuestCaller;
use super::catalog::{self, ComponentCatalog};
use super::exec::Linked;
use super::exec::{self, Call, Env, Returned};
use super::host::{HostState, Origin};
use super::io::NoInput;
use super::outbound::{Secret, scrub_text, scrub_value};
use super::schema::{self, ArgumentsRefused, CheckBudget, Schemas};
use super::{
    AttemptError, CancelToken, EngineError, Execution, ExecutionReport, TaskMode, ToolInfo,
    WasmEngine, convert,
};

/// A component that could not be loaded, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct LoadError {
    /// The file.
    pub path: String,
    /// What is wrong with it.
    pub reason: LoadFailure,
}

/// What is wrong with a component that could not be loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadFailure {
    /// The file cannot be read.
    #[error("cannot read the file: {0}")]
    Unreadable(String),
    /// It is a core module, built for another target.
    #[error("it is a core WebAssembly module, not a component (build for wasm32-wasip2): {0}")]
    CoreModule(String),
    /// It is not WebAssembly, or not valid.
    #[error("it is not a valid WebAssembly component: {0}")]
    Invalid(String),
    /// The compilation did not finish (its thread was lost).
    #[error("compilation was abandoned: {0}")]
    Abandoned(String),
    /// It imports what the host does not provide.
    #[error(
        "its imports cannot be satisfied (only WASI 0.2, wasi:http, snodo:tasks/context and \
         snodo:tasks/caller are provided): {0}"
    )]
    Imports(String),
    /// It does not export a `snodo:tasks` executor.
    #[error(
        "it is not a snodo:tasks executor of 0.1.0, 0.2.0, 0.3.0 or 0.4.0 (build it with the \
         snodo-guest SDK): {0}"
    )]
    NotAnExecutor(String),
    /// One of its exports has another shape than the version it names.
    #[error("its {export} export {problem}")]
    Export {
        /// The export's name.
        export: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A load-time call (`describe()`, `describe-catalog()`) did not return.
    #[error("{call}() failed: {error}")]
    DescribeFailed {
        /// The export's function.
        call: &'static str,
        /// Why it produced nothing.
        error: AttemptError,
    },
    /// A load-time call returned another type than its own.
    #[error("{call}() returned the wrong type")]
    DescribeWrongType {
        /// The export's function.
        call: &'static str,
    },
    /// What it describes is refused (a tool, a schema, a catalog entry).
    #[error("{0}")]
    Description(String),
}

/// How a load went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadInfo {
    /// SHA-256 of the file, hex.
    pub digest: String,
    /// Found precompiled in the on-disk cache (no compilation happened).
    pub cache_hit: bool,
    /// Time to compile or deserialize.
    pub prepare_time: Duration,
}

/// A loaded component: its tools and what it takes to instantiate it.
pub struct Component {
    path: PathBuf,
    engine: WasmEngine,
    linked: Linked,
    tools: Vec<ToolInfo>,
    schemas: Arc<HashMap<String, Schemas>>,
    catalog: ComponentCatalog,
    info: LoadInfo,
}

/// What a component described at load: a function of its bytes, so kept by digest and
/// not asked again when the same component is loaded anew (a redeploy, a rollback, each
/// node's follower).
struct Described {
    tools: Vec<ToolInfo>,
    schemas: Arc<HashMap<String, Schemas>>,
    catalog: ComponentCatalog,
}

/// The wall clock of each load-time call (`describe`, `describe-catalog`), time waiting in
/// imports included: a component whose description sleeps is refused after it, rather
/// than holding a deploy or a node's start.
pub const DESCRIBE_WALL_CLOCK_MS: u64 = 5_000;

impl std::fmt::Debug for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Component")
            .field("path", &self.path)
            .field("info", &self.info)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Loads components into one engine, sharing compiled code by content digest.
pub struct ComponentLoader {
    engine: WasmEngine,
    linker: Arc<Linker<HostState>>,
    cache_dir: Option<PathBuf>,
    loaded: Mutex<HashMap<String, wasmtime::component::Component>>,
    described: Mutex<HashMap<String, Arc<Described>>>,
    describe_wall_clock_ms: u64,
}

impl ComponentLoader {
    /// A loader on `engine`, keeping precompiled code in `cache_dir` when given.
    pub fn new(engine: WasmEngine, cache_dir: Option<PathBuf>) -> Result<Self, EngineError> {
        let link = |e: wasmtime::Error| EngineError::Link(format!("{e:#}"));
        let mut linker = Linker::<HostState>::new(&engine.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
        // Every component may import wasi:http; whether a request goes out is decided per
        // request by the execution's grant (none: refused).
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(link)?;
        Executor::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)
            .map_err(link)?;
        crate::bindings::v4::snodo::tasks0_4_0::caller::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut linker, |s| s)
        .map_err(link)?;
        crate::bindings::v5::snodo::tasks0_5_0::timers::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut linker, |s| s)
        .map_err(link)?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            cache_dir,
            loaded: Mutex::new(HashMap::new()),
            described: Mutex::new(HashMap::new()),
            describe_wall_clock_ms: DESCRIBE_WALL_CLOCK_MS,
        })
    }

    /// The same loader with another wall clock for the load-time calls (default
    /// [`DESCRIBE_WALL_CLOCK_MS`]).
    pub fn with_describe_wall_clock(mut self, wall_clock: Duration) -> Self {
        self.describe_wall_clock_ms = u64::try_from(wall_clock.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// How many components' descriptions are kept (one per digest ever loaded here).
    pub fn descriptions_kept(&self) -> usize {
        self.described.lock().len()
    }

    /// The engine.
    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    fn cache_path(&self, digest: &str) -> Option<PathBuf> {
        self.cache_dir
            .as_ref()
            .map(|d| d.join(format!("{digest}-{}.cwasm", self.engine.fingerprint())))
    }

    /// Loads the component at `path`: compiles it (or finds it in the cache), checks that it
    /// is a `snodo:tasks` executor (0.1.0; 0.2.0 with a catalog; 0.3.0 with a catalog and
    /// `execution`), and validates what it
    /// describes: its tools (schemas compiled), and its resources, templates and prompts.
    pub async fn load(&self, path: impl AsRef<Path>) -> Result<Arc<Component>, LoadError> {
        let path = path.as_ref().to_path_buf();
        let bytes = tokio::fs::read(&path).await.map_err(|e| LoadError {
            path: path.display().to_string(),
            reason: LoadFailure::Unreadable(e.to_string()),
        })?;
        self.load_bytes(path, bytes).await
    }

    /// Loads a component from its bytes, as [`ComponentLoader::load`] does from a file;
    /// `origin` names where they came from in messages (a path, or a store's digest).
    pub async fn load_bytes(
        &self,
        origin: impl Into<PathBuf>,
        bytes: Vec<u8>,
    ) -> Result<Arc<Component>, LoadError> {
        let path: PathBuf = origin.into();
        let fail = |reason: LoadFailure| LoadError {
            path: path.display().to_string(),
            reason,
        };
        let digest = snodo_core::model::component_digest(&bytes);
        let started = Instant::now();
        let (component, cache_hit) = self.compile(&digest, bytes).await.map_err(fail)?;
        let prepare_time = started.elapsed();
        let instance = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| fail(LoadFailure::Imports(format!("{e:#}"))))?;
        let tools = ExecutorIndices::new(&instance)
            .map_err(|e| fail(LoadFailure::NotAnExecutor(format!("{e:#}"))))?;
        let export =
            |export: &'static str, problem: String| fail(LoadFailure::Export { export, problem });
        // A 0.1.0 component has no catalog; a component that names the export with another
        // shape is refused rather than half served.
        let has_catalog = component.get_export_index(None, CATALOG_EXPORT).is_some();
        let catalog =
            if has_catalog {
                Some(CatalogIndices::new(&instance).map_err(|e| {
                    export(CATALOG_EXPORT, format!("is not the 0.2.0 catalog: {e:#}"))
                })?)
            } else {
                None
            };
        let execute = component
            .get_export_index(None, TOOLS_EXPORT)
            .and_then(|tools| component.get_export_index(Some(&tools), "execute"))
            .ok_or_else(|| export(TOOLS_EXPORT, "has no execute".into()))?;
        // A 0.3.0 component's `execute` is called through `execution`.
        let execution = match component.get_export_index(None, EXECUTION_EXPORT) {
            Some(found) => {
                let indices = ExecutionIndices::new(&instance).map_err(|e| {
                    export(EXECUTION_EXPORT, format!("is not the 0.3.0 one: {e:#}"))
                })?;
                let execute = component
                    .get_export_index(Some(&found), "execute")
                    .ok_or_else(|| export(EXECUTION_EXPORT, "has no execute".into()))?;
                Some((indices, execute))
            }
            None => None,
        };
        // A 0.4.0 component's mode rule is called through `modes`.
        let modes = match component.get_export_index(None, MODES_EXPORT) {
            Some(_) => Some(
                ModesIndices::new(&instance)
                    .map_err(|e| export(MODES_EXPORT, format!("is not the 0.4.0 one: {e:#}")))?,
            ),
            None => None,
        };
        let linked = Linked {
            instance,
            tools,
            catalog,
            execute,
            execution,
            modes,
        };
        let cached = self.described.lock().get(&digest).cloned();
        let described = match cached {
            Some(d) => d,
            None => {
                let d = Arc::new(self.describe(&linked).await.map_err(fail)?);
                self.described.lock().insert(digest.clone(), d.clone());
                d
            }
        };
        Ok(Arc::new(Component {
            path: path.clone(),
            engine: self.engine.clone(),
            linked,
            tools: described.tools.clone(),
            schemas: described.schemas.clone(),
            catalog: described.catalog.clone(),
            info: LoadInfo {
                digest,
                cache_hit,
                prepare_time,
            },
        }))
    }

    /// What `linked` describes: its tools (schemas compiled) and its catalog, each call
    /// within the load-time wall clock.
    async fn describe(&self, linked: &Linked) -> Result<Described, LoadFailure> {
        let env = || {
            let mut env = describe_env();
            env.limits.wall_clock_ms = Some(self.describe_wall_clock_ms);
            env
        };
        let described = exec::run(&self.engine, linked, env(), Call::Describe).await;
        let refused = LoadFailure::Description;
        let tools = match described.result {
            Ok(Returned::Tools(t)) => convert::tools(t).map_err(refused)?,
            Ok(_) => return Err(LoadFailure::DescribeWrongType { call: "describe" }),
            Err(error) => {
                return Err(LoadFailure::DescribeFailed {
                    call: "describe",
                    error,
                });
            }
        };
        let schemas = Arc::new(schema::compile_all(&tools).map_err(refused)?);
        let catalog = if linked.catalog.is_some() {
            let described = exec::run(&self.engine, linked, env(), Call::DescribeCatalog).await;
            match described.result {
                Ok(Returned::Catalog(c)) => catalog::catalog(c).map_err(refused)?,
                Ok(_) => {
                    return Err(LoadFailure::DescribeWrongType {
                        call: "describe-catalog",
                    });
                }
                Err(error) => {
                    return Err(LoadFailure::DescribeFailed {
                        call: "describe-catalog",
                        error,
                    });
                }
            }
        } else {
            ComponentCatalog::default()
        };
        Ok(Described {
            tools,
            schemas,
            catalog,
        })
    }

    /// The compiled component for `digest`: from memory, from the disk cache, or compiled
    /// now (and written to the cache).
    async fn compile(
        &self,
        digest: &str,
        bytes: Vec<u8>,
    ) -> Result<(wasmtime::component::Component, bool), LoadFailure> {
        if let Some(c) = self.loaded.lock().get(digest) {
            return Ok((c.clone(), true));
        }
        let engine = self.engine.engine.clone();
        let cache = self.cache_path(digest);
        let digest_owned = digest.to_owned();
        let (component, hit) = tokio::task::spawn_blocking(move || {
            let cached = cache.as_ref().is_some_and(|p| p.exists());
            if !cached {
                tracing::info!(digest = %short(&digest_owned), "compiling a component (cached afterwards)");
            }
            // Read, not mmap: a mapped cache file truncated underneath us (by an operator
            // or a concurrent writer) would kill the process with SIGBUS.
            let entry = cache.as_ref().and_then(|p| std::fs::read(p).ok());
            if let Some(compiled) = entry.as_deref().and_then(|e| open_entry(e, &digest_owned)) {
                // SAFETY: the bytes are our own cache entry: written by this loader from
                // `Component::serialize`, sealed with the SHA-256 of the source they were
                // compiled from (so an entry copied under another component's name is
                // refused) and of themselves (so an altered entry is refused), and wasmtime
                // checks the engine header again. A hash is no defence against someone who
                // can write the cache directory on purpose: it must be as trusted as the
                // binary.
                #[allow(unsafe_code)]
                let loaded = unsafe { wasmtime::component::Component::deserialize(&engine, compiled) };
                if let Ok(c) = loaded {
                    return Ok::<_, LoadFailure>((c, true));
                }
            }
            if entry.is_some() {
                tracing::warn!(digest = %short(&digest_owned), "a cache entry did not match its component; recompiling");
            }
            let c = wasmtime::component::Component::new(&engine, &bytes).map_err(|e| {
                let msg = format!("{e:#}");
                if msg.contains("component") && msg.contains("module") {
                    LoadFailure::CoreModule(msg)
                } else {
                    LoadFailure::Invalid(msg)
                }
            })?;
            if let Some(path) = cache
                && let Ok(serialized) = c.serialize()
            {
                    // Write then rename, so a crash never leaves a torn cache entry.
                    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                    let written = path
                        .parent()
                        .map_or(Ok(()), std::fs::create_dir_all)
                        .and_then(|()| std::fs::write(&tmp, seal_entry(&serialized, &digest_owned)))
                        .and_then(|()| std::fs::rename(&tmp, &path));
                    if written.is_err() {
                        let _ = std::fs::remove_file(&tmp);
                    }
            }
            Ok((c, false))
        })
        .await
        .map_err(|e| LoadFailure::Abandoned(e.to_string()))??;
        self.loaded
            .lock()
            .insert(digest.to_owned(), component.clone());
        Ok((component, hit))
    }
}

/// The first bytes of a cache entry written by this loader.
const ENTRY_MAGIC: &[u8; 8] = b"snodocw1";

/// A cache entry: the magic, the source's digest (hex), the SHA-256 of the compiled bytes,
/// then the compiled bytes.
fn seal_entry(compiled: &[u8], source_digest: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(compiled.len() + 104);
    out.extend_from_slice(ENTRY_MAGIC);
    out.extend_from_slice(source_digest.as_bytes());
    out.extend_from_slice(&Sha256::digest(compiled));
    out.extend_from_slice(compiled);
    out
}

/// The compiled bytes of an entry sealed for `source_digest`, or `None` if it was written
/// for another component, altered, or not written by this loader.
fn open_entry<'a>(entry: &'a [u8], source_digest: &str) -> Option<&'a [u8]> {
    let rest = entry.strip_prefix(ENTRY_MAGIC.as_slice())?;
    let rest = rest.strip_prefix(source_digest.as_bytes())?;
    let (hash, compiled) = rest.split_at_checked(32)?;
    (Sha256::digest(compiled).as_slice() == hash).then_some(compiled)
}

/// What the runner needs of a component: run one execution. `Component` is the real one;
/// runner tests give it fakes that need no WebAssembly.
#[async_trait::async_trait]
pub trait Executable: Send + Sync + 'static {
    /// Runs one execution in a fresh instance.
    async fn execute(&self, exec: Execution) -> ExecutionReport;
}

#[async_trait::async_trait]
impl Executable for Component {
    async fn execute(&self, exec: Execution) -> ExecutionReport {
        Component::execute(self, exec).await
    }
}

impl Component {
    /// The engine it runs on (its counters, its outbound side).
    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tools it provides.
    pub fn tools(&self) -> &[ToolInfo] {
        &self.tools
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&ToolInfo> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Whether `arguments` match the `inputSchema` of `tool`, checked where it is called
    /// within `budget` (a tool this component does not have has no schema to break).
    pub fn check_arguments(
        &self,
        tool: &str,
        arguments: &Value,
        budget: CheckBudget,
    ) -> Result<(), ArgumentsRefused> {
        match self.schemas.get(tool) {
            Some(s) => s.check_arguments(tool, arguments, budget),
            None => Ok(()),
        }
    }

    /// How the load went.
    pub fn info(&self) -> &LoadInfo {
        &self.info
    }

    /// Runs `call` in a fresh instance of this component.
    async fn run(&self, env: Env, call: Call) -> exec::Ran {
        exec::run(&self.engine, &self.linked, env, call).await
    }

    fn env(exec: &Execution) -> Env {
        Env {
            origin: Origin {
                tool: exec.tool.clone(),
                task: exec.task_id.clone(),
                attempt: exec.attempt,
            },
            limits: exec.limits,
            io: exec.io.clone(),
            cancel: exec.cancel.clone(),
            cancel_grace: exec.cancel_grace,
            grants: exec.grants.clone(),
            tenant: exec.tenant.clone(),
            caller: exec.caller.clone(),
        }
    }

    /// `output`, unless its JSON is larger than the engine's `max_result_bytes`: every
    /// guest output that reaches a client or the store is capped alike.
    fn capped<T: serde::Serialize>(&self, output: T) -> Result<T, AttemptError> {
        convert::within_size(&output, self.engine.config().max_result_bytes)?;
        Ok(output)
    }

    /// Runs `work` in one of `tenant`'s CPU turns: host work of an execution that grows
    /// with what the guest is given or returns (serializing its arguments, checking its
    /// result) is counted in its tenant's share, as the guest's own computing is, rather
    /// than taken from the async workers every tenant's requests need.
    async fn in_turn<R>(&self, tenant: &Arc<str>, work: impl FnOnce() -> R) -> R {
        self.engine.cpu().run(tenant, async move { work() }).await
    }

    /// Runs one execution in a fresh instance.
    pub async fn execute(&self, mut exec: Execution) -> ExecutionReport {
        let given = std::mem::take(&mut exec.arguments);
        let arguments = if few_values(&given, INLINE_VALUES) {
            json_text(&given)
        } else {
            // Large arguments are serialized, and their tree freed, on the blocking pool in
            // the tenant's turn: a poll that long on an async worker would hold up the
            // requests queued behind it, whoever's they are.
            let serialized = self
                .engine
                .cpu()
                .run_blocking(&exec.tenant, move || json_text(&given))
                .await;
            match serialized {
                Ok(text) => text,
                Err(e) => {
                    tracing::error!(error = %e, "serializing an execution's arguments failed to run");
                    return ExecutionReport {
                        outcome: Err(AttemptError::Unavailable(
                            "the arguments could not be handed to the tool".into(),
                        )),
                        logs: Vec::new(),
                        dropped_logs: 0,
                        instantiate: Duration::ZERO,
                        run: Duration::ZERO,
                    };
                }
            }
        };
        let work = types::Work {
            task_id: exec.task_id.clone(),
            tool: exec.tool.clone(),
            arguments,
            idempotency_key: exec.idempotency_key.clone(),
            attempt: exec.attempt,
        };
        let ran = self.run(Self::env(&exec), Call::Execute(work)).await;
        let max = self.engine.config().max_result_bytes;
        let outcome = self
            .in_turn(&exec.tenant, || match ran.result {
                Ok(Returned::Outcome(o)) => convert::outcome(o)
                    .map_err(AttemptError::InvalidOutcome)
                    .and_then(|o| self.keeps_output_promise(&exec.tool, o))
                    .and_then(|o| convert::check_size(o, max)),
                Ok(Returned::OutcomeV3(o)) => convert::outcome_v3(o)
                    .map_err(AttemptError::InvalidOutcome)
                    .and_then(|o| self.keeps_output_promise(&exec.tool, o))
                    .and_then(|o| convert::check_size(o, max)),
                Ok(_) => Err(AttemptError::InvalidOutcome(
                    "execute returned the wrong type".into(),
                )),
                Err(e) => Err(e),
            })
            .await;
        let secrets = secrets_of(&exec);
        let outcome = outcome
            .map(|o| scrub_outcome(o, &secrets))
            .map_err(|e| scrub_error(e, &secrets));
        ExecutionReport {
            outcome,
            logs: ran.logs,
            dropped_logs: ran.dropped_logs,
            instantiate: ran.instantiate,
            run: ran.run,
        }
    }

    /// `outcome`, unless it is a result that breaks the tool's `outputSchema`.
    fn keeps_output_promise(
        &self,
        tool: &str,
        outcome: super::GuestOutcome,
    ) -> Result<super::GuestOutcome, AttemptError> {
        if let (super::GuestOutcome::Completed(r), Some(s)) = (&outcome, self.schemas.get(tool)) {
            s.check_result(r).map_err(AttemptError::InvalidOutcome)?;
        }
        Ok(outcome)
    }

    /// Runs the tool's `prepare` phase (inside the request, before a task exists). The
    /// execution's IO answers input requests (MRTR); `Err(NeedInput)` lists what to ask.
    pub async fn prepare(
        &self,
        exec: Execution,
    ) -> Result<Result<Value, snodo_core::model::JsonRpcError>, AttemptError> {
        let call = Call::Prepare {
            tool: exec.tool.clone(),
            arguments: exec.arguments.to_string(),
        };
        let ran = self.run(Self::env(&exec), call).await;
        let secrets = secrets_of(&exec);
        let prepared = match ran.result {
            Ok(Returned::Prepared(Ok(args))) => self.capped(args).and_then(|args| {
                serde_json::from_str(&args).map(Ok).map_err(|e| {
                    AttemptError::InvalidOutcome(format!(
                        "prepare returned arguments that are not JSON: {e}"
                    ))
                })
            }),
            Ok(Returned::Prepared(Err(e))) => guest_error(e),
            Ok(_) => Err(wrong_type("prepare")),
            Err(e) => Err(e),
        };
        scrubbed(prepared, &secrets)
    }

    /// The resources, templates and prompts it serves (empty for a 0.1.0 component).
    pub fn catalog(&self) -> &ComponentCatalog {
        &self.catalog
    }

    /// Reads the resource at `uri` in a fresh instance, with the execution's IO, limits
    /// and grants (its `tool` names the read in the operator's log). `Ok(None)` when this
    /// component serves no such URI; `Ok(Some(Err))` is the guest's own error;
    /// `Err(NeedInput)` lists what to ask.
    pub async fn read_resource(
        &self,
        exec: Execution,
        uri: &str,
    ) -> Result<Option<Result<Value, snodo_core::model::JsonRpcError>>, AttemptError> {
        let request = if self.catalog.resources.iter().any(|r| r.uri == uri) {
            ResourceRequest {
                uri: uri.to_owned(),
                template: None,
                variables: Vec::new(),
            }
        } else {
            let found = self
                .catalog
                .templates
                .iter()
                .find_map(|t| t.template.capture(uri).map(|v| (t.template.as_str(), v)));
            let Some((template, variables)) = found else {
                return Ok(None);
            };
            ResourceRequest {
                uri: uri.to_owned(),
                template: Some(template.to_owned()),
                variables,
            }
        };
        let ran = self
            .run(Self::env(&exec), Call::ReadResource(request))
            .await;
        let read = match ran.result {
            Ok(Returned::Contents(Ok(c))) => catalog::contents(c)
                .map_err(AttemptError::InvalidOutcome)
                .and_then(|contents| self.capped(contents))
                .map(Ok),
            Ok(Returned::Contents(Err(e))) => guest_error(e),
            Ok(_) => Err(wrong_type("read-resource")),
            Err(e) => Err(e),
        };
        scrubbed(read, &secrets_of(&exec)).map(Some)
    }

    /// Renders the prompt `name` with `arguments`, like [`read_resource`](Self::read_resource).
    pub async fn get_prompt(
        &self,
        exec: Execution,
        name: &str,
        arguments: &Value,
    ) -> Result<Result<serde_json::Map<String, Value>, snodo_core::model::JsonRpcError>, AttemptError>
    {
        let call = Call::GetPrompt {
            name: name.to_owned(),
            arguments: arguments.to_string(),
        };
        let ran = self.run(Self::env(&exec), call).await;
        let rendered = match ran.result {
            Ok(Returned::Prompt(Ok(p))) => catalog::prompt_result(p)
                .map_err(AttemptError::InvalidOutcome)
                .and_then(|rendered| self.capped(rendered))
                .map(|rendered| Ok(Value::Object(rendered))),
            Ok(Returned::Prompt(Err(e))) => guest_error(e),
            Ok(_) => Err(wrong_type("get-prompt")),
            Err(e) => Err(e),
        };
        match scrubbed(rendered, &secrets_of(&exec))? {
            Ok(Value::Object(map)) => Ok(Ok(map)),
            Ok(_) => Err(wrong_type("get-prompt")),
            Err(e) => Ok(Err(e)),
        }
    }

    /// Suggests values for `argument` of a prompt (`Completing::Prompt`) or a template's
    /// variable, given `value` typed so far and the other arguments in `context`. It runs
    /// without grants (no environment, no outbound HTTP), so no secret reaches it and its
    /// answer has none to scrub.
    pub async fn complete(
        &self,
        tenant: Arc<str>,
        target: Completing<'_>,
        argument: &str,
        value: &str,
        context: &Value,
    ) -> Result<Result<Value, snodo_core::model::JsonRpcError>, AttemptError> {
        use super::bindings::catalog_types::CompletionRef;

        let target = match target {
            Completing::Prompt(n) => CompletionRef::Prompt(n.to_owned()),
            Completing::Template(t) => CompletionRef::ResourceTemplate(t.to_owned()),
        };
        let call = Call::Complete {
            target,
            argument: argument.to_owned(),
            value: value.to_owned(),
            context: context.to_string(),
        };
        let mut env = describe_env();
        env.limits.deadline_ms = Some(1_000);
        env.caller = Arc::new(GuestCaller {
            tenant: tenant.to_string(),
            ..GuestCaller::default()
        });
        env.tenant = tenant;
        match self.run(env, call).await.result? {
            Returned::Completion(Ok(c)) => Ok(Ok(self.capped(catalog::completion(c))?)),
            Returned::Completion(Err(e)) => guest_error(e),
            _ => Err(wrong_type("complete")),
        }
    }

    /// Asks the tool whether this call of an optional tool should be a task, and (0.4.0
    /// components) for how long it is kept and polled. The rule runs for `caller`, in its
    /// tenant's share of the CPU, without grants: no secret reaches it, so none can come
    /// back in the figures it returns.
    pub async fn choose_mode(
        &self,
        tenant: Arc<str>,
        caller: Arc<GuestCaller>,
        tool: &str,
        arguments: &Value,
    ) -> Result<ModeChoice, AttemptError> {
        let call = if self.linked.modes.is_some() {
            Call::Choose(modes::Call {
                tool: tool.to_owned(),
                arguments: arguments.to_string(),
                caller: caller.principal(),
                client_capabilities: caller.capabilities(),
            })
        } else {
            Call::ChooseMode {
                tool: tool.to_owned(),
                arguments: arguments.to_string(),
            }
        };
        let env = Env {
            origin: Origin {
                tool: tool.to_owned(),
                ..Origin::default()
            },
            limits: ExecutionLimits {
                deadline_ms: Some(1_000),
                ..ExecutionLimits::default()
            },
            io: Arc::new(NoInput),
            cancel: CancelToken::new(),
            cancel_grace: Duration::ZERO,
            grants: Default::default(),
            tenant,
            caller,
        };
        match self.run(env, call).await.result? {
            Returned::Mode(m) => Ok(ModeChoice {
                mode: convert::mode(m),
                ttl_ms: None,
                poll_interval_ms: None,
            }),
            Returned::Choice(c) => Ok(ModeChoice {
                mode: convert::mode(c.mode),
                ttl_ms: c.ttl_ms,
                poll_interval_ms: c.poll_interval_ms,
            }),
            _ => Err(AttemptError::InvalidOutcome(
                "choose-mode returned the wrong type".into(),
            )),
        }
    }
}

/// What a tool's mode rule decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeChoice {
    /// Whether the call becomes a task.
    pub mode: TaskMode,
    /// The task's TTL, if the rule set one (the host bounds it).
    pub ttl_ms: Option<u64>,
    /// Its poll interval, if the rule set one (the host bounds it).
    pub poll_interval_ms: Option<u64>,
}

/// What a completion is for.
#[derive(Debug, Clone, Copy)]
pub enum Completing<'a> {
    /// An argument of the prompt with this name.
    Prompt(&'a str),
    /// A variable of the resource template with this URI template.
    Template(&'a str),
}

fn guest_error<T>(
    e: types::RpcError,
) -> Result<Result<T, snodo_core::model::JsonRpcError>, AttemptError> {
    convert::rpc_error(e)
        .map(Err)
        .map_err(AttemptError::InvalidOutcome)
}

fn wrong_type(export: &str) -> AttemptError {
    AttemptError::InvalidOutcome(format!("{export} returned the wrong type"))
}

/// The export a 0.2.0 component serves its catalog from.
const CATALOG_EXPORT: &str = "snodo:tasks/catalog@0.2.0";
/// The executor interface, which components of every WIT version export.
const TOOLS_EXPORT: &str = "snodo:tasks/tools@0.1.0";
/// The 0.3.0 `execute`.
const EXECUTION_EXPORT: &str = "snodo:tasks/execution@0.3.0";

/// Arguments of at most this many values are serialized where they are.
const INLINE_VALUES: usize = 4_096;

/// Whether `value` holds at most `limit` values, counted without walking past the limit.
fn few_values(value: &Value, limit: usize) -> bool {
    fn walk(v: &Value, left: &mut usize) -> bool {
        if *left == 0 {
            return false;
        }
        *left -= 1;
        match v {
            Value::Array(items) => items.iter().all(|i| walk(i, left)),
            Value::Object(map) => map.values().all(|i| walk(i, left)),
            _ => true,
        }
    }
    let mut left = limit;
    walk(value, &mut left)
}

/// `value` as JSON text, written straight into a buffer (the `Display` route goes through
/// the formatter a piece at a time, several times slower on large values).
fn json_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// The 0.4.0 mode rule.
const MODES_EXPORT: &str = "snodo:tasks/modes@0.4.0";

/// The environment of the load-time calls (`describe`, `describe-catalog`): no input, a
/// short deadline and wall clock.
fn describe_env() -> Env {
    Env {
        origin: Origin::default(),
        limits: ExecutionLimits {
            deadline_ms: Some(5_000),
            wall_clock_ms: Some(DESCRIBE_WALL_CLOCK_MS),
            ..ExecutionLimits::default()
        },
        io: Arc::new(NoInput),
        cancel: CancelToken::new(),
        cancel_grace: Duration::ZERO,
        grants: Default::default(),
        tenant: Arc::from(""),
        caller: Arc::default(),
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// What an execution's outputs are scrubbed of: the secrets its grant lists and the values
/// it injects.
fn secrets_of(exec: &Execution) -> Vec<Secret> {
    let Some(grant) = exec.grants.http.as_ref() else {
        return Vec::new();
    };
    let mut secrets = grant.scrub.clone();
    for value in grant.inject.iter().map(|i| &i.value) {
        if !secrets.contains(value) {
            secrets.push(value.clone());
        }
    }
    secrets
}

/// A guest's own error with the secrets replaced in its message and data.
fn scrub_rpc(
    mut e: snodo_core::model::JsonRpcError,
    secrets: &[Secret],
) -> snodo_core::model::JsonRpcError {
    e.message = scrub_text(&e.message, secrets).unwrap_or(e.message);
    if let Some(d) = e.data.as_mut() {
        scrub_value(d, secrets);
    }
    e
}

/// An attempt's failure with the secrets replaced in its text, which can quote what the
/// guest returned (an output that breaks its schema, a malformed content block).
fn scrub_error(e: AttemptError, secrets: &[Secret]) -> AttemptError {
    let clean = |m: String| scrub_text(&m, secrets).unwrap_or(m);
    match e {
        AttemptError::Trap(m) => AttemptError::Trap(clean(m)),
        AttemptError::InvalidOutcome(m) => AttemptError::InvalidOutcome(clean(m)),
        AttemptError::Stopped(m) => AttemptError::Stopped(clean(m)),
        AttemptError::Unavailable(m) => AttemptError::Unavailable(clean(m)),
        AttemptError::JournalDivergence(m) => AttemptError::JournalDivergence(clean(m)),
        other => other,
    }
}

/// What a request-path export (`prepare`, a resource read, a prompt render) returned, with
/// the secrets replaced everywhere: values, object keys, its error.
fn scrubbed(
    out: Result<Result<Value, snodo_core::model::JsonRpcError>, AttemptError>,
    secrets: &[Secret],
) -> Result<Result<Value, snodo_core::model::JsonRpcError>, AttemptError> {
    if secrets.is_empty() {
        return out;
    }
    match out {
        Ok(Ok(mut v)) => {
            scrub_value(&mut v, secrets);
            Ok(Ok(v))
        }
        Ok(Err(e)) => Ok(Err(scrub_rpc(e, secrets))),
        Err(e) => Err(scrub_error(e, secrets)),
    }
}

/// `outcome` with the execution's secrets replaced: a tool that reads a secret cannot hand
/// it to the client or the store by returning it.
fn scrub_outcome(outcome: super::GuestOutcome, secrets: &[Secret]) -> super::GuestOutcome {
    use super::GuestOutcome;
    if secrets.is_empty() {
        return outcome;
    }
    match outcome {
        GuestOutcome::Completed(map) => {
            let mut v = serde_json::Value::Object(map);
            scrub_value(&mut v, secrets);
            match v {
                serde_json::Value::Object(map) => GuestOutcome::Completed(map),
                _ => GuestOutcome::Completed(serde_json::Map::new()),
            }
        }
        GuestOutcome::Failed {
            error: e,
            status_message,
        } => GuestOutcome::Failed {
            error: scrub_rpc(e, secrets),
            status_message: status_message.map(|m| scrub_text(&m, secrets).unwrap_or(m)),
        },
        GuestOutcome::Retry {
            error: e,
            status_message,
        } => GuestOutcome::Retry {
            error: scrub_rpc(e, secrets),
            status_message: scrub_text(&status_message, secrets).unwrap_or(status_message),
        },
    }
}
