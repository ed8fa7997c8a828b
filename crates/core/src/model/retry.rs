//! RetryPolicy: the exact list of delays an executor may consume by asking for a retry.

use serde::{Deserialize, Serialize};

/// The longest single delay a policy may hold: 7 days. A longer wait is almost certainly a
/// unit mistake (seconds given as milliseconds the other way round) and would outlive any
/// sensible task TTL.
pub const MAX_RETRY_DELAY_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The most entries a policy may hold.
pub const MAX_RETRY_ENTRIES: usize = 100;

/// An immutable, exact list of retry delays in milliseconds.
///
/// The n-th retry an executor requests waits `delays_ms()[n]`; once the list is used up the
/// next retry request fails the task instead. The list is persisted with the work descriptor,
/// so a restart never changes the schedule. [`RetryPolicy::fixed`] and
/// [`RetryPolicy::exponential`] only expand to such a list.
///
/// The default policy is empty: executor failures do not retry unless the tool opts in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "RawRetryPolicy", into = "RawRetryPolicy")]
pub struct RetryPolicy {
    delays_ms: Vec<u64>,
}

/// Why a retry policy was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryPolicyError {
    /// A delay was below zero.
    #[error("retry delay #{index} is negative ({value} ms); delays are milliseconds >= 0")]
    Negative {
        /// Position in the list.
        index: usize,
        /// The value given.
        value: i128,
    },
    /// A delay was longer than [`MAX_RETRY_DELAY_MS`].
    #[error(
        "retry delay #{index} is {value} ms; the longest allowed is {MAX_RETRY_DELAY_MS} ms (7 days)"
    )]
    TooLong {
        /// Position in the list.
        index: usize,
        /// The value given.
        value: i128,
    },
    /// More than [`MAX_RETRY_ENTRIES`] entries.
    #[error("a retry policy holds at most {MAX_RETRY_ENTRIES} delays, got {0}")]
    TooMany(usize),
    /// The constructor's arithmetic overflowed or its parameters make no sense.
    #[error("{0}")]
    Parameters(String),
    /// The stored form has a schema version this build does not know.
    #[error("retry policy version {0} is not supported (this build reads version 1)")]
    Version(u32),
}

impl RetryPolicy {
    /// A policy with exactly these delays.
    pub fn new<I, T>(delays_ms: I) -> Result<Self, RetryPolicyError>
    where
        I: IntoIterator<Item = T>,
        T: Into<i128>,
    {
        let mut out = Vec::new();
        for (index, d) in delays_ms.into_iter().enumerate() {
            let value: i128 = d.into();
            if index >= MAX_RETRY_ENTRIES {
                return Err(RetryPolicyError::TooMany(index + 1));
            }
            if value < 0 {
                return Err(RetryPolicyError::Negative { index, value });
            }
            if value > i128::from(MAX_RETRY_DELAY_MS) {
                return Err(RetryPolicyError::TooLong { index, value });
            }
            out.push(value as u64);
        }
        Ok(Self { delays_ms: out })
    }

    /// No retries: the first retry request fails the task.
    pub fn none() -> Self {
        Self::default()
    }

    /// `count` retries, each after `delay_ms`.
    pub fn fixed(delay_ms: u64, count: usize) -> Result<Self, RetryPolicyError> {
        if count > MAX_RETRY_ENTRIES {
            return Err(RetryPolicyError::TooMany(count));
        }
        Self::new(std::iter::repeat_n(delay_ms, count))
    }

    /// `count` retries starting at `initial_ms`, each delay `factor` times the previous one.
    ///
    /// Overflow and delays past [`MAX_RETRY_DELAY_MS`] are errors, never clamped: the
    /// persisted list is exactly what the caller asked for or nothing.
    pub fn exponential(
        initial_ms: u64,
        factor: u32,
        count: usize,
    ) -> Result<Self, RetryPolicyError> {
        if factor == 0 {
            return Err(RetryPolicyError::Parameters(
                "an exponential retry factor must be at least 1".into(),
            ));
        }
        if count > MAX_RETRY_ENTRIES {
            return Err(RetryPolicyError::TooMany(count));
        }
        let mut delays = Vec::with_capacity(count);
        let mut d = initial_ms;
        for i in 0..count {
            delays.push(d);
            if i + 1 < count {
                d = d.checked_mul(u64::from(factor)).ok_or_else(|| {
                    RetryPolicyError::Parameters(format!(
                        "exponential retry delays overflow at entry #{}",
                        i + 1
                    ))
                })?;
            }
        }
        Self::new(delays)
    }

