//! The WebAssembly host: one engine, components loaded once and cached, and a fresh
//! sandboxed instance for every execution.
//!
//! - [`WasmEngine`]: the wasmtime engine (async, epoch interruption, pooling allocator).
//! - [`ComponentLoader`] / [`Component`]: loading a `.wasm` file, compiling it once per
//!   content digest (cached in memory and on disk), validating what it describes.
//! - [`Component::execute`]: one execution under limits, with cancellation and input.
//! - [`ComponentCatalog`]: the resources, templates and prompts a 0.2.0 component serves
//!   ([`Component::read_resource`], [`Component::get_prompt`], [`Component::complete`] run
//!   like synchronous tool calls).
//! - [`ExecutionIo`]: what the `context` imports talk to (implemented by the layers that
//!   own the input: `mcp::SyncIo`, `runner::TaskIo`).
//!
//! `wasm/` never touches the wire or the store; it speaks the domain model, and what a
//! guest asks of its task goes through [`ExecutionIo`].

mod bindings;
mod caller;
mod catalog;
mod component;
mod convert;
pub mod cpu;
mod engine;
mod exec;
pub mod headers;
mod host;
mod io;
mod limits;
pub mod outbound;
mod schema;
#[cfg(feature = "testing")]
pub mod testing;
mod timers;

use std::fmt;

use serde_json::{Value, json};

use snodo_core::model::JsonRpcError;

pub use caller::GuestCaller;
pub use catalog::{ComponentCatalog, PromptInfo, ResourceInfo, TemplateInfo, UriTemplate};
pub use component::{
    Completing, Component, ComponentLoader, DESCRIBE_WALL_CLOCK_MS, Executable, LoadError,
    LoadFailure, LoadInfo, ModeChoice,
};
pub use engine::{Allocation, EngineConfig, EngineError, MemoryHold, WasmEngine};
pub use exec::{
    DEFAULT_CANCEL_GRACE, DEFAULT_DEADLINE, DirGrant, Execution, ExecutionReport, WasiGrants,
};
pub use host::{CancelToken, GUEST_LOG_LINES_PER_SECOND, LogLine};
pub use io::{
    ExecutionIo, InputAnswers, InputFailure, InputRequests, IoError, Progress, SleepFailure,
    check_capabilities,
};
pub use limits::ToolLimits;
pub use schema::{
    ArgumentsRefused, CheckBudget, Exhausted, MAX_PATTERN_BYTES, MAX_SCHEMA_BYTES,
    MAX_SCHEMA_PATTERNS, MAX_VALIDATION_MS, MAX_VALIDATION_STEPS,
};

/// How a tool runs when called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskMode {
    /// Synchronously, never a task.
    Sync,
    /// A task when the request declares the tasks extension.
    Optional,
    /// Only as a task.
    Required,
}

impl TaskMode {
    /// `sync`, `optional` or `required`: the SDK's, the docs' and the configuration's word.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskMode::Sync => "sync",
            TaskMode::Optional => "optional",
            TaskMode::Required => "required",
        }
    }
}

/// One tool a component provides, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// Unique within the component.
    pub name: String,
    /// Human-readable title.
    pub title: Option<String>,
    /// What it does.
    pub description: Option<String>,
    /// JSON Schema (an object schema) for the arguments.
    pub input_schema: Value,
    /// JSON Schema for structured content.
    pub output_schema: Option<Value>,
    /// The suggested task policy.
    pub mode: TaskMode,
    /// Client capabilities the tool needs.
    pub required_capabilities: Option<Value>,
    /// The tool has a `prepare` phase.
    pub has_prepare: bool,
    /// The tool chooses per call whether an optional call becomes a task.
    pub has_mode_rule: bool,
    /// The parameters a client mirrors into `Mcp-Param-*` headers (`x-mcp-header`).
    pub header_params: Vec<headers::HeaderParam>,
}

