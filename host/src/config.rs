//! The configuration file (TOML) of `snodo serve`, and its validation.
//!
//! Every section and key is optional; unknown keys are errors (a typo must not be silently
//! ignored). Errors name the file, the key and the reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::budget::TenantLimits;
use crate::deploy::DeploySettings;
use crate::http::{self, TokenError};
use crate::model::{ExecutionLimits, Principal, RetryPolicy};
use crate::runner::{ComponentPolicy, RunnerOptions};
use crate::serve::{ServeOptions, ToolSettings};
use crate::store::{StoreConfig, StoreKind};
use crate::wasm::outbound::{AllowList, AllowedHost, HttpGrant, Injection, Secret};
use crate::wasm::{DirGrant, TaskMode, WasiGrants};

/// A configuration problem: which file, which key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {key}: {reason}")]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// The key (dotted path), or `-` for the whole file.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

/// The file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listen address (default 127.0.0.1:3001; MCP_PORT overrides the port).
    pub listen: Option<SocketAddr>,
    /// The largest accepted request body in bytes (default 4 MiB); larger ones get 413.
    pub max_body_bytes: Option<usize>,
    /// The task store.
    #[serde(default)]
    pub store: StoreSection,
    /// This node.
    #[serde(default)]
    pub node: NodeSection,
    /// Where compiled components are cached (default `<data>/cache`).
    pub cache_dir: Option<PathBuf>,
    /// Components to serve.
    #[serde(default)]
    pub components: Vec<ComponentSection>,
    /// Defaults for every tool.
    #[serde(default)]
    pub defaults: ToolSection,
    /// Per-tool settings, by tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolSection>,
    /// Runner settings.
    #[serde(default)]
    pub runner: RunnerSection,
    /// Authentication.
    #[serde(default)]
    pub auth: AuthSection,
    /// HTTP connection limits and timeouts.
    #[serde(default)]
    pub http: HttpSection,
    /// The metrics endpoint.
    #[serde(default)]
    pub metrics: MetricsSection,
    /// Traces.
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// Per-tenant and global budgets.
    #[serde(default)]
    pub limits: LimitsBudgetSection,
    /// The WebAssembly engine's instance pool.
    #[serde(default)]
    pub engine: EngineSection,
    /// How outbound HTTP is sent.
    #[serde(default)]
    pub outbound: OutboundSection,
    /// Secrets tools may use, by name.
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretSection>,
    /// How deployments reach this node.
    #[serde(default)]
    pub deploy: DeploySection,
    /// Operators: admin tokens and cross-tenant tenants.
    #[serde(default)]
    pub admin: AdminSection,
    /// The directory relative paths in the file are resolved against: the file's own
    /// directory when loaded with [`Config::load`], the working directory otherwise.
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

/// `[deploy]`, times in milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploySection {
    /// How often the store is asked for a new deployment.
    pub poll_ms: Option<u64>,
    /// How long a retired, unpinned component stays stored.
    pub retention_ms: Option<u64>,
    /// How often components past their retention are collected.
    pub collect_every_ms: Option<u64>,
    /// Ed25519 public keys (32 bytes, base64) components must be signed with, by name.
    #[serde(default)]
    pub trusted_keys: BTreeMap<String, String>,
    /// Whether an unsigned component is refused (default: yes when keys are given).
    pub require_signature: Option<bool>,
    /// A directory of `.wasm` files deployed as they change (development).
    pub watch: Option<PathBuf>,
}

/// `[http]`, timeouts in milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// Time a new connection may stay silent before its first byte.
    pub first_byte_timeout_ms: Option<u64>,
    /// Time to send a complete request head.
    pub header_timeout_ms: Option<u64>,
    /// Time to send a whole request body once the head arrived.
    pub body_timeout_ms: Option<u64>,
    /// Time a keep-alive connection may wait for its next request.
    pub idle_timeout_ms: Option<u64>,
    /// The most connections open at once.
    pub max_connections: Option<usize>,
    /// The most connections one peer address may hold open (0: no such cap).
    pub max_connections_per_peer: Option<usize>,
}

/// `[outbound]`: how the host sends the requests tools make.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundSection {
    /// A PEM file of root certificates trusted besides the usual ones (a private CA).
    pub ca_bundle: Option<PathBuf>,
    /// Names answered without DNS: `{ "api.internal" = ["10.0.0.7"] }`. The address rules
    /// still apply to what they name.
    #[serde(default)]
    pub resolve: BTreeMap<String, Vec<std::net::IpAddr>>,
    /// Requests of one tenant in flight at once (default 64).
    pub max_concurrent_per_tenant: Option<u32>,
    /// The most bytes one task's journal holds (default 8 MiB).
    pub journal_task_bytes: Option<u64>,
}

/// `[secrets.NAME]`: where a secret's value comes from. Exactly one of `env`, `file` or
/// (for development only, with `development = true`) `value`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSection {
    /// An environment variable of the server's.
    pub env: Option<String>,
    /// A file holding the value (surrounding whitespace removed).
    pub file: Option<PathBuf>,
    /// The value itself: refused unless `development = true`.
    pub value: Option<String>,
    /// Marks a literal `value` as acceptable (never in production).
    #[serde(default)]
    pub development: bool,
}

/// `inject = [{ host, header, value }]`: a header the host adds to a tool's requests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectSection {
    /// The URLs it goes to, in `allowed_outbound_hosts` syntax.
    pub host: String,
    /// The header name.
    pub header: String,
    /// The value; `{secret.NAME}` is replaced by the secret's value.
    pub value: String,
}

/// `outbound = { ... }` of a tool: limits on its requests, per attempt.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOutboundSection {
    /// Time to connect, TLS included (default 10000).
    pub connect_timeout_ms: Option<u64>,
    /// Time to the response's first byte (default 30000).
    pub first_byte_timeout_ms: Option<u64>,
    /// Time between two chunks of a response body (default 30000).
    pub between_bytes_timeout_ms: Option<u64>,
    /// Request body bytes (default 1 MiB).
    pub max_request_bytes: Option<u64>,
    /// Response body bytes, and what one journal entry holds (default 1 MiB).
    pub max_response_bytes: Option<u64>,
    /// Requests per attempt (default 64).
    pub max_requests: Option<u32>,
    /// Requests of one attempt in flight at once (default 8).
    pub max_concurrent: Option<u32>,
}

/// `[metrics]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// The bearer token `GET /metrics` requires (prefer `token_env`).
    pub token: Option<String>,
    /// An environment variable holding that token.
    pub token_env: Option<String>,
}

/// `[telemetry]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// Keep a caller's W3C trace context with the tasks it creates (default: false, or
    /// true when `[telemetry.otlp]` exports spans; a node of an earlier build refuses such
    /// a task, so turn it on once every node runs this build).
    pub trace_context: Option<bool>,
    /// Spans exported over OTLP; none without this table.
    pub otlp: Option<OtlpSection>,
}

/// `[telemetry.otlp]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpSection {
    /// The collector: the traces URL for `http/protobuf`
    /// (`http://collector:4318/v1/traces`), the address for `grpc`
    /// (`http://collector:4317`).
    pub endpoint: String,
    /// `http/protobuf` (default) or `grpc`.
    pub protocol: Option<String>,
    /// Headers (gRPC metadata) sent with every export, e.g. a collector's API key.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The share of traces recorded, 0 to 1 (default 1).
    pub sampling_ratio: Option<f64>,
    /// Whether a caller's `sampled` flag decides for its trace (default true).
    pub follow_parent: Option<bool>,
    /// Longest one export may take (default 10,000 ms).
    pub timeout_ms: Option<u64>,
    /// How often queued spans are sent (default 1,000 ms).
    pub interval_ms: Option<u64>,
    /// Most spans waiting to be sent; past it new spans are dropped and counted
    /// (default 8,192).
    pub max_queue: Option<usize>,
    /// Most spans in one export (default 512).
    pub max_batch: Option<usize>,
    /// `service.name` (default `snodo`).
    pub service_name: Option<String>,
}

impl OtlpSection {
    /// The exporter and sampling this table asks for, checked.
    pub fn options(&self, file: &str) -> Result<crate::serve::TracingOptions, ConfigError> {
        let o = self;
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let protocol = match o.protocol.as_deref() {
            None | Some("http/protobuf") => snodo_otel::Protocol::HttpProtobuf,
            Some("grpc") => snodo_otel::Protocol::Grpc,
            Some(other) => {
                return Err(err(
                    "telemetry.otlp.protocol",
                    format!("{other:?} is not \"http/protobuf\" or \"grpc\""),
                ));
            }
        };
        if !o.endpoint.starts_with("http://") {
            return Err(err(
                "telemetry.otlp.endpoint",
                "must be an http:// URL: this build's exporters speak plain HTTP and gRPC to a collector beside the node, which forwards over TLS".into(),
            ));
        }
        let ratio = o.sampling_ratio.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(err(
                "telemetry.otlp.sampling_ratio",
                format!("{ratio} is not between 0 and 1"),
            ));
        }
        let positive = |key: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(err(key, "must be above 0".into())),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        let mut otlp = snodo_otel::OtlpConfig::new(o.endpoint.clone());
        otlp.protocol = protocol;
        otlp.headers = o.headers.clone().into_iter().collect();
        otlp.timeout = std::time::Duration::from_millis(positive(
            "telemetry.otlp.timeout_ms",
            o.timeout_ms,
            otlp.timeout.as_millis() as u64,
        )?);
        otlp.interval = std::time::Duration::from_millis(positive(
            "telemetry.otlp.interval_ms",
            o.interval_ms,
            otlp.interval.as_millis() as u64,
        )?);
        otlp.max_queue = positive(
            "telemetry.otlp.max_queue",
            o.max_queue.map(|v| v as u64),
            otlp.max_queue as u64,
        )? as usize;
        otlp.max_batch = positive(
            "telemetry.otlp.max_batch",
            o.max_batch.map(|v| v as u64),
            otlp.max_batch as u64,
        )? as usize;
        if let Some(name) = &o.service_name {
            otlp.service_name.clone_from(name);
        }
        Ok(crate::serve::TracingOptions {
            otlp,
            sampling_ratio: ratio,
            follow_parent: o.follow_parent.unwrap_or(true),
        })
    }
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `redb` (default), `sqlite`, `postgres` or `memory`.
    pub kind: Option<StoreKind>,
    /// The redb or SQLite file (default `.snodo/tasks.redb` or `.snodo/tasks.sqlite`).
    pub path: Option<PathBuf>,
    /// PostgreSQL: the connection string (prefer `url_env`).
    pub url: Option<String>,
    /// PostgreSQL: an environment variable holding the connection string.
    pub url_env: Option<String>,
    /// PostgreSQL: the schema holding Snodo's tables (default `snodo`).
    pub schema: Option<String>,
    /// PostgreSQL: connections this node keeps at most (default 16).
    pub pool: Option<usize>,
    /// PostgreSQL: grouped write transactions in flight at once (default 2).
    pub write_groups: Option<usize>,
    /// PostgreSQL: apply pending migrations at start (default false: run `snodo migrate`).
    pub migrate: Option<bool>,
}

/// `[node]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// This node's identity, unique among the nodes sharing a store (default
    /// `<host>:<pid>`).
    pub id: Option<String>,
}

/// `[[components]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentSection {
    /// The `.wasm` file.
    pub path: PathBuf,
}

/// A retry policy as written: a list, `{ fixed, count }` or `{ exponential, factor, count }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RetrySection {
    /// The exact delays in ms.
    List(Vec<i64>),
    /// `count` retries of `fixed` ms.
    Fixed {
        /// Delay in ms.
        fixed: u64,
        /// How many.
        count: usize,
    },
    /// `count` retries from `exponential` ms, multiplied by `factor` each time.
    Exponential {
        /// First delay in ms.
        exponential: u64,
        /// Multiplier.
        factor: u32,
        /// How many.
        count: usize,
    },
}

/// `[[...grants.dirs]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirSection {
    /// Host path.
    pub host: PathBuf,
    /// Guest path.
    pub guest: String,
    /// Writable (default false).
    #[serde(default)]
    pub writable: bool,
}

