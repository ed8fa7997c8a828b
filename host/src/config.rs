//! The configuration file (TOML) of `snodo serve`, and its validation.
//!
//! Every section and key is optional; unknown keys are errors (a typo must not be silently
//! ignored). Errors name the file, the key and the reason.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model::{ExecutionLimits, Principal, RetryPolicy};
use crate::runner::RunnerOptions;
use crate::serve::{ServeOptions, StoreChoice, ToolSettings};
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
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `redb` (default) or `memory`.
    pub kind: Option<String>,
    /// The redb file (default `.snodo/tasks.redb`).
    pub path: Option<PathBuf>,
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
    /// Network access.
    #[serde(default)]
    pub network: bool,
}

/// `[defaults]` and `[tools.NAME]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSection {
    /// `sync`, `optional` or `required`: pins the task policy.
    pub mode: Option<String>,
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
    /// Reap interval; 0 disables reaping.
    pub reap_interval_ms: Option<u64>,
    /// Most concurrent attempts.
    pub max_concurrent: Option<usize>,
    /// Idle time before a parked guest is released.
    pub park_after_ms: Option<u64>,
    /// Grace period after cancellation.
    pub cancel_grace_ms: Option<u64>,
    /// Drain timeout at shutdown.
    pub drain_timeout_ms: Option<u64>,
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
}

fn mode(s: &str) -> Option<TaskMode> {
    match s {
        "sync" => Some(TaskMode::Sync),
        "optional" => Some(TaskMode::Optional),
        "required" => Some(TaskMode::Required),
        _ => None,
    }
}

impl Config {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: "-".into(),
            reason: format!("cannot read: {e}"),
        })?;
        Self::parse(&file, &text)
    }

    /// Parses `text` (named `file` in errors).
    pub fn parse(file: &str, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let reason = e.message().to_owned();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].lines().count().max(1);
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            ConfigError {
                file: file.into(),
                key: key_of(&reason),
                reason: format!("{reason}{at}"),
            }
        })
    }

    /// The serve options this configuration describes, with everything validated except
    /// what needs the components loaded (tool names are checked by `serve`).
    pub fn to_serve_options(&self, file: &str) -> Result<ServeOptions, ConfigError> {
        let err = |key: &str, reason: String| ConfigError {
            file: file.into(),
            key: key.into(),
            reason,
        };
        let data = PathBuf::from(".snodo");
        let mut opts = ServeOptions::new(
            data.clone(),
            self.components.iter().map(|c| c.path.clone()).collect(),
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
        opts.store = match self.store.kind.as_deref().unwrap_or("redb") {
            "redb" => StoreChoice::Redb(
                self.store
                    .path
                    .clone()
                    .unwrap_or_else(|| data.join("tasks.redb")),
            ),
            "memory" => StoreChoice::Memory,
            other => {
                return Err(err(
                    "store.kind",
                    format!("{other:?} is not a store; use \"redb\" or \"memory\""),
                ));
            }
        };
        if let Some(c) = &self.cache_dir {
            opts.cache_dir = Some(c.clone());
        }
        let defaults = tool_settings(&self.defaults, "defaults", &ToolSettings::default())
            .map_err(|(k, r)| err(&k, r))?;
        if let Some(ttl) = defaults.ttl_ms {
            opts.ttl_ms = if ttl == 0 { None } else { Some(ttl) };
        }
        if let Some(p) = defaults.poll_interval_ms {
            opts.poll_interval_ms = p;
        }
        opts.defaults = defaults.clone();
        for (name, section) in &self.tools {
            let settings = tool_settings(section, &format!("tools.{name}"), &defaults)
                .map_err(|(k, r)| err(&k, r))?;
            opts.tool_settings.insert(name.clone(), settings);
        }
        let r = &self.runner;
        let ms = std::time::Duration::from_millis;
        let base = RunnerOptions::default();
        opts.runner = RunnerOptions {
            recover: r.recover.unwrap_or(base.recover),
            lease: r.lease_ms.map_or(base.lease, ms),
            heartbeat: r.heartbeat_ms.map_or(base.heartbeat, ms),
            reap_interval: match r.reap_interval_ms {
                Some(0) => None,
                Some(v) => Some(ms(v)),
                None => base.reap_interval,
            },
            max_concurrent: r.max_concurrent.unwrap_or(base.max_concurrent),
            park_after: r.park_after_ms.map_or(base.park_after, ms),
            cancel_grace: r.cancel_grace_ms.map_or(base.cancel_grace, ms),
            drain_timeout: r.drain_timeout_ms.map_or(base.drain_timeout, ms),
            ..base
        };
        if opts.runner.lease.is_zero() || opts.runner.lease > std::time::Duration::from_secs(3_600)
        {
            return Err(err("runner.lease_ms", "a lease is 1..=3600000 ms".into()));
        }
        if opts.runner.heartbeat.is_zero() || opts.runner.heartbeat >= opts.runner.lease {
            return Err(err(
                "runner.heartbeat_ms",
                "the heartbeat must be positive and shorter than the lease".into(),
            ));
        }
        if opts.runner.max_concurrent == 0 {
            return Err(err(
                "runner.max_concurrent",
                "at least one attempt must be able to run".into(),
            ));
        }
        for (i, t) in self.auth.tokens.iter().enumerate() {
            let key = format!("auth.tokens[{i}]");
            let token = match (&t.token, &t.token_env) {
                (Some(t), None) => t.clone(),
                (None, Some(var)) => std::env::var(var).map_err(|_| {
                    err(
                        &format!("{key}.token_env"),
                        format!("the environment variable {var} is not set"),
                    )
                })?,
                _ => return Err(err(&key, "give exactly one of token and token_env".into())),
            };
            if token.len() < 16 {
                return Err(err(
                    &key,
                    "a bearer token must be at least 16 characters".into(),
                ));
            }
            if t.tenant.is_empty() {
                return Err(err(&format!("{key}.tenant"), "must not be empty".into()));
            }
            opts.tokens
                .push((token, Principal::new(&t.tenant, &t.subject)));
        }
        Ok(opts)
    }
}