/// What a guest's execution returned, validated.
#[derive(Debug, Clone, PartialEq)]
pub enum GuestOutcome {
    /// A `CallToolResult` (a JSON object), `isError` possibly set.
    Completed(serde_json::Map<String, Value>),
    /// A JSON-RPC error, and the status message the task ends with (the error's message
    /// when `None`).
    Failed {
        /// The error.
        error: JsonRpcError,
        /// The tool's own last status message (0.3.0 components).
        status_message: Option<String>,
    },
    /// Try again after the next retry delay.
    Retry {
        /// The error to fail with when no retry is left.
        error: JsonRpcError,
        /// Shown while waiting.
        status_message: String,
    },
}

/// A resource limit an execution ran into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// Linear memory.
    Memory {
        /// The cap.
        bytes: u64,
    },
    /// Table elements.
    Table {
        /// The cap.
        elements: u64,
    },
    /// Running time.
    Deadline {
        /// The cap.
        ms: u64,
    },
    /// Fuel.
    Fuel {
        /// The budget.
        units: u64,
    },
    /// Wall-clock time of an execution, time in imports (sleep, input) included.
    WallClock {
        /// The cap.
        ms: u64,
    },
    /// The memory all live guests of this host may hold together.
    MemoryBudget {
        /// The budget.
        bytes: u64,
    },
    /// The size of what the guest returned (its result or error, as JSON).
    ResultSize {
        /// The cap.
        bytes: u64,
    },
    /// The memory the live guests of one tenant may hold together.
    TenantMemory {
        /// The share.
        bytes: u64,
    },
    /// The task's TTL: a sleep asked to end at or after it.
    Ttl {
        /// When the sleep would end (ms since the epoch, store clock).
        until_ms: u64,
        /// When the task expires.
        expires_at_ms: u64,
    },
}

impl Limit {
    /// The limit's name, as reported in failures.
    pub fn name(&self) -> &'static str {
        match self {
            Limit::Memory { .. } => "memory",
            Limit::Table { .. } => "table",
            Limit::Deadline { .. } => "deadline",
            Limit::Fuel { .. } => "fuel",
            Limit::WallClock { .. } => "wall_clock",
            Limit::MemoryBudget { .. } => "guest_memory_total",
            Limit::ResultSize { .. } => "result_bytes",
            Limit::TenantMemory { .. } => "guest_memory_per_tenant",
            Limit::Ttl { .. } => "ttl",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Memory { bytes } => write!(f, "memory limit of {bytes} bytes exceeded"),
            Limit::Table { elements } => write!(f, "table limit of {elements} elements exceeded"),
            Limit::Deadline { ms } => write!(f, "running time limit of {ms} ms exceeded"),
            Limit::Fuel { units } => write!(f, "fuel budget of {units} units used up"),
            Limit::WallClock { ms } => write!(f, "wall-clock limit of {ms} ms exceeded"),
            Limit::MemoryBudget { bytes } => write!(
                f,
                "the host's memory budget for live guests ({bytes} bytes) is spent"
            ),
            Limit::ResultSize { bytes } => write!(f, "result larger than {bytes} bytes"),
            Limit::TenantMemory { bytes } => write!(
                f,
                "this tenant's share of the memory for live guests ({bytes} bytes) is spent"
            ),
            Limit::Ttl {
                until_ms,
                expires_at_ms,
            } => {
                let at = |ms: &u64| snodo_core::model::Timestamp(*ms).rfc3339();
                write!(
                    f,
                    "the tool asked to sleep until {}, but its task expires at {} (its TTL); \
                     a task cannot outlive its TTL",
                    at(until_ms),
                    at(expires_at_ms)
                )
            }
        }
    }
}