/// WASI grants.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantsSection {
    /// Environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Directories.
    #[serde(default)]
    pub dirs: Vec<DirSection>,
    /// Removed: raw sockets are not granted (see `allowed_outbound_hosts`). Kept so that
    /// a file still naming it gets an error that says what replaced it.
    pub network: Option<bool>,
}

/// `[defaults]` and `[tools.NAME]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSection {
    /// `sync`, `optional` or `required`: pins the task policy.
    pub mode: Option<TaskMode>,
    /// Retry policy for tasks of the tool.
    pub retry: Option<RetrySection>,
    /// Task TTL in ms; 0 means unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested poll interval in ms.
    pub poll_interval_ms: Option<u64>,
    /// Per-execution limits.
    pub limits: Option<LimitsSection>,
    /// What the tool may reach.
    pub grants: Option<GrantsSection>,
    /// Where the tool may send HTTP requests (`https://api.example.com`,
    /// `https://*.example.com:443`, `http://127.0.0.1:8080`). None by default.
    pub allowed_outbound_hosts: Option<Vec<String>>,
    /// Limits on the tool's outbound requests.
    pub outbound: Option<ToolOutboundSection>,
    /// Headers the host adds to the tool's requests (secrets the guest never sees).
    pub inject: Option<Vec<InjectSection>>,
    /// Secrets the guest may read, as environment variables of the same name upper-cased
    /// (`github` → `GITHUB`).
    pub secrets: Option<Vec<String>>,
    /// Record responses in the task's journal and replay them (default true).
    pub journal: Option<bool>,
    /// Token claims the tool's guest is shown (of those `auth.oauth.forward_claims` takes).
    pub claims: Option<Vec<String>>,
}

/// `limits = { memory_bytes, table_elements, deadline_ms, fuel }`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Linear memory cap in bytes.
    pub memory_bytes: Option<u64>,
    /// Table elements cap.
    pub table_elements: Option<u32>,
    /// Running-time cap in ms.
    pub deadline_ms: Option<u64>,
    /// Fuel budget.
    pub fuel: Option<u64>,
    /// Wall-clock cap of one execution in ms.
    pub wall_clock_ms: Option<u64>,
}

/// `[runner]`, all in milliseconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerSection {
    /// Recover unclaimed and expired work.
    pub recover: Option<bool>,
    /// Lease length.
    pub lease_ms: Option<u64>,
    /// Heartbeat interval.
    pub heartbeat_ms: Option<u64>,
    /// Reap interval; at least 1 (tasks past their TTL hold their place under the task
    /// caps until the reaper removes them).
    pub reap_interval_ms: Option<u64>,
    /// Most concurrent attempts.
    pub max_concurrent: Option<usize>,
    /// Most concurrent attempts of one tenant.
    pub max_running_per_tenant: Option<usize>,
    /// Recoveries a task may have before it fails.
    pub max_recoveries: Option<u32>,
    /// Times an attempt of a task may fail to start its guest on a node before it fails.
    pub max_start_failures: Option<u32>,
    /// `pinned` (default) or `latest`: what recovery does with a task whose component
    /// version is no longer deployed.
    pub component_policy: Option<ComponentPolicy>,
    /// Idle time before a parked guest is released.
    pub park_after_ms: Option<u64>,
    /// Wall-clock cap of a task's attempt.
    pub attempt_wall_clock_ms: Option<u64>,
    /// Grace period after cancellation.
    pub cancel_grace_ms: Option<u64>,
    /// Drain timeout at shutdown.
    pub drain_timeout_ms: Option<u64>,
}

/// `[engine]`: how recycled instance slots are reset (see ARCHITECTURE.md, `wasm/`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// Linear memory a recycled slot keeps resident (default 1 MiB).
    pub keep_resident_bytes: Option<usize>,
    /// Reset recycled slots with PAGEMAP_SCAN where the kernel has it (default true).
    pub pagemap_scan: Option<bool>,
}

/// `[limits]`: the budgets that keep one tenant from starving or flooding the others.
/// Defaults in [`TenantLimits`] and docs/configuration.md.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsBudgetSection {
    /// Concurrent synchronous guest executions per tenant.
    pub sync_calls_per_tenant: Option<usize>,
    /// The same, all tenants together.
    pub sync_calls: Option<usize>,
    /// Wall-clock limit of a synchronous call.
    pub sync_timeout_ms: Option<u64>,
    /// Live tasks per tenant.
    pub live_tasks_per_tenant: Option<u64>,
    /// Stored tasks per tenant, terminal ones included.
    pub stored_tasks_per_tenant: Option<u64>,
    /// Bytes of stored task records and journals per tenant.
    pub stored_bytes_per_tenant: Option<u64>,
    /// Task creations per second per tenant.
    pub task_creates_per_second: Option<u32>,
    /// Task creations at once before the rate applies.
    pub task_create_burst: Option<u32>,
    /// Subscription streams per tenant.
    pub streams_per_tenant: Option<usize>,
    /// Subscription streams in total.
    pub streams: Option<usize>,
    /// Task ids one stream may watch.
    pub stream_task_ids: Option<usize>,
    /// Linear memory all live guests may hold together.
    pub guest_memory_total_bytes: Option<usize>,
    /// Linear memory one guest may hold.
    pub guest_memory_bytes: Option<usize>,
    /// Linear memory one tenant's live guests may hold together.
    pub guest_memory_per_tenant_bytes: Option<usize>,
    /// The largest result a guest may return.
    pub result_bytes: Option<usize>,
    /// Guests of one tenant executing at once.
    pub executing_per_tenant: Option<usize>,
    /// Guests executing at once, all tenants together.
    pub executing: Option<usize>,
}

/// A token given as itself or by the environment variable holding it (exactly one of the
/// two), or the key under `key` and the reason it cannot be read.
fn token_of(
    token: &Option<String>,
    token_env: &Option<String>,
    key: &str,
) -> Result<String, (String, String)> {
    match (token, token_env) {
        (Some(t), None) => Ok(t.clone()),
        (None, Some(var)) => std::env::var(var).map_err(|_| {
            (
                format!("{key}.token_env"),
                format!("the environment variable {var} is not set"),
            )
        }),
        _ => Err((
            key.to_owned(),
            "give exactly one of token and token_env".into(),
        )),
    }
}

/// `[admin]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// Admin bearer tokens (the admin API and the console only).
    #[serde(default)]
    pub tokens: Vec<AdminTokenSection>,
    /// Tenants whose operators act on every tenant.
    #[serde(default)]
    pub cross_tenant: Vec<String>,
    /// How long a console sign-in lasts (default 28 800 000: eight hours).
    pub session_ms: Option<u64>,
    /// Console sign-in through the identity provider.
    pub oauth: Option<AdminOAuthSection>,
}

/// `[admin.oauth]`: the console's client at one of `[[auth.oauth.issuers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminOAuthSection {
    /// The issuer (exactly one of `[[auth.oauth.issuers]]`).
    pub issuer: String,
    /// The console's client id there.
    pub client_id: String,
    /// An environment variable holding its secret (a confidential client).
    pub client_secret_env: Option<String>,
    /// The scopes asked for (default: the admin scopes).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Where the provider sends the browser back (default: the resource's origin and
    /// `/console/oauth/callback`).
    pub redirect_uri: Option<String>,
}

/// `[[admin.tokens]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminTokenSection {
    /// The token itself (prefer `token_env`).
    pub token: Option<String>,
    /// An environment variable holding the token.
    pub token_env: Option<String>,
    /// The operator's tenant.
    pub tenant: String,
    /// Who the operator is (default `operator`).
    pub subject: Option<String>,
    /// Whether it acts on every tenant.
    #[serde(default)]
    pub cross_tenant: bool,
}

/// `[[auth.tokens]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSection {
    /// The token itself (prefer `token_env`).
    pub token: Option<String>,
    /// An environment variable holding the token.
    pub token_env: Option<String>,
    /// The tenant (the store scope).
    pub tenant: String,
    /// The subject.
    pub subject: String,
}

/// `[auth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Bearer tokens.
    #[serde(default)]
    pub tokens: Vec<TokenSection>,
    /// What tasks are kept apart by: `tenant` (the default) or `tenant_subject`.
    pub isolation: Option<crate::model::Isolation>,
    /// The OAuth resource server.
    pub oauth: Option<OAuthSection>,
    /// The scopes each operation needs.
    #[serde(default)]
    pub scopes: ScopesSection,
}

/// `[auth.oauth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSection {
    /// This resource's URL (the audience tokens must name); default
    /// `http://{listen address}/mcp`.
    pub resource: Option<String>,
    /// How far `exp` and `nbf` may be off (default 60 000).
    pub leeway_ms: Option<u64>,
    /// The least time between key-set fetches caused by unknown keys (default 30 000).
    pub jwks_min_refresh_ms: Option<u64>,
    /// How long a key set is used before it is fetched again (default 3 600 000).
    pub jwks_max_age_ms: Option<u64>,
    /// How long an introspection answer is reused (default 60 000).
    pub introspection_cache_ms: Option<u64>,
    /// How long a request to an identity provider may take (default 10 000).
    pub fetch_timeout_ms: Option<u64>,
    /// The most introspection requests sent to one issuer per second (default 50).
    pub introspections_per_second: Option<u32>,
    /// Whether issuers naming their tenants the same way may share them (default false).
    #[serde(default)]
    pub shared_tenants: bool,
    /// Claims passed on with the caller.
    #[serde(default)]
    pub forward_claims: Vec<String>,
    /// The authorization servers.
    #[serde(default)]
    pub issuers: Vec<IssuerSection>,
}

/// `[[auth.oauth.issuers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerSection {
    /// The issuer identifier (`iss`).
    pub issuer: String,
    /// Its JWK Set; default: its metadata's `jwks_uri`.
    pub jwks_uri: Option<String>,
    /// Audiences accepted besides the resource.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// Accepted algorithms (default RS256, ES256, EdDSA).
    pub algorithms: Option<Vec<String>>,
    /// The claim naming the tenant (dotted path).
    pub tenant_claim: Option<String>,
    /// The tenant of every principal when no claim names it.
    pub tenant: Option<String>,
    /// The claim naming the subject (default `sub`).
    pub subject_claim: Option<String>,
    /// CA certificates (PEM) to trust for this issuer.
    pub ca_file: Option<PathBuf>,
    /// Introspection of opaque tokens.
    pub introspection: Option<IntrospectionSection>,
}

/// `[auth.oauth.issuers.introspection]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionSection {
    /// The endpoint; default: the issuer metadata's.
    pub endpoint: Option<String>,
    /// This server's client id at the issuer.
    pub client_id: String,
    /// Its secret (prefer `client_secret_env`).
    pub client_secret: Option<String>,
    /// An environment variable holding it.
    pub client_secret_env: Option<String>,
}

/// `[auth.scopes]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopesSection {
    /// Needed by every MCP request.
    #[serde(default)]
    pub mcp: Vec<String>,
    /// `tools/call`.
    #[serde(default)]
    pub tools_call: Vec<String>,
    /// `tools/call` of the tools a pattern (`name`, `prefix*`, `*`) matches, on top.
    #[serde(default)]
    pub tools: BTreeMap<String, Vec<String>>,
    /// `tasks/get` and `subscriptions/listen`.
    #[serde(default)]
    pub tasks_get: Vec<String>,
    /// `tasks/update`.
    #[serde(default)]
    pub tasks_update: Vec<String>,
    /// `tasks/cancel`.
    #[serde(default)]
    pub tasks_cancel: Vec<String>,
    /// `resources/read`.
    #[serde(default)]
    pub resources_read: Vec<String>,
    /// `prompts/get`.
    #[serde(default)]
    pub prompts_get: Vec<String>,
    /// The operator API.
    #[serde(default)]
    pub admin: Vec<String>,
}

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "expected `a`"), with the
/// nearest of the expected names suggested when `x` looks like a typo of one.
fn suggest_known(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let names = expected.split('`').skip(1).step_by(2);
    crate::suggest::with_suggestion(message.to_owned(), unknown, names)
}

