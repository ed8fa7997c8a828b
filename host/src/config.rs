//! The configuration of `snodo serve`: defaults, then the file (TOML), then the
//! environment (`SNODO_<SECTION>__<KEY>`), then the command line, into one [`Config`], and
//! its validation.
//!
//! Every section and key is optional; unknown keys are errors (a typo must not be silently
//! ignored). Errors name the file, the key and the reason, or the variable or the flag
//! that gave the value.

mod auth;
mod env;
mod sources;
mod tools;

pub use auth::{AuthSection, MetricsSection, TokenSection};
pub use tools::{InjectSection, RetrySection, SecretSection, ToolSection};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::budget::LimitsConfig;
use crate::deploy::DeploySettings;
use crate::http;
use crate::runner::RunnerOptions;
use crate::serve::{ServeOptions, ToolSettings};
use crate::store::{StoreConfig, StoreSection};
use crate::wasm::EngineConfig;
use crate::wasm::outbound::AllowedHost;
use tools::{journal_room, tool_settings};

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
    /// The data directory: the default home of a file store and of the compiled-component
    /// cache (default `.snodo` in the working directory).
    pub data_dir: Option<PathBuf>,
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
    pub runner: RunnerOptions,
    /// Authentication.
    #[serde(default)]
    pub auth: AuthSection,
    /// HTTP connection limits and timeouts.
    #[serde(default)]
    pub http: http::HttpLimits,
    /// The metrics endpoint.
    #[serde(default)]
    pub metrics: MetricsSection,
    /// Traces.
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// Per-tenant and global budgets.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// How the WebAssembly engine resets recycled instance slots.
    #[serde(default)]
    pub engine: EngineConfig,
    /// How outbound HTTP is sent.
    #[serde(default)]
    pub outbound: crate::wasm::outbound::OutboundConfig,
    /// Secrets tools may use, by name.
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretSection>,
    /// How deployments reach this node.
    #[serde(default)]
    pub deploy: DeploySettings,
    /// Operators: admin tokens and cross-tenant tenants.
    #[serde(default)]
    pub admin: crate::admin::AdminConfig,
    /// Recurring tool calls (docs/time.md).
    #[serde(default)]
    pub schedules: Vec<snodo_core::model::ScheduleDeclaration>,
    /// Webhooks: where deliveries may go and the subscriptions declared (docs/webhooks.md).
    #[serde(default)]
    pub webhooks: snodo_server::WebhookSettings,
    /// Where tasks past their TTL are kept before the reaper removes them (docs/operators.md).
    #[serde(default)]
    pub archive: Option<snodo_server::archive::ArchiveSettings>,
    /// Upstream MCP servers whose tools are served through the gateway (docs/gateway.md).
    #[serde(default)]
    pub upstreams: Vec<snodo_server::gateway::UpstreamSection>,
    /// Where the gateway component is, and how upstreams are listed.
    #[serde(default)]
    pub gateway: snodo_server::gateway::GatewaySettings,
    /// The directory relative paths in the file are resolved against: the file's own
    /// directory when loaded with [`Config::load`], the working directory otherwise.
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
    /// The keys given by a variable or a flag rather than by the file, and which.
    #[serde(skip)]
    origins: Vec<sources::Origin>,
    /// Secret values (tokens, client secrets, tools' secrets) are not read: a command
    /// that only reads the store or lists the tools needs none ([`Config::without_secret_values`]).
    #[serde(skip)]
    unread_secrets: bool,
}

/// The `file` of an error about a flag.
pub const COMMAND_LINE: &str = "the command line";

