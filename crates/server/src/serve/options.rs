//! What `snodo serve` is told ([`ServeOptions`]), how it fails ([`ServeError`], one exit
//! code per kind), and the settings a running node cannot take without a restart.

use std::net::SocketAddr;
use std::path::PathBuf;

use snodo_core::model::Principal;
use snodo_core::store::StoreConfig;
use snodo_runner::budget::TenantLimits;
use snodo_runner::{ComponentPolicy, RunnerOptions};
use snodo_wasm::EngineConfig;

use super::DEFAULT_TTL_MS;
use crate::deploy::{DeployError, DeploySettings, DeployerSettings, ToolSettings};
use crate::http::{self, HttpConfig};
use crate::identity;

/// This process's default node identity: `<host>:<pid>`, unique among live processes.
pub fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}:{}", std::process::id())
}

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// This node's identity, unique among the nodes sharing a store: it names the claims
    /// this node holds and appears in logs and metrics.
    pub node: String,
    /// The store.
    pub store: StoreConfig,
    /// Where precompiled components are cached.
    pub cache_dir: Option<PathBuf>,
    /// Component files to serve.
    pub components: Vec<PathBuf>,
    /// Bearer tokens; empty (and no OAuth) serves loopback only.
    pub tokens: Vec<(String, Principal)>,
    /// The OAuth resource server (`[auth.oauth]`), if configured.
    pub oauth: Option<identity::oauth::OAuthConfig>,
    /// The scopes each operation needs (`[auth.scopes]`).
    pub scopes: crate::mcp::ScopePolicy,
    /// The largest accepted request body.
    pub max_body_bytes: usize,
    /// Connection limits and timeouts of the HTTP transport.
    pub http_limits: http::HttpLimits,
    /// The bearer token `GET /metrics` requires; `None` leaves it open.
    pub metrics_token: Option<String>,
    /// TTL of created tasks.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
    /// Settings applied to every tool.
    pub defaults: ToolSettings,
    /// Settings by tool name (over the defaults); naming a tool no component provides is
    /// an error at start.
    pub tool_settings: std::collections::BTreeMap<String, ToolSettings>,
    /// Runner settings.
    pub runner: RunnerOptions,
    /// Per-tenant and global budgets of the MCP edge.
    pub limits: TenantLimits,
    /// What recovery does with tasks pinned to a component version no longer deployed.
    pub component_policy: ComponentPolicy,
    /// The WebAssembly engine (fuel metering is turned on when any tool sets fuel).
    pub engine: EngineConfig,
    /// How deployments reach this node.
    pub deploy: DeploySettings,
    /// Admin tokens and which tenants' operators act on every tenant (`[admin]`); the
    /// admin scopes come from `scopes.admin`.
    pub admin: crate::admin::AdminConfig,
    /// Whether callers' trace context is kept with their tasks (`[telemetry]
    /// trace_context`, `--trace-context`; off by default).
    pub trace_context: bool,
    /// Where spans go and which are sampled; disabled by default. `serve` sets it from
    /// `otlp` when that is configured.
    pub tracer: snodo_core::spans::Tracer,
    /// The OTLP exporter (`[telemetry.otlp]`); `None` exports no spans.
    pub otlp: Option<TracingOptions>,
    /// The configuration's `[[schedules]]`: the store is made to agree with them at start.
    pub schedules: Vec<snodo_core::model::ScheduleSpec>,
    /// `[webhooks]`: where deliveries may go, their bounds, and the subscriptions the store
    /// is made to agree with at start.
    pub webhooks: crate::WebhookSettings,
    /// `[archive]`: where tasks past their TTL are kept before the reaper removes them
    /// (checked already, its directory resolved); none: they are removed unkept.
    pub archive: Option<crate::archive::ArchiveSettings>,
    /// `[[upstreams]]`: MCP servers whose tools are served through the gateway component
    /// (checked already, their credentials read).
    pub upstreams: Vec<crate::gateway::Upstream>,
    /// `[gateway]`: where the gateway component is, and how upstreams are listed.
    pub gateway: crate::gateway::GatewaySettings,
}

/// `[telemetry.otlp]`: where spans go and which traces are sampled.
#[derive(Debug, Clone)]
pub struct TracingOptions {
    /// The exporter.
    pub otlp: snodo_otel::OtlpConfig,
    /// The share of traces recorded (0 to 1) among those this node decides.
    pub sampling_ratio: f64,
    /// Whether a caller's `sampled` flag decides for its trace.
    pub follow_parent: bool,
}

impl ServeOptions {
    /// What the node's [`Deployer`] loads components and builds catalogs under.
    pub fn deployer_settings(&self) -> DeployerSettings {
        DeployerSettings {
            node: self.node.clone(),
            components: self.components.clone(),
            cache_dir: self.cache_dir.clone(),
            engine: self.engine.clone(),
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            defaults: self.defaults.clone(),
            tool_settings: self.tool_settings.clone(),
            park_after: self.runner.park_after,
            component_policy: self.component_policy,
            deploy: self.deploy.clone(),
        }
    }

