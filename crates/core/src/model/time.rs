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

    /// The instant in RFC 3339, UTC, to the millisecond ([`rfc3339`]).
    pub fn rfc3339(self) -> String {
        rfc3339(self)
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

/// This host's wall clock in milliseconds since the Unix epoch (0 before it), unsmoothed:
/// for what is not store time (how long to wait in place, a benchmark's schedule).
pub fn wall_millis() -> u64 {
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

/// `2025-11-25T10:30:00.123Z` for a store timestamp (UTC).
///
/// Written digit by digit: every task a lookup returns carries two of these, and the
/// formatting machinery cost more than the rest of building the reply.
pub fn rfc3339(t: Timestamp) -> String {
    let ms = t.as_millis();
    let secs = ms / 1_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let year = u64::try_from(y).unwrap_or(u64::MAX);
    if year > 9_999 {
        // Beyond four digits the layout widens; the slow path keeps it exact.
        return format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
            rem / 3_600,
            (rem % 3_600) / 60,
            rem % 60,
            ms % 1_000
        );
    }
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, u64::from(m));
    put(8, 2, u64::from(d));
    put(11, 2, rem / 3_600);
    put(14, 2, (rem % 3_600) / 60);
    put(17, 2, rem % 60);
    put(20, 3, ms % 1_000);
    // Every byte written above is an ASCII digit or separator.
    String::from_utf8_lossy(&out).into_owned()
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
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

    #[test]
    fn formats_known_instants() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_764_066_600_123, "2025-11-25T10:30:00.123Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (4_107_542_399_999, "2100-02-28T23:59:59.999Z"),
            // The last instant with a four-digit year, and the first without one.
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "10000-01-01T00:00:00.000Z"),
        ] {
            assert_eq!(rfc3339(Timestamp(ms)), text);
        }
    }
}