impl Config {
    /// What `snodo config validate` points out in a configuration that loads: settings
    /// that are valid but often not what was meant, each naming its key.
    pub fn notices(&self) -> Vec<String> {
        let sections = std::iter::once(("defaults".to_owned(), &self.defaults))
            .chain(self.tools.iter().map(|(n, s)| (format!("tools.{n}"), s)));
        let mut out = Vec::new();
        for (key, section) in sections {
            for entry in section.allowed_outbound_hosts.iter().flatten() {
                if AllowedHost::parse(entry).is_ok_and(|e| e.is_localhost()) {
                    out.push(format!(
                        "{key}.allowed_outbound_hosts: {entry:?} matches only URLs that name \
                         localhost, not 127.0.0.1 or [::1]; a tool that asks for those needs \
                         an entry naming the address (docs/outbound.md)"
                    ));
                }
            }
        }
        out
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: "-".into(),
            reason: format!("cannot read: {e}"),
        })?;
        let mut config = Self::parse(&file, &text)?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        config.base_dir = Some(std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()));
        Ok(config)
    }

    /// `path` as written in the file, resolved against [`Config::base_dir`].
    fn store_choice(
        &self,
        file: &str,
        data: &Path,
        node: &str,
    ) -> Result<StoreConfig, ConfigError> {
        let st = &self.store;
        let kind = st.kind.unwrap_or_default();
        let err = |key: &str, reason: String| ConfigError {
            file: file.into(),
            key: key.into(),
            reason,
        };
        if kind != StoreKind::Postgres {
            for (set, key) in [
                (st.url.is_some(), "url"),
                (st.url_env.is_some(), "url_env"),
                (st.schema.is_some(), "schema"),
                (st.pool.is_some(), "pool"),
                (st.write_groups.is_some(), "write_groups"),
                (st.migrate.is_some(), "migrate"),
            ] {
                if set {
                    return Err(err(
                        &format!("store.{key}"),
                        "only a PostgreSQL store (kind = \"postgres\") takes this".into(),
                    ));
                }
            }
        }
        if matches!(kind, StoreKind::Postgres | StoreKind::Memory) && st.path.is_some() {
            return Err(err(
                "store.path",
                "only a file store (redb or sqlite) takes a path".into(),
            ));
        }
        let file = |default: &str| {
            st.path
                .as_deref()
                .map_or_else(|| data.join(default), |p| self.resolve(p))
        };
        Ok(match kind {
            StoreKind::Redb => StoreConfig::Redb(file("tasks.redb")),
            StoreKind::Sqlite => StoreConfig::Sqlite(file("tasks.sqlite")),
            StoreKind::Memory => StoreConfig::Memory,
            StoreKind::Postgres => {
                let url = match (&st.url, &st.url_env) {
                    (Some(u), None) => u.clone(),
                    (None, Some(var)) => std::env::var(var).map_err(|_| {
                        err(
                            "store.url_env",
                            format!("the environment variable {var} is not set"),
                        )
                    })?,
                    _ => {
                        return Err(err(
                            "store",
                            "a PostgreSQL store needs exactly one of url and url_env".into(),
                        ));
                    }
                };
                let mut o = crate::store::PgOptions::new(url, node);
                o.migrate = false;
                if let Some(schema) = &st.schema {
                    o.schema = schema.clone();
                }
                if let Err(e) = o.check() {
                    let key = if e.to_string().contains("schema") {
                        "store.schema"
                    } else if st.url.is_some() {
                        "store.url"
                    } else {
                        "store.url_env"
                    };
                    return Err(err(key, e.to_string()));
                }
                if let Some(n) = st.pool {
                    if !(1..=1024).contains(&n) {
                        return Err(err("store.pool", "1..=1024 connections".into()));
                    }
                    o.pool_size = n;
                }
                if let Some(n) = st.write_groups {
                    let writes = o.pool_size - o.read_connections();
                    if !(1..=writes).contains(&n) {
                        return Err(err(
                            "store.write_groups",
                            format!(
                                "1..={writes}: each group holds one of the pool's {writes} \
                                 write connections (store.pool)"
                            ),
                        ));
                    }
                    o.write_groups = n;
                }
                if let Some(m) = st.migrate {
                    o.migrate = m;
                }
                StoreConfig::Postgres(o)
            }
        })
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        match &self.base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        }
    }

    /// Parses `text` (named `file` in errors).
    pub fn parse(file: &str, text: &str) -> Result<Self, ConfigError> {
        let error = |key: String, e: toml::de::Error| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].lines().count().max(1);
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            ConfigError {
                file: file.into(),
                key,
                reason: format!("{}{at}", suggest_known(e.message())),
            }
        };
        let de = toml::Deserializer::parse(text).map_err(|e| error("-".into(), e))?;
        // The path of the value that failed, as the serde stack saw it.
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let e = e.into_inner();
            // An unknown key's path ends with the key itself.
            let key = if path == "." { "-".to_owned() } else { path };
            error(key, e)
        })
    }

    /// The serve options this configuration describes, with everything validated except
    /// what needs the components loaded (tool names are checked by `serve`).
    pub fn to_serve_options(&self, file: &str) -> Result<ServeOptions, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let data = PathBuf::from(".snodo");
        let mut opts = ServeOptions::new(
            data.clone(),
            self.components
                .iter()
                .map(|c| self.resolve(&c.path))
                .collect(),
        );
        if let Some(l) = self.listen {
            opts.listen = l;
        }
        if let Some(b) = self.max_body_bytes {
            if b < 1024 {
                return Err(err("max_body_bytes", "at least 1024 bytes".into()));
            }
            opts.max_body_bytes = b;
        }
        if let Some(id) = &self.node.id {
            if id.is_empty() || id.len() > 128 {
                return Err(err("node.id", "1..=128 bytes".into()));
            }
            opts.node = id.clone();
        }
        opts.store = self.store_choice(file, &data, &opts.node)?;
        if let Some(c) = &self.cache_dir {
            opts.cache_dir = Some(self.resolve(c));
        }
        let resolve = |p: &Path| self.resolve(p);
        let secrets = self.secrets(file)?;
        let defaults = tool_settings(
            &self.defaults,
            "defaults",
            &ToolSettings::default(),
            &resolve,
            &secrets,
        )
        .map_err(|(k, r)| err(&k, r))?;
        if let Some(ttl) = defaults.ttl_ms {
            opts.ttl_ms = if ttl == 0 { None } else { Some(ttl) };
        }
        if let Some(p) = defaults.poll_interval_ms {
            opts.poll_interval_ms = p;
        }
        opts.defaults = defaults.clone();
        for (name, section) in &self.tools {
            let settings = tool_settings(
                section,
                &format!("tools.{name}"),
                &defaults,
                &resolve,
                &secrets,
            )
            .map_err(|(k, r)| err(&k, r))?;
            opts.tool_settings.insert(name.clone(), settings);
        }
        opts.runner = self.runner_options(file)?;
        if let Some(p) = self.runner.component_policy {
            opts.component_policy = p;
        }
        opts.tokens = self.tokens(file)?;
        opts.admin = self.admin(file, &opts.tokens)?;
        self.oauth_into(file, &mut opts)?;
        self.limits_into(file, &mut opts)?;
        opts.http_limits = self.http_limits(file)?;
        self.outbound_into(file, &mut opts)?;
        journal_room(file, &opts)?;
        opts.metrics_token = self.metrics_token(file)?;
        opts.otlp = self.otlp(file)?;
        opts.trace_context = self.telemetry.trace_context.unwrap_or(opts.otlp.is_some());
        opts.deploy = self.deploy_settings(file)?;
        Ok(opts)
    }

    /// `[deploy]`, over the defaults.
    fn deploy_settings(&self, file: &str) -> Result<DeploySettings, ConfigError> {
        let d = &self.deploy;
        let base = DeploySettings::default();
        let ms = std::time::Duration::from_millis;
        let positive = |key: &str, v: Option<u64>, default: std::time::Duration| match v {
            Some(0) => Err(config_error(
                file,
                &format!("deploy.{key}"),
                "must be at least 1".into(),
            )),
            Some(v) => Ok(ms(v)),
            None => Ok(default),
        };
        let mut keys = Vec::new();
        for (name, key) in &d.trusted_keys {
            let key = crate::trust::parse_key(key)
                .map_err(|e| config_error(file, &format!("deploy.trusted_keys.{name}"), e))?;
            keys.push((name.clone(), key));
        }
        let require = d.require_signature.unwrap_or(!keys.is_empty());
        if require && keys.is_empty() {
            return Err(config_error(
                file,
                "deploy.require_signature",
                "requires deploy.trusted_keys: no signature could be accepted".into(),
            ));
        }
        Ok(DeploySettings {
            poll: positive("poll_ms", d.poll_ms, base.poll)?,
            retention: d.retention_ms.map_or(base.retention, ms),
            collect_every: positive("collect_every_ms", d.collect_every_ms, base.collect_every)?,
            trust: crate::trust::TrustPolicy { keys, require },
            watch: d.watch.as_ref().map(|w| self.resolve(w)),
        })
    }

    /// `[runner]`, over the runner's defaults.
    fn runner_options(&self, file: &str) -> Result<RunnerOptions, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let r = &self.runner;
        let ms = std::time::Duration::from_millis;
        let base = RunnerOptions::default();
        let runner = RunnerOptions {
            recover: r.recover.unwrap_or(base.recover),
            lease: r.lease_ms.map_or(base.lease, ms),
            heartbeat: r.heartbeat_ms.map_or(base.heartbeat, ms),
            reap_interval: match r.reap_interval_ms {
                Some(0) => None,
                Some(v) => Some(ms(v)),
                None => base.reap_interval,
            },
            max_concurrent: r.max_concurrent.unwrap_or(base.max_concurrent),
            max_running_per_tenant: r
                .max_running_per_tenant
                .unwrap_or(base.max_running_per_tenant),
            max_recoveries: r.max_recoveries.unwrap_or(base.max_recoveries),
            max_start_failures: r.max_start_failures.unwrap_or(base.max_start_failures),
            park_after: r.park_after_ms.map_or(base.park_after, ms),
            attempt_wall_clock: r.attempt_wall_clock_ms.map_or(base.attempt_wall_clock, ms),
            cancel_grace: r.cancel_grace_ms.map_or(base.cancel_grace, ms),
            drain_timeout: r.drain_timeout_ms.map_or(base.drain_timeout, ms),
            ..base
        };
        if r.reap_interval_ms == Some(0) {
            // Every served task counts against limits.stored_tasks_per_tenant, and a task
            // past its TTL keeps its place until the reaper removes it.
            return Err(err(
                "runner.reap_interval_ms",
                "at least 1: without the reaper, tasks past their TTL would hold their place under limits.stored_tasks_per_tenant and limits.live_tasks_per_tenant for good".into(),
            ));
        }
        if runner.lease.is_zero() || runner.lease > std::time::Duration::from_secs(3_600) {
            return Err(err("runner.lease_ms", "a lease is 1..=3600000 ms".into()));
        }
        if runner.heartbeat.is_zero() || runner.heartbeat >= runner.lease {
            return Err(err(
                "runner.heartbeat_ms",
                "the heartbeat must be positive and shorter than the lease".into(),
            ));
        }
        if runner.attempt_wall_clock <= runner.park_after {
            return Err(err(
                "runner.attempt_wall_clock_ms",
                format!(
                    "must be longer than runner.park_after_ms ({} ms), or an attempt waiting for input would be stopped before it parks",
                    runner.park_after.as_millis()
                ),
            ));
        }
        if runner.max_concurrent == 0 {
            return Err(err(
                "runner.max_concurrent",
                "at least one attempt must be able to run".into(),
            ));
        }
        if runner.max_running_per_tenant == 0 {
            return Err(err(
                "runner.max_running_per_tenant",
                "at least one attempt of a tenant must be able to run".into(),
            ));
        }
        Ok(runner)
    }

    /// `[limits]` and `[engine]`: the edge's budgets and the guests' memory and results.
    fn limits_into(&self, file: &str, opts: &mut ServeOptions) -> Result<(), ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let l = &self.limits;
        let tenants = crate::serve::tenants_in(&opts.tokens);
        let b = TenantLimits::for_tenants(tenants);
        let positive = |key: &str, v: Option<u64>| match v {
            Some(0) => Err(err(&format!("limits.{key}"), "must be at least 1".into())),
            _ => Ok(()),
        };
        positive(
            "sync_calls_per_tenant",
            l.sync_calls_per_tenant.map(|v| v as u64),
        )?;
        positive("sync_calls", l.sync_calls.map(|v| v as u64))?;
        positive("sync_timeout_ms", l.sync_timeout_ms)?;
        positive("live_tasks_per_tenant", l.live_tasks_per_tenant)?;
        positive("stored_tasks_per_tenant", l.stored_tasks_per_tenant)?;
        positive("stored_bytes_per_tenant", l.stored_bytes_per_tenant)?;
        positive(
            "task_creates_per_second",
            l.task_creates_per_second.map(u64::from),
        )?;
        positive("task_create_burst", l.task_create_burst.map(u64::from))?;
        positive("streams_per_tenant", l.streams_per_tenant.map(|v| v as u64))?;
        positive("streams", l.streams.map(|v| v as u64))?;
        positive("stream_task_ids", l.stream_task_ids.map(|v| v as u64))?;
        positive("result_bytes", l.result_bytes.map(|v| v as u64))?;
        opts.limits = TenantLimits {
            sync_calls_per_tenant: l.sync_calls_per_tenant.unwrap_or(b.sync_calls_per_tenant),
            sync_calls: l.sync_calls.unwrap_or(b.sync_calls),
            sync_timeout_ms: l.sync_timeout_ms.unwrap_or(b.sync_timeout_ms),
            live_tasks_per_tenant: l.live_tasks_per_tenant.unwrap_or(b.live_tasks_per_tenant),
            stored_tasks_per_tenant: l
                .stored_tasks_per_tenant
                .unwrap_or(b.stored_tasks_per_tenant),
            stored_bytes_per_tenant: l
                .stored_bytes_per_tenant
                .unwrap_or(b.stored_bytes_per_tenant),
            task_creates_per_second: l
                .task_creates_per_second
                .unwrap_or(b.task_creates_per_second),
            task_create_burst: l.task_create_burst.unwrap_or(b.task_create_burst),
            streams_per_tenant: l.streams_per_tenant.unwrap_or(b.streams_per_tenant),
            streams: l.streams.unwrap_or(b.streams),
            stream_task_ids: l.stream_task_ids.unwrap_or(b.stream_task_ids),
        };
        if let Some(m) = l.guest_memory_bytes {
            if m < (1 << 20) {
                return Err(err("limits.guest_memory_bytes", "at least 1 MiB".into()));
            }
            opts.engine.max_memory_bytes = m;
        }
        if let Some(m) = l.guest_memory_total_bytes {
            opts.engine.max_total_memory_bytes = m;
        }
        if opts.engine.max_total_memory_bytes < opts.engine.max_memory_bytes {
            return Err(err(
                "limits.guest_memory_total_bytes",
                format!(
                    "smaller than one guest's memory ({} bytes): no guest could use its cap",
                    opts.engine.max_memory_bytes
                ),
            ));
        }
        if let Some(r) = l.result_bytes {
            opts.engine.max_result_bytes = r;
        }
        positive(
            "guest_memory_per_tenant_bytes",
            l.guest_memory_per_tenant_bytes.map(|v| v as u64),
        )?;
        opts.engine.max_tenant_memory_bytes = l
            .guest_memory_per_tenant_bytes
            .or_else(|| crate::serve::shared_memory(&opts.engine, tenants));
        positive(
            "executing_per_tenant",
            l.executing_per_tenant.map(|v| v as u64),
        )?;
        positive("executing", l.executing.map(|v| v as u64))?;
        if let Some(n) = l.executing_per_tenant {
            opts.engine.executing_per_tenant = n;
        }
        if let Some(n) = l.executing {
            opts.engine.executing = n;
        }
        if let Some(k) = self.engine.keep_resident_bytes {
            opts.engine.keep_resident_bytes = k;
        }
        if let Some(p) = self.engine.pagemap_scan {
            opts.engine.pagemap_scan = p;
        }
        Ok(())
    }

    /// `[auth.oauth]`, `[auth.scopes]` and `auth.isolation`, checked as `serve` checks them.
    fn oauth_into(&self, file: &str, opts: &mut ServeOptions) -> Result<(), ConfigError> {
        use crate::http::oauth::{Algorithm, IntrospectionConfig, IssuerConfig, OAuthConfig};
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let isolation = self.auth.isolation.unwrap_or_default();
        for (_, p) in &mut opts.tokens {
            p.isolation = isolation;
        }
        let sc = &self.auth.scopes;
        opts.scopes = crate::mcp::ScopePolicy {
            mcp: sc.mcp.clone(),
            tools_call: sc.tools_call.clone(),
            tools: sc
                .tools
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            tasks_get: sc.tasks_get.clone(),
            tasks_update: sc.tasks_update.clone(),
            tasks_cancel: sc.tasks_cancel.clone(),
            resources_read: sc.resources_read.clone(),
            prompts_get: sc.prompts_get.clone(),
            admin: sc.admin.clone(),
        };
        for scope in opts.scopes.all() {
            let ok = !scope.is_empty()
                && scope
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\');
            if !ok {
                return Err(err(
                    "auth.scopes",
                    format!(
                        "{scope:?} is not a scope (printable ASCII without spaces, quotes or backslashes)"
                    ),
                ));
            }
        }
        let Some(o) = &self.auth.oauth else {
            if !opts.scopes.is_empty() {
                return Err(err(
                    "auth.scopes",
                    "scopes need [auth.oauth]: static tokens and the local principal hold every scope".into(),
                ));
            }
            return Ok(());
        };
        let d = OAuthConfig::default();
        let ms = |v: Option<u64>, default: std::time::Duration| {
            v.map_or(default, |ms| {
                std::time::Duration::from_secs(ms.div_ceil(1000))
            })
        };
        let mut issuers = Vec::new();
        for (i, is) in o.issuers.iter().enumerate() {
            let key = format!("auth.oauth.issuers[{i}]");
            let algorithms = match &is.algorithms {
                None => Algorithm::DEFAULT.to_vec(),
                Some(names) => names
                    .iter()
                    .map(|n| Algorithm::parse(n))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| err(&format!("{key}.algorithms"), e))?,
            };
            let introspection = match &is.introspection {
                None => None,
                Some(x) => {
                    let secret = match (&x.client_secret, &x.client_secret_env) {
                        (Some(s), None) => s.clone(),
                        (None, Some(var)) => std::env::var(var).map_err(|_| {
                            err(
                                &format!("{key}.introspection.client_secret_env"),
                                format!("the environment variable {var} is not set"),
                            )
                        })?,
                        _ => {
                            return Err(err(
                                &format!("{key}.introspection"),
                                "give exactly one of client_secret and client_secret_env".into(),
                            ));
                        }
                    };
                    Some(IntrospectionConfig {
                        endpoint: x.endpoint.clone(),
                        client_id: x.client_id.clone(),
                        client_secret: secret,
                    })
                }
            };
            issuers.push(IssuerConfig {
                issuer: is.issuer.clone(),
                jwks_uri: is.jwks_uri.clone(),
                introspection,
                audiences: is.audiences.clone(),
                algorithms,
                tenant_claim: is.tenant_claim.clone(),
                tenant: is.tenant.clone(),
                subject_claim: is.subject_claim.clone().unwrap_or_else(|| "sub".into()),
                ca_file: is.ca_file.clone(),
            });
        }
        let config = OAuthConfig {
            resource: o.resource.clone(),
            issuers,
            leeway: ms(o.leeway_ms, d.leeway),
            isolation,
            forward_claims: o.forward_claims.clone(),
            jwks_min_refresh: ms(o.jwks_min_refresh_ms, d.jwks_min_refresh),
            jwks_max_age: ms(o.jwks_max_age_ms, d.jwks_max_age),
            introspection_cache: ms(o.introspection_cache_ms, d.introspection_cache),
            fetch_timeout: ms(o.fetch_timeout_ms, d.fetch_timeout),
            introspections_per_second: o
                .introspections_per_second
                .unwrap_or(d.introspections_per_second),
            shared_tenants: o.shared_tenants,
            challenge_scopes: opts.scopes.ordinary(),
            scopes_supported: opts.scopes.all(),
        };
        if config.leeway > std::time::Duration::from_secs(300) {
            return Err(err(
                "auth.oauth.leeway_ms",
                "at most 300000: a longer leeway keeps expired tokens working".into(),
            ));
        }
        crate::http::oauth::check(&config).map_err(|e| err("auth.oauth", e))?;
        opts.oauth = Some(config);
        Ok(())
    }

    /// `[[auth.tokens]]`: each token and the principal it stands for, checked as the command
    /// line checks them.
    fn tokens(&self, file: &str) -> Result<Vec<(String, Principal)>, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let mut tokens: Vec<(String, Principal)> = Vec::new();
        for (i, t) in self.auth.tokens.iter().enumerate() {
            let key = format!("auth.tokens[{i}]");
            let token = token_of(&t.token, &t.token_env, &key).map_err(|(k, r)| err(&k, r))?;
            let principal = Principal::new(&t.tenant, &t.subject);
            if let Err(e) = http::check_token(&token, &principal, &tokens) {
                let field = match e {
                    TokenError::EmptyTenant | TokenError::ControlCharacter => "tenant",
                    TokenError::EmptySubject => "subject",
                    TokenError::TooShort | TokenError::Duplicate { .. } if t.token.is_some() => {
                        "token"
                    }
                    TokenError::TooShort | TokenError::Duplicate { .. } => "token_env",
                };
                let reason = match e {
                    TokenError::Duplicate { first } => {
                        format!("the same token as auth.tokens[{first}]; tokens must be unique")
                    }
                    other => other.to_string(),
                };
                return Err(err(&format!("{key}.{field}"), reason));
            }
            tokens.push((token, principal));
        }
        Ok(tokens)
    }

    /// `[admin]`: admin tokens, checked as MCP tokens are and distinct from them.
    fn admin(
        &self,
        file: &str,
        mcp_tokens: &[(String, Principal)],
    ) -> Result<crate::admin::AdminConfig, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let a = &self.admin;
        let mut tokens: Vec<(String, Principal, bool)> = Vec::new();
        let mut seen: Vec<(String, Principal)> = Vec::new();
        for (i, t) in a.tokens.iter().enumerate() {
            let key = format!("admin.tokens[{i}]");
            let token = token_of(&t.token, &t.token_env, &key).map_err(|(k, r)| err(&k, r))?;
            let principal = Principal::new(
                &t.tenant,
                t.subject.clone().unwrap_or_else(|| "operator".into()),
            );
            let field = if t.token.is_some() {
                "token"
            } else {
                "token_env"
            };
            if mcp_tokens.iter().any(|(m, _)| *m == token) {
                return Err(err(
                    &format!("{key}.{field}"),
                    "the same token as one of auth.tokens: an admin token must be its own".into(),
                ));
            }
            if let Err(e) = http::check_token(&token, &principal, &seen) {
                let at = match e {
                    TokenError::EmptyTenant | TokenError::ControlCharacter => "tenant",
                    TokenError::EmptySubject => "subject",
                    _ => field,
                };
                let reason = match e {
                    TokenError::Duplicate { first } => {
                        format!("the same token as admin.tokens[{first}]; tokens must be unique")
                    }
                    other => other.to_string(),
                };
                return Err(err(&format!("{key}.{at}"), reason));
            }
            seen.push((token.clone(), principal.clone()));
            tokens.push((token, principal, t.cross_tenant));
        }
        if let Some(t) = a.cross_tenant.iter().find(|t| t.is_empty()) {
            return Err(err("admin.cross_tenant", format!("{t:?} is not a tenant")));
        }
        let sign_in = match &a.oauth {
            None => None,
            Some(o) => {
                let issuers = self.auth.oauth.as_ref().map(|x| &x.issuers);
                if !issuers.is_some_and(|is| is.iter().any(|i| i.issuer == o.issuer)) {
                    return Err(err(
                        "admin.oauth.issuer",
                        format!("{:?} is not one of [[auth.oauth.issuers]]", o.issuer),
                    ));
                }
                if o.client_id.is_empty() {
                    return Err(err("admin.oauth.client_id", "must not be empty".into()));
                }
                let client_secret = match &o.client_secret_env {
                    Some(var) => Some(std::env::var(var).map_err(|_| {
                        err(
                            "admin.oauth.client_secret_env",
                            format!("the environment variable {var} is not set"),
                        )
                    })?),
                    None => None,
                };
                if let Some(u) = &o.redirect_uri
                    && !(u.starts_with("https://")
                        || u.starts_with("http://127.0.0.1")
                        || u.starts_with("http://localhost")
                        || u.starts_with("http://[::1]"))
                {
                    return Err(err(
                        "admin.oauth.redirect_uri",
                        "https, or plain http to loopback only".into(),
                    ));
                }
                Some(crate::admin::SignIn {
                    issuer: o.issuer.clone(),
                    client_id: o.client_id.clone(),
                    client_secret,
                    scopes: o.scopes.clone(),
                    redirect_uri: o.redirect_uri.clone(),
                })
            }
        };
        let session_ms = a.session_ms.unwrap_or(crate::admin::DEFAULT_SESSION_MS);
        if !(60_000..=7 * 24 * 3_600_000).contains(&session_ms) {
            return Err(err(
                "admin.session_ms",
                "from 60000 (a minute) to 604800000 (a week)".into(),
            ));
        }
        Ok(crate::admin::AdminConfig {
            tokens,
            cross_tenant: a.cross_tenant.clone(),
            session_ms,
            sign_in,
            ..Default::default()
        })
    }

    /// `[http]`: the transport's timeouts and connection cap.
    fn http_limits(&self, file: &str) -> Result<http::HttpLimits, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let ms = std::time::Duration::from_millis;
        let h = &self.http;
        let base = http::HttpLimits::default();
        let positive = |key: &str, v: Option<u64>, default: std::time::Duration| match v {
            Some(0) => Err(err(key, "must be positive".into())),
            Some(v) => Ok(ms(v)),
            None => Ok(default),
        };
        Ok(http::HttpLimits {
            first_byte_timeout: positive(
                "http.first_byte_timeout_ms",
                h.first_byte_timeout_ms,
                base.first_byte_timeout,
            )?,
            header_timeout: positive(
                "http.header_timeout_ms",
                h.header_timeout_ms,
                base.header_timeout,
            )?,
            body_timeout: positive("http.body_timeout_ms", h.body_timeout_ms, base.body_timeout)?,
            idle_timeout: positive("http.idle_timeout_ms", h.idle_timeout_ms, base.idle_timeout)?,
            max_connections: match h.max_connections {
                Some(n) if n == 0 || n > http::MAX_CONNECTIONS_LIMIT => {
                    return Err(err(
                        "http.max_connections",
                        format!("1..={}", http::MAX_CONNECTIONS_LIMIT),
                    ));
                }
                Some(n) => n,
                None => base.max_connections,
            },
            max_connections_per_peer: h
                .max_connections_per_peer
                .unwrap_or(base.max_connections_per_peer),
        })
    }

    /// `[metrics]`: the token `GET /metrics` requires, if any.
    /// `[telemetry.otlp]`, checked.
    fn otlp(&self, file: &str) -> Result<Option<crate::serve::TracingOptions>, ConfigError> {
        self.telemetry
            .otlp
            .as_ref()
            .map(|o| o.options(file))
            .transpose()
    }

    fn metrics_token(&self, file: &str) -> Result<Option<String>, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let token = match (&self.metrics.token, &self.metrics.token_env) {
            (None, None) => None,
            (Some(t), None) => Some(t.clone()),
            (None, Some(var)) => Some(std::env::var(var).map_err(|_| {
                err(
                    "metrics.token_env",
                    format!("the environment variable {var} is not set"),
                )
            })?),
            (Some(_), Some(_)) => {
                return Err(err(
                    "metrics",
                    "give at most one of token and token_env".into(),
                ));
            }
        };
        if let Some(t) = &token
            && t.len() < http::MIN_TOKEN_LEN
        {
            let key = if self.metrics.token.is_some() {
                "metrics.token"
            } else {
                "metrics.token_env"
            };
            return Err(err(key, TokenError::TooShort.to_string()));
        }
        Ok(token)
    }
}

