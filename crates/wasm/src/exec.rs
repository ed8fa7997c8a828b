//! Running one export call in a fresh, limited, cancellable instance.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use snodo_core::model::ExecutionLimits;

use super::bindings::{
    CatalogIndices, ExecutionIndices, ExecutorIndices, ModesIndices, catalog_types, modes,
    outcomes, types,
};
use super::host::{Captured, HostState, Limiter, LogBuffer, LogLine, Origin};
use super::{AttemptError, CancelToken, ExecutionIo, GuestOutcome, HostStop, Limit, WasmEngine};

/// Running time an execution gets when its work names no deadline: five minutes.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// How long a cancelled guest may keep running before it is stopped.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(2);
/// How much stdout and stderr output is kept per execution.
const CAPTURE_BYTES: usize = 64 << 10;

/// What a tool may reach beyond clocks and randomness. Nothing by default.
///
/// Also the `grants = { env, dirs }` of a tool's settings in the configuration file; the
/// host resolves relative directories against the file's directory and builds `http` from
/// the tool's outbound settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WasiGrants {
    /// Environment variables visible to the guest (`env = { NAME = "value" }`, in name
    /// order).
    pub env: Vec<(String, String)>,
    /// Host directories mounted into the guest (`dirs = [{ host, guest, writable }]`).
    pub dirs: Vec<DirGrant>,
    /// Outbound HTTP through the host (`wasi:http`), when granted.
    pub http: Option<Arc<crate::outbound::HttpGrant>>,
}

impl<'de> serde::Deserialize<'de> for WasiGrants {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The keys a file may give: `http` is never one of them, and `network` is refused
        /// with what replaced it.
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Keys {
            #[serde(default)]
            env: std::collections::BTreeMap<String, String>,
            #[serde(default)]
            dirs: Vec<DirGrant>,
            #[serde(default, deserialize_with = "no_raw_sockets")]
            network: (),
        }
        let Keys {
            env,
            dirs,
            network: (),
        } = Keys::deserialize(d)?;
        Ok(Self {
            env: env.into_iter().collect(),
            dirs,
            http: None,
        })
    }
}

/// `network = ...`: raw sockets were granted once; the key stays known so that a file
/// still naming it is told what replaced it.
fn no_raw_sockets<'de, D: serde::Deserializer<'de>>(_: D) -> Result<(), D::Error> {
    Err(serde::de::Error::custom(
        "raw sockets are not granted: name the hosts the tool may reach in \
         allowed_outbound_hosts (docs/outbound.md)",
    ))
}

/// One mounted directory (`{ host, guest, writable }`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// The host path.
    pub host: PathBuf,
    /// Where the guest sees it.
    pub guest: String,
    /// Whether the guest may write (default false).
    #[serde(default)]
    pub writable: bool,
}

/// One execution of a tool.
pub struct Execution {
    /// The task, or `None` for a synchronous call.
    pub task_id: Option<String>,
    /// The tool to run.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// The dedupe identity exposed to the guest.
    pub idempotency_key: String,
    /// Which execution of the task this is (1-based; 1 for synchronous calls).
    pub attempt: u32,
    /// Resource limits (capped by the engine's).
    pub limits: ExecutionLimits,
    /// What the imports talk to.
    pub io: Arc<dyn ExecutionIo>,
    /// The cancellation token.
    pub cancel: CancelToken,
    /// How long a cancelled guest may keep running.
    pub cancel_grace: Duration,
    /// What the tool may reach.
    pub grants: WasiGrants,
    /// The tenant whose share of the CPU it runs in ([`crate::cpu`]); empty for the host's
    /// own calls.
    pub tenant: Arc<str>,
    /// Who it runs for, as the guest sees it.
    pub caller: Arc<crate::GuestCaller>,
}

impl Execution {
    /// A synchronous-style execution of `tool` with default limits and a fresh token.
    pub fn new(tool: impl Into<String>, arguments: Value, io: Arc<dyn ExecutionIo>) -> Self {
        Self {
            task_id: None,
            tool: tool.into(),
            arguments,
            idempotency_key: String::new(),
            attempt: 1,
            limits: ExecutionLimits::default(),
            io,
            cancel: CancelToken::new(),
            cancel_grace: DEFAULT_CANCEL_GRACE,
            grants: WasiGrants::default(),
            tenant: Arc::from(""),
            caller: Arc::default(),
        }
    }

