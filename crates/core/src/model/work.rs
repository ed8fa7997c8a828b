//! The Work descriptor: what a task does, persisted atomically with the task.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Invalid, Principal, RetryPolicy, TraceContext};

/// The schema version this build writes for [`Work`].
pub const WORK_SCHEMA_VERSION: u32 = 1;

/// The longest idempotency key, in bytes.
const MAX_IDEMPOTENCY_KEY_LEN: usize = 256;
/// The longest work type, in bytes.
const MAX_TYPE_LEN: usize = 128;

/// A versioned, JSON-safe description of one unit of durable work.
///
/// It is built once, when the task is created, and never changes: every attempt (first,
/// retried or recovered) receives the same descriptor. It holds only what is needed to
/// resume the work: never a bearer token, a transport handle or a request's `_meta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Work {
    /// [`WORK_SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// What kind of work this is, e.g. `snodo/tool-call`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The work's JSON input, e.g. `{"tool": "export", "arguments": {...}}`.
    pub input: Value,
    /// The identity external effects should be deduplicated by. Every attempt of the task
    /// sees the same key; within the MCP integration it equals the task id.
    pub idempotency_key: String,
    /// The exact retry schedule the executor may consume.
    #[serde(default)]
    pub retry_policy: RetryPolicy,
    /// Per-attempt resource limits.
    #[serde(default)]
    pub limits: ExecutionLimits,
    /// Who created the work (identity only, never a credential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Principal>,
    /// Content digest of the component that runs the work, when one is pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_digest: Option<String>,
    /// What the creator was granted, as the work's executor is shown it. `None` (and work
    /// written before grants were recorded): every scope, no claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<Grant>,
    /// Where the work sits in its caller's distributed trace: every attempt continues it.
    /// `None`: the caller sent no trace context (and work written before traces were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

/// The scopes and claims a principal held when it created the work: what its executor sees
/// on every attempt. Claims are the ones the operator passes to the tool; never a
/// credential.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// The granted scopes; `None`: every scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// The claims passed on (a JSON object).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub claims: serde_json::Map<String, Value>,
}

/// Resource limits for one attempt. `None` means the host's configured default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionLimits {
    /// Linear memory cap in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Table elements cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_elements: Option<u32>,
    /// Running time (not time parked waiting for input) before the attempt is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Optional fuel budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Wall-clock time of one execution, time in imports and waiting for a CPU turn
    /// included, before it is stopped. A task's attempt without one gets the runner's
    /// `attempt_wall_clock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_clock_ms: Option<u64>,
}

/// Why a work descriptor was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkError {
    /// Written by a newer build.
    #[error("work schema version {found} is newer than this build supports ({supported})")]
    UnsupportedVersion {
        /// The version found.
        found: u32,
        /// The newest this build reads.
        supported: u32,
    },
    /// A field broke a rule.
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

impl Work {
    /// A descriptor with the default (empty) retry policy and default limits.
    pub fn new(kind: impl Into<String>, input: Value, idempotency_key: impl Into<String>) -> Self {
        Self {
            schema_version: WORK_SCHEMA_VERSION,
            kind: kind.into(),
            input,
            idempotency_key: idempotency_key.into(),
            retry_policy: RetryPolicy::default(),
            limits: ExecutionLimits::default(),
            principal: None,
            component_digest: None,
            grant: None,
            trace: None,
        }
    }

    /// The same descriptor pinned to the component with this content digest.
    pub fn with_component_digest(mut self, digest: impl Into<String>) -> Self {
        self.component_digest = Some(digest.into());
        self
    }

    /// The same descriptor with `policy`.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry_policy = policy;
        self
    }

    /// The same descriptor with `limits`.
    pub fn with_limits(mut self, limits: ExecutionLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The same descriptor recording what its creator was granted.
    pub fn with_grant(mut self, grant: Grant) -> Self {
        self.grant = Some(grant);
        self
    }

    /// The same descriptor recording `principal`.
    pub fn with_principal(mut self, principal: Principal) -> Self {
        self.principal = Some(principal);
        self
    }

    /// The same descriptor continuing the trace `trace`.
    pub fn with_trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Checks every rule a stored descriptor must satisfy.
    pub fn validate(&self) -> Result<(), WorkError> {
        if self.schema_version > WORK_SCHEMA_VERSION || self.schema_version == 0 {
            return Err(WorkError::UnsupportedVersion {
                found: self.schema_version,
                supported: WORK_SCHEMA_VERSION,
            });
        }
        if self.kind.is_empty() || self.kind.len() > MAX_TYPE_LEN {
            return Err(Invalid::new(format!(
                "work type must be 1..={MAX_TYPE_LEN} bytes, got {}",
                self.kind.len()
            ))
            .into());
        }
        if self.idempotency_key.is_empty() || self.idempotency_key.len() > MAX_IDEMPOTENCY_KEY_LEN {
            return Err(Invalid::new(format!(
                "idempotency key must be 1..={MAX_IDEMPOTENCY_KEY_LEN} bytes, got {}",
                self.idempotency_key.len()
            ))
            .into());
        }
        let zero = |v: Option<u64>| v == Some(0);
        if zero(self.limits.memory_bytes)
            || zero(self.limits.deadline_ms)
            || zero(self.limits.fuel)
            || zero(self.limits.wall_clock_ms)
        {
            return Err(Invalid::new("execution limits must be positive when set").into());
        }
        if let Some(trace) = &self.trace {
            trace.validate().map_err(Invalid::new)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_form_is_stable() {
        let w = Work::new("snodo/tool-call", json!({"tool": "x"}), "k1")
            .with_retry_policy(RetryPolicy::fixed(10, 2).unwrap());
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(v["schemaVersion"], 1);
        assert_eq!(v["type"], "snodo/tool-call");
        assert_eq!(v["retryPolicy"]["delaysMs"], json!([10, 10]));
        let back: Work = serde_json::from_value(v).unwrap();
        assert_eq!(back, w);
    }

    /// Why `w` is refused, or nothing.
    fn refusal(w: &Work) -> String {
        w.validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn validation_names_the_field() {
        let mut w = Work::new("", json!({}), "k");
        assert!(refusal(&w).contains("work type"), "{w:?}");
        w.kind = "t".into();
        w.idempotency_key = "x".repeat(300);
        assert!(refusal(&w).contains("idempotency"), "{w:?}");
        w.idempotency_key = "k".into();
        w.schema_version = 9;
        assert!(matches!(
            w.validate(),
            Err(WorkError::UnsupportedVersion { found: 9, .. })
        ));
        w.schema_version = 1;
        w.limits.deadline_ms = Some(0);
        assert!(w.validate().is_err());
        w.limits.deadline_ms = Some(1);
        assert_eq!(w.validate(), Ok(()));
    }
}