impl Config {
    /// `[secrets]`, each read from its source now: a missing variable or file is an error
    /// at start, not at the first request.
    fn secrets(&self, file: &str) -> Result<BTreeMap<String, Secret>, ConfigError> {
        let mut out = BTreeMap::new();
        for (name, s) in &self.secrets {
            let key = format!("secrets.{name}");
            let err = |reason: String| config_error(file, &key, reason);
            let value = match (&s.env, &s.file, &s.value) {
                (Some(var), None, None) => std::env::var(var)
                    .map_err(|_| err(format!("the environment variable {var} is not set")))?,
                (None, Some(path), None) => {
                    let path = self.resolve(path);
                    std::fs::read_to_string(&path)
                        .map_err(|e| err(format!("cannot read {}: {e}", path.display())))?
                        .trim()
                        .to_owned()
                }
                (None, None, Some(v)) if s.development => v.clone(),
                (None, None, Some(_)) => {
                    return Err(err(
                        "a literal value is for development only: set development = true, \
                         or take it from env or file"
                            .into(),
                    ));
                }
                _ => return Err(err("give exactly one of env, file or value".into())),
            };
            if value.is_empty() {
                return Err(err("the secret is empty".into()));
            }
            out.insert(name.clone(), Secret::new(value));
        }
        Ok(out)
    }

