//! `[telemetry.otlp]` of the configuration file: where spans go, how, and which traces are
//! sampled, with its defaults and its rules.

use std::collections::BTreeMap;
use std::time::Duration;

use snodo_core::config::{SettingError, millis};

use crate::{OtlpConfig, Protocol};

/// `[telemetry.otlp]`: the exporter's settings as written (times in milliseconds, under the
/// names with `_ms`) and the sampling. Only `endpoint` has no default.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpSection {
    /// The collector: the traces URL for `http/protobuf`
    /// (`http://collector:4318/v1/traces`), the address for `grpc`
    /// (`http://collector:4317`). Required.
    pub endpoint: String,
    /// `http/protobuf` (the default) or `grpc`.
    pub protocol: Protocol,
    /// Headers (gRPC metadata) sent with every export, e.g. a collector's API key.
    pub headers: BTreeMap<String, String>,
    /// The share of traces recorded among those this node decides, 0 to 1 (default 1).
    pub sampling_ratio: f64,
    /// Whether a caller's `sampled` flag decides for its trace (default true).
    pub follow_parent: bool,
    /// Longest one export may take (`timeout_ms`, default 10 000).
    #[serde(rename = "timeout_ms", with = "millis")]
    pub timeout: Duration,
    /// How often queued spans are sent (`interval_ms`, default 1 000).
    #[serde(rename = "interval_ms", with = "millis")]
    pub interval: Duration,
    /// Most spans waiting to be sent; past it new spans are dropped and counted (default
    /// 8 192).
    pub max_queue: usize,
    /// Most spans in one export (default 512).
    pub max_batch: usize,
    /// `service.name` (default `snodo`).
    pub service_name: String,
}

impl Default for OtlpSection {
    fn default() -> Self {
        Self::new(String::new())
    }
}

impl OtlpSection {
    /// The defaults, sending to `endpoint`.
    pub fn new(endpoint: String) -> Self {
        let d = OtlpConfig::new(endpoint);
        Self {
            endpoint: d.endpoint,
            protocol: d.protocol,
            headers: BTreeMap::new(),
            sampling_ratio: 1.0,
            follow_parent: true,
            timeout: d.timeout,
            interval: d.interval,
            max_queue: d.max_queue,
            max_batch: d.max_batch,
            service_name: d.service_name,
        }
    }

    /// The rules of `[telemetry.otlp]`, each naming its key (relative to the section).
    pub fn check(&self) -> Result<(), SettingError> {
        if !self.endpoint.starts_with("http://") {
            return Err(SettingError::new(
                "endpoint",
                "must be an http:// URL: this build's exporters speak plain HTTP and gRPC to a collector beside the node, which forwards over TLS",
            ));
        }
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(SettingError::new(
                "sampling_ratio",
                format!("{} is not between 0 and 1", self.sampling_ratio),
            ));
        }
        for (key, zero) in [
            ("timeout_ms", self.timeout.is_zero()),
            ("interval_ms", self.interval.is_zero()),
            ("max_queue", self.max_queue == 0),
            ("max_batch", self.max_batch == 0),
        ] {
            if zero {
                return Err(SettingError::new(key, "must be above 0"));
            }
        }
        Ok(())
    }

    /// The exporter's settings (the node is filled in by the host).
    pub fn config(&self) -> OtlpConfig {
        let mut c = OtlpConfig::new(self.endpoint.clone());
        c.protocol = self.protocol;
        c.headers = self.headers.clone().into_iter().collect();
        c.timeout = self.timeout;
        c.interval = self.interval;
        c.max_queue = self.max_queue;
        c.max_batch = self.max_batch;
        c.service_name.clone_from(&self.service_name);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_exporters_and_the_rules_name_their_key() {
        let s = OtlpSection::new("http://c:4318/v1/traces".into());
        assert_eq!(s.check(), Ok(()));
        let c = s.config();
        let d = OtlpConfig::new("http://c:4318/v1/traces");
        assert_eq!(
            (c.timeout, c.max_queue, c.protocol),
            (d.timeout, d.max_queue, d.protocol)
        );
        assert_eq!(OtlpSection::default().check().unwrap_err().key, "endpoint");
        let zero = OtlpSection {
            max_batch: 0,
            ..s.clone()
        };
        assert_eq!(zero.check().unwrap_err().key, "max_batch");
        assert_eq!("grpc".parse::<Protocol>(), Ok(Protocol::Grpc));
        assert!("http/json".parse::<Protocol>().is_err());
    }
}