    /// The exact delays, in order.
    pub fn delays_ms(&self) -> &[u64] {
        &self.delays_ms
    }

    /// The delay before retry number `retry_count` (0-based), or `None` when exhausted.
    pub fn delay_for(&self, retry_count: u32) -> Option<u64> {
        self.delays_ms.get(retry_count as usize).copied()
    }
}

/// The stored form. Signed so a negative delay in a configuration file or a hand-edited
/// record is reported as negative rather than as a type error.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRetryPolicy {
    version: u32,
    delays_ms: Vec<i128>,
}

impl TryFrom<RawRetryPolicy> for RetryPolicy {
    type Error = RetryPolicyError;
    fn try_from(raw: RawRetryPolicy) -> Result<Self, Self::Error> {
        if raw.version != 1 {
            return Err(RetryPolicyError::Version(raw.version));
        }
        RetryPolicy::new(raw.delays_ms)
    }
}

impl From<RetryPolicy> for RawRetryPolicy {
    fn from(p: RetryPolicy) -> Self {
        RawRetryPolicy {
            version: 1,
            delays_ms: p.delays_ms.into_iter().map(i128::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_expand_to_exact_lists() {
        assert_eq!(
            RetryPolicy::fixed(250, 3).map(|p| p.delays_ms().to_vec()),
            Ok(vec![250, 250, 250])
        );
        assert_eq!(
            RetryPolicy::exponential(100, 3, 4).map(|p| p.delays_ms().to_vec()),
            Ok(vec![100, 300, 900, 2_700])
        );
        assert_eq!(RetryPolicy::none().delay_for(0), None);
        let p = RetryPolicy::new([250u32, 1_000, 5_000]).unwrap();
        assert_eq!(p.delay_for(2), Some(5_000));
        assert_eq!(p.delay_for(3), None);
    }

    #[test]
    fn invalid_policies_are_rejected_with_a_reason() {
        assert_eq!(
            RetryPolicy::new([10i64, -5]),
            Err(RetryPolicyError::Negative {
                index: 1,
                value: -5
            })
        );
        let too_long = RetryPolicy::new([MAX_RETRY_DELAY_MS + 1]);
        assert!(matches!(
            too_long,
            Err(RetryPolicyError::TooLong { index: 0, .. })
        ));
        assert!(matches!(
            RetryPolicy::fixed(1, MAX_RETRY_ENTRIES + 1),
            Err(RetryPolicyError::TooMany(_))
        ));
        assert!(matches!(
            RetryPolicy::exponential(u64::MAX / 2, 4, 3),
            Err(RetryPolicyError::Parameters(_))
        ));
        // Does not overflow but passes the ceiling.
        assert!(matches!(
            RetryPolicy::exponential(1_000, 10, 10),
            Err(RetryPolicyError::TooLong { index: 6, .. })
        ));
        assert!(matches!(
            RetryPolicy::exponential(1, 0, 2),
            Err(RetryPolicyError::Parameters(_))
        ));
        let msg = RetryPolicy::new([-1i32]).unwrap_err().to_string();
        assert!(msg.contains("negative"), "{msg}");
    }

    #[test]
    fn stored_form_is_versioned_and_validated() {
        let p = RetryPolicy::new([250u32, 1_000]).unwrap();
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"version": 1, "delaysMs": [250, 1000]})
        );
        let back: RetryPolicy = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
        let neg = serde_json::from_value::<RetryPolicy>(
            serde_json::json!({"version": 1, "delaysMs": [-3]}),
        );
        assert!(neg.unwrap_err().to_string().contains("negative"));
        let newer = serde_json::from_value::<RetryPolicy>(
            serde_json::json!({"version": 2, "delaysMs": []}),
        );
        assert!(newer.is_err());
        let huge = serde_json::from_value::<RetryPolicy>(
            serde_json::json!({"version": 1, "delaysMs": [1e300]}),
        );
        assert!(huge.is_err());
    }
}
