//! The engine's `View` and `Txn` over the SQLite tables inside one transaction, and the
//! mapping of SQLite's errors into the contract's.

use std::collections::HashSet;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode, OptionalExtension, ToSql, params};

use crate::model::{Task, TaskId, TaskView, Timestamp};

use super::super::engine::{Count, Head, Index, Kv, Record, Txn, View};
use super::super::sql::{self, ClaimCols};
use super::super::{StoreError, StoreResult};

/// The SQL that reads each ordered index: the partial indexes `tasks_due`, `tasks_expiry`
/// and `tasks_claimed` serve them (the comparison implies the index's `IS NOT NULL`).
pub(super) const DUE_UPTO: &str =
    "SELECT id FROM tasks WHERE due_at <= ?1 ORDER BY due_at, id LIMIT ?2";
pub(super) const EXPIRY_UPTO: &str =
    "SELECT id FROM tasks WHERE expires_at <= ?1 ORDER BY expires_at, id LIMIT ?2";
pub(super) const CLAIMED_UPTO: &str =
    "SELECT id FROM tasks WHERE claim_epoch <= ?1 ORDER BY claim_epoch, id LIMIT ?2";

const LOAD: &str = "SELECT body, work, claim_generation, claim_token, claim_epoch, \
     claim_expires_at, claim_owner FROM tasks WHERE id = ?1";
const HEAD: &str = "SELECT scope, expires_at FROM tasks WHERE id = ?1";
/// What a lookup reads: the task's body alone (the claim and the work are the runner's).
const BODY: &str = "SELECT body FROM tasks WHERE id = ?1";
const LIVE_COUNT: &str = "SELECT n FROM live WHERE scope = ?1";
const STORED_COUNT: &str = "SELECT n FROM stored WHERE scope = ?1";
const PINNED_COUNT: &str = "SELECT n FROM pinned WHERE digest = ?1";
const SET_PINNED: &str = "INSERT INTO pinned (digest, n) VALUES (?1, ?2) \
     ON CONFLICT (digest) DO UPDATE SET n = excluded.n";
const DROP_PINNED: &str = "DELETE FROM pinned WHERE digest = ?1";
const PINNED_TASKS: &str = "SELECT id FROM tasks WHERE live \
     AND json_extract(CAST(work AS TEXT), '$.work.componentDigest') = ?1 ORDER BY id LIMIT ?2";
const TALLY_COUNT: &str = "SELECT n FROM tally WHERE key = ?1";
const SET_TALLY: &str = "INSERT INTO tally (key, n) VALUES (?1, ?2) \
     ON CONFLICT (key) DO UPDATE SET n = excluded.n";
const DROP_TALLY: &str = "DELETE FROM tally WHERE key = ?1";
const TALLIES: &str = "SELECT key, n FROM tally WHERE key >= ?1 ORDER BY key";
const LISTING: &str = "SELECT key, tool FROM listing WHERE key >= ?1 AND key < ?2 \
     ORDER BY key DESC LIMIT ?3";
const LISTING_PUT: &str = "INSERT INTO listing (key, tool) VALUES (?1, ?2) \
     ON CONFLICT (key) DO UPDATE SET tool = excluded.tool";
const LISTING_DEL: &str = "DELETE FROM listing WHERE key = ?1";
const KV_GET: &str = "SELECT value FROM kv WHERE space = ?1 AND key = ?2";
const KV_SCAN_UP: &str = "SELECT key, value FROM kv WHERE space = ?1 ORDER BY key LIMIT ?2";
const KV_SCAN_DOWN: &str = "SELECT key, value FROM kv WHERE space = ?1 ORDER BY key DESC LIMIT ?2";
const KV_RANGE: &str =
    "SELECT key, value FROM kv WHERE space = ?1 AND key >= ?2 ORDER BY key LIMIT ?3";
const KV_PUT: &str = "INSERT INTO kv (space, key, value) VALUES (?1, ?2, ?3) \
     ON CONFLICT (space, key) DO UPDATE SET value = excluded.value";