    /// The same execution, made for `caller`.
    pub fn for_caller(mut self, caller: Arc<crate::GuestCaller>) -> Self {
        self.caller = caller;
        self
    }

    /// The same execution, run in `tenant`'s share of the CPU.
    pub fn in_tenant(mut self, tenant: impl Into<Arc<str>>) -> Self {
        self.tenant = tenant.into();
        self
    }
}

/// How an execution went.
#[derive(Debug)]
pub struct ExecutionReport {
    /// The outcome, or why there is none.
    pub outcome: Result<GuestOutcome, AttemptError>,
    /// What the guest logged (stdout and stderr included, line by line).
    pub logs: Vec<LogLine>,
    /// Log lines (or output bytes) dropped past the caps.
    pub dropped_logs: usize,
    /// Time to instantiate.
    pub instantiate: Duration,
    /// Time in the call.
    pub run: Duration,
}

/// What it takes to instantiate a loaded component and find its exports.
pub(crate) struct Linked {
    pub(crate) instance: wasmtime::component::InstancePre<HostState>,
    /// `snodo:tasks/tools@0.1.0`, which components of every version export.
    pub(crate) tools: ExecutorIndices,
    /// `snodo:tasks/catalog@0.2.0`, when the component is a 0.2.0 one.
    pub(crate) catalog: Option<CatalogIndices>,
    /// `execute` of `snodo:tasks/tools@0.1.0`, found once: the one export every tool call
    /// and task attempt reaches, called without loading (and type-checking) the others.
    pub(crate) execute: wasmtime::component::ComponentExportIndex,
    /// `snodo:tasks/execution@0.3.0`, when the component is a 0.3.0 one: its `execute` is
    /// called instead of the tools interface's.
    pub(crate) execution: Option<(ExecutionIndices, wasmtime::component::ComponentExportIndex)>,
    /// `snodo:tasks/modes@0.4.0`, when the component is a 0.4.0 one: its rule is called
    /// instead of the tools interface's `choose-mode`.
    pub(crate) modes: Option<ModesIndices>,
}

impl Linked {
    /// The instance's catalog export; an error (a trap for the call) on a 0.1.0 component.
    fn catalog(
        &self,
        store: &mut Store<HostState>,
        instance: &wasmtime::component::Instance,
    ) -> wasmtime::Result<super::bindings::v2::exports::snodo::tasks0_2_0::catalog::Guest> {
        match &self.catalog {
            Some(c) => c.load(store, instance),
            None => Err(wasmtime::Error::msg(
                "the component serves no catalog (a snodo:tasks@0.1.0 component)",
            )),
        }
    }
}

/// The export to call.
pub(crate) enum Call {
    Describe,
    ChooseMode {
        tool: String,
        arguments: String,
    },
    /// The 0.4.0 rule, on a component that exports `modes`.
    Choose(modes::Call),
    Prepare {
        tool: String,
        arguments: String,
    },
    Execute(types::Work),
    DescribeCatalog,
    ReadResource(catalog_types::ResourceRequest),
    GetPrompt {
        name: String,
        arguments: String,
    },
    Complete {
        target: catalog_types::CompletionRef,
        argument: String,
        value: String,
        context: String,
    },
}

/// What the export returned.
pub(crate) enum Returned {
    Tools(Vec<types::Tool>),
    Mode(types::TaskMode),
    Choice(modes::Choice),
    Prepared(Result<String, types::RpcError>),
    Outcome(types::Outcome),
    OutcomeV3(outcomes::Outcome),
    Catalog(catalog_types::Catalog),
    Contents(Result<Vec<catalog_types::ResourceContents>, types::RpcError>),
    Prompt(Result<catalog_types::PromptResult, types::RpcError>),
    Completion(Result<catalog_types::Completion, types::RpcError>),
}