    /// `[outbound]` into the engine's and the runner's settings.
    fn outbound_into(&self, file: &str, opts: &mut ServeOptions) -> Result<(), ConfigError> {
        let o = &self.outbound;
        let out = &mut opts.engine.outbound;
        out.ca_bundle = o.ca_bundle.as_ref().map(|p| self.resolve(p));
        out.resolve = o
            .resolve
            .iter()
            .map(|(k, v)| (k.trim_end_matches('.').to_ascii_lowercase(), v.clone()))
            .collect();
        if let Some(n) = o.max_concurrent_per_tenant {
            if n == 0 {
                return Err(config_error(
                    file,
                    "outbound.max_concurrent_per_tenant",
                    "must be positive".into(),
                ));
            }
            out.max_concurrent_per_tenant = n;
        }
        if let Some(b) = o.journal_task_bytes {
            if b == 0 {
                return Err(config_error(
                    file,
                    "outbound.journal_task_bytes",
                    "must be positive".into(),
                ));
            }
            opts.runner.journal_task_bytes = b;
        }
        Ok(())
    }
}

/// Refuses a journaled tool whose largest response could never be recorded: the host
/// holds `max_response_bytes` plus [`JOURNAL_HEAD_BYTES`] of the task's journal before it
/// sends a request, so with less than that in `outbound.journal_task_bytes` every
/// journaled request of the tool would be refused unsent.
///
/// [`JOURNAL_HEAD_BYTES`]: crate::wasm::outbound::JOURNAL_HEAD_BYTES
fn journal_room(file: &str, opts: &ServeOptions) -> Result<(), ConfigError> {
    let room = opts.runner.journal_task_bytes;
    let grants = std::iter::once(("defaults", opts.defaults.grants.as_ref())).chain(
        opts.tool_settings
            .iter()
            .map(|(name, t)| (name.as_str(), t.grants.as_ref())),
    );
    for (name, grants) in grants {
        let Some(http) = grants.and_then(|g| g.http.as_ref()) else {
            continue;
        };
        let needs = http
            .limits
            .max_response_bytes
            .saturating_add(crate::wasm::outbound::JOURNAL_HEAD_BYTES);
        if http.journal && needs > room {
            let key = if name == "defaults" {
                "defaults.outbound.max_response_bytes".to_owned()
            } else {
                format!("tools.{name}.outbound.max_response_bytes")
            };
            return Err(config_error(
                file,
                &key,
                format!(
                    "a journaled response of up to {} bytes (plus {} for its head) cannot fit \
                     in outbound.journal_task_bytes = {room}: every journaled request would be \
                     refused; raise outbound.journal_task_bytes, lower this, or set journal = false",
                    http.limits.max_response_bytes,
                    crate::wasm::outbound::JOURNAL_HEAD_BYTES
                ),
            ));
        }
    }
    Ok(())
}

/// The error at `key` of `file`.
fn config_error(file: &str, key: &str, reason: String) -> ConfigError {
    ConfigError {
        file: file.into(),
        key: key.into(),
        reason,
    }
}

/// The settings of `[defaults]` (over `base`) or of one `[tools.NAME]` (over the defaults).
fn tool_settings(
    s: &ToolSection,
    key: &str,
    base: &ToolSettings,
    resolve: &dyn Fn(&Path) -> PathBuf,
    secrets: &BTreeMap<String, Secret>,
) -> Result<ToolSettings, (String, String)> {
    let mut out = base.clone();
    if let Some(m) = s.mode {
        out.mode = Some(m);
    }
    if let Some(r) = &s.retry {
        let policy = match r {
            RetrySection::List(l) => RetryPolicy::new(l.iter().copied()),
            RetrySection::Fixed { fixed, count } => RetryPolicy::fixed(*fixed, *count),
            RetrySection::Exponential {
                exponential,
                factor,
                count,
            } => RetryPolicy::exponential(*exponential, *factor, *count),
        };
        out.retry_policy = Some(policy.map_err(|e| (format!("{key}.retry"), e.to_string()))?);
    }
    if let Some(t) = s.ttl_ms {
        if t > crate::store::MAX_TTL_MS {
            return Err((
                format!("{key}.ttl_ms"),
                format!("at most {} (one year)", crate::store::MAX_TTL_MS),
            ));
        }
        out.ttl_ms = Some(t);
    }
    if let Some(p) = s.poll_interval_ms {
        if p == 0 {
            return Err((format!("{key}.poll_interval_ms"), "must be positive".into()));
        }
        out.poll_interval_ms = Some(p);
    }
    if let Some(c) = &s.claims {
        out.claims = Some(c.clone());
    }
    if let Some(l) = s.limits {
        let zero = |v: Option<u64>| v == Some(0);
        if zero(l.memory_bytes) || zero(l.deadline_ms) || zero(l.fuel) || zero(l.wall_clock_ms) {
            return Err((
                format!("{key}.limits"),
                "limits must be positive when set".into(),
            ));
        }
        out.limits = Some(ExecutionLimits {
            memory_bytes: l.memory_bytes,
            table_elements: l.table_elements,
            deadline_ms: l.deadline_ms,
            fuel: l.fuel,
            wall_clock_ms: l.wall_clock_ms,
        });
    }
    if let Some(g) = &s.grants {
        if g.network.is_some() {
            return Err((
                format!("{key}.grants.network"),
                "raw sockets are not granted: name the hosts the tool may reach in \
                 allowed_outbound_hosts (docs/outbound.md)"
                    .into(),
            ));
        }
        let http = out.grants.as_ref().and_then(|g| g.http.clone());
        out.grants = Some(WasiGrants {
            env: g.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            dirs: g
                .dirs
                .iter()
                .map(|d| DirGrant {
                    host: resolve(&d.host),
                    guest: d.guest.clone(),
                    writable: d.writable,
                })
                .collect(),
            http,
        });
    }
    outbound_grant(s, key, &mut out, secrets)?;
    Ok(out)
}

