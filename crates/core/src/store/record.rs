//! The bytes of a stored task record, for the stores that keep records as bytes (redb on
//! disk, the memory store in memory): the task and its work as versioned JSON, compressed
//! with zstd and a fixed dictionary.

use serde::{Deserialize, Serialize};

use crate::model::{Task, TaskView, Work};

use super::engine::Record;
use super::{StoreError, StoreResult};

/// The record layout version this build writes.
pub(crate) const RECORD_VERSION: u32 = 1;

#[derive(Serialize)]
pub(crate) struct RecordOut<'a> {
    v: u32,
    task: &'a Task,
    work: &'a Work,
}

#[derive(Deserialize)]
pub(crate) struct RecordIn {
    v: u32,
    task: Task,
    work: Work,
}

/// A record read for its task alone: the work is skipped over, never built.
#[derive(Deserialize)]
pub(crate) struct TaskIn {
    v: u32,
    task: Task,
}

/// A record read for what a client may see of its task: the work and the task's
/// runner-only fields are skipped over, never built.
#[derive(Deserialize)]
pub(crate) struct ViewIn {
    pub(crate) v: u32,
    pub(crate) task: TaskView,
}

#[derive(Deserialize)]
pub(crate) struct VersionProbe {
    v: u32,
}

/// The first byte of a compressed record: zstd over the record's JSON, with
/// [`DICTIONARY_1`]. A JSON record (as schema 2 wrote them) starts with `{`.
const ZSTD_DICT_1: u8 = 1;

/// The zstd level records are written with: with the dictionary a small record already
/// compresses to about a fifth of its JSON. zstd's fast mode (a negative level, literals
/// stored raw) compresses in half the time and decompresses in a quarter, but its records
/// are a fifth larger, and so is everything that holds them: the file, and redb's cache of
/// parked tasks' pages (0.75 KiB of heap per parked task against 0.49). It bought no
/// measurable task throughput and about 7% of a lookup's CPU, so the records stay small.
/// The level is not part of the format: a record written at any level reads the same.
#[cfg_attr(not(feature = "redb"), allow(dead_code))]
const ZSTD_LEVEL: i32 = 3;

/// A compressed record's JSON is at most this long; a longer length in a record is damage.
const MAX_RECORD_JSON: usize = 64 << 20;

/// A raw-content zstd dictionary: the keys and common values of a record, so a small
/// record compresses to the bytes that differ from it (about 200 bytes for a completed
/// tool call whose JSON is about 950). Records written with it can only be read with
/// exactly these bytes: a different dictionary needs a new first byte.
const DICTIONARY_1: &[u8] = br#"{"v":1,"task":{"id":"","scope":"default","status":"completed","statusMessage":"","createdAt":17,"lastUpdatedAt":17,"ttlMs":86400000,"pollIntervalMs":1000,"revision":2,"attempt":1,"retryCount":0,"retryAt":17,"inputs":{},"outcome":{"result":{"content":[{"text":"","type":"text"}],"isError":false},"structuredContent":{}},"generation":1,"recoveries":0,"claim":{"generation":1,"token":0,"epoch":1,"expiresAt":17,"owner":""},"clientCapabilities":{"elicitation":{"form":{}},"extensions":{"io.modelcontextprotocol/tasks":{}}},"events":[{"id":"g1-started","revision":1,"digest":1,"generation":1},{"id":"e-","revision":2,"digest":1,"generation":1}]},"work":{"schemaVersion":1,"type":"snodo/tool-call","input":{"arguments":{},"tool":""},"idempotencyKey":"","retryPolicy":{"version":1,"delaysMs":[]},"limits":{},"principal":{"tenant":"default","subject":"anonymous"},"componentDigest":"sha256:"}}"#;

thread_local! {
    // One context per thread (the writer, and each thread reads run on): loading the
    // dictionary once, not per record.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn zstd_error(what: &str, e: std::io::Error) -> StoreError {
    StoreError::corrupt(format!("{what}: {e}"))
}

