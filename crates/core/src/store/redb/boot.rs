//! Opening a file as a store: the schema check and the upgrades of older files, the boot
//! epoch and the fence of the claims earlier boots made, the server key, and the tables
//! and counts that builds before them did not make, all in one durable commit.

use std::collections::HashMap;

use redb::{Database, Durability, ReadableTable, Table, TableHandle, WriteTransaction};

use crate::model::Clock;
use crate::store::engine::{self, Ctx, Head};
use crate::store::listing::{listing_keys, tally_key, tool_of};
use crate::store::record::decode;
use crate::store::{StoreError, StoreResult};

use super::codec::{backend, decode_head, encode_head};
use super::tables::WriteTables;
use super::{
    HEADS, JOURNAL, KV, LISTING, LIVE, META, PINNED, REDB_SCHEMA_VERSION, REVOKED, REVOKED_AT,
    SECRETS, STORED, TALLY, TASKS,
};

/// Checks the schema version, advances the boot epoch and fences old claims, in one
/// durable commit. Returns the new epoch, how many claims were fenced, and the server key.
pub(super) fn boot(
    db: &Database,
    clock: &dyn Clock,
    issuer: u64,
) -> StoreResult<(u64, usize, [u8; 32])> {
    let mut txn = db.begin_write().map_err(backend)?;
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    // Asked before anything below opens (and so creates) the tables.
    let has = |name: &str| -> StoreResult<bool> {
        Ok(txn
            .list_tables()
            .map_err(backend)?
            .any(|t| t.name() == name))
    };
    let (has_stored, has_pinned) = (has(STORED.name())?, has(PINNED.name())?);
    let has_listing = has(LISTING.name())?;
    let epoch = {
        let mut meta = txn.open_table(META).map_err(backend)?;
        settle_schema(&txn, &mut meta)?;
        let prev = meta.get("boot_epoch").map_err(backend)?.map(|v| v.value());
        let epoch = prev.unwrap_or(0) + 1;
        meta.insert("boot_epoch", epoch).map_err(backend)?;
        epoch
    };
    let fenced = {
        let mut tables = WriteTables::open(&txn)?;
        let ctx = Ctx {
            now: clock.now(),
            epoch,
            issuer,
        };
        engine::fence_previous_epochs(&mut tables, &ctx)?
    };
    let key = server_key(&txn)?;
    // Once the file is known to be a store: the tables builds before them did not
    // make, and the stored counts from the heads.
    drop(txn.open_table(JOURNAL).map_err(backend)?);
    drop(txn.open_table(REVOKED).map_err(backend)?);
    drop(txn.open_table(REVOKED_AT).map_err(backend)?);
    drop(txn.open_table(KV).map_err(backend)?);
    if !has_pinned {
        build_pinned(&txn)?;
    }
    if !has_listing {
        build_listing(&txn)?;
    }
    if !has_stored {
        build_stored(&txn)?;
    }
    txn.commit().map_err(backend)?;
    Ok((epoch, fenced, key))
}

/// Refuses a file of a newer build or of another program, upgrades one of an older build,
/// and stamps a new one with this build's version.
fn settle_schema(txn: &WriteTransaction, meta: &mut Table<'_, &str, u64>) -> StoreResult<()> {
    let version = meta
        .get("schema_version")
        .map_err(backend)?
        .map(|v| v.value());
    match version {
        Some(v) if v > REDB_SCHEMA_VERSION => {
            return Err(StoreError::IncompatibleSchema(
                format!(
                    "the store was written by a newer snodo (schema {v}); this build reads schema {REDB_SCHEMA_VERSION}. Upgrade snodo or point it at another data path"
                )
                .into(),
            ));
        }
        Some(v) if v < REDB_SCHEMA_VERSION => {
            if v < 2 {
                build_heads_and_live(txn)?;
            }
            // Version 2 wrote JSON records; version 3 writes compressed ones and reads
            // both, so its upgrade converts nothing.
            meta.insert("schema_version", REDB_SCHEMA_VERSION)
                .map_err(backend)?;
        }
        Some(_) => {}
        None => {
            // No schema version: a database nobody wrote to yet (new, or a first start
            // interrupted before its first commit) becomes a store; one that holds anything
            // else is some other program's, and is not touched.
            let foreign = txn
                .list_tables()
                .map_err(backend)?
                .map(|t| t.name().to_owned())
                .find(|name| name != META.name());
            if let Some(table) = foreign {
                return Err(StoreError::corrupt(format!(
                    "the file is a redb database but not a snodo store (it has a table {table:?} and no schema version)"
                )));
            }
            meta.insert("schema_version", REDB_SCHEMA_VERSION)
                .map_err(backend)?;
        }
    }
    Ok(())
}

