//! An SQLite store's online backup: SQLite's backup API run inside one read transaction of
//! a reader connection (a WAL snapshot the writer never waits for), into a new file that is
//! then read back and counted against the same snapshot.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::super::backup::{Backup, FileKind, check_destination, check_layout, conclude};
use super::super::embedded::create_beside;
use super::*;

/// The rows of every table of `conn` (its own tables, not SQLite's), in its current
/// transaction.
fn rows(conn: &Connection) -> StoreResult<BTreeMap<String, u64>> {
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(backend)?;
    let mut out = BTreeMap::new();
    for name in names {
        // The names come from the file's own schema; quoted as identifiers all the same.
        let sql = format!("SELECT count(*) FROM \"{}\"", name.replace('"', "\"\""));
        let n: i64 = conn.query_row(&sql, [], |r| r.get(0)).map_err(backend)?;
        if n > 0 {
            out.insert(name, n as u64);
        }
    }
    Ok(out)
}

/// Copies the store a reader connection `conn` sees into a new file at `to`: the counts and
/// the copy come from one read transaction, so they describe one snapshot.
pub(super) fn backup(conn: &Connection, to: &Path, taken_at_ms: u64) -> StoreResult<Backup> {
    check_destination(to)?;
    let (file, temp) = create_beside(to, "backup.sqlite")?;
    drop(file);
    conn.execute_batch("BEGIN").map_err(backend)?;
    let copied = (|| {
        let taken = rows(conn)?;
        let mut dst = Connection::open(&temp).map_err(backend)?;
        {
            let b = rusqlite::backup::Backup::new(conn, &mut dst).map_err(backend)?;
            // Every page in one step, within the snapshot the transaction holds.
            loop {
                match b.step(-1).map_err(backend)? {
                    rusqlite::backup::StepResult::Done => break,
                    rusqlite::backup::StepResult::More => continue,
                    other => {
                        return Err(StoreError::unavailable(format!(
                            "the backup could not read the store ({other:?})"
                        )));
                    }
                }
            }
        }
        // One self-contained file: no write-ahead log beside it.
        dst.pragma_update(None, "journal_mode", "DELETE")
            .map_err(backend)?;
        dst.close().map_err(|(_, e)| backend(e))?;
        Ok(taken)
    })();
    let _ = conn.execute_batch("ROLLBACK");
    conclude(&temp, to, FileKind::Sqlite, taken_at_ms, copied, count_copy)
}

/// The rows of every table of the SQLite file at `path`, opened read-only, after SQLite's
/// integrity check; its layout version must be one this build reads.
pub(crate) fn count_copy(path: &Path) -> StoreResult<BTreeMap<String, u64>> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(backend)?;
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(backend)?;
    if check != "ok" {
        return Err(StoreError::corrupt(format!(
            "{}: the file failed SQLite's integrity check: {check}",
            path.display()
        )));
    }
    check_layout(
        path,
        meta_u64(&conn, "schema_version")?,
        SQLITE_SCHEMA_VERSION,
    )?;
    rows(&conn)
}
