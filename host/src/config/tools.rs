//! `[defaults]`, `[tools.NAME]` and `[secrets]`: what each tool may do and reach, over the
//! defaults every tool inherits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Config, ConfigError, config_error};
use crate::model::RetryPolicy;
use crate::serve::{ServeOptions, ToolSettings};
use crate::wasm::outbound::{AllowList, AllowedHost, HttpGrant, Injection, Secret, ToolOutbound};
use crate::wasm::{DirGrant, TaskMode, ToolLimits, WasiGrants};

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
    pub limits: Option<ToolLimits>,
    /// What the tool may reach.
    pub grants: Option<WasiGrants>,
    /// Where the tool may send HTTP requests (`https://api.example.com`,
    /// `https://*.example.com:443`, `http://127.0.0.1:8080`). None by default.
    pub allowed_outbound_hosts: Option<Vec<String>>,
    /// Limits on the tool's outbound requests.
    pub outbound: Option<ToolOutbound>,
    /// Headers the host adds to the tool's requests (secrets the guest never sees).
    pub inject: Option<Vec<InjectSection>>,
    /// Secrets the guest may read, as environment variables of the same name upper-cased
    /// (`github` → `GITHUB`).
    pub secrets: Option<Vec<String>>,
    /// Record responses in the task's journal and replay them (default true).
    pub journal: Option<bool>,
    /// Token claims the tool's guest is shown (of those `auth.oauth.forward_claims` takes).
    pub claims: Option<Vec<String>>,
    /// For a client that declared no tasks support: how long its call waits for the task
    /// before it is answered with a handle the built-in `task_result` tool follows (at most
    /// [`MAX_HANDLE_AFTER_MS`]). Off when unset.
    pub handle_after_ms: Option<u64>,
}

/// The longest `handle_after_ms`: ten minutes, past every client's own timeout.
const MAX_HANDLE_AFTER_MS: u64 = 600_000;

impl Config {
    /// `[secrets]`, each read from its source now: a missing variable or file is an error
    /// at start, not at the first request.
    pub(super) fn secrets(&self, file: &str) -> Result<BTreeMap<String, Secret>, ConfigError> {
        let mut out = BTreeMap::new();
        for (name, s) in &self.secrets {
            let key = format!("secrets.{name}");
            let err = |reason: String| config_error(file, &key, reason);
            let value = match (&s.env, &s.file, &s.value) {
                (Some(var), None, None) => self
                    .env_secret(var)
                    .ok_or_else(|| err(format!("the environment variable {var} is not set")))?,
                (None, Some(path), None) => {
                    let path = self.resolve(path);
                    self.file_secret(&path)
                        .map_err(|e| err(format!("cannot read {}: {e}", path.display())))?
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
}

/// Refuses a journaled tool whose largest response could never be recorded: the host
/// holds `max_response_bytes` plus [`JOURNAL_HEAD_BYTES`] of the task's journal before it
/// sends a request, so with less than that in `outbound.journal_task_bytes` every
/// journaled request of the tool would be refused unsent.
///
/// [`JOURNAL_HEAD_BYTES`]: crate::wasm::outbound::JOURNAL_HEAD_BYTES
pub(super) fn journal_room(file: &str, opts: &ServeOptions) -> Result<(), ConfigError> {
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

/// The settings of `[defaults]` (over `base`) or of one `[tools.NAME]` (over the defaults).
pub(super) fn tool_settings(
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
    if let Some(h) = s.handle_after_ms {
        if h > MAX_HANDLE_AFTER_MS {
            return Err((
                format!("{key}.handle_after_ms"),
                format!(
                    "at most {MAX_HANDLE_AFTER_MS} (ten minutes): a call waiting longer would \
                     outlast the client's own timeout, which the handle is there to beat"
                ),
            ));
        }
        out.handle_after_ms = Some(h);
    }
    if let Some(l) = s.limits {
        out.limits = Some(
            l.check()
                .map_err(|e| (format!("{key}.limits"), e.to_owned()))?,
        );
    }
    if let Some(g) = &s.grants {
        let http = out.grants.as_ref().and_then(|g| g.http.clone());
        let dirs = (g.dirs.iter())
            .map(|d| DirGrant {
                host: resolve(&d.host),
                ..d.clone()
            })
            .collect();
        out.grants = Some(WasiGrants {
            env: g.env.clone(),
            dirs,
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
        grant.allowed = AllowList::parse(hosts)
            .map_err(|e| (format!("{key}.allowed_outbound_hosts"), e.to_string()))?;
    }
    if let Some(o) = s.outbound {
        o.check()
            .map_err(|e| (format!("{key}.outbound.{}", e.key), e.reason))?;
        o.apply_to(&mut grant.limits);
        out.outbound = Some(o.over(out.outbound));
    }
    if let Some(j) = s.journal {
        grant.journal = j;
    }
    let secret = |name: &str, at: &str| secret_named(secrets, name, at);
    if let Some(inject) = &s.inject {
        injections(inject, key, &mut grant, secrets)?;
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

/// `inject = [...]` of a tool at `key`: the headers replace the inherited ones, and each
/// must be reachable through the tool's allow-list.
fn injections(
    inject: &[InjectSection],
    key: &str,
    grant: &mut HttpGrant,
    secrets: &BTreeMap<String, Secret>,
) -> Result<(), (String, String)> {
    grant.inject.clear();
    for (i, inj) in inject.iter().enumerate() {
        let at = format!("{key}.inject[{i}]");
        let host =
            AllowedHost::parse(&inj.host).map_err(|e| (format!("{at}.host"), e.to_string()))?;
        let header = inj.header.to_ascii_lowercase();
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if header.is_empty() || !header.bytes().all(token) {
            return Err((
                format!("{at}.header"),
                format!("{:?} is not a header name", inj.header),
            ));
        }
        let (value, used) = render_secrets(&inj.value, |name| {
            secret_named(secrets, name, &format!("{at}.value"))
        })?;
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
    Ok(())
}

/// The secret `name` of `[secrets]`, or the key `at` that asked for it and why it cannot.
fn secret_named(
    secrets: &BTreeMap<String, Secret>,
    name: &str,
    at: &str,
) -> Result<Secret, (String, String)> {
    secrets.get(name).cloned().ok_or_else(|| {
        (
            at.to_owned(),
            format!("no secret {name:?} is configured under [secrets]"),
        )
    })
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