/// The outbound part of a tool's settings: its allow-list, limits, injected headers,
/// readable secrets and journal, over what `out` inherited.
fn outbound_grant(
    s: &ToolSection,
    key: &str,
    out: &mut ToolSettings,
    secrets: &BTreeMap<String, Secret>,
) -> Result<(), (String, String)> {
    let set = s.allowed_outbound_hosts.is_some()
        || s.outbound.is_some()
        || s.inject.is_some()
        || s.secrets.is_some()
        || s.journal.is_some();
    if !set {
        return Ok(());
    }
    let grants = out.grants.get_or_insert_with(WasiGrants::default);
    let mut grant = grants
        .http
        .as_deref()
        .cloned()
        .unwrap_or_else(|| HttpGrant::new(AllowList::default()));
    if let Some(hosts) = &s.allowed_outbound_hosts {
        grant.allowed =
            AllowList::parse(hosts).map_err(|e| (format!("{key}.allowed_outbound_hosts"), e))?;
    }
    if let Some(o) = s.outbound {
        let k = format!("{key}.outbound");
        let positive = |v: Option<u64>, what: &str| match v {
            Some(0) => Err((format!("{k}.{what}"), "must be positive".to_owned())),
            v => Ok(v),
        };
        let l = &mut grant.limits;
        let ms = std::time::Duration::from_millis;
        if let Some(v) = positive(o.connect_timeout_ms, "connect_timeout_ms")? {
            l.connect_timeout = ms(v);
        }
        if let Some(v) = positive(o.first_byte_timeout_ms, "first_byte_timeout_ms")? {
            l.first_byte_timeout = ms(v);
        }
        if let Some(v) = positive(o.between_bytes_timeout_ms, "between_bytes_timeout_ms")? {
            l.between_bytes_timeout = ms(v);
        }
        if let Some(v) = positive(o.max_request_bytes, "max_request_bytes")? {
            l.max_request_bytes = v;
        }
        if let Some(v) = positive(o.max_response_bytes, "max_response_bytes")? {
            l.max_response_bytes = v;
        }
        if let Some(v) = positive(o.max_requests.map(u64::from), "max_requests")? {
            l.max_requests = v as u32;
        }
        if let Some(v) = positive(o.max_concurrent.map(u64::from), "max_concurrent")? {
            l.max_concurrent = v as u32;
        }
    }
    if let Some(j) = s.journal {
        grant.journal = j;
    }
    let secret = |name: &str, at: &str| {
        secrets.get(name).cloned().ok_or_else(|| {
            (
                at.to_owned(),
                format!("no secret {name:?} is configured under [secrets]"),
            )
        })
    };
    if let Some(inject) = &s.inject {
        grant.inject.clear();
        for (i, inj) in inject.iter().enumerate() {
            let at = format!("{key}.inject[{i}]");
            let host = AllowedHost::parse(&inj.host).map_err(|e| (format!("{at}.host"), e))?;
            let header = inj.header.to_ascii_lowercase();
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if header.is_empty() || !header.bytes().all(token) {
                return Err((
                    format!("{at}.header"),
                    format!("{:?} is not a header name", inj.header),
                ));
            }
            let (value, used) =
                render_secrets(&inj.value, |name| secret(name, &format!("{at}.value")))?;
            grant.scrub.extend(used);
            grant.inject.push(Injection {
                host,
                header,
                value: Secret::new(value),
            });
        }
        let allowed_key = format!("{key}.allowed_outbound_hosts");
        if let Some((i, why)) = grant.unreachable_injection(&allowed_key) {
            return Err((format!("{key}.inject[{i}].host"), why));
        }
    }
    if let Some(names) = &s.secrets {
        for name in names {
            let value = secret(name, &format!("{key}.secrets"))?;
            let var = name.to_ascii_uppercase().replace(['-', '.'], "_");
            grants.env.retain(|(k, _)| *k != var);
            grants.env.push((var, value.expose().to_owned()));
            grant.scrub.push(value);
        }
    }
    grant.scrub.dedup();
    grants.http = Some(std::sync::Arc::new(grant));
    Ok(())
}