    /// Defaults: loopback port 3001, redb at `data/tasks.redb`, the given components, a
    /// task TTL of one day ([`DEFAULT_TTL_MS`]).
    pub fn new(data: PathBuf, components: Vec<PathBuf>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 3001)),
            node: default_node_id(),
            store: StoreConfig::Redb(data.join("tasks.redb")),
            cache_dir: Some(data.join("cache")),
            components,
            tokens: Vec::new(),
            oauth: None,
            scopes: Default::default(),
            max_body_bytes: HttpConfig::default().max_body_bytes,
            http_limits: http::HttpLimits::default(),
            metrics_token: None,
            ttl_ms: Some(DEFAULT_TTL_MS),
            poll_interval_ms: 1_000,
            defaults: ToolSettings::default(),
            tool_settings: Default::default(),
            runner: RunnerOptions::default(),
            limits: TenantLimits::default(),
            component_policy: ComponentPolicy::default(),
            engine: EngineConfig::default(),
            deploy: DeploySettings::default(),
            admin: crate::admin::AdminConfig {
                session_ms: crate::admin::DEFAULT_SESSION_MS,
                ..Default::default()
            },
            trace_context: false,
            tracer: Default::default(),
            otlp: None,
            schedules: Vec::new(),
            webhooks: crate::WebhookSettings::default(),
            archive: None,
            upstreams: Vec::new(),
            gateway: Default::default(),
        }
    }
}

/// Why `snodo serve` could not start or stopped with an error. Each kind has its own exit
/// code (see [`ServeError::exit_code`]), so a supervisor can tell a typo from a broken disk.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The settings are wrong (a refused token, a TTL shorter than the retries, a setting
    /// naming a tool no component provides). Exit code 2.
    #[error("{0}")]
    Config(String),
    /// The listen address cannot be bound, or serving failed. Exit code 3.
    #[error("{0}")]
    Listen(String),
    /// The store cannot be opened: damaged, written by a newer build, or in use. Exit 4.
    #[error("the task store cannot be opened: {0}")]
    Store(#[from] snodo_core::store::StoreError),
    /// A component cannot be loaded, or the wasm engine cannot be built. Exit code 5.
    #[error("{0}")]
    Component(String),
}

impl ServeError {
    /// The process exit code for this error: 2 configuration, 3 listening, 4 store,
    /// 5 components (1 stays for anything else the binary reports).
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Config(_) => 2,
            ServeError::Listen(_) => 3,
            ServeError::Store(_) => 4,
            ServeError::Component(_) => 5,
        }
    }
}

impl From<DeployError> for ServeError {
    fn from(e: DeployError) -> Self {
        match e {
            DeployError::Config(why) => ServeError::Config(why),
            DeployError::Component(why) => ServeError::Component(why),
            DeployError::Store(e) => ServeError::Store(e),
        }
    }
}

/// The settings of `next` that differ from `before` and that a running node cannot take
/// (its listener, store, engine, budgets, tokens and runner are built once), by key.
pub(super) fn needs_restart(before: &ServeOptions, next: &ServeOptions) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut check = |key: &'static str, same: bool| {
        if !same {
            out.push(key);
        }
    };
    check("listen", before.listen == next.listen);
    check("node.id", before.node == next.node);
    check(
        "store",
        format!("{:?}", before.store) == format!("{:?}", next.store),
    );
    check("cache_dir", before.cache_dir == next.cache_dir);
    check("auth.tokens", before.tokens == next.tokens);
    check(
        "max_body_bytes",
        before.max_body_bytes == next.max_body_bytes,
    );
    check(
        "http",
        format!("{:?}", before.http_limits) == format!("{:?}", next.http_limits),
    );
    check("metrics.token", before.metrics_token == next.metrics_token);
    check(
        "runner",
        format!("{:?}", before.runner) == format!("{:?}", next.runner),
    );
    check("limits", before.limits == next.limits);
    check("archive", before.archive == next.archive);
    // Compared by value, apart from credentials, which a running gateway takes
    // (`Gateway::rotate`).
    check(
        "upstreams",
        crate::gateway::same_but_credentials(&before.upstreams, &next.upstreams),
    );
    check("gateway", before.gateway == next.gateway);
    check(
        "engine",
        format!("{:?}", before.engine) == format!("{:?}", next.engine),
    );
    out
}

/// How many tenants `tokens` name: the defaults of a node serving several are sized for
/// sharing ([`TenantLimits::for_tenants`], [`snodo_runner::budget::shared_memory`]).
pub fn tenants_in(tokens: &[(String, Principal)]) -> usize {
    let tenants: std::collections::HashSet<&str> =
        tokens.iter().map(|(_, p)| p.tenant.as_str()).collect();
    tenants.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{Upstream, UpstreamSection};
    use snodo_wasm::outbound::Secret;

    fn with_bearer(value: &str) -> ServeOptions {
        let mut opts = ServeOptions::new(PathBuf::from("/data"), Vec::new());
        let section: UpstreamSection = serde_json::from_value(serde_json::json!({
            "name": "tickets", "url": "http://127.0.0.1:9000/mcp", "bearer": "tok"
        }))
        .expect("parses");
        let upstream =
            Upstream::new(section, |_| Some(Secret::new(value.to_owned()))).expect("valid");
        opts.upstreams.push(upstream);
        opts
    }

    #[test]
    fn a_rotated_upstream_secret_is_taken_live_and_a_moved_upstream_needs_a_restart() {
        let before = with_bearer("first");
        assert!(needs_restart(&before, &with_bearer("first")).is_empty());
        let rotated = with_bearer("second");
        assert!(needs_restart(&before, &rotated).is_empty());
        assert!(
            before.upstreams != rotated.upstreams,
            "the values differ, so the gateway takes the new one"
        );
        let mut moved = with_bearer("first");
        moved.upstreams[0].section.url = "http://127.0.0.1:9001/mcp".into();
        assert_eq!(needs_restart(&before, &moved), ["upstreams"]);
        let mut renamed = with_bearer("first");
        renamed.upstreams[0].section.prefix = Some("t_".into());
        assert_eq!(needs_restart(&before, &renamed), ["upstreams"]);
        let mut more = with_bearer("first");
        more.upstreams.extend(with_bearer("first").upstreams);
        assert_eq!(needs_restart(&before, &more), ["upstreams"]);
    }
}
