//! What a deployer is configured with: `[deploy]` ([`DeploySettings`]), the per-tool
//! settings ([`ToolSettings`]), the part of a node's configuration deployments read
//! ([`DeployerSettings`]), and why a deployment was refused ([`DeployError`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use snodo_core::config::SettingError;

use snodo_core::model::RetryPolicy;
use snodo_core::store::StoreError;
use snodo_runner::ComponentPolicy;
use snodo_wasm::EngineConfig;

use crate::trust::{PublicKey, TrustPolicy};

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
    /// The outbound limits as the operator wrote them (`[defaults]` then `[tools.NAME]`,
    /// each key only where given). `grants` holds them resolved over the host's defaults;
    /// an upstream tool applies them over the gateway's own grant instead, whose
    /// defaults differ.
    pub outbound: Option<snodo_wasm::outbound::ToolOutbound>,
    /// The token claims its guest is shown.
    pub claims: Option<Vec<String>>,
    /// How long a call from a client without tasks waits before it is answered with a
    /// handle to its task (off when `None`).
    pub handle_after_ms: Option<u64>,
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

/// How deployments reach a serving node: the `[deploy]` section of the configuration
/// file (times in milliseconds, under the names with `_ms`). Every field has a default,
/// documented here and in docs/configuration.md.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeploySettings {
    /// How often the store is asked for a new deployment (`deploy.poll_ms`, default 2 000:
    /// the bound on how long a node serves an old deployment; on PostgreSQL an
    /// announcement usually brings it within milliseconds).
    #[serde(rename = "poll_ms", with = "snodo_core::config::millis")]
    pub poll: Duration,
    /// How long a component the current deployment no longer names stays stored once no
    /// live task is pinned to it, so that a rollback within it needs nothing re-stored
    /// (`deploy.retention_ms`, default 604 800 000: 7 days).
    #[serde(rename = "retention_ms", with = "snodo_core::config::millis")]
    pub retention: Duration,
    /// How often this node collects components past their retention
    /// (`deploy.collect_every_ms`, default 3 600 000: an hour).
    #[serde(rename = "collect_every_ms", with = "snodo_core::config::millis")]
    pub collect_every: Duration,
    /// The Ed25519 public keys components must be signed with, by name
    /// (`deploy.trusted_keys`; none by default: nothing checked).
    pub trusted_keys: BTreeMap<String, PublicKey>,
    /// Whether an unsigned component is refused (`deploy.require_signature`; default: yes
    /// when keys are given).
    pub require_signature: Option<bool>,
    /// A directory whose `.wasm` files are served beside the configured components: a
    /// changed, added or removed file is deployed at the next poll (`deploy.watch`, for
    /// development). The host resolves a relative path against the file's directory.
    pub watch: Option<PathBuf>,
}

impl Default for DeploySettings {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(2),
            retention: Duration::from_secs(7 * 24 * 3_600),
            collect_every: Duration::from_secs(3_600),
            trusted_keys: BTreeMap::new(),
            require_signature: None,
            watch: None,
        }
    }
}

impl DeploySettings {
    /// The trust policy the keys and `require_signature` make.
    pub fn trust(&self) -> TrustPolicy {
        let keys: Vec<(String, [u8; 32])> = (self.trusted_keys.iter())
            .map(|(name, key)| (name.clone(), key.0))
            .collect();
        let require = self.require_signature.unwrap_or(!keys.is_empty());
        TrustPolicy { keys, require }
    }

    /// The rules of `[deploy]`, each naming its key (relative to the section): the poll and
    /// collection intervals positive, and no signature required without a key to check it.
    pub fn check(&self) -> Result<(), SettingError> {
        for (key, every) in [
            ("poll_ms", self.poll),
            ("collect_every_ms", self.collect_every),
        ] {
            if every.is_zero() {
                return Err(SettingError::new(key, "must be at least 1"));
            }
        }
        if self.require_signature == Some(true) && self.trusted_keys.is_empty() {
            return Err(SettingError::new(
                "require_signature",
                "requires deploy.trusted_keys: no signature could be accepted",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: serde_json::Value) -> DeploySettings {
        serde_json::from_value(v).expect("parses")
    }

    #[test]
    fn deploy_settings_read_their_keys_and_check_them() {
        assert_eq!(parse(json!({})), DeploySettings::default());
        let key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
        let d = parse(json!({"poll_ms": 500, "retention_ms": 0, "trusted_keys": {"release": key}}));
        assert_eq!(d.poll, Duration::from_millis(500));
        assert_eq!(d.retention, Duration::ZERO, "retention may be zero");
        assert_eq!(d.trust().keys, [("release".to_owned(), [0; 32])]);
        assert!(d.trust().require, "keys given: signatures required");
        assert_eq!(d.check(), Ok(()));
        assert!(!parse(json!({"require_signature": false})).trust().require);
        for (v, key) in [
            (json!({"poll_ms": 0}), "poll_ms"),
            (json!({"collect_every_ms": 0}), "collect_every_ms"),
            (json!({"require_signature": true}), "require_signature"),
        ] {
            assert_eq!(parse(v).check().expect_err(key).key, key);
        }
        let e = serde_json::from_value::<DeploySettings>(json!({"trusted_keys": {"r": "AAAA"}}))
            .expect_err("a short key");
        assert!(e.to_string().contains("32 bytes"), "{e}");
        assert!(serde_json::from_value::<DeploySettings>(json!({"poll": 1})).is_err());
    }
}