/// `[telemetry]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// Keep a caller's W3C trace context with the tasks it creates (default: false, or
    /// true when `[telemetry.otlp]` exports spans; a node of an earlier build refuses such
    /// a task, so turn it on once every node runs this build).
    pub trace_context: Option<bool>,
    /// Spans exported over OTLP; none without this table.
    pub otlp: Option<snodo_otel::OtlpSection>,
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

    /// `[store]`, its path resolved against [`Config::base_dir`].
    fn store_choice(
        &self,
        file: &str,
        data: &Path,
        node: &str,
    ) -> Result<StoreConfig, ConfigError> {
        let mut store = self.store.clone();
        store.path = store.path.map(|p| self.resolve(&p));
        store
            .to_config(data, node)
            .map_err(|e| setting_error(file, e.under("store")))
    }

    /// `path` as written in the file, resolved against [`Config::base_dir`].
    fn resolve(&self, path: &Path) -> PathBuf {
        match &self.base_dir {
            Some(base) if path.is_relative() => base.join(path),
            _ => path.to_path_buf(),
        }
    }

    /// The same configuration, its secret values left unread: each stands as a placeholder
    /// naming where it would come from, so a command that never uses them (`snodo tools`,
    /// `snodo deployments`, `snodo inspect`) runs without the variables and files that
    /// hold them. The store's own connection string is still read: it is how to reach it.
    pub fn without_secret_values(mut self) -> Self {
        self.unread_secrets = true;
        self
    }

    /// The secret value the environment variable `var` holds: `None` when it is not set;
    /// a placeholder when secret values are not read.
    fn env_secret(&self, var: &str) -> Option<String> {
        if self.unread_secrets {
            return Some(format!("(unread secret {var})"));
        }
        std::env::var(var).ok()
    }

    /// The secret value the file at `path` holds, trimmed; a placeholder when secret
    /// values are not read.
    fn file_secret(&self, path: &Path) -> std::io::Result<String> {
        if self.unread_secrets {
            return Ok(format!("(unread secret {})", path.display()));
        }
        Ok(std::fs::read_to_string(path)?.trim().to_owned())
    }

    /// The serve options this configuration describes, with everything validated except
    /// what needs the components loaded (tool names are checked by `serve`).
    /// An error about a value a variable or a flag gave names the variable or the flag.
    pub fn to_serve_options(&self, file: &str) -> Result<ServeOptions, ConfigError> {
        self.serve_options(file).map_err(|e| self.attributed(e))
    }

    fn serve_options(&self, file: &str) -> Result<ServeOptions, ConfigError> {
        let err = |key: &str, reason: String| config_error(file, key, reason);
        let data = self
            .data_dir
            .as_deref()
            .map_or_else(|| PathBuf::from(".snodo"), |d| self.resolve(d));
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
        opts.component_policy = self.runner.component_policy;
        opts.tokens = self.tokens(file)?;
        opts.admin = self.admin(file, &opts.tokens)?;
        if opts.admin.backup_dir.is_none() {
            // Backups through the server land beside the store file unless told otherwise.
            opts.admin.backup_dir = match &opts.store {
                crate::store::StoreConfig::Redb(p) | crate::store::StoreConfig::Sqlite(p) => {
                    std::path::absolute(p)
                        .ok()
                        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
                }
                _ => None,
            };
        }
        self.oauth_into(file, &mut opts)?;
        self.limits_into(file, &mut opts)?;
        opts.http_limits = self.http_limits(file)?;
        self.outbound_into(file, &mut opts)?;
        journal_room(file, &opts)?;
        opts.metrics_token = self.metrics_token(file)?;
        opts.otlp = self.otlp(file)?;
        opts.trace_context = self.telemetry.trace_context.unwrap_or(opts.otlp.is_some());
        opts.deploy = self.deploy_settings(file)?;
        opts.schedules = self.schedules(file)?;
        self.webhooks
            .check()
            .map_err(|e| setting_error(file, e.under("webhooks")))?;
        opts.webhooks = self.webhooks.clone();
        opts.archive = self.archive(file)?;
        opts.upstreams = self.upstreams(file, &secrets)?;
        self.gateway
            .check()
            .map_err(|e| setting_error(file, e.under("gateway")))?;
        opts.gateway = self.gateway.clone();
        opts.gateway.component = opts.gateway.component.as_deref().map(|p| self.resolve(p));
        Ok(opts)
    }

    /// `[[upstreams]]`, each checked, its bearer token read from `[secrets]`, no name twice.
    fn upstreams(
        &self,
        file: &str,
        secrets: &BTreeMap<String, crate::wasm::outbound::Secret>,
    ) -> Result<Vec<snodo_server::gateway::Upstream>, ConfigError> {
        let mut out: Vec<snodo_server::gateway::Upstream> = Vec::new();
        for (i, section) in self.upstreams.iter().enumerate() {
            let at = format!("upstreams[{i}]");
            let u =
                snodo_server::gateway::Upstream::new(section.clone(), |n| secrets.get(n).cloned())
                    .map_err(|e| setting_error(file, e.under(&at)))?;
            if out.iter().any(|o| o.section.name == u.section.name) {
                return Err(config_error(
                    file,
                    &format!("{at}.name"),
                    format!("{:?} names two upstreams", u.section.name),
                ));
            }
            // A served name must lead to one upstream: no prefix may begin another.
            let prefix = u.served_name("");
            if let Some(o) = out.iter().find(|o| {
                let theirs = o.served_name("");
                !prefix.is_empty()
                    && !theirs.is_empty()
                    && (prefix.starts_with(&theirs) || theirs.starts_with(&prefix))
            }) {
                return Err(config_error(
                    file,
                    &format!("{at}.prefix"),
                    format!(
                        "{prefix:?} and upstream {:?}'s {:?} begin one another: a served name \
                         could be either's; give them prefixes that do not",
                        o.section.name,
                        o.served_name("")
                    ),
                ));
            }
            out.push(u);
        }
        Ok(out)
    }

    /// `[archive]`, checked, its directory resolved against [`Config::base_dir`].
    fn archive(
        &self,
        file: &str,
    ) -> Result<Option<snodo_server::archive::ArchiveSettings>, ConfigError> {
        let Some(a) = &self.archive else {
            return Ok(None);
        };
        a.check()
            .map_err(|e| setting_error(file, e.under("archive")))?;
        let mut a = a.clone();
        a.directory = a.directory.as_deref().map(|d| self.resolve(d));
        Ok(Some(a))
    }

    /// `[[schedules]]`, each checked as far as it can be without the tools served (`serve`
    /// checks the tool and its arguments), with no name twice.
    fn schedules(&self, file: &str) -> Result<Vec<snodo_core::model::ScheduleSpec>, ConfigError> {
        let mut out: Vec<snodo_core::model::ScheduleSpec> = Vec::new();
        for (i, declared) in self.schedules.iter().enumerate() {
            let key = format!("schedules[{i}]");
            let spec = declared
                .spec()
                .map_err(|reason| config_error(file, &key, reason))?;
            if out.iter().any(|s| s.name == spec.name) {
                return Err(config_error(
                    file,
                    &key,
                    format!("a second schedule named {:?}", spec.name),
                ));
            }
            out.push(spec);
        }
        Ok(out)
    }

    /// `[deploy]`, checked, its watched directory resolved against [`Config::base_dir`].
    fn deploy_settings(&self, file: &str) -> Result<DeploySettings, ConfigError> {
        self.deploy
            .check()
            .map_err(|e| setting_error(file, e.under("deploy")))?;
        let mut deploy = self.deploy.clone();
        deploy.watch = deploy.watch.map(|w| self.resolve(&w));
        Ok(deploy)
    }

    /// `[runner]`, checked.
    fn runner_options(&self, file: &str) -> Result<RunnerOptions, ConfigError> {
        self.runner
            .check()
            .map_err(|e| setting_error(file, e.under("runner")))?;
        Ok(self.runner.clone())
    }

    /// `[limits]` and `[engine]`: the edge's budgets and the guests' memory and results,
    /// their defaults those of a node serving as many tenants as the tokens name.
    fn limits_into(&self, file: &str, opts: &mut ServeOptions) -> Result<(), ConfigError> {
        let under = |e: snodo_core::config::SettingError| setting_error(file, e.under("limits"));
        self.limits.check().map_err(under)?;
        let tenants = crate::serve::tenants_in(&opts.tokens);
        opts.limits = self.limits.tenant_limits(tenants);
        opts.engine = EngineConfig {
            outbound: opts.engine.outbound.clone(),
            ..self.engine.clone()
        };
        self.limits
            .apply_to(&mut opts.engine, tenants)
            .map_err(under)
    }

    /// `[http]`, checked.
    fn http_limits(&self, file: &str) -> Result<http::HttpLimits, ConfigError> {
        self.http
            .check()
            .map_err(|e| setting_error(file, e.under("http")))?;
        Ok(self.http)
    }

    /// `[telemetry.otlp]`, checked.
    fn otlp(&self, file: &str) -> Result<Option<crate::serve::TracingOptions>, ConfigError> {
        let Some(o) = &self.telemetry.otlp else {
            return Ok(None);
        };
        o.check()
            .map_err(|e| setting_error(file, e.under("telemetry.otlp")))?;
        Ok(Some(crate::serve::TracingOptions {
            otlp: o.config(),
            sampling_ratio: o.sampling_ratio,
            follow_parent: o.follow_parent,
        }))
    }

    /// `[outbound]`, checked, for the engine (its bundle resolved against
    /// [`Config::base_dir`]), and its journal budget for the runner, which hands it to each
    /// attempt.
    fn outbound_into(&self, file: &str, opts: &mut ServeOptions) -> Result<(), ConfigError> {
        self.outbound
            .check()
            .map_err(|e| setting_error(file, e.under("outbound")))?;
        let mut outbound = self.outbound.clone();
        outbound.ca_bundle = outbound.ca_bundle.map(|p| self.resolve(&p));
        opts.runner.journal_task_bytes = outbound.journal_task_bytes;
        opts.engine.outbound = outbound;
        Ok(())
    }
}