/// `value` with every `{secret.NAME}` replaced, and the secrets it used.
fn render_secrets(
    value: &str,
    secret: impl Fn(&str) -> Result<Secret, (String, String)>,
) -> Result<(String, Vec<Secret>), (String, String)> {
    let mut out = String::new();
    let mut used = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("{secret.") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "{secret.".len()..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let s = secret(&after[..end])?;
        out.push_str(s.expose());
        used.push(s);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok((out, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let c = Config::parse(
            "snodo.toml",
            r#"
listen = "127.0.0.1:4000"
[store]
kind = "memory"
[[components]]
path = "examples.wasm"
[defaults]
ttl_ms = 600000
[tools.flaky]
mode = "required"
retry = [250, 1000]
limits = { memory_bytes = 16777216, deadline_ms = 1000 }
grants = { env = { REGION = "eu" } }
[tools.quick_report]
retry = { exponential = 100, factor = 2, count = 3 }
[runner]
lease_ms = 20000
heartbeat_ms = 5000
[[auth.tokens]]
token = "0123456789abcdef0123"
tenant = "acme"
subject = "alice"
"#,
        )
        .unwrap();
        let o = c.to_serve_options("snodo.toml").unwrap();
        assert_eq!(o.listen.port(), 4000);
        assert_eq!(o.store, StoreConfig::Memory);
        assert_eq!(o.ttl_ms, Some(600_000));
        let flaky = &o.tool_settings["flaky"];
        assert_eq!(flaky.mode, Some(TaskMode::Required));
        assert_eq!(
            flaky.retry_policy.as_ref().map(|p| p.delays_ms().to_vec()),
            Some(vec![250, 1000])
        );
        assert_eq!(flaky.limits.and_then(|l| l.deadline_ms), Some(1000));
        assert_eq!(
            o.tool_settings["quick_report"]
                .retry_policy
                .as_ref()
                .map(|p| p.delays_ms().to_vec()),
            Some(vec![100, 200, 400])
        );
        assert_eq!(o.tokens[0].1, Principal::new("acme", "alice"));
        assert_eq!(o.runner.heartbeat, std::time::Duration::from_secs(5));
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_reason() {
        let e = Config::parse("s.toml", "[runnr]\nlease_ms = 1\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.key.as_str()), ("s.toml", "runnr"));
        assert!(e.reason.contains("line 1"), "{e}");
        assert!(e.reason.contains("did you mean \"runner\"?"), "{e}");
        let e = options("[http]\nmax_conections = 8\n").unwrap_err();
        assert!(
            e.reason.contains("did you mean \"max_connections\"?"),
            "{e}"
        );
        let e = options("[http]\ncolour = 8\n").unwrap_err();
        assert!(!e.reason.contains("did you mean"), "nothing near: {e}");
        let e = Config::parse("s.toml", "[tools.x]\nretry = [-1]\n")
            .unwrap()
            .to_serve_options("s.toml")
            .unwrap_err();
        assert_eq!(e.key, "tools.x.retry");
        assert!(e.reason.contains("negative"), "{e}");
        let e = options("[tools.x]\nmode = \"sometimes\"\n").unwrap_err();
        assert_eq!(e.key, "tools.x.mode");
        let e = options("[store]\nkind = \"mongo\"\n").unwrap_err();
        assert_eq!(e.key, "store.kind");
        // Unknown keys are named with their whole path, in a list as in a table.
        let e = options("[[components]]\npath = \"a.wasm\"\npaht = \"b\"\n").unwrap_err();
        assert_eq!(e.key, "components[0].paht");
        let e = options("[limits]\nsync_calls = \"many\"\n").unwrap_err();
        assert_eq!(e.key, "limits.sync_calls");
        let e = Config::parse("s.toml", "[runner]\nlease_ms = 1000\nheartbeat_ms = 2000\n")
            .unwrap()
            .to_serve_options("s.toml")
            .unwrap_err();
        assert_eq!(e.key, "runner.heartbeat_ms");
        let e = Config::parse(
            "s.toml",
            "[[auth.tokens]]\ntoken = \"short\"\ntenant = \"a\"\nsubject = \"b\"\n",
        )
        .unwrap()
        .to_serve_options("s.toml")
        .unwrap_err();
        assert_eq!(e.key, "auth.tokens[0].token");
        let e = Config::parse("s.toml", "listen = \"nope\"\n").unwrap_err();
        assert!(e.to_string().starts_with("s.toml: "), "{e}");
    }

    /// The reference in docs/configuration.md is a file this build accepts, key for key.
    #[test]
    fn the_documented_sample_parses() {
        let doc = include_str!("../../docs/configuration.md");
        let sample = doc
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a toml block");
        let config = Config::parse("configuration.md", sample).expect("the sample parses");
        assert_eq!(config.limits.sync_calls_per_tenant, Some(64));
        assert_eq!(config.engine.pagemap_scan, Some(true));
    }

    fn options(text: &str) -> Result<ServeOptions, ConfigError> {
        Config::parse("s.toml", text)?.to_serve_options("s.toml")
    }

    #[test]
    fn the_reaper_cannot_be_turned_off_under_the_stored_task_cap() {
        let e = options("[runner]\nreap_interval_ms = 0\n").unwrap_err();
        assert_eq!(e.key, "runner.reap_interval_ms");
        assert!(e.reason.contains("limits.stored_tasks_per_tenant"), "{e}");
        let o = options("[runner]\nreap_interval_ms = 5000\n").expect("options");
        assert_eq!(
            o.runner.reap_interval,
            Some(std::time::Duration::from_secs(5))
        );
    }

    #[test]
    fn stores_are_chosen_by_kind_with_their_own_keys() {
        let o = options("[store]\nkind = \"sqlite\"\npath = \"t.sqlite\"\n").expect("sqlite");
        assert_eq!(o.store, StoreConfig::Sqlite(PathBuf::from("t.sqlite")));
        let o = options("[store]\nkind = \"sqlite\"\n").expect("sqlite");
        assert_eq!(
            o.store,
            StoreConfig::Sqlite(PathBuf::from(".snodo/tasks.sqlite"))
        );
        let o = options(
            "[node]\nid = \"node-a\"\n[store]\nkind = \"postgres\"\nurl = \"host=db user=snodo\"\nschema = \"tenant_a\"\npool = 4\nwrite_groups = 3\nmigrate = true\n",
        )
        .expect("postgres");
        let StoreConfig::Postgres(pg) = &o.store else {
            panic!("{:?}", o.store)
        };
        assert_eq!(
            (
                pg.url.as_str(),
                pg.schema.as_str(),
                pg.pool_size,
                pg.migrate,
                pg.node.as_str()
            ),
            ("host=db user=snodo", "tenant_a", 4, true, "node-a")
        );
        assert_eq!(pg.write_groups, 3);
        assert_eq!(o.node, "node-a");
        // The default identity is unique per process.
        let o = options("[store]\nkind = \"postgres\"\nurl = \"host=db\"\n").expect("pg");
        assert!(
            o.node.ends_with(&format!(":{}", std::process::id())),
            "{}",
            o.node
        );
        let StoreConfig::Postgres(pg) = &o.store else {
            panic!()
        };
        assert_eq!(
            (
                pg.schema.as_str(),
                pg.pool_size,
                pg.migrate,
                pg.write_groups
            ),
            ("snodo", 16, false, 2)
        );
        for (text, key) in [
            ("[store]\nkind = \"postgres\"\n", "store"),
            (
                "[store]\nkind = \"postgres\"\nurl = \"x\"\nurl_env = \"Y\"\n",
                "store",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl_env = \"SNODO_SURELY_UNSET_VAR\"\n",
                "store.url_env",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"host=db\"\nschema = \"Bad-Name\"\n",
                "store.schema",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"host=db\"\npool = 0\n",
                "store.pool",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"host=db\"\nwrite_groups = 0\n",
                "store.write_groups",
            ),
            // A pool of 4 keeps one connection for reads: three for writes.
            (
                "[store]\nkind = \"postgres\"\nurl = \"host=db\"\npool = 4\nwrite_groups = 4\n",
                "store.write_groups",
            ),
            (
                "[store]\nkind = \"redb\"\nwrite_groups = 2\n",
                "store.write_groups",
            ),
            (
                "[store]\nkind = \"postgres\"\nurl = \"host=db\"\npath = \"x\"\n",
                "store.path",
            ),
            ("[store]\nurl = \"host=db\"\n", "store.url"),
            (
                "[store]\nkind = \"sqlite\"\nschema = \"s\"\n",
                "store.schema",
            ),
            ("[node]\nid = \"\"\n", "node.id"),
        ] {
            let e = options(text).expect_err(text);
            assert_eq!(e.key, key, "{text}: {e}");
        }
    }

    #[test]
    fn issuers_naming_tenants_alike_are_refused_unless_shared() {
        let two = |extra: &str, a: &str, b: &str| {
            format!(
                "[auth.oauth]\nresource = \"https://mcp.example.com/mcp\"\n{extra}\n\
                 [[auth.oauth.issuers]]\nissuer = \"https://a.example.com\"\n{a}\n\
                 [[auth.oauth.issuers]]\nissuer = \"https://b.example.com\"\n{b}\n"
            )
        };
        let claim = "tenant_claim = \"org_id\"";
        let e = options(&two("", claim, claim)).unwrap_err();
        assert_eq!(e.key, "auth.oauth");
        assert!(e.reason.contains("shared_tenants"), "{e}");
        let fixed = "tenant = \"acme\"";
        assert!(
            options(&two("", fixed, fixed)).is_err(),
            "the same fixed tenant"
        );
        assert!(options(&two("shared_tenants = true", claim, claim)).is_ok());
        assert!(options(&two("", claim, "tenant_claim = \"tid\"")).is_ok());
        assert!(options(&two("", fixed, "tenant = \"partners\"")).is_ok());
        let e = options(&two(
            "introspections_per_second = 0",
            claim,
            "tenant_claim = \"tid\"",
        ))
        .unwrap_err();
        assert!(e.reason.contains("introspections_per_second"), "{e}");
    }

    #[test]
    fn oauth_issuers_scopes_and_isolation_are_read_and_checked() {
        let o = options(
            r#"
[auth]
isolation = "tenant_subject"
[auth.oauth]
resource = "https://mcp.example.com/mcp"
leeway_ms = 30000
forward_claims = ["email"]
[[auth.oauth.issuers]]
issuer = "https://idp.example.com/realms/acme"
tenant_claim = "org_id"
algorithms = ["RS256", "EdDSA"]
[auth.oauth.issuers.introspection]
client_id = "snodo"
client_secret = "s3cret"
[[auth.oauth.issuers]]
issuer = "https://login.example.org"
tenant = "partners"
subject_claim = "oid"
[auth.scopes]
tools_call = ["tools:call"]
admin = ["snodo:admin"]
[auth.scopes.tools]
"export_*" = ["reports:export"]
"#,
        )
        .expect("a valid [auth]");
        let oauth = o.oauth.expect("oauth");
        assert_eq!(
            oauth.resource.as_deref(),
            Some("https://mcp.example.com/mcp")
        );
        assert_eq!(oauth.leeway, std::time::Duration::from_secs(30));
        assert_eq!(oauth.isolation, crate::model::Isolation::TenantSubject);
        assert_eq!(oauth.forward_claims, ["email"]);
        let [a, b] = &oauth.issuers[..] else {
            panic!("two issuers: {:?}", oauth.issuers.len())
        };
        assert_eq!(a.tenant_claim.as_deref(), Some("org_id"));
        assert_eq!(a.subject_claim, "sub");
        assert_eq!(a.algorithms.len(), 2);
        assert_eq!(
            a.introspection.as_ref().map(|i| i.client_secret.as_str()),
            Some("s3cret")
        );
        assert_eq!(
            (b.tenant.as_deref(), b.subject_claim.as_str()),
            (Some("partners"), "oid")
        );
        assert_eq!(
            oauth.challenge_scopes,
            ["tools:call", "reports:export"],
            "admin is not ordinary use"
        );
        assert_eq!(oauth.scopes_supported.len(), 3);
        assert_eq!(
            o.scopes.tools,
            [("export_*".to_owned(), vec!["reports:export".to_owned()])]
        );

        let issuer =
            "[[auth.oauth.issuers]]\nissuer = \"https://idp.example.com\"\ntenant = \"t\"\n";
        let refused = [
            (
                "[auth.scopes]\ntools_call = [\"x\"]\n".to_owned(),
                "auth.scopes",
                "need [auth.oauth]",
            ),
            (
                format!("[auth.oauth]\nleeway_ms = 600000\n{issuer}"),
                "auth.oauth.leeway_ms",
                "300000",
            ),
            (
                "[auth.oauth]\n".to_owned(),
                "auth.oauth",
                "at least one issuer",
            ),
            (
                "[[auth.oauth.issuers]]\nissuer = \"http://idp.example.com\"\ntenant = \"t\"\n"
                    .to_owned(),
                "auth.oauth",
                "https",
            ),
            (
                "[[auth.oauth.issuers]]\nissuer = \"https://idp.example.com\"\n".to_owned(),
                "auth.oauth",
                "tenant_claim",
            ),
            (
                format!("{issuer}algorithms = [\"HS256\"]\n"),
                "auth.oauth.issuers[0].algorithms",
                "shared-secret",
            ),
            (
                format!("{issuer}algorithms = [\"none\"]\n"),
                "auth.oauth.issuers[0].algorithms",
                "never",
            ),
            (
                format!("{issuer}[auth.oauth.issuers.introspection]\nclient_id = \"c\"\n"),
                "auth.oauth.issuers[0].introspection",
                "exactly one",
            ),
            (
                format!("[auth.oauth]\nresource = \"https://mcp.example.com/mcp#x\"\n{issuer}"),
                "auth.oauth",
                "fragment",
            ),
            (
                format!("{issuer}[auth.scopes]\nmcp = [\"a b\"]\n"),
                "auth.scopes",
                "not a scope",
            ),
            (
                {
                    let introspected = |iss: &str| {
                        format!(
                            "[[auth.oauth.issuers]]\nissuer = \"{iss}\"\ntenant = \"t\"\n\
                             [auth.oauth.issuers.introspection]\nclient_id = \"c\"\nclient_secret = \"s\"\n"
                        )
                    };
                    introspected("https://a.example.com") + &introspected("https://b.example.com")
                },
                "auth.oauth",
                "one issuer only",
            ),
            (
                format!("[auth.oauth]\njwks_min_refresh_ms = 0\n{issuer}"),
                "auth.oauth",
                "at least 1000",
            ),
        ];
        for (text, key, why) in refused {
            let e = options(&text).expect_err(why);
            assert_eq!(e.key, key, "{why}: {e}");
            assert!(e.reason.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn trace_context_is_kept_only_when_turned_on() {
        assert!(!options("").expect("empty").trace_context);
        assert!(
            options("[telemetry]\ntrace_context = true\n")
                .expect("on")
                .trace_context
        );
        assert!(
            options("[telemetry]\nsampling = 1\n").is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn otlp_export_is_configured_checked_and_keeps_trace_context() {
        let o = options(
            "[telemetry.otlp]\nendpoint = \"http://c:4317\"\nprotocol = \"grpc\"\nsampling_ratio = 0.25\nfollow_parent = false\ninterval_ms = 50\nmax_queue = 10\nheaders = { \"x-api-key\" = \"k\" }\n",
        )
        .expect("valid");
        assert!(o.trace_context, "exporting spans keeps the trace context");
        let t = o.otlp.expect("otlp");
        assert_eq!(t.otlp.protocol, snodo_otel::Protocol::Grpc);
        assert_eq!(t.otlp.endpoint, "http://c:4317");
        assert_eq!(t.sampling_ratio, 0.25);
        assert!(!t.follow_parent);
        assert_eq!(t.otlp.interval, std::time::Duration::from_millis(50));
        assert_eq!(t.otlp.max_queue, 10);
        assert_eq!(t.otlp.max_batch, 512, "the default");
        assert_eq!(t.otlp.headers, [("x-api-key".to_owned(), "k".to_owned())]);
        let off = options(
            "[telemetry]\ntrace_context = false\n[telemetry.otlp]\nendpoint = \"http://c/v1/traces\"\n",
        )
        .expect("valid");
        assert!(!off.trace_context, "an explicit false stands");
        assert!(options("").expect("empty").otlp.is_none(), "off by default");
        for (bad, key) in [
            ("endpoint = \"c:4317\"", "telemetry.otlp.endpoint"),
            ("endpoint = \"https://c:4317\"", "telemetry.otlp.endpoint"),
            (
                "endpoint = \"http://c\"\nprotocol = \"http/json\"",
                "telemetry.otlp.protocol",
            ),
            (
                "endpoint = \"http://c\"\nsampling_ratio = 1.5",
                "telemetry.otlp.sampling_ratio",
            ),
            (
                "endpoint = \"http://c\"\nmax_batch = 0",
                "telemetry.otlp.max_batch",
            ),
        ] {
            let e = options(&format!("[telemetry.otlp]\n{bad}\n"))
                .expect_err(bad)
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn admin_tokens_are_their_own_and_sign_in_names_a_configured_issuer() {
        let mcp =
            "[[auth.tokens]]\ntoken = \"mcp-token-0123456789\"\ntenant = \"a\"\nsubject = \"x\"\n";
        let admin = |token: &str, extra: &str| {
            format!("[[admin.tokens]]\ntoken = \"{token}\"\ntenant = \"a\"\n{extra}")
        };
        let o =
            options(&(mcp.to_owned() + &admin("ops-token-0123456789", "cross_tenant = true\n")))
                .expect("an admin token");
        assert_eq!(o.admin.tokens.len(), 1);
        let (_, p, cross) = &o.admin.tokens[0];
        assert_eq!(
            (p.tenant.as_str(), p.subject.as_str(), *cross),
            ("a", "operator", true)
        );
        assert_eq!(o.admin.session_ms, crate::admin::DEFAULT_SESSION_MS);
        let e = options(&(mcp.to_owned() + &admin("mcp-token-0123456789", ""))).unwrap_err();
        assert_eq!(e.key, "admin.tokens[0].token");
        assert!(e.reason.contains("auth.tokens"), "{e}");
        let e = options(&admin("short", "")).unwrap_err();
        assert_eq!(e.key, "admin.tokens[0].token");
        let e = options("[admin]\nsession_ms = 10\n").unwrap_err();
        assert_eq!(e.key, "admin.session_ms");
        let e = options("[admin.oauth]\nissuer = \"https://idp.example.com\"\nclient_id = \"c\"\n")
            .unwrap_err();
        assert_eq!(e.key, "admin.oauth.issuer");
        let o = options(
            "[[auth.oauth.issuers]]\nissuer = \"https://idp.example.com\"\ntenant = \"a\"\n\
             [admin.oauth]\nissuer = \"https://idp.example.com\"\nclient_id = \"console\"\n",
        )
        .expect("sign-in through a configured issuer");
        let sign_in = o.admin.sign_in.expect("sign-in");
        assert_eq!(
            (sign_in.client_id.as_str(), sign_in.client_secret),
            ("console", None)
        );
    }

    #[test]
    fn tokens_are_unique_and_name_someone() {
        let entry = |token: &str, tenant: &str, subject: &str| {
            format!(
                "[[auth.tokens]]\ntoken = \"{token}\"\ntenant = \"{tenant}\"\nsubject = \"{subject}\"\n"
            )
        };
        let t = "0123456789abcdef-token";
        let o = options(&(entry(t, "a", "x") + &entry("another-token-0123456789", "a", "y")))
            .expect("two distinct tokens");
        assert_eq!(o.tokens.len(), 2);
        let e = options(&(entry(t, "a", "x") + &entry(t, "b", "y"))).unwrap_err();
        assert_eq!(e.key, "auth.tokens[1].token");
        assert!(e.reason.contains("auth.tokens[0]"), "{e}");
        let e = options(&entry(t, "", "x")).unwrap_err();
        assert_eq!(e.key, "auth.tokens[0].tenant");
        let e = options(&entry(t, "a", "")).unwrap_err();
        assert_eq!(e.key, "auth.tokens[0].subject");
    }

    #[test]
    fn a_node_serving_several_tenants_gets_the_shared_defaults() {
        let entry = |token: &str, tenant: &str| {
            format!(
                "[[auth.tokens]]\ntoken = \"{token}\"\ntenant = \"{tenant}\"\nsubject = \"s\"\n"
            )
        };
        let one =
            options(&(entry("0123456789abcdef-one", "a") + &entry("0123456789abcdef-two", "a")))
                .expect("one tenant");
        assert_eq!(one.limits.task_creates_per_second, 10_000);
        assert_eq!(one.limits.stored_tasks_per_tenant, 1_000_000);
        assert_eq!(one.limits.stored_bytes_per_tenant, 100 << 30);
        assert_eq!(one.engine.max_tenant_memory_bytes, None);
        let two = entry("0123456789abcdef-one", "a") + &entry("0123456789abcdef-two", "b");
        let shared = options(&two).expect("two tenants");
        assert_eq!(
            (
                shared.limits.task_creates_per_second,
                shared.limits.task_create_burst
            ),
            (50, 1_000)
        );
        assert_eq!(shared.limits.stored_tasks_per_tenant, 100_000);
        assert_eq!(shared.limits.stored_bytes_per_tenant, 1 << 30);
        assert_eq!(shared.engine.max_tenant_memory_bytes, Some(512 << 20));
        let set = options(&format!(
            "{two}[limits]\ntask_creates_per_second = 500\nguest_memory_per_tenant_bytes = 1048576\nstored_tasks_per_tenant = 7\nstored_bytes_per_tenant = 4096\n"
        ))
        .expect("set");
        assert_eq!(set.limits.task_creates_per_second, 500, "a setting wins");
        assert_eq!(set.limits.stored_tasks_per_tenant, 7);
        assert_eq!(set.limits.stored_bytes_per_tenant, 4096);
        assert_eq!(set.engine.max_tenant_memory_bytes, Some(1 << 20));
    }

    #[test]
    fn http_limits_and_the_metrics_token() {
        let o = options("").expect("defaults");
        assert_eq!(o.http_limits, http::HttpLimits::default());
        assert_eq!(o.metrics_token, None);
        let o = options(
            "[http]\nfirst_byte_timeout_ms = 500\nheader_timeout_ms = 1500\nbody_timeout_ms = 2500\nidle_timeout_ms = 3500\nmax_connections = 7\nmax_connections_per_peer = 0\n[metrics]\ntoken = \"metrics-0123456789\"\n",
        )
        .expect("set");
        assert_eq!(
            o.http_limits,
            http::HttpLimits {
                first_byte_timeout: std::time::Duration::from_millis(500),
                header_timeout: std::time::Duration::from_millis(1500),
                body_timeout: std::time::Duration::from_millis(2500),
                idle_timeout: std::time::Duration::from_millis(3500),
                max_connections: 7,
                max_connections_per_peer: 0,
            }
        );
        assert_eq!(o.metrics_token.as_deref(), Some("metrics-0123456789"));
        for (text, key) in [
            ("[http]\nheader_timeout_ms = 0\n", "http.header_timeout_ms"),
            (
                "[http]\nfirst_byte_timeout_ms = 0\n",
                "http.first_byte_timeout_ms",
            ),
            ("[http]\nbody_timeout_ms = 0\n", "http.body_timeout_ms"),
            ("[http]\nidle_timeout_ms = 0\n", "http.idle_timeout_ms"),
            ("[http]\nmax_connections = 0\n", "http.max_connections"),
            (
                "[http]\nmax_connections = 100000000\n",
                "http.max_connections",
            ),
            ("[metrics]\ntoken = \"short\"\n", "metrics.token"),
            (
                "[metrics]\ntoken_env = \"SNODO_TEST_UNSET_METRICS_TOKEN\"\n",
                "metrics.token_env",
            ),
            ("[http]\nheader_timeout = 5\n", "http.header_timeout"),
        ] {
            let e = options(text).expect_err(text);
            assert_eq!(e.key, key, "{text}: {e}");
        }
    }

    #[test]
    fn relative_paths_resolve_against_the_files_directory() {
        let dir = tempfile::tempdir().expect("tmp");
        let conf = dir.path().join("conf");
        std::fs::create_dir(&conf).expect("mkdir");
        let file = conf.join("snodo.toml");
        std::fs::write(
            &file,
            r#"
cache_dir = "cache"
[store]
path = "state/tasks.redb"
[[components]]
path = "tools/examples.wasm"
[[components]]
path = "/opt/tools/fixtures.wasm"
[defaults]
grants = { dirs = [{ host = "shared", guest = "/shared" }] }
[tools.flaky]
grants = { dirs = [{ host = "../exports", guest = "/exports" }, { host = "/srv/abs", guest = "/abs" }] }
"#,
        )
        .expect("write");
        let o = Config::load(&file)
            .expect("load")
            .to_serve_options("snodo.toml")
            .expect("options");
        let base = std::path::absolute(&conf).expect("absolute");
        assert_eq!(
            o.components,
            vec![
                base.join("tools/examples.wasm"),
                PathBuf::from("/opt/tools/fixtures.wasm")
            ]
        );
        assert_eq!(o.store, StoreConfig::Redb(base.join("state/tasks.redb")));
        assert_eq!(o.cache_dir, Some(base.join("cache")));
        let dirs = |s: &ToolSettings| {
            s.grants
                .as_ref()
                .map(|g| g.dirs.iter().map(|d| d.host.clone()).collect::<Vec<_>>())
        };
        assert_eq!(dirs(&o.defaults), Some(vec![base.join("shared")]));
        assert_eq!(
            dirs(&o.tool_settings["flaky"]),
            Some(vec![base.join("../exports"), PathBuf::from("/srv/abs")])
        );
        // Parsed text has no file: paths stay as written (relative to the working directory).
        let o = options("[[components]]\npath = \"tools/x.wasm\"\n").expect("parse");
        assert_eq!(o.components, vec![PathBuf::from("tools/x.wasm")]);
    }

    #[test]
    fn outbound_grants_limits_and_secrets_reach_the_tool() {
        let dir = tempfile::tempdir().expect("dir");
        let secret_file = dir.path().join("github");
        std::fs::write(&secret_file, "ghp_from_a_file\n").expect("write");
        let text = format!(
            r#"
listen = "127.0.0.1:4100"
[outbound]
resolve = {{ "api.internal" = ["10.0.0.7"] }}
max_concurrent_per_tenant = 9
journal_task_bytes = 2000000
[secrets]
github = {{ file = "{}" }}
dev = {{ value = "dev-value", development = true }}
[defaults]
allowed_outbound_hosts = ["https://api.example.com"]
[tools.open_ticket]
allowed_outbound_hosts = ["https://api.github.com", "http://127.0.0.1:8080"]
outbound = {{ max_requests = 5, first_byte_timeout_ms = 2000 }}
inject = [{{ host = "https://api.github.com", header = "Authorization", value = "Bearer {{secret.github}}" }}]
secrets = ["dev"]
journal = false
"#,
            secret_file.display()
        );
        let o = options(&text).expect("parse");
        assert_eq!(o.engine.outbound.max_concurrent_per_tenant, 9);
        assert_eq!(
            o.engine.outbound.resolve.get("api.internal"),
            Some(&vec!["10.0.0.7".parse().expect("ip")])
        );
        assert_eq!(o.runner.journal_task_bytes, 2_000_000);
        // A journal too small for the largest journaled response is refused, naming it.
        let small = text.replace(
            "journal_task_bytes = 2000000",
            "journal_task_bytes = 1000000",
        );
        let e = options(&small).expect_err("no room");
        assert_eq!(e.key, "defaults.outbound.max_response_bytes", "{e}");
        assert!(e.reason.contains("outbound.journal_task_bytes"), "{e}");
        let defaults = o.defaults.grants.as_ref().and_then(|g| g.http.as_ref());
        assert_eq!(
            defaults.map(|g| g.allowed.clone()),
            Some(AllowList::parse(&["https://api.example.com"]).expect("list"))
        );
        let tool = &o.tool_settings["open_ticket"];
        let grants = tool.grants.as_ref().expect("grants");
        let http = grants.http.as_ref().expect("http");
        assert_eq!(http.limits.max_requests, 5);
        assert_eq!(http.limits.first_byte_timeout.as_millis(), 2000);
        assert_eq!(http.limits.max_response_bytes, 1 << 20, "the default stays");
        assert!(!http.journal);
        assert_eq!(http.inject.len(), 1);
        assert_eq!(http.inject[0].header, "authorization");
        assert_eq!(http.inject[0].value.expose(), "Bearer ghp_from_a_file");
        assert_eq!(
            grants.env,
            vec![("DEV".to_owned(), "dev-value".to_owned())],
            "a readable secret is an environment variable of the guest"
        );
        for secret in ["ghp_from_a_file", "dev-value"] {
            assert!(
                http.scrub.iter().any(|s| s.expose() == secret),
                "{secret} is scrubbed"
            );
        }
        assert!(
            !format!("{tool:?}").contains("ghp_from_a_file"),
            "secrets do not print"
        );
    }

    #[test]
    fn an_injection_no_allowed_entry_covers_is_refused_and_localhost_entries_are_noted() {
        let secret = "[secrets]\nk = { value = \"v\", development = true }\n";
        let inject = "inject = [{ host = \"https://api.example.org\", header = \"x-key\", \
                      value = \"{secret.k}\" }]\n";
        let e = options(&format!(
            "{secret}[tools.t]\nallowed_outbound_hosts = [\"https://api.example.com\"]\n{inject}"
        ))
        .expect_err("an injection nothing reaches");
        assert_eq!(e.key, "tools.t.inject[0].host", "{e}");
        assert!(
            e.reason.contains("\"https://api.example.com\"")
                && e.reason.contains("never be sent")
                && e.reason.contains("tools.t.allowed_outbound_hosts"),
            "{e}"
        );
        let e = options(&format!("{secret}[tools.t]\n{inject}")).expect_err("no list at all");
        assert!(e.reason.contains("(none)"), "{e}");
        // Covered by the list the tool inherits.
        options(&format!(
            "{secret}[defaults]\nallowed_outbound_hosts = [\"https://*.example.org\"]\n\
             [tools.t]\n{inject}"
        ))
        .expect("covered by a wildcard of the defaults");

        let config = Config::parse(
            "s.toml",
            "[defaults]\nallowed_outbound_hosts = [\"http://127.0.0.1:9000\"]\n\
             [tools.t]\nallowed_outbound_hosts = [\"http://localhost:8080\"]\n",
        )
        .expect("parse");
        let notes = config.notices();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("tools.t.allowed_outbound_hosts: \"http://localhost:8080\"")
                && notes[0].contains("not 127.0.0.1 or [::1]"),
            "{notes:?}"
        );
    }

    #[test]
    fn outbound_mistakes_name_their_key() {
        for (text, key, says) in [
            (
                "[tools.t.grants]\nnetwork = true\n",
                "tools.t.grants.network",
                "allowed_outbound_hosts",
            ),
            (
                "[tools.t]\nallowed_outbound_hosts = [\"api.example.com\"]\n",
                "tools.t.allowed_outbound_hosts",
                "scheme://host",
            ),
            (
                "[secrets]\nk = { value = \"x\" }\n",
                "secrets.k",
                "development",
            ),
            (
                "[secrets]\nk = { env = \"SNODO_TEST_SURELY_UNSET_VARIABLE\" }\n",
                "secrets.k",
                "not set",
            ),
            (
                "[tools.t]\ninject = [{ host = \"https://a.test\", header = \"X\", value = \"{secret.nope}\" }]\n",
                "tools.t.inject[0].value",
                "no secret \"nope\"",
            ),
            (
                "[tools.t]\ninject = [{ host = \"https://a.test\", header = \"bad header\", value = \"v\" }]\n",
                "tools.t.inject[0].header",
                "not a header name",
            ),
            (
                "[tools.t]\noutbound = { max_requests = 0 }\n",
                "tools.t.outbound.max_requests",
                "positive",
            ),
            (
                "[outbound]\njournal_task_bytes = 0\n",
                "outbound.journal_task_bytes",
                "positive",
            ),
        ] {
            let e = options(text).expect_err(text);
            assert_eq!(e.key, key, "{text}: {e}");
            assert!(e.reason.contains(says), "{text}: {e}");
        }
    }
}
