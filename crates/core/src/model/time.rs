//! Store time: millisecond timestamps and the injectable clocks that produce them.
//!
//! The store owns the clock. Leases, `retry_at` and TTL expiry are all computed from the
//! store's clock, never from a runner's, so tests drive time with a [`ManualClock`] instead
//! of sleeping and several nodes agree on what "now" means.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as assigned by a store clock.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp `ms` milliseconds later, saturating at the end of time rather than
    /// wrapping (a wrapped lease expiry would be in the past and fence a live worker).
    pub fn plus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }
}

/// A source of store time.
pub trait Clock: Send + Sync + 'static {
    /// The current time. Implementations never go backwards within one process.
    fn now(&self) -> Timestamp;
}

/// Wall-clock time, made monotonic: if the system clock steps back, `now` holds at the
/// latest value it has returned until the wall clock catches up.
#[derive(Debug, Default)]
pub struct SystemClock {
    last: AtomicU64,
}

impl SystemClock {
    /// A new system clock.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let wall = wall_millis();
        let prev = self.last.fetch_max(wall, Ordering::AcqRel);
        Timestamp(prev.max(wall))
    }
}

/// The wall clock in milliseconds since the Unix epoch (0 before it), unsmoothed.
pub(crate) fn wall_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A clock that only moves when told to. Cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `start` until advanced.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start.0)),
        }
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_is_shared_between_clones() {
        let a = ManualClock::new(Timestamp(1_000));
        let b = a.clone();
        a.advance(250);
        assert_eq!(b.now(), Timestamp(1_250));
    }

    #[test]
    fn plus_saturates() {
        assert_eq!(Timestamp(u64::MAX - 1).plus_ms(10), Timestamp(u64::MAX));
    }

    #[test]
    fn system_clock_never_goes_back() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert!(
            a.0 > 1_600_000_000_000,
            "system clock reads a plausible date"
        );
    }
}