/// Extracts a key name from a serde message such as "unknown field `foo`, expected ...".
fn key_of(reason: &str) -> String {
    reason
        .split('`')
        .nth(1)
        .map(str::to_owned)
        .unwrap_or_else(|| "-".into())
}

fn tool_settings(
    s: &ToolSection,
    key: &str,
    base: &ToolSettings,
) -> Result<ToolSettings, (String, String)> {
    let mut out = base.clone();
    if let Some(m) = &s.mode {
        out.mode = Some(mode(m).ok_or_else(|| {
            (
                format!("{key}.mode"),
                format!("{m:?} is not a mode; use \"sync\", \"optional\" or \"required\""),
            )
        })?);
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
    if let Some(l) = s.limits {
        let zero = |v: Option<u64>| v == Some(0);
        if zero(l.memory_bytes) || zero(l.deadline_ms) || zero(l.fuel) {
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
        });
    }
    if let Some(g) = &s.grants {
        out.grants = Some(WasiGrants {
            env: g.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            dirs: g
                .dirs
                .iter()
                .map(|d| DirGrant {
                    host: d.host.clone(),
                    guest: d.guest.clone(),
                    writable: d.writable,
                })
                .collect(),
            network: g.network,
        });
    }
    Ok(out)
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
        assert_eq!(o.store, StoreChoice::Memory);
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
        let e = Config::parse("s.toml", "[tools.x]\nretry = [-1]\n")
            .unwrap()
            .to_serve_options("s.toml")
            .unwrap_err();
        assert_eq!(e.key, "tools.x.retry");
        assert!(e.reason.contains("negative"), "{e}");
        let e = Config::parse("s.toml", "[tools.x]\nmode = \"sometimes\"\n")
            .unwrap()
            .to_serve_options("s.toml")
            .unwrap_err();
        assert_eq!(e.key, "tools.x.mode");
        let e = Config::parse("s.toml", "[store]\nkind = \"mongo\"\n")
            .unwrap()
            .to_serve_options("s.toml")
            .unwrap_err();
        assert_eq!(e.key, "store.kind");
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
        assert_eq!(e.key, "auth.tokens[0]");
        let e = Config::parse("s.toml", "listen = \"nope\"\n").unwrap_err();
        assert!(e.to_string().starts_with("s.toml: "), "{e}");
    }
}
