//! Randomness, lowercase hex and the random ids built from them: the one place each is
//! written.
//!
//! Every random value Snodo makes (task ids, claim tokens, store keys, session ids, trace
//! and span ids) comes from the operating system's CSPRNG through [`fill_random`]: some of
//! them act as bearer capabilities, so none comes from a seeded generator. Every id, digest
//! and key Snodo writes as text is lowercase hex ([`hex`]); [`unhex`] and
//! [`unhex_array`] read exactly that form back (uppercase digits are refused, so one value
//! has one spelling).

use std::fmt;

/// Fills `buf` from the operating system's randomness source.
///
/// # Panics
/// If the operating system has no randomness source; nothing safe can be done without one.
pub fn fill_random(buf: &mut [u8]) {
    #[allow(clippy::expect_used)]
    getrandom::fill(buf).expect("the OS randomness source is unavailable");
}

/// `N` random bytes. Panics as [`fill_random`].
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    fill_random(&mut bytes);
    bytes
}

/// `N` random bytes, not all zero (an all-zero trace or span id is invalid). Panics as
/// [`fill_random`].
pub fn random_nonzero<const N: usize>() -> [u8; N] {
    loop {
        let bytes = random_bytes::<N>();
        if bytes.iter().any(|b| *b != 0) {
            return bytes;
        }
    }
}

/// A random `u64` (claim tokens, store instance ids). Panics as [`fill_random`].
pub fn random_u64() -> u64 {
    u64::from_le_bytes(random_bytes())
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Writes the lowercase hex digits of `bytes` into `out`, which must be twice as long
/// (the digits of `bytes[i]` at `out[2i]` and `out[2i + 1]`); extra room is left as it is.
pub fn hex_into(bytes: &[u8], out: &mut [u8]) {
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// The value of one lowercase hex digit.
pub fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// The bytes `text` spells in lowercase hex; `None` for an odd length or any other
/// character.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks_exact(2)
        .map(|p| Some((hex_digit(p[0])? << 4) | hex_digit(p[1])?))
        .collect()
}

/// The `N` bytes `text` spells in exactly `2 * N` lowercase hex digits.
pub fn unhex_array<const N: usize>(text: &str) -> Option<[u8; N]> {
    let b = text.as_bytes();
    if b.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (o, p) in out.iter_mut().zip(b.chunks_exact(2)) {
        *o = (hex_digit(p[0])? << 4) | hex_digit(p[1])?;
    }
    Some(out)
}

macro_rules! trace_id_type {
    ($(#[$doc:meta])* $name:ident, $len:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name([u8; $len]);

        impl $name {
            /// A fresh id: random bytes, not all zero.
            pub fn random() -> Self {
                Self(random_nonzero())
            }

            /// The id of these bytes (all zero is the invalid id, which a caller that
            /// parses ids never gets: [`Self::parse`] refuses it).
            pub fn from_bytes(bytes: [u8; $len]) -> Self {
                Self(bytes)
            }

            /// The raw bytes.
            pub fn to_bytes(self) -> [u8; $len] {
                self.0
            }

            /// Parses the hex form: exactly the lowercase digits, not all zero.
            pub fn parse(text: &str) -> Option<Self> {
                unhex_array(text)
                    .filter(|b: &[u8; $len]| b.iter().any(|x| *x != 0))
                    .map(Self)
            }
        }

        impl From<[u8; $len]> for $name {
            fn from(bytes: [u8; $len]) -> Self {
                Self(bytes)
            }
        }

        impl From<$name> for [u8; $len] {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut out = [0u8; $len * 2];
                hex_into(&self.0, &mut out);
                f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({self})", stringify!($name))
            }
        }
    };
}

trace_id_type!(
    /// A W3C trace id: 16 bytes, not all zero, written as 32 lowercase hex digits.
    TraceId,
    16
);

trace_id_type!(
    /// A W3C span id: 8 bytes, not all zero, written as 16 lowercase hex digits.
    SpanId,
    8
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_other_spellings() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00ab10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(unhex(""), Some(vec![]));
        for bad in ["0", "00AB10", "+f", "0g", "ab "] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
        assert_eq!(unhex_array::<2>("ab10"), Some([0xab, 0x10]));
        assert_eq!(unhex_array::<2>("ab1"), None);
        assert_eq!(unhex_array::<2>("ab1000"), None);
        let mut out = [0u8; 4];
        hex_into(&[0xfe, 0x01], &mut out);
        assert_eq!(&out, b"fe01");
    }

    #[test]
    fn trace_and_span_ids_are_random_nonzero_and_print_as_hex() {
        let span = SpanId::random();
        assert_ne!(span.to_bytes(), [0; 8]);
        assert_ne!(span, SpanId::random());
        let text = span.to_string();
        assert_eq!(text.len(), 16);
        assert_eq!(SpanId::parse(&text), Some(span));
        let trace = TraceId::from_bytes([0xab; 16]);
        assert_eq!(trace.to_string(), "ab".repeat(16));
        assert_eq!(
            format!("{trace:?}"),
            format!("TraceId({})", "ab".repeat(16))
        );
        assert_eq!(TraceId::parse(&"0".repeat(32)), None, "all zero is invalid");
        assert_eq!(SpanId::parse(&"AB".repeat(8)), None, "uppercase is refused");
        assert_ne!(random_u64(), random_u64());
        assert_ne!(random_nonzero::<1>(), [0]);
    }
}
