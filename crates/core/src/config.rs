//! What every layer's settings type shares: durations written in milliseconds, and the
//! error a settings check returns (the key, relative to the layer's section, and why).
//!
//! Each layer owns the serde type of its section of the configuration file
//! (`#[serde(default, deny_unknown_fields)]`, its defaults in its `Default`) and a `check`
//! returning a [`SettingError`]; the host prefixes the section's name.

/// A setting that does not hold: its key (dotted, relative to the section that checked it)
/// and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SettingError {
    /// The key, relative to the section.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

impl SettingError {
    /// The error at `key`.
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The same error with its key under `section` (`lease_ms` under `runner` is
    /// `runner.lease_ms`).
    pub fn under(self, section: &str) -> Self {
        let key = if self.key.is_empty() {
            section.to_owned()
        } else {
            format!("{section}.{}", self.key)
        };
        Self { key, ..self }
    }
}

/// A [`Duration`](std::time::Duration) as a whole number of milliseconds (`lease_ms =
/// 30000`), for `#[serde(with = "snodo_core::config::millis")]`.
pub mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// Reads the milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }

    /// A duration written in milliseconds and kept in whole seconds, a part of a second
    /// rounded up, for `#[serde(with = "snodo_core::config::millis::seconds")]`: for times
    /// compared with the whole seconds of token timestamps.
    pub mod seconds {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes the milliseconds.
        pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
            super::serialize(d, s)
        }

        /// Reads the milliseconds, rounded up to whole seconds.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
            u64::deserialize(d).map(|ms| Duration::from_secs(ms.div_ceil(1000)))
        }
    }

    /// An optional duration, for `#[serde(with = "snodo_core::config::millis::option")]`.
    pub mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes the milliseconds, or nothing.
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        /// Reads the milliseconds.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Option::<u64>::deserialize(d).map(|v| v.map(Duration::from_millis))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
    struct Timed {
        #[serde(with = "millis")]
        lease_ms: Duration,
        #[serde(default, with = "millis::option")]
        reap_ms: Option<Duration>,
        #[serde(default, with = "millis::seconds")]
        leeway_ms: Duration,
    }

    #[test]
    fn durations_are_milliseconds_and_errors_nest_under_their_section() {
        let t: Timed = serde_json::from_str(r#"{"lease_ms": 1500}"#).unwrap();
        assert_eq!(t.lease_ms, Duration::from_millis(1500));
        assert_eq!(t.reap_ms, None);
        let back = serde_json::to_value(&t).unwrap();
        assert_eq!(back["lease_ms"], 1500);
        let t: Timed = serde_json::from_str(r#"{"lease_ms": 1, "leeway_ms": 1001}"#).unwrap();
        assert_eq!(
            t.leeway_ms,
            Duration::from_secs(2),
            "whole seconds, rounded up"
        );
        let e = SettingError::new("lease_ms", "too long").under("runner");
        assert_eq!(e.to_string(), "runner.lease_ms: too long");
    }
}
