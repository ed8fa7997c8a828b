//! What a deployer is configured with: `[deploy]` ([`DeploySettings`]), the per-tool
//! settings ([`ToolSettings`]), the part of a node's configuration deployments read
//! ([`DeployerSettings`]), and why a deployment was refused ([`DeployError`]).

use std::path::PathBuf;
use std::time::Duration;

use snodo_core::model::RetryPolicy;
use snodo_core::store::StoreError;
use snodo_runner::ComponentPolicy;
use snodo_wasm::EngineConfig;

use crate::trust::TrustPolicy;

/// Why a deployment, a component or the settings of a deployer were refused. Each kind
/// means something different to a node: `serve` exits with a code of its own for each.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    /// The settings are wrong (a TTL shorter than the retries, a setting naming a tool no
    /// component provides, an unreadable watched directory).
    #[error("{0}")]
    Config(String),
    /// A component cannot be read, verified or loaded, or the wasm engine cannot be built.
    #[error("{0}")]
    Component(String),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Settings for one tool (or the defaults for all); `None` keeps what the tool says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSettings {
    /// A pinned task mode.
    pub mode: Option<snodo_wasm::TaskMode>,
    /// The retry policy for its tasks.
    pub retry_policy: Option<RetryPolicy>,
    /// Task TTL in ms (0 = unlimited).
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval in ms.
    pub poll_interval_ms: Option<u64>,
    /// Per-execution limits.
    pub limits: Option<snodo_core::model::ExecutionLimits>,
    /// WASI grants.
    pub grants: Option<snodo_wasm::WasiGrants>,
    /// The token claims its guest is shown.
    pub claims: Option<Vec<String>>,
}

/// What a [`Deployer`] loads components and builds catalogs under: the part of a node's
/// configuration that deployments read. A reload replaces it as a whole.
#[derive(Debug, Clone)]
pub struct DeployerSettings {
    /// This node's identity (named in the notes of the deployments it makes).
    pub node: String,
    /// The configured component files.
    pub components: Vec<PathBuf>,
    /// Where precompiled components are cached.
    pub cache_dir: Option<PathBuf>,
    /// The WebAssembly engine (fuel metering is turned on when any tool sets fuel).
    pub engine: EngineConfig,
    /// TTL of created tasks.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
    /// Settings applied to every tool.
    pub defaults: ToolSettings,
    /// Settings by tool name (over the defaults).
    pub tool_settings: std::collections::BTreeMap<String, ToolSettings>,
    /// How long a guest may wait for input before its task is parked (the runner's
    /// `park_after`): a tool's TTL must outlive it.
    pub park_after: Duration,
    /// What recovery does with tasks pinned to a component version no longer deployed.
    pub component_policy: ComponentPolicy,
    /// How deployments reach this node.
    pub deploy: DeploySettings,
}

/// How deployments reach a serving node. Settings of `[deploy]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploySettings {
    /// How often the store is asked for a new deployment. Default 2 s: the bound on how
    /// long a node serves an old deployment (on PostgreSQL an announcement usually brings
    /// it within milliseconds).
    pub poll: Duration,
    /// How long a component the current deployment no longer names stays stored once no
    /// live task is pinned to it (a rollback within it needs nothing re-stored). Default
    /// 7 days.
    pub retention: Duration,
    /// How often this node collects components past their retention. Default 1 hour.
    pub collect_every: Duration,
    /// The keys components must be signed with (none by default: nothing checked).
    pub trust: TrustPolicy,
    /// A directory whose `.wasm` files are served beside the configured components: a
    /// changed, added or removed file is deployed at the next poll (for development).
    pub watch: Option<PathBuf>,
}

impl Default for DeploySettings {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(2),
            retention: Duration::from_secs(7 * 24 * 3_600),
            collect_every: Duration::from_secs(3_600),
            trust: TrustPolicy::default(),
            watch: None,
        }
    }
}
