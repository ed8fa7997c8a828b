//! The operators' audit: records kept in [`Kv::Audit`] under [`AuditRecord::key`], so an
//! ascending walk reads newest first and the oldest sit at the end, where each append sweeps
//! a few past [`AUDIT_RETENTION_MS`].

use crate::model::{AUDIT_RETENTION_MS, AuditPage, AuditRecord, MAX_AUDIT_PAGE};
use crate::store::{StoreError, StoreResult};

use super::{Ctx, Kv, Txn, View};

/// The most expired records one append removes: the sweep keeps pace with the appends.
const SWEEP: usize = 8;

fn decode(bytes: &[u8]) -> StoreResult<AuditRecord> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::corrupt(format!("a stored audit record does not decode: {e}")))
}

/// Stamps `record` with the write's time and stores it; removes up to [`SWEEP`] records
/// older than the retention. Returns the record as stored.
pub(crate) fn append(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    mut record: AuditRecord,
) -> StoreResult<AuditRecord> {
    record.at = ctx.now;
    let body = serde_json::to_vec(&record)
        .map_err(|e| StoreError::invalid(format!("an audit record: {e}")))?;
    txn.kv_put(Kv::Audit, &record.key(), &body)?;
    let cutoff = ctx.now.as_millis().saturating_sub(AUDIT_RETENTION_MS);
    for (k, v) in txn.kv_scan(Kv::Audit, SWEEP, true)? {
        if decode(&v)?.at.as_millis() >= cutoff {
            break;
        }
        txn.kv_del(Kv::Audit, &k)?;
    }
    Ok(record)
}

/// The key a page's `next` cursor names (the hex of the last key read), or the refusal.
pub(crate) fn cursor_key(cursor: &str) -> StoreResult<Vec<u8>> {
    let bytes = cursor.as_bytes();
    if !bytes.len().is_multiple_of(2) || bytes.len() > 256 {
        return Err(StoreError::invalid("not an audit cursor"));
    }
    bytes
        .chunks(2)
        .map(
            |p| match (crate::ids::hex_digit(p[0]), crate::ids::hex_digit(p[1])) {
                (Some(a), Some(b)) => Ok(a << 4 | b),
                _ => Err(StoreError::invalid("not an audit cursor")),
            },
        )
        .collect()
}

/// The first key after `key`: where the page after the one ending at `key` starts.
pub(crate) fn after(key: &[u8]) -> Vec<u8> {
    let mut k = key.to_vec();
    k.push(0);
    k
}

/// Checks a page's limit.
pub(crate) fn check_limit(limit: usize) -> StoreResult<()> {
    if (1..=MAX_AUDIT_PAGE).contains(&limit) {
        Ok(())
    } else {
        Err(StoreError::invalid(format!(
            "an audit page holds 1 to {MAX_AUDIT_PAGE} records, asked {limit}"
        )))
    }
}

/// A page of at most `limit` records, newest first, starting after the cursor `from`.
pub(crate) fn page(view: &dyn View, from: Option<&str>, limit: usize) -> StoreResult<AuditPage> {
    check_limit(limit)?;
    let start = match from {
        Some(c) => after(&cursor_key(c)?),
        None => Vec::new(),
    };
    let rows = view.kv_range(Kv::Audit, &start, limit + 1)?;
    let more = rows.len() > limit;
    let mut records = Vec::with_capacity(limit);
    let mut last = None;
    for (k, v) in rows.into_iter().take(limit) {
        records.push(decode(&v)?);
        last = Some(k);
    }
    Ok(AuditPage {
        records,
        next: if more {
            last.map(|k| crate::ids::hex(&k))
        } else {
            None
        },
    })
}