/// The environment of one call.
pub(crate) struct Env {
    pub(crate) origin: Origin,
    pub(crate) limits: ExecutionLimits,
    pub(crate) io: Arc<dyn ExecutionIo>,
    pub(crate) cancel: CancelToken,
    pub(crate) cancel_grace: Duration,
    pub(crate) grants: WasiGrants,
    pub(crate) tenant: Arc<str>,
    pub(crate) caller: Arc<crate::GuestCaller>,
}

pub(crate) struct Ran {
    pub(crate) result: Result<Returned, AttemptError>,
    pub(crate) logs: Vec<LogLine>,
    pub(crate) dropped_logs: usize,
    pub(crate) instantiate: Duration,
    pub(crate) run: Duration,
}

fn wasi(
    grants: &WasiGrants,
    stdout: &Captured,
    stderr: &Captured,
) -> Result<wasmtime_wasi::WasiCtx, String> {
    // Deny by default: no arguments, environment, files or sockets; stdin is empty.
    let mut b = WasiCtxBuilder::new();
    b.stdout(stdout.clone()).stderr(stderr.clone());
    for (k, v) in &grants.env {
        b.env(k, v);
    }
    for d in &grants.dirs {
        let perms = if d.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        b.preopened_dir(&d.host, &d.guest, perms).map_err(|e| {
            // The host path is the operator's business, not the client's.
            tracing::error!(host = %d.host.display(), guest = %d.guest, error = %e, "cannot open a granted directory");
            format!("the directory granted as {} cannot be opened", d.guest)
        })?;
    }
    // No sockets and no name lookups: a guest reaches the network only through wasi:http,
    // which the host checks and sends.
    Ok(b.build())
}

fn classify(err: &wasmtime::Error, stop: Option<&HostStop>, fuel: u64) -> AttemptError {
    let stop = err.downcast_ref::<HostStop>().or(stop);
    if let Some(stop) = stop {
        return match stop {
            HostStop::NeedInput(q) => AttemptError::NeedInput(q.clone()),
            HostStop::Lost(m) => AttemptError::Stopped(m.clone()),
            HostStop::Parked => AttemptError::Parked,
            HostStop::Slept { until_ms, wait_ms } => AttemptError::Sleeping {
                until_ms: *until_ms,
                wait_ms: *wait_ms,
            },
            HostStop::Limit(l) => AttemptError::Limit(l.clone()),
        };
    }
    if err.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::OutOfFuel) {
        return AttemptError::Limit(Limit::Fuel { units: fuel });
    }
    // The full error carries wasmtime's wasm backtrace (many lines of guest symbols) and,
    // with RUST_BACKTRACE set, host frames and source paths: it goes to the debug log; the
    // warning and the reply carry the short reason.
    let reason = client_reason(err);
    tracing::warn!(%reason, "the guest trapped");
    tracing::debug!(error = ?err, "the guest trapped: its backtrace");
    AttemptError::Trap(reason)
}

/// The reason a client is told: a trap's code when there is one, else the first line of the
/// innermost cause, with anything path-like removed, at most [`REASON_CHARS`] characters.
fn client_reason(err: &wasmtime::Error) -> String {
    match err.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => scrub(&trap.to_string()),
        None => scrub(&err.root_cause().to_string()),
    }
}

/// The longest reason a reply carries.
const REASON_CHARS: usize = 200;

/// The first line of `text`, with words that look like file paths or source locations
/// replaced, truncated to [`REASON_CHARS`].
fn scrub(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let words: Vec<&str> = line
        .split_whitespace()
        .map(|w| {
            if w.contains('/') || w.contains('\\') || w.contains(".rs:") {
                "<path>"
            } else {
                w
            }
        })
        .collect();
    words.join(" ").chars().take(REASON_CHARS).collect()
}

fn lines(level: &'static str, bytes: &[u8], logs: &mut LogBuffer) {
    for line in String::from_utf8_lossy(bytes).lines() {
        logs.push(level, line.to_owned());
    }
}

/// A [`Ran`] for an execution that failed before its call began.
fn failed(e: AttemptError) -> Ran {
    Ran {
        result: Err(e),
        logs: Vec::new(),
        dropped_logs: 0,
        instantiate: Duration::ZERO,
        run: Duration::ZERO,
    }
}