/// `json` as a compressed record (see [`framed`]), its frame with a content checksum;
/// frames written without one, as earlier builds did, still read.
#[cfg_attr(not(feature = "redb"), allow(dead_code))]
fn compress(json: &[u8]) -> StoreResult<Vec<u8>> {
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let c = match &mut *cell {
            Some(c) => c,
            none => {
                let start = |e| zstd_error("cannot start the record compressor", e);
                let mut c = zstd::bulk::Compressor::with_dictionary(ZSTD_LEVEL, DICTIONARY_1)
                    .map_err(start)?;
                // Each frame carries a checksum of its content, which the decompressor
                // verifies: without it a flipped byte in a stored record often decodes to
                // different bytes of the same length (a third of single-byte flips did), and
                // a damaged record could then be read as a valid one. Four bytes a record.
                c.include_checksum(true).map_err(start)?;
                none.insert(c)
            }
        };
        let frame = c
            .compress(json)
            .map_err(|e| zstd_error("cannot compress a record", e))?;
        framed(json.len(), &frame)
    })
}

/// A compressed record's bytes: the first byte, the JSON's length (4 bytes, little
/// endian), the zstd frame.
#[cfg_attr(not(feature = "redb"), allow(dead_code))]
fn framed(json_len: usize, frame: &[u8]) -> StoreResult<Vec<u8>> {
    let len = u32::try_from(json_len)
        .map_err(|_| StoreError::invalid("a task record is larger than 4 GiB"))?;
    let mut out = Vec::with_capacity(5 + frame.len());
    out.push(ZSTD_DICT_1);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(frame);
    Ok(out)
}

/// The JSON of a stored record, whichever way it was written.
fn json_of(bytes: &[u8]) -> StoreResult<std::borrow::Cow<'_, [u8]>> {
    match bytes.split_first() {
        Some((b'{', _)) => Ok(std::borrow::Cow::Borrowed(bytes)),
        Some((&ZSTD_DICT_1, rest)) => {
            let (len, frame) = rest
                .split_first_chunk::<4>()
                .ok_or_else(|| StoreError::corrupt("a compressed task record is truncated"))?;
            let len = u32::from_le_bytes(*len) as usize;
            if len > MAX_RECORD_JSON {
                return Err(StoreError::corrupt(format!(
                    "a compressed task record claims {len} bytes"
                )));
            }
            DECOMPRESSOR.with(|cell| {
                let mut cell = cell.borrow_mut();
                let d = match &mut *cell {
                    Some(d) => d,
                    none => none.insert(
                        zstd::bulk::Decompressor::with_dictionary(DICTIONARY_1)
                            .map_err(|e| zstd_error("cannot start the record decompressor", e))?,
                    ),
                };
                let json = d
                    .decompress(frame, len)
                    .map_err(|e| zstd_error("unreadable compressed task record", e))?;
                if json.len() != len {
                    return Err(StoreError::corrupt(
                        "a compressed task record's length does not match its contents",
                    ));
                }
                Ok(std::borrow::Cow::Owned(json))
            })
        }
        Some((other, _)) => Err(StoreError::corrupt(format!(
            "a task record starts with byte {other:#04x}, which no layout uses"
        ))),
        None => Err(StoreError::corrupt("an empty task record")),
    }
}

#[cfg_attr(not(feature = "redb"), allow(dead_code))]
pub(crate) fn encode(record: &Record) -> StoreResult<Vec<u8>> {
    compress(&encode_json(record)?)
}

/// The record as plain JSON, uncompressed: what redb's schema 2 wrote, and what the memory
/// store keeps (compressing takes about a tenth of a task's CPU there, for bytes that
/// never leave memory). [`decode`] reads both forms.
pub(crate) fn encode_json(record: &Record) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(&RecordOut {
        v: RECORD_VERSION,
        task: &record.task,
        work: &record.work,
    })
    .map_err(|e| StoreError::invalid(format!("the task cannot be encoded: {e}")))
}