const KV_DEL: &str = "DELETE FROM kv WHERE space = ?1 AND key = ?2";
const INSERT: &str = "INSERT INTO tasks (id, scope, status, live, due_at, expires_at, \
     claim_generation, claim_token, claim_epoch, claim_expires_at, claim_owner, body, work) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";
const UPDATE: &str = "UPDATE tasks SET scope = ?2, status = ?3, live = ?4, due_at = ?5, \
     expires_at = ?6, claim_generation = ?7, claim_token = ?8, claim_epoch = ?9, \
     claim_expires_at = ?10, claim_owner = ?11, body = ?12 WHERE id = ?1";
const DELETE: &str = "DELETE FROM tasks WHERE id = ?1";
const JOURNAL: &str = "SELECT seq, entry FROM journal WHERE task_id = ?1 ORDER BY seq";
const JOURNAL_PUT: &str = "INSERT INTO journal (task_id, seq, entry) VALUES (?1, ?2, ?3)";
const JOURNAL_DELETE: &str = "DELETE FROM journal WHERE task_id = ?1";
const SET_LIVE: &str =
    "INSERT INTO live (scope, n) VALUES (?1, ?2) ON CONFLICT (scope) DO UPDATE SET n = excluded.n";
const DROP_LIVE: &str = "DELETE FROM live WHERE scope = ?1";
const SET_STORED: &str = "INSERT INTO stored (scope, n) VALUES (?1, ?2) \
     ON CONFLICT (scope) DO UPDATE SET n = excluded.n";
const DROP_STORED: &str = "DELETE FROM stored WHERE scope = ?1";
const REVOKED: &str = "SELECT 1 FROM revoked WHERE key = ?1";
const REVOKE: &str = "INSERT INTO revoked (key, until) VALUES (?1, ?2) \
     ON CONFLICT (key) DO UPDATE SET until = max(until, excluded.until)";
const REVOKE_SWEEP: &str = "DELETE FROM revoked WHERE key IN \
     (SELECT key FROM revoked WHERE until <= ?1 ORDER BY until LIMIT ?2)";

/// The task rows as seen from one transaction: a read transaction (as a [`View`]) or the
/// writer's (as a [`Txn`]). `conn` must be inside that transaction for as long as this
/// lives.
pub(super) struct Rows<'c> {
    conn: &'c Connection,
    /// Tasks created in this transaction whose row is not written yet: their next `put`
    /// inserts the row (and the work body); every other `put` updates one.
    created: HashSet<TaskId>,
}

impl<'c> Rows<'c> {
    pub(super) fn new(conn: &'c Connection) -> Self {
        Self {
            conn,
            created: HashSet::new(),
        }
    }
}