/// A store for one call: its host state, memory and table limits, fuel and deadline.
fn new_store(
    engine: &WasmEngine,
    env: Env,
    stdout: &Captured,
    stderr: &Captured,
) -> Result<Store<HostState>, AttemptError> {
    let cfg = engine.config();
    let memory_bytes = env.limits.memory_bytes.map_or(cfg.max_memory_bytes, |m| {
        (m as usize).min(cfg.max_memory_bytes)
    });
    let table_elements = env
        .limits
        .table_elements
        .map_or(cfg.max_table_elements, |t| {
            (t as usize).min(cfg.max_table_elements)
        });
    let wasi = wasi(&env.grants, stdout, stderr).map_err(AttemptError::Unavailable)?;
    let scrub = env
        .grants
        .http
        .as_ref()
        .map(|g| g.scrub.clone())
        .unwrap_or_default();
    let hooks = crate::outbound::Hooks::new(
        engine.outbound.clone(),
        env.grants.http.clone(),
        &env.origin.tool,
        env.tenant.clone(),
        env.origin.task.as_deref(),
        env.io.clone(),
    );
    let state = HostState {
        wasi,
        table: wasmtime::component::ResourceTable::new(),
        limiter: Limiter {
            memory_bytes,
            table_elements,
            in_use: engine.memory_in_use.clone(),
            total_bytes: cfg.max_total_memory_bytes,
            held: 0,
            tenant_in_use: engine.tenant_memory(&env.tenant),
            tenant_bytes: engine.tenant_memory_bytes().0,
            reserve_bytes: engine.tenant_memory_bytes().1,
        },
        io: env.io,
        cancel: env.cancel.clone(),
        logs: LogBuffer {
            origin: env.origin,
            scrub,
            rate: Some((engine.log_rate.clone(), env.tenant.clone())),
            ..LogBuffer::default()
        },
        stop: None,
        http: wasmtime_wasi_http::WasiHttpCtx::new(),
        hooks,
        caller: env.caller.clone(),
    };
    let mut store = Store::new(&engine.engine, state);
    store.limiter(|s| &mut s.limiter);
    meter(engine, &mut store, &env.limits)?;
    Ok(store)
}

/// Gives `store` its fuel and its running-time deadline.
fn meter(
    engine: &WasmEngine,
    store: &mut Store<HostState>,
    limits: &ExecutionLimits,
) -> Result<(), AttemptError> {
    if engine.config().fuel {
        let fuel = limits.fuel.unwrap_or(u64::MAX);
        if let Err(e) = store.set_fuel(fuel) {
            return Err(AttemptError::Unavailable(e.to_string()));
        }
    } else if limits.fuel.is_some() {
        // A fuel limit on an engine that does not count fuel would be silently ignored.
        return Err(AttemptError::Unavailable(
            "this tool has a fuel limit but the engine was built without fuel metering".into(),
        ));
    }
    // The deadline counts running time: the callback runs once per epoch tick while the
    // guest executes wasm, and not while it is parked in an async import.
    let deadline = limits
        .deadline_ms
        .map_or(DEFAULT_DEADLINE, Duration::from_millis);
    let budget = engine.ticks(deadline);
    let deadline_ms = deadline.as_millis() as u64;
    let mut used = 0u64;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        used += 1;
        if used >= budget {
            return Err(wasmtime::Error::new(HostStop::Limit(Limit::Deadline {
                ms: deadline_ms,
            })));
        }
        Ok(UpdateDeadline::Yield(1))
    });
    Ok(())
}

/// Why instantiation failed: unavailable when a limit refused it, else a trap.
fn instantiation_failed(e: &wasmtime::Error) -> AttemptError {
    let msg = format!("{e:#}");
    tracing::warn!(error = ?e, "instantiation failed");
    let reason = scrub(&msg);
    if msg.contains("concurrent") || msg.contains("limit") {
        AttemptError::Unavailable(format!("cannot instantiate: {reason}"))
    } else {
        AttemptError::Trap(format!("instantiation failed: {reason}"))
    }
}