/// Decodes a record in one pass. Only a record that fails to decode, or decodes with
/// another layout version, is read a second time, for the version alone: a record of a
/// later layout must be refused as such, not as damage.
fn decode_as<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    version: impl Fn(&T) -> u32,
) -> StoreResult<T> {
    let json = json_of(bytes)?;
    let bytes = json.as_ref();
    let failed = match serde_json::from_slice::<T>(bytes) {
        Ok(r) if version(&r) == RECORD_VERSION => return Ok(r),
        Ok(_) => None,
        Err(e) => Some(e),
    };
    match serde_json::from_slice::<VersionProbe>(bytes) {
        Ok(p) if p.v != RECORD_VERSION => Err(StoreError::IncompatibleSchema(
            format!(
                "a task record has layout version {}; this build reads version {RECORD_VERSION}",
                p.v
            )
            .into(),
        )),
        _ => Err(StoreError::corrupt(match failed {
            Some(e) => format!("unreadable task record: {e}"),
            None => "unreadable task record".to_owned(),
        })),
    }
}

pub(crate) fn decode(bytes: &[u8]) -> StoreResult<Record> {
    let r: RecordIn = decode_as(bytes, |r: &RecordIn| r.v)?;
    Ok(Record {
        task: r.task,
        work: r.work,
    })
}

/// The task of an encoded record, without building its work.
pub(crate) fn decode_task(bytes: &[u8]) -> StoreResult<Task> {
    Ok(decode_as(bytes, |r: &TaskIn| r.v)?.task)
}

/// The view of an encoded record's task, without building anything else.
pub(crate) fn decode_view(bytes: &[u8]) -> StoreResult<TaskView> {
    Ok(decode_as(bytes, |r: &ViewIn| r.v)?.task)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small completed tool call's record, as the writer stores it.
    const RECORD: &[u8] = br#"{"v":1,"task":{"id":"019ade3f4c2a7b8e91f0c3d2a4b5e6f7","scope":"default","status":"completed","createdAt":1764686400123,"lastUpdatedAt":1764686400131,"ttlMs":86400000,"revision":2,"attempt":1,"retryCount":0,"inputs":{},"outcome":{"result":{"content":[{"type":"text","text":"succeeded on attempt 1"}],"isError":false}},"generation":1,"recoveries":0,"clientCapabilities":{},"events":[{"id":"g1-started","revision":1,"digest":12873459812734591234,"generation":1}]},"work":{"schemaVersion":1,"type":"snodo/tool-call","input":{"arguments":{"succeed_on_attempt":1},"tool":"flaky"},"idempotencyKey":"c3d2a4b5e6f7","retryPolicy":{"version":1,"delaysMs":[]},"limits":{},"principal":{"tenant":"default","subject":"anonymous"},"componentDigest":"sha256:7d1a"}}"#;

    #[test]
    fn a_compressed_record_reads_back_and_is_a_fraction_of_its_json() {
        let stored = compress(RECORD).expect("compress");
        assert_eq!(json_of(&stored).expect("read").as_ref(), RECORD);
        assert!(
            stored.len() * 3 < RECORD.len(),
            "{} bytes for {} of JSON",
            stored.len(),
            RECORD.len()
        );
    }

    #[test]
    fn every_flipped_byte_of_a_compressed_record_is_refused_never_misread() {
        let stored = compress(RECORD).expect("compress");
        for i in 0..stored.len() {
            let mut damaged = stored.clone();
            damaged[i] ^= 0x5a;
            match json_of(&damaged) {
                Err(StoreError::Corrupt(_)) => {}
                Err(e) => panic!("byte {i}: refused, but not as damage: {e}"),
                Ok(json) => panic!(
                    "byte {i}: read as {}",
                    String::from_utf8_lossy(json.as_ref())
                ),
            }
        }
    }

    #[test]
    fn a_frame_without_a_checksum_as_earlier_builds_wrote_still_reads() {
        let mut c =
            zstd::bulk::Compressor::with_dictionary(ZSTD_LEVEL, DICTIONARY_1).expect("compressor");
        let frame = c.compress(RECORD).expect("compress");
        let stored = framed(RECORD.len(), &frame).expect("framed");
        assert_eq!(json_of(&stored).expect("read").as_ref(), RECORD);
    }
}
