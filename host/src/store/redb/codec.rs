//! The bytes of the redb file: versioned task records, index keys and task heads.

use serde::{Deserialize, Serialize};

use crate::model::{Scope, Task, TaskId, Work};

use super::super::engine::{Head, Record};
use super::super::{StoreError, StoreResult};
use super::RECORD_VERSION;

pub(super) fn encode_head(h: &Head) -> Vec<u8> {
    let exp = h.expires_at.map_or(u64::MAX, |t| t.as_millis());
    let mut out = exp.to_be_bytes().to_vec();
    out.extend_from_slice(h.scope.as_str().as_bytes());
    out
}

pub(super) fn decode_head(bytes: &[u8]) -> StoreResult<Head> {
    let (exp, scope) = bytes
        .split_first_chunk::<8>()
        .ok_or_else(|| StoreError::corrupt("a task head is too short"))?;
    let exp = u64::from_be_bytes(*exp);
    let scope = std::str::from_utf8(scope)
        .map_err(|_| StoreError::corrupt("a task head's scope is not UTF-8"))?;
    Ok(Head {
        scope: Scope::new(scope),
        expires_at: (exp != u64::MAX).then_some(crate::model::Timestamp(exp)),
    })
}

#[derive(Serialize)]
pub(super) struct RecordOut<'a> {
    v: u32,
    task: &'a Task,
    work: &'a Work,
}

#[derive(Deserialize)]
pub(super) struct RecordIn {
    v: u32,
    task: Task,
    work: Work,
}

/// A record read for its task alone: the work is skipped over, never built.
#[derive(Deserialize)]
pub(super) struct TaskIn {
    v: u32,
    task: Task,
}

#[derive(Deserialize)]
pub(super) struct VersionProbe {
    v: u32,
}

pub(super) fn encode(record: &Record) -> StoreResult<Vec<u8>> {
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

pub(super) fn decode(bytes: &[u8]) -> StoreResult<Record> {
    let r: RecordIn = decode_as(bytes, |r: &RecordIn| r.v)?;
    Ok(Record {
        task: r.task,
        work: r.work,
    })
}

/// The task of an encoded record, without building its work.
pub(super) fn decode_task(bytes: &[u8]) -> StoreResult<Task> {
    Ok(decode_as(bytes, |r: &TaskIn| r.v)?.task)
}

pub(super) fn index_key(key: u64, id: &TaskId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&key.to_be_bytes());
    k[8..].copy_from_slice(id.as_bytes());
    k
}

pub(super) fn id_of_index_key(k: &[u8]) -> StoreResult<TaskId> {
    let bytes: [u8; 16] = k
        .get(8..24)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| StoreError::corrupt("an index key has the wrong length"))?;
    Ok(TaskId::from_bytes(bytes))
}

/// Maps a redb error into the contract's terms.
pub(super) fn backend(e: impl Into<redb::Error>) -> StoreError {
    let e: redb::Error = e.into();
    match &e {
        redb::Error::Corrupted(_) => StoreError::corrupt(&e),
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            StoreError::corrupt(format!("not a readable snodo store: {e}"))
        }
        redb::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            StoreError::corrupt(format!("the file is truncated: {e}"))
        }
        redb::Error::UpgradeRequired(v) => StoreError::IncompatibleSchema(
            format!("the file uses redb format {v}, which this build cannot read").into(),
        ),
        redb::Error::DatabaseAlreadyOpen => {
            StoreError::unavailable("the store file is already open in another process")
        }
        _ => StoreError::unavailable(&e),
    }
}