/// Calls the export `call` names on `instance` and wraps what it returned.
async fn call_export(
    linked: &Linked,
    store: &mut Store<HostState>,
    instance: &wasmtime::component::Instance,
    call: Call,
) -> wasmtime::Result<Returned> {
    let tools = |store: &mut Store<HostState>| linked.tools.load(store, instance);
    match call {
        Call::Describe => {
            // Loading type-checks every export of an interface: `describe` runs once per
            // component, when it is loaded, so a 0.3.0 `execution` of the wrong shape is
            // refused then and its `execute` may be called unchecked afterwards.
            if let Some((execution, _)) = &linked.execution {
                execution.load(&mut *store, instance)?;
            }
            tools(store)?
                .snodo_tasks0_1_0_tools()
                .call_describe(&mut *store)
                .await
                .map(Returned::Tools)
        }
        Call::Choose(call) => {
            let modes = linked
                .modes
                .as_ref()
                .ok_or_else(|| wasmtime::Error::msg("the component has no modes export"))?;
            modes
                .load(&mut *store, instance)?
                .call_choose(&mut *store, &call)
                .await
                .map(Returned::Choice)
        }
        Call::ChooseMode { tool, arguments } => tools(store)?
            .snodo_tasks0_1_0_tools()
            .call_choose_mode(&mut *store, &tool, &arguments)
            .await
            .map(Returned::Mode),
        Call::Prepare { tool, arguments } => tools(store)?
            .snodo_tasks0_1_0_tools()
            .call_prepare(&mut *store, &tool, &arguments)
            .await
            .map(Returned::Prepared),
        Call::Execute(work) => execute(linked, store, instance, &work).await,
        Call::DescribeCatalog => {
            let c = linked.catalog(store, instance)?;
            c.call_describe_catalog(&mut *store)
                .await
                .map(Returned::Catalog)
        }
        Call::ReadResource(request) => {
            let c = linked.catalog(store, instance)?;
            c.call_read_resource(&mut *store, &request)
                .await
                .map(Returned::Contents)
        }
        Call::GetPrompt { name, arguments } => {
            let c = linked.catalog(store, instance)?;
            c.call_get_prompt(&mut *store, &name, &arguments)
                .await
                .map(Returned::Prompt)
        }
        Call::Complete {
            target,
            argument,
            value,
            context,
        } => {
            let c = linked.catalog(store, instance)?;
            c.call_complete(&mut *store, &target, &argument, &value, &context)
                .await
                .map(Returned::Completion)
        }
    }
}

/// Calls the component's `execute`: the 0.3.0 `execution` interface's when it has one,
/// else the `tools` interface's.
async fn execute(
    linked: &Linked,
    store: &mut Store<HostState>,
    instance: &wasmtime::component::Instance,
    work: &types::Work,
) -> wasmtime::Result<Returned> {
    if let Some((_, index)) = &linked.execution {
        let func = instance
            .get_func(&mut *store, *index)
            .ok_or_else(|| wasmtime::Error::msg("the component lost its execute"))?;
        // SAFETY: the signature is the one `execution.call_execute` uses, and this
        // component's `execution` was checked against it when the component was loaded
        // (`Call::Describe` in `call_export`); a loaded component's types never change.
        #[allow(unsafe_code)]
        let execute = unsafe {
            wasmtime::component::TypedFunc::<(&types::Work,), (outcomes::Outcome,)>::new_unchecked(
                func,
            )
        };
        return execute
            .call_async(&mut *store, (work,))
            .await
            .map(|(outcome,)| Returned::OutcomeV3(outcome));
    }
    let func = instance
        .get_func(&mut *store, linked.execute)
        .ok_or_else(|| wasmtime::Error::msg("the component lost its execute"))?;
    // SAFETY: the signature is the one `tools.call_execute` uses, and this component's
    // `execute` was checked against it when the component was loaded:
    // `ComponentLoader::load` runs `describe` through `tools.load`, which type-checks every
    // export of the interface, and a loaded component's types never change.
    #[allow(unsafe_code)]
    let execute = unsafe {
        wasmtime::component::TypedFunc::<(&types::Work,), (types::Outcome,)>::new_unchecked(func)
    };
    execute
        .call_async(&mut *store, (work,))
        .await
        .map(|(outcome,)| Returned::Outcome(outcome))
}