/// Version 1 had no live-task counts and no heads: both are built from the stored tasks,
/// once.
fn build_heads_and_live(txn: &WriteTransaction) -> StoreResult<()> {
    let tasks = txn.open_table(TASKS).map_err(backend)?;
    let mut heads = txn.open_table(HEADS).map_err(backend)?;
    let mut live: HashMap<String, u64> = HashMap::new();
    for entry in tasks.iter().map_err(backend)? {
        let (k, v) = entry.map_err(backend)?;
        let rec = decode(v.value())?;
        if !rec.task.status.is_terminal() {
            *live.entry(rec.task.scope.as_str().to_owned()).or_insert(0) += 1;
        }
        heads
            .insert(k.value(), encode_head(&Head::of(&rec.task)).as_slice())
            .map_err(backend)?;
    }
    drop((tasks, heads));
    let mut counts = txn.open_table(LIVE).map_err(backend)?;
    for (scope, n) in &live {
        counts.insert(scope.as_str(), *n).map_err(backend)?;
    }
    Ok(())
}

/// The store's server key: the one kept in the file, or a new one kept from now on.
fn server_key(txn: &WriteTransaction) -> StoreResult<[u8; 32]> {
    let mut secrets = txn.open_table(SECRETS).map_err(backend)?;
    let stored = secrets
        .get("server_key")
        .map_err(backend)?
        .map(|v| <[u8; 32]>::try_from(v.value()));
    match stored {
        Some(Ok(k)) => Ok(k),
        Some(Err(_)) => Err(StoreError::corrupt("the server key has the wrong length")),
        None => {
            let k = crate::ids::random_bytes::<32>();
            secrets
                .insert("server_key", k.as_slice())
                .map_err(backend)?;
            Ok(k)
        }
    }
}

/// The live tasks per component digest, counted from the tasks.
fn build_pinned(txn: &WriteTransaction) -> StoreResult<()> {
    let tasks = txn.open_table(TASKS).map_err(backend)?;
    let mut counts: HashMap<String, u64> = HashMap::new();
    for entry in tasks.iter().map_err(backend)? {
        let (_, v) = entry.map_err(backend)?;
        let rec = decode(v.value())?;
        if let (false, Some(d)) = (rec.task.status.is_terminal(), rec.work.component_digest) {
            *counts.entry(d).or_insert(0) += 1;
        }
    }
    drop(tasks);
    let mut pinned = txn.open_table(PINNED).map_err(backend)?;
    // The fence may have opened the table; what it holds is rebuilt here.
    for (digest, n) in &counts {
        pinned.insert(digest.as_str(), *n).map_err(backend)?;
    }
    Ok(())
}

/// The listing entries and the tallies, computed from every task, then written: the fence
/// may have opened (and written to) the tables, so they are cleared first.
fn build_listing(txn: &WriteTransaction) -> StoreResult<()> {
    let tasks = txn.open_table(TASKS).map_err(backend)?;
    let mut entries = Vec::new();
    let mut tallies: HashMap<String, u64> = HashMap::new();
    for entry in tasks.iter().map_err(backend)? {
        let (_, v) = entry.map_err(backend)?;
        let rec = decode(v.value())?;
        let tool = tool_of(&rec.work).to_owned();
        for key in listing_keys(&rec.task) {
            entries.push((key, tool.clone()));
        }
        let tenant = rec.task.scope.tenant();
        *tallies
            .entry(tally_key(tenant, &tool, rec.task.status))
            .or_insert(0) += 1;
    }
    drop(tasks);
    let mut listing = txn.open_table(LISTING).map_err(backend)?;
    listing.retain(|_, _| false).map_err(backend)?;
    for (key, tool) in &entries {
        listing
            .insert(key.as_slice(), tool.as_bytes())
            .map_err(backend)?;
    }
    drop(listing);
    let mut tally = txn.open_table(TALLY).map_err(backend)?;
    tally.retain(|_, _| false).map_err(backend)?;
    for (key, n) in &tallies {
        tally.insert(key.as_str(), *n).map_err(backend)?;
    }
    Ok(())
}

/// The stored tasks per scope, counted from the heads.
fn build_stored(txn: &WriteTransaction) -> StoreResult<()> {
    let heads = txn.open_table(HEADS).map_err(backend)?;
    let mut counts: HashMap<String, u64> = HashMap::new();
    for entry in heads.iter().map_err(backend)? {
        let (_, v) = entry.map_err(backend)?;
        *counts
            .entry(decode_head(v.value())?.scope.as_str().to_owned())
            .or_insert(0) += 1;
    }
    drop(heads);
    let mut stored = txn.open_table(STORED).map_err(backend)?;
    // The fence may have opened the table; what it holds is rebuilt here.
    for (scope, n) in &counts {
        stored.insert(scope.as_str(), *n).map_err(backend)?;
    }
    Ok(())
}
