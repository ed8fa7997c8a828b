//! A redb store's online backup: every table copied under one read transaction (an MVCC
//! snapshot the writer never waits for) into a new file, then read back and counted.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTableMetadata, TableDefinition,
    TableHandle, WriteTransaction,
};

use super::super::backup::{Backup, FileKind, check_destination, check_layout, conclude};
use super::super::embedded::create_beside;
use super::*;

/// Calls `$f!(TABLE)` for every table of the layout: the one list a copy and a count share,
/// so a table added to the layout and not here fails every backup (see [`unknown_tables`]).
macro_rules! each_table {
    ($f:ident) => {
        [
            $f!(TASKS),
            $f!(DUE),
            $f!(EXPIRY),
            $f!(CLAIMED),
            $f!(LIVE),
            $f!(HEADS),
            $f!(JOURNAL),
            $f!(STORED),
            $f!(REVOKED),
            $f!(REVOKED_AT),
            $f!(PINNED),
            $f!(KV),
            $f!(LISTING),
            $f!(TALLY),
            $f!(META),
            $f!(SECRETS),
        ]
    };
}

/// Copies table `def` from the snapshot `read` into `write`; returns how many rows.
fn copy<K: redb::Key + 'static, V: redb::Value + 'static>(
    read: &ReadTransaction,
    write: &WriteTransaction,
    def: TableDefinition<'_, K, V>,
) -> StoreResult<(String, u64)> {
    let name = def.name().to_owned();
    let src = match read.open_table(def) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok((name, 0)),
        Err(e) => return Err(backend(e)),
    };
    let mut dst = write.open_table(def).map_err(backend)?;
    let mut n = 0;
    for entry in redb::ReadableTable::iter(&src).map_err(backend)? {
        let (k, v) = entry.map_err(backend)?;
        dst.insert(k.value(), v.value()).map_err(backend)?;
        n += 1;
    }
    Ok((name, n))
}

/// The rows of table `def` in `read` (0: the table does not exist).
fn count<K: redb::Key + 'static, V: redb::Value + 'static>(
    read: &ReadTransaction,
    def: TableDefinition<'_, K, V>,
) -> StoreResult<(String, u64)> {
    let name = def.name().to_owned();
    match read.open_table(def) {
        Ok(t) => Ok((name, t.len().map_err(backend)?)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok((name, 0)),
        Err(e) => Err(backend(e)),
    }
}

/// Tables in `read` the layout does not name: a copy would leave them out.
fn unknown_tables(read: &ReadTransaction) -> StoreResult<Vec<String>> {
    macro_rules! name {
        ($t:ident) => {
            $t.name()
        };
    }
    let known = each_table!(name);
    Ok(read
        .list_tables()
        .map_err(backend)?
        .map(|t| t.name().to_owned())
        .filter(|n| !known.contains(&n.as_str()))
        .collect())
}

/// Only tables with rows are reported: a table a store never wrote is not created.
fn nonzero(
    pairs: impl IntoIterator<Item = StoreResult<(String, u64)>>,
) -> StoreResult<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for p in pairs {
        let (name, n) = p?;
        if n > 0 {
            out.insert(name, n);
        }
    }
    Ok(out)
}

/// Copies `db` as of one snapshot into a new file at `to`, reads the copy back and counts
/// it against the snapshot, and only then links it at `to`.
pub(super) fn backup(db: &Database, to: &Path, taken_at_ms: u64) -> StoreResult<Backup> {
    check_destination(to)?;
    let read = db.begin_read().map_err(backend)?;
    let unknown = unknown_tables(&read)?;
    if !unknown.is_empty() {
        return Err(StoreError::corrupt(format!(
            "the store holds tables this build does not copy: {}",
            unknown.join(", ")
        )));
    }
    let (file, temp) = create_beside(to, "backup.redb")?;
    let copied = (|| {
        let copy_db = Database::builder()
            .create_with_backend(redb::backends::FileBackend::new(file).map_err(backend)?)
            .map_err(backend)?;
        let write = copy_db.begin_write().map_err(backend)?;
        macro_rules! copied {
            ($t:ident) => {
                copy(&read, &write, $t)
            };
        }
        let taken = nonzero(each_table!(copied))?;
        write.commit().map_err(backend)?;
        Ok(taken)
    })();
    drop(read);
    conclude(&temp, to, FileKind::Redb, taken_at_ms, copied, count_copy)
}

/// The rows of every table of the redb file at `path`, after a full integrity check (every
/// page's checksum); its layout version must be one this build reads.
pub(crate) fn count_copy(path: &Path) -> StoreResult<BTreeMap<String, u64>> {
    let mut db = Database::builder().open(path).map_err(backend)?;
    if !db.check_integrity().map_err(backend)? {
        return Err(StoreError::corrupt(format!(
            "{}: the file failed its integrity check",
            path.display()
        )));
    }
    let read = db.begin_read().map_err(backend)?;
    let version = match read.open_table(META) {
        Ok(t) => t.get("schema_version").map_err(backend)?.map(|v| v.value()),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(backend(e)),
    };
    check_layout(path, version, REDB_SCHEMA_VERSION)?;
    macro_rules! counted {
        ($t:ident) => {
            count(&read, $t)
        };
    }
    nonzero(each_table!(counted))
}