/// The guest's log lines followed by its stdout and stderr lines, and how many were dropped.
fn collect_logs(
    state: &mut HostState,
    stdout: &Captured,
    stderr: &Captured,
) -> (Vec<LogLine>, usize) {
    let mut logs = std::mem::take(&mut state.logs);
    let (out, out_dropped) = stdout.take();
    let (err, err_dropped) = stderr.take();
    lines("stdout", &out, &mut logs);
    lines("stderr", &err, &mut logs);
    (logs.lines, logs.dropped + out_dropped + err_dropped)
}

pub(crate) async fn run(engine: &WasmEngine, linked: &Linked, env: Env, call: Call) -> Ran {
    let env_fuel = env.limits.fuel.unwrap_or(u64::MAX);
    let grace = env.cancel_grace;
    // The wall clock covers the whole execution: waiting for a CPU turn, instantiating,
    // running and waiting in imports.
    let wall_clock = env.limits.wall_clock_ms;
    let deadline = wall_clock.map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let past_wall_clock = async move {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(past_wall_clock);
    let wall_clock_error = || {
        AttemptError::Limit(Limit::WallClock {
            ms: wall_clock.unwrap_or_default(),
        })
    };
    let stdout = Captured::new(CAPTURE_BYTES);
    let stderr = Captured::new(CAPTURE_BYTES);
    let (cpu, tenant) = (engine.cpu.clone(), env.tenant.clone());
    let mut store = match new_store(engine, env, &stdout, &stderr) {
        Ok(s) => s,
        Err(e) => return failed(e),
    };

    let started = Instant::now();
    let instantiated = tokio::select! {
        r = cpu.run(&tenant, linked.instance.instantiate_async(&mut store)) => r,
        () = &mut past_wall_clock => return failed(wall_clock_error()),
    };
    let instance = match instantiated {
        Ok(i) => i,
        Err(e) => return failed(instantiation_failed(&e)),
    };
    let instantiate = started.elapsed();
    let started = Instant::now();
    let cancel = store.data().cancel.clone();
    let result = tokio::select! {
        r = cpu.run(&tenant, call_export(linked, &mut store, &instance, call)) => Some(Ok(r)),
        () = async {
            cancel.cancelled().await;
            // The grace period is a real-time allowance for the guest to notice.
            tokio::time::sleep(grace).await;
        } => None,
        () = &mut past_wall_clock => Some(Err(wall_clock_error())),
    };
    let run = started.elapsed();
    let state = store.data_mut();
    let result = match result {
        Some(Ok(Ok(r))) => Ok(r),
        Some(Ok(Err(e))) => Err(classify(&e, state.stop.as_ref(), env_fuel)),
        Some(Err(limit)) => Err(limit),
        None => Err(AttemptError::Cancelled),
    };
    // A replay that asked the journal something else cannot be trusted with any outcome.
    let result = match state.hooks.diverged() {
        Some(why) if !matches!(result, Err(AttemptError::Cancelled)) => {
            Err(AttemptError::JournalDivergence(why))
        }
        _ => result,
    };
    let (logs, dropped_logs) = collect_logs(state, &stdout, &stderr);
    Ran {
        result,
        logs,
        dropped_logs,
        instantiate,
        run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_read_env_and_dirs_and_refuse_raw_sockets() {
        let g: WasiGrants = serde_json::from_value(serde_json::json!({
            "env": {"REGION": "eu", "A": "1"},
            "dirs": [{"host": "/srv/x", "guest": "/x"}],
        }))
        .expect("parses");
        assert_eq!(
            g.env,
            [
                ("A".to_owned(), "1".to_owned()),
                ("REGION".to_owned(), "eu".to_owned())
            ]
        );
        assert!(!g.dirs[0].writable, "read-only by default");
        assert!(g.http.is_none());
        let e = serde_json::from_value::<WasiGrants>(serde_json::json!({"network": true}))
            .expect_err("raw sockets");
        assert!(e.to_string().contains("allowed_outbound_hosts"), "{e}");
        assert!(serde_json::from_value::<WasiGrants>(serde_json::json!({"http": {}})).is_err());
    }
}
