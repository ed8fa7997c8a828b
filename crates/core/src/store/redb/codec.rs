//! The bytes of the redb file beside the records (`store/record.rs`): index keys and task
//! heads.

use crate::model::{Scope, TaskId};

use super::super::engine::Head;
use super::super::{StoreError, StoreResult};

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
