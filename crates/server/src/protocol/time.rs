//! RFC 3339 timestamps for the wire, from store milliseconds.

use snodo_core::model::Timestamp;

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
