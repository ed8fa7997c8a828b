//! Revocations: keys the server issued and withdrew, kept until their time passes.

use crate::model::Timestamp;
use crate::store::{StoreError, StoreResult};

use super::{Ctx, Txn};

/// The longest key a revocation takes.
pub(crate) const MAX_REVOKE_KEY: usize = 512;
/// How many lapsed revocations each new one removes: more than one, so lapsed ones never
/// pile up whatever the rate of new ones.
pub(crate) const REVOKE_SWEEP: usize = 4;

pub(crate) fn check_revoke_key(key: &str) -> StoreResult<()> {
    if key.is_empty() || key.len() > MAX_REVOKE_KEY {
        return Err(StoreError::invalid(format!(
            "a revocation key must be 1..={MAX_REVOKE_KEY} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

/// Records `key` as revoked until `until`, and clears a few revocations that have lapsed.
pub(crate) fn revoke(txn: &mut dyn Txn, ctx: &Ctx, key: &str, until: Timestamp) -> StoreResult<()> {
    check_revoke_key(key)?;
    txn.revoke_sweep(ctx.now, REVOKE_SWEEP)?;
    // Nothing to remember for what has lapsed already.
    if until > ctx.now {
        txn.revoke_put(key, until)?;
    }
    Ok(())
}