/// Why an execution produced no outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptError {
    /// The guest trapped (a panic, `unreachable`, a host bug surfaced as a trap).
    Trap(String),
    /// A resource limit ended it.
    Limit(Limit),
    /// The guest returned something malformed.
    InvalidOutcome(String),
    /// It was cancelled (and stopped, cooperatively or not).
    Cancelled,
    /// A synchronous call needs these answers from the client first (MRTR).
    NeedInput(InputRequests),
    /// The attempt lost its right to continue (lease lost, task gone); not a failure of
    /// the task.
    Stopped(String),
    /// The guest waited for input longer than the park limit and was released; its answers
    /// are in the store and a fresh guest replays them when the last one arrives.
    Parked,
    /// The guest went to sleep past the sleep threshold: its task sleeps in the store
    /// until `until_ms` (store clock) with its claim given up, and a fresh guest replays it
    /// then.
    Sleeping {
        /// When it wakes.
        until_ms: u64,
        /// How long that was when the sleep was committed (store clock).
        wait_ms: u64,
    },
    /// The host could not run it now (e.g. every instance slot is busy); try again.
    Unavailable(String),
    /// A replayed attempt sent a request that differs from the one its task's journal
    /// recorded at that position.
    JournalDivergence(String),
}

impl AttemptError {
    /// The failure kind reported in `error.data.kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            AttemptError::Trap(_) => "trap",
            AttemptError::Limit(_) => "limit",
            AttemptError::InvalidOutcome(_) => "invalid_outcome",
            AttemptError::Cancelled => "cancelled",
            AttemptError::NeedInput(_) => "input_required",
            AttemptError::Stopped(_) => "stopped",
            AttemptError::Parked => "parked",
            AttemptError::Sleeping { .. } => "sleeping",
            AttemptError::Unavailable(_) => "unavailable",
            AttemptError::JournalDivergence(_) => "journal_divergence",
        }
    }

    /// The JSON-RPC error a task or call fails with: -32603 with `data.kind` and detail.
    pub fn to_rpc_error(&self) -> JsonRpcError {
        let mut data = json!({"kind": self.kind(), "detail": self.to_string()});
        if let AttemptError::Limit(l) = self {
            data["limit"] = json!(l.name());
        }
        JsonRpcError::new(-32603, format!("the tool did not finish: {self}")).with_data(data)
    }
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::Trap(m) => write!(f, "the guest trapped: {m}"),
            AttemptError::Limit(l) => write!(f, "{l}"),
            AttemptError::InvalidOutcome(m) => {
                write!(f, "the guest returned an invalid outcome: {m}")
            }
            AttemptError::Cancelled => write!(f, "cancelled"),
            AttemptError::NeedInput(q) => write!(f, "{} input request(s) need answers", q.len()),
            AttemptError::Stopped(m) => write!(f, "stopped: {m}"),
            AttemptError::Parked => write!(f, "released while waiting for input"),
            AttemptError::Sleeping { until_ms, .. } => write!(
                f,
                "released while sleeping until {}",
                snodo_core::model::Timestamp(*until_ms).rfc3339()
            ),
            AttemptError::Unavailable(m) => write!(f, "unavailable: {m}"),
            AttemptError::JournalDivergence(m) => write!(f, "journal divergence: {m}"),
        }
    }
}

/// Why the host stopped a guest from inside an import or the limiter, carried through the
/// trap so the call's error can be classified.
#[derive(Debug, Clone)]
pub(crate) enum HostStop {
    NeedInput(InputRequests),
    Lost(String),
    Parked,
    Slept { until_ms: u64, wait_ms: u64 },
    Limit(Limit),
}

impl fmt::Display for HostStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostStop::NeedInput(_) => write!(f, "suspended for client input"),
            HostStop::Lost(m) => write!(f, "stopped by the host: {m}"),
            HostStop::Parked => write!(f, "released while waiting for input"),
            HostStop::Slept { .. } => write!(f, "released while sleeping"),
            HostStop::Limit(l) => write!(f, "{l}"),
        }
    }
}

impl std::error::Error for HostStop {}