/// A layer's setting error at its key of `file`.
fn setting_error(file: &str, e: snodo_core::config::SettingError) -> ConfigError {
    config_error(file, &e.key, e.reason)
}

/// The error at `key` of `file`.
fn config_error(file: &str, key: &str, reason: String) -> ConfigError {
    ConfigError {
        file: file.into(),
        key: key.into(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Principal;
    use crate::wasm::TaskMode;
    use crate::wasm::outbound::{AllowList, ToolOutbound};

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

    fn env_options(text: &str, vars: &[(&str, &str)]) -> Result<ServeOptions, ConfigError> {
        let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        Config::parse_with_env("s.toml", text, vars)?.to_serve_options("s.toml")
    }

    #[test]
    fn every_key_can_come_from_the_environment_over_the_file() {
        let o = env_options(
            "[http]\nmax_connections = 4\nidle_timeout_ms = 7000\n[tools.flaky]\nttl_ms = 5000\n\
             [[auth.oauth.issuers]]\nissuer = \"https://idp.example.com\"\ntenant = \"t\"\n",
            &[
                ("SNODO_DEPLOY__POLL_MS", "500"),
                ("SNODO_LIMITS__SYNC_CALLS", "7"),
                ("SNODO_ADMIN__SESSION_MS", "60000"),
                ("SNODO_AUTH__OAUTH__LEEWAY_MS", "30000"),
                ("SNODO_HTTP__MAX_CONNECTIONS", "8"),
                ("SNODO_STORE__KIND", "memory"),
                ("SNODO_NODE__ID", "123"),
                ("SNODO_RUNNER__LEASE_MS", "20000"),
                ("SNODO_ADMIN__CROSS_TENANT", "[\"ops\", \"audit\"]"),
                ("SNODO_LISTEN", "127.0.0.1:4000"),
                ("SNODO_TOOLS__FLAKY__RETRY", "[250, 1000]"),
                ("SNODO_ENGINE__PAGEMAP_SCAN", "false"),
                ("SNODO_ENGINE__KEEP_RESIDENT_BYTES", "4096"),
                ("SNODO_URL", "http://127.0.0.1:1"),
                ("SNODO_ADMIN_TOKEN", "not a config key"),
            ],
        )
        .expect("valid");
        assert_eq!(o.http_limits.max_connections, 8, "the variable wins");
        assert_eq!(
            o.http_limits.idle_timeout.as_millis(),
            7000,
            "the file stays"
        );
        assert_eq!(o.store, StoreConfig::Memory);
        assert_eq!(o.node, "123", "a string key takes the text as is");
        assert_eq!(o.runner.lease, std::time::Duration::from_secs(20));
        assert_eq!(o.admin.cross_tenant, ["ops", "audit"]);
        assert_eq!(o.listen.port(), 4000);
        let flaky = &o.tool_settings["flaky"];
        assert_eq!(flaky.ttl_ms, Some(5000));
        assert_eq!(
            flaky.retry_policy.as_ref().map(|p| p.delays_ms().to_vec()),
            Some(vec![250, 1000])
        );
        assert!(!o.engine.pagemap_scan);
        assert_eq!(o.engine.keep_resident_bytes, 4096);
        assert_eq!(o.deploy.poll, std::time::Duration::from_millis(500));
        assert_eq!(o.limits.sync_calls, 7);
        assert_eq!(o.admin.session_ms, 60_000);
        let oauth = o.oauth.expect("oauth");
        assert_eq!(oauth.leeway, std::time::Duration::from_secs(30));
        assert_eq!(oauth.issuers.len(), 1, "the file's issuers stay");
    }

    #[test]
    fn environment_errors_name_the_variable() {
        let e = env_options("", &[("SNODO_HTTP__MAX_CONNECTIONS", "many")]).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            (env::SOURCE, "SNODO_HTTP__MAX_CONNECTIONS")
        );
        assert!(e.reason.contains("invalid type"), "{e}");
        let e = env_options("", &[("SNODO_HTTP__MAX_CONNECTIONS", "1.5")]).unwrap_err();
        assert_eq!(e.key, "SNODO_HTTP__MAX_CONNECTIONS");
        assert!(
            e.reason.contains("floating point"),
            "the typed reading's error: {e}"
        );
        let e = env_options("", &[("SNODO_HTTP__MAX_CONECTIONS", "8")]).unwrap_err();
        assert_eq!(e.key, "SNODO_HTTP__MAX_CONECTIONS");
        assert!(
            e.reason
                .contains("did you mean SNODO_HTTP__MAX_CONNECTIONS?"),
            "{e}"
        );
        let e = env_options("", &[("SNODO_RUNNR__LEASE_MS", "8")]).unwrap_err();
        assert_eq!(e.key, "SNODO_RUNNR__LEASE_MS");
        assert!(e.reason.contains("did you mean SNODO_RUNNER?"), "{e}");
        // A value that parses but breaks a rule is named by its variable too.
        let e = env_options("", &[("SNODO_HTTP__MAX_CONNECTIONS", "0")]).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            (env::SOURCE, "SNODO_HTTP__MAX_CONNECTIONS")
        );
        let e = env_options("", &[("SNODO_RUNNER__HEARTBEAT_MS", "60000")]).unwrap_err();
        assert_eq!(e.key, "SNODO_RUNNER__HEARTBEAT_MS");
        // A table the variable made that misses a required key is the variable's.
        let e = env_options("", &[("SNODO_ADMIN__OAUTH__CLIENT_ID", "console")]).unwrap_err();
        assert_eq!(e.key, "SNODO_ADMIN__OAUTH__CLIENT_ID");
        assert!(e.reason.contains("missing field `issuer`"), "{e}");
        // The file's own mistakes still name the file, with their line.
        let e = env_options(
            "[runnr]\nlease_ms = 1\n",
            &[("SNODO_HTTP__MAX_CONNECTIONS", "8")],
        )
        .unwrap_err();
        assert_eq!((e.file.as_str(), e.key.as_str()), ("s.toml", "runnr"));
        assert!(e.reason.contains("line 1"), "{e}");
        // Keys inside lists of tables are the file's alone.
        let e = env_options(
            "[[components]]\npath = \"a.wasm\"\n",
            &[("SNODO_COMPONENTS__PATH", "b")],
        )
        .unwrap_err();
        assert!(e.reason.contains("list of tables"), "{e}");
    }

    #[test]
    fn a_key_a_flag_gave_is_named_by_the_flag() {
        let mut c = Config::parse("s.toml", "").unwrap();
        for (i, token) in ["0123456789abcdef-one", "0123456789abcdef-one"]
            .iter()
            .enumerate()
        {
            c.auth.tokens.push(TokenSection {
                token: Some((*token).to_owned()),
                token_env: None,
                tenant: "acme".into(),
                subject: format!("s{i}"),
            });
            c.given_by_flag(&format!("auth.tokens[{i}]"), &format!("--token #{}", i + 1));
        }
        let e = c.to_serve_options(COMMAND_LINE).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.key.as_str()),
            (COMMAND_LINE, "--token #2")
        );
        assert!(e.reason.contains("unique"), "{e}");
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
        assert!(config.engine.pagemap_scan);
    }

    fn options(text: &str) -> Result<ServeOptions, ConfigError> {
        Config::parse("s.toml", text)?.to_serve_options("s.toml")
    }

    #[test]
    fn a_read_only_command_needs_no_secret_value() {
        let text = "[[auth.tokens]]\ntoken_env = \"SNODO_TEST_UNSET_TOKEN\"\ntenant = \"a\"\n\
                    subject = \"s\"\n[secrets.api]\nenv = \"SNODO_TEST_UNSET_SECRET\"\n\
                    [secrets.key]\nfile = \"/nonexistent/snodo-key\"\n";
        let e = options(text).unwrap_err();
        assert!(e.reason.contains("is not set"), "{e}");
        let o = Config::parse("s.toml", text)
            .expect("parse")
            .without_secret_values()
            .to_serve_options("s.toml")
            .expect("no secret value is read");
        assert_eq!(o.tokens.len(), 1);
        assert_eq!(o.tokens[0].0, "(unread secret SNODO_TEST_UNSET_TOKEN)");
    }

    #[test]
    fn upstreams_are_read_with_their_token_and_refused_by_their_key() {
        let secret = "[secrets.tickets]\nvalue = \"t0ken\"\ndevelopment = true\n";
        let o = options(&format!(
            "{secret}[[upstreams]]\nname = \"tickets\"\nurl = \"http://127.0.0.1:9000/mcp\"\n\
             confirm = [\"*\"]\nbearer = \"tickets\"\n[gateway]\ncomponent = \"gw.wasm\"\n\
             refresh_ms = 5000\n"
        ))
        .expect("options");
        assert_eq!(o.upstreams.len(), 1);
        let u = &o.upstreams[0];
        assert_eq!(u.bearer.as_ref().map(|s| s.expose()), Some("t0ken"));
        assert!(u.confirms("anything"));
        assert_eq!(o.gateway.refresh, std::time::Duration::from_secs(5));
        assert!(
            o.gateway
                .component
                .expect("a component")
                .ends_with("gw.wasm")
        );
        for (text, key) in [
            (
                "[[upstreams]]\nname = \"a\"\nurl = \"http://a/\"\nbearer = \"nope\"\n",
                "upstreams[0].bearer",
            ),
            (
                "[[upstreams]]\nname = \"a\"\nurl = \"http://a/\"\n\
                 [[upstreams]]\nname = \"a\"\nurl = \"http://b/\"\n",
                "upstreams[1].name",
            ),
            (
                "[[upstreams]]\nname = \"a\"\nurl = \"mailto:x\"\n",
                "upstreams[0].url",
            ),
            (
                "[gateway]\nlist_timeout_ms = 0\n",
                "gateway.list_timeout_ms",
            ),
        ] {
            let e = options(text).unwrap_err();
            assert_eq!(e.key, key, "{e}");
        }
    }

    #[test]
    fn an_archive_is_read_resolved_and_refused_by_its_key() {
        let c = Config::parse(
            "/etc/snodo/s.toml",
            "[archive]\ndirectory = \"archive\"\njournal = true\ninterval_ms = 5000\n",
        )
        .expect("parse");
        let mut c = c;
        c.base_dir = Some(PathBuf::from("/etc/snodo"));
        let o = c.to_serve_options("s.toml").expect("options");
        let a = o.archive.expect("an archive");
        assert_eq!(a.directory, Some(PathBuf::from("/etc/snodo/archive")));
        assert!(a.journal);
        assert_eq!(a.interval_ms, Some(5_000));
        assert_eq!(options("").expect("options").archive, None);
        let e = options("[archive]\njournal = true\n").unwrap_err();
        assert_eq!(e.key, "archive.directory", "{e}");
        let e = options("[archive.s3]\nbucket = \"B\"\n").unwrap_err();
        assert_eq!(e.key, "archive.s3.bucket", "{e}");
        let e = options("[archive]\ndirectory = \"a\"\nevery = 1\n").unwrap_err();
        assert!(e.to_string().contains("every"), "{e}");
    }

    #[test]
    fn webhooks_are_read_with_their_defaults_and_refused_by_their_key() {
        let o = options(
            "[webhooks]\nallowed_hosts = [\"https://hooks.example.com\"]\n\
             [[webhooks.subscriptions]]\nname = \"ops\"\ntenant = \"acme\"\n\
             url = \"https://hooks.example.com/in\"\nevents = [\"failed\"]\n",
        )
        .expect("options");
        assert_eq!(o.webhooks.subscriptions.len(), 1);
        assert_eq!(o.webhooks.retry_ms.len(), 7, "the default retry list");
        assert_eq!(o.webhooks.lease_ms, 60_000);
        let refused = [
            (
                "[webhooks]\nallowed_hosts = [\"ftp://x\"]\n",
                "webhooks.allowed_hosts",
                "",
            ),
            (
                "[webhooks]\nallowed_hosts = [\"https://a.example\"]\n\
                 [[webhooks.subscriptions]]\nname = \"ops\"\ntenant = \"acme\"\n\
                 url = \"https://b.example/in\"\n",
                "webhooks.subscriptions[0]",
                "add \"https://b.example\" to webhooks.allowed_hosts",
            ),
            (
                "[webhooks]\nallowed_hosts = [\"https://a.example\"]\n\
                 [[webhooks.subscriptions]]\nname = \"ops\"\ntenant = \"acme\"\n\
                 url = \"https://a.example/in\"\nevents = [\"done\"]\n",
                "webhooks.subscriptions[0]",
                "events: \"done\"",
            ),
            (
                "[webhooks]\nlease_ms = 1000\n",
                "webhooks.lease_ms",
                "longer than",
            ),
            (
                "[webhooks]\nretry_ms = [700000000]\n",
                "webhooks.retry_ms",
                "the longest allowed",
            ),
        ];
        for (text, key, reason) in refused {
            let e = options(text).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
            assert!(e.reason.contains(reason), "{text}: {e}");
        }
    }

    #[test]
    fn a_handle_wait_is_inherited_from_the_defaults_and_bounded() {
        let o = options("[defaults]\nhandle_after_ms = 30000\n[tools.a]\nttl_ms = 600000\n[tools.b]\nhandle_after_ms = 0\n")
            .expect("options");
        assert_eq!(o.defaults.handle_after_ms, Some(30_000));
        assert_eq!(o.tool_settings["a"].handle_after_ms, Some(30_000));
        assert_eq!(o.tool_settings["b"].handle_after_ms, Some(0));
        assert_eq!(
            options("").expect("options").defaults.handle_after_ms,
            None,
            "off by default"
        );
        let e = options("[tools.a]\nhandle_after_ms = 600001\n").unwrap_err();
        assert_eq!(e.key, "tools.a.handle_after_ms");
        assert!(e.reason.contains("at most 600000"), "{e}");
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
outbound = {{ connect_timeout_ms = 3000 }}
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
        assert_eq!(
            http.limits.connect_timeout.as_millis(),
            3000,
            "[defaults]'s"
        );
        // What was written is kept as written too (an upstream tool applies it over the
        // gateway's own limits): each key given at either depth, no other.
        let ms = |m| Some(std::time::Duration::from_millis(m));
        assert_eq!(
            tool.outbound,
            Some(ToolOutbound {
                connect_timeout: ms(3000),
                first_byte_timeout: ms(2000),
                max_requests: Some(5),
                ..ToolOutbound::default()
            })
        );
        assert_eq!(
            o.defaults.outbound,
            Some(ToolOutbound {
                connect_timeout: ms(3000),
                ..ToolOutbound::default()
            })
        );
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

    #[test]
    fn schedules_are_read_with_their_defaults_and_refused_by_their_index() {
        let o = options(
            "[[schedules]]\nname = \"nightly\"\ntool = \"report\"\ntenant = \"acme\"\n\
             cron = \"0 2 * * *\"\nzone = \"Europe/Paris\"\nmissed = \"one\"\n\
             arguments = { region = \"eu\" }\n\
             [[schedules]]\nname = \"poll\"\ntool = \"report\"\ntenant = \"acme\"\n\
             every_ms = 30000\ncatch_up = 5\n",
        )
        .expect("options");
        let [nightly, poll] = o.schedules.as_slice() else {
            panic!("two schedules: {:?}", o.schedules);
        };
        assert_eq!(nightly.subject, "scheduler", "the default subject");
        assert_eq!(nightly.missed, snodo_core::model::Missed::One);
        assert_eq!(nightly.arguments["region"], "eu");
        assert_eq!(nightly.cadence.describe(), "0 2 * * * in Europe/Paris");
        assert_eq!(poll.cadence.describe(), "every 30 s");
        assert_eq!((poll.catch_up, poll.missed_after_ms), (5, 60_000));
        let one = "[[schedules]]\nname = \"a\"\ntool = \"t\"\ntenant = \"acme\"\n";
        for (text, key, says) in [
            (one.to_string(), "schedules[0]", "give cron or every_ms"),
            (
                format!("{one}every_ms = 1\n"),
                "schedules[0]",
                "shorter than the least",
            ),
            (
                format!("{one}cron = \"* * * * *\"\nzone = \"Nowhere/Else\"\n"),
                "schedules[0]",
                "time zone",
            ),
            (
                format!("{one}every_ms = 1000\n{one}every_ms = 2000\n"),
                "schedules[1]",
                "a second schedule named \"a\"",
            ),
            (
                format!("{one}every_ms = 1000\nmissed = \"some\"\n"),
                "schedules[0].missed",
                "some",
            ),
        ] {
            let e = options(&text).expect_err(&text);
            assert_eq!(e.key, key, "{text}: {e}");
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }
}