/// The claim from its five columns: all set, or all null.
fn claim_cols(
    id: &TaskId,
    generation: Option<i64>,
    token: Option<i64>,
    epoch: Option<i64>,
    expires_at: Option<i64>,
    owner: Option<String>,
) -> StoreResult<Option<ClaimCols>> {
    match (generation, token, epoch, expires_at, owner) {
        (Some(generation), Some(token), Some(epoch), Some(expires_at), Some(owner)) => {
            Ok(Some(ClaimCols {
                generation,
                token,
                epoch,
                expires_at,
                owner,
            }))
        }
        (None, None, None, None, None) => Ok(None),
        _ => Err(StoreError::corrupt(format!(
            "task {id} has some of its claim columns set and others null"
        ))),
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl View for Rows<'_> {
    fn journal(&self, id: &TaskId) -> StoreResult<Vec<(u32, Vec<u8>)>> {
        let mut stmt = self.conn.prepare_cached(JOURNAL).map_err(backend)?;
        let rows = stmt
            .query_map(params![id.as_bytes().as_slice()], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(backend)?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, entry) = row.map_err(backend)?;
            let seq = u32::try_from(seq)
                .map_err(|_| StoreError::corrupt(format!("a journal position is {seq}")))?;
            out.push((seq, entry));
        }
        Ok(out)
    }

    fn load(&self, id: &TaskId) -> StoreResult<Option<Record>> {
        let mut stmt = self.conn.prepare_cached(LOAD).map_err(backend)?;
        let found = stmt
            .query_row(params![id.as_bytes().as_slice()], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<i64>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ))
            })
            .optional()
            .map_err(backend)?;
        let Some((body, work, generation, token, epoch, expires_at, owner)) = found else {
            return Ok(None);
        };
        let claim = claim_cols(id, generation, token, epoch, expires_at, owner)?;
        sql::decode_record(&body, &work, claim).map(Some)
    }

    fn load_view(&self, id: &TaskId) -> StoreResult<Option<TaskView>> {
        let mut stmt = self.conn.prepare_cached(BODY).map_err(backend)?;
        let body = stmt
            .query_row(params![id.as_bytes().as_slice()], |r| {
                r.get::<_, Vec<u8>>(0)
            })
            .optional()
            .map_err(backend)?;
        body.map(|b| sql::decode_view(&b)).transpose()
    }

    fn head(&self, id: &TaskId) -> StoreResult<Option<Head>> {
        let mut stmt = self.conn.prepare_cached(HEAD).map_err(backend)?;
        let found = stmt
            .query_row(params![id.as_bytes().as_slice()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<i64>>(1)?))
            })
            .optional()
            .map_err(backend)?;
        Ok(found.map(|(scope, expires_at)| sql::head_of(scope, expires_at)))
    }

    fn index_upto(&self, index: Index, upto: u64, limit: usize) -> StoreResult<Vec<TaskId>> {
        let query = match index {
            Index::Due => DUE_UPTO,
            Index::Expiry => EXPIRY_UPTO,
            Index::Claimed => CLAIMED_UPTO,
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut stmt = self.conn.prepare_cached(query).map_err(backend)?;
        let mut rows = stmt.query(params![to_i64(upto), limit]).map_err(backend)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(backend)? {
            let id = row.get_ref(0).map_err(backend)?;
            let ValueRef::Blob(bytes) = id else {
                return Err(StoreError::corrupt("a stored task id is not a blob"));
            };
            out.push(sql::id_of(bytes)?);
        }
        Ok(out)
    }

    fn count(&self, kind: Count, key: &str) -> StoreResult<u64> {
        let bytes_key;
        let (sql, key) = match kind {
            Count::Live => (LIVE_COUNT, key),
            Count::Stored => (STORED_COUNT, key),
            Count::Pinned => (PINNED_COUNT, key),
            Count::Tally => (TALLY_COUNT, key),
            // Beside the scope's stored-task count, under a key no scope has.
            Count::StoredBytes => {
                bytes_key = Count::bytes_key(key);
                (STORED_COUNT, bytes_key.as_str())
            }
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(backend)?;
        let n = stmt
            .query_row(params![key], |r| r.get::<_, i64>(0))
            .optional()
            .map_err(backend)?;
        match n {
            None => Ok(0),
            Some(n) => u64::try_from(n)
                .map_err(|_| StoreError::corrupt(format!("{key:?} has a negative {kind:?} count"))),
        }
    }

    fn pinned_tasks(&self, digest: &str, limit: usize) -> StoreResult<Vec<TaskId>> {
        let mut stmt = self.conn.prepare_cached(PINNED_TASKS).map_err(backend)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows = stmt.query(params![digest, limit]).map_err(backend)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(backend)? {
            let ValueRef::Blob(bytes) = row.get_ref(0).map_err(backend)? else {
                return Err(StoreError::corrupt("a stored task id is not a blob"));
            };
            out.push(sql::id_of(bytes)?);
        }
        Ok(out)
    }

    fn listing(&self, from: &[u8], to: &[u8], limit: usize) -> StoreResult<Vec<(Vec<u8>, String)>> {
        let mut stmt = self.conn.prepare_cached(LISTING).map_err(backend)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![from, to, limit], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    fn tallies(&self, prefix: &str) -> StoreResult<Vec<(String, u64)>> {
        let mut stmt = self.conn.prepare_cached(TALLIES).map_err(backend)?;
        let mut rows = stmt.query(params![prefix]).map_err(backend)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(backend)? {
            let key: String = row.get(0).map_err(backend)?;
            if !key.starts_with(prefix) {
                break;
            }
            let n: i64 = row.get(1).map_err(backend)?;
            out.push((key, u64::try_from(n).unwrap_or(0)));
        }
        Ok(out)
    }

    fn kv_get(&self, space: Kv, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let mut stmt = self.conn.prepare_cached(KV_GET).map_err(backend)?;
        stmt.query_row(params![space.tag(), key], |r| r.get::<_, Vec<u8>>(0))
            .optional()
            .map_err(backend)
    }

    fn kv_scan(
        &self,
        space: Kv,
        limit: usize,
        newest_first: bool,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let sql = if newest_first {
            KV_SCAN_DOWN
        } else {
            KV_SCAN_UP
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(backend)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![space.tag(), limit], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }

    fn kv_range(
        &self,
        space: Kv,
        from: &[u8],
        limit: usize,
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut stmt = self.conn.prepare_cached(KV_RANGE).map_err(backend)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![space.tag(), from, limit], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(backend)?;
        rows.collect::<Result<_, _>>().map_err(backend)
    }

    fn revoked(&self, key: &str) -> StoreResult<bool> {
        let mut stmt = self.conn.prepare_cached(REVOKED).map_err(backend)?;
        stmt.exists(params![key]).map_err(backend)
    }
}

/// `index_put` and `index_del` do nothing: the indexes are SQL indexes over the task's own
/// columns (`due_at`, `expires_at`, `claim_epoch`), which `put` writes from the task in the
/// same statement that writes the rest of it, and `remove` deletes with the row. The engine
/// always calls `put` (or `remove`) after moving a task's index entries.
impl Txn for Rows<'_> {
    fn put(&mut self, record: &Record) -> StoreResult<()> {
        let row = sql::row_of(&record.task)?;
        let id = row.id.as_slice();
        let claim = row.claim_columns();
        let columns: [&dyn ToSql; 12] = sql::task_columns!(id, row, claim);
        if self.created.remove(&record.task.id) {
            // Work never changes after creation: it is written here, once.
            let work = sql::encode_work(&record.work)?;
            let mut with_work = columns.to_vec();
            with_work.push(&work);
            let mut stmt = self.conn.prepare_cached(INSERT).map_err(backend)?;
            stmt.execute(&*with_work).map_err(backend)?;
        } else {
            let mut stmt = self.conn.prepare_cached(UPDATE).map_err(backend)?;
            let changed = stmt.execute(&columns[..]).map_err(backend)?;
            if changed != 1 {
                return Err(StoreError::corrupt(format!(
                    "task {} was saved as a stored task but has no row",
                    record.task.id
                )));
            }
        }
        Ok(())
    }

    fn remove(&mut self, id: &TaskId) -> StoreResult<()> {
        self.created.remove(id);
        let mut stmt = self.conn.prepare_cached(DELETE).map_err(backend)?;
        stmt.execute(params![id.as_bytes().as_slice()])
            .map_err(backend)?;
        let mut stmt = self.conn.prepare_cached(JOURNAL_DELETE).map_err(backend)?;
        stmt.execute(params![id.as_bytes().as_slice()])
            .map_err(backend)?;
        Ok(())
    }

    fn journal_put(&mut self, id: &TaskId, seq: u32, entry: &[u8]) -> StoreResult<()> {
        let mut stmt = self.conn.prepare_cached(JOURNAL_PUT).map_err(backend)?;
        match stmt.execute(params![id.as_bytes().as_slice(), i64::from(seq), entry]) {
            Ok(_) => Ok(()),
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) => {
                Err(super::super::engine::journal_taken(seq))
            }
            Err(e) => Err(backend(e)),
        }
    }

    fn created(&mut self, task: &Task) -> StoreResult<()> {
        self.created.insert(task.id);
        Ok(())
    }

    fn index_put(&mut self, _index: Index, _key: u64, _id: &TaskId) -> StoreResult<()> {
        Ok(())
    }

    fn index_del(&mut self, _index: Index, _key: u64, _id: &TaskId) -> StoreResult<()> {
        Ok(())
    }

    fn set_count(&mut self, kind: Count, key: &str, count: u64) -> StoreResult<()> {
        let bytes_key;
        let (set, drop, key) = match kind {
            Count::Live => (SET_LIVE, DROP_LIVE, key),
            Count::Stored => (SET_STORED, DROP_STORED, key),
            Count::Pinned => (SET_PINNED, DROP_PINNED, key),
            Count::Tally => (SET_TALLY, DROP_TALLY, key),
            Count::StoredBytes => {
                bytes_key = Count::bytes_key(key);
                (SET_STORED, DROP_STORED, bytes_key.as_str())
            }
        };
        if count == 0 {
            let mut stmt = self.conn.prepare_cached(drop).map_err(backend)?;
            stmt.execute(params![key]).map_err(backend)?;
        } else {
            let mut stmt = self.conn.prepare_cached(set).map_err(backend)?;
            stmt.execute(params![key, to_i64(count)]).map_err(backend)?;
        }
        Ok(())
    }

    fn listing_put(&mut self, key: &[u8], tool: &str) -> StoreResult<()> {
        let mut stmt = self.conn.prepare_cached(LISTING_PUT).map_err(backend)?;
        stmt.execute(params![key, tool]).map_err(backend)?;
        Ok(())
    }

    fn listing_del(&mut self, key: &[u8]) -> StoreResult<()> {
        let mut stmt = self.conn.prepare_cached(LISTING_DEL).map_err(backend)?;
        stmt.execute(params![key]).map_err(backend)?;
        Ok(())
    }

    fn kv_put(&mut self, space: Kv, key: &[u8], value: &[u8]) -> StoreResult<()> {
        let mut stmt = self.conn.prepare_cached(KV_PUT).map_err(backend)?;
        stmt.execute(params![space.tag(), key, value])
            .map_err(backend)?;
        Ok(())
    }

    fn kv_del(&mut self, space: Kv, key: &[u8]) -> StoreResult<()> {
        let mut stmt = self.conn.prepare_cached(KV_DEL).map_err(backend)?;
        stmt.execute(params![space.tag(), key]).map_err(backend)?;
        Ok(())
    }

    fn revoke_put(&mut self, key: &str, until: Timestamp) -> StoreResult<()> {
        let mut stmt = self.conn.prepare_cached(REVOKE).map_err(backend)?;
        stmt.execute(params![key, to_i64(until.as_millis())])
            .map_err(backend)?;
        Ok(())
    }

    fn revoke_sweep(&mut self, now: Timestamp, limit: usize) -> StoreResult<()> {
        let mut stmt = self.conn.prepare_cached(REVOKE_SWEEP).map_err(backend)?;
        stmt.execute(params![to_i64(now.as_millis()), limit as i64])
            .map_err(backend)?;
        Ok(())
    }
}

/// Maps a SQLite error into the contract's terms: damage is [`StoreError::Corrupt`],
/// everything else (I/O, a full disk, a lock held elsewhere) is
/// [`StoreError::Unavailable`]: the operation did not commit.
pub(super) fn backend(e: rusqlite::Error) -> StoreError {
    use rusqlite::Error as E;
    match &e {
        E::FromSqlConversionFailure(..)
        | E::IntegralValueOutOfRange(..)
        | E::InvalidColumnType(..)
        | E::Utf8Error(..) => StoreError::corrupt(format!("a stored value is unreadable: {e}")),
        _ => match code_of(&e) {
            Some(ErrorCode::DatabaseCorrupt) => {
                StoreError::corrupt(format!("the database file is damaged: {e}"))
            }
            Some(ErrorCode::NotADatabase) => StoreError::corrupt(format!(
                "the file is not a SQLite database, so not a snodo store: {e}"
            )),
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::unavailable(
                format!("the database is locked by another connection: {e}"),
            ),
            Some(ErrorCode::DiskFull) => StoreError::unavailable(format!("the disk is full: {e}")),
            _ => StoreError::unavailable(format!("SQLite failed: {e}")),
        },
    }
}

/// The SQLite result code behind `e`, if SQLite reported it.
pub(super) fn code_of(e: &rusqlite::Error) -> Option<ErrorCode> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.code),
        rusqlite::Error::SqlInputError { error, .. } => Some(error.code),
        _ => None,
    }
}
