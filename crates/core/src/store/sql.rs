//! What the SQL adapters (PostgreSQL, SQLite) share: how a task record maps onto a row.
//!
//! A row keeps in columns what SQL must find or change without decoding anything: the
//! scope and expiry (authorization), the due time and expiry (the claim and reap queues),
//! liveness (counts) and the claim itself, so a heartbeat rewrites only the lease columns.
//! The rest of the task is one versioned JSON body with the claim taken out, and the work
//! descriptor, which never changes after creation, is a body of its own written once.

use serde::{Deserialize, Serialize};

use crate::model::{Claim, Scope, Task, TaskId, Timestamp, Work};

use super::engine::{Head, Record};
use super::{StoreError, StoreResult};

/// The body layout version this build writes and reads.
pub(crate) const BODY_VERSION: u32 = 1;

/// A task's columns, as the SQL adapters write them.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) id: [u8; 16],
    pub(crate) scope: String,
    pub(crate) status: &'static str,
    pub(crate) live: bool,
    pub(crate) due_at: Option<i64>,
    pub(crate) expires_at: Option<i64>,
    pub(crate) claim: Option<ClaimCols>,
    /// The task without its claim.
    pub(crate) body: Vec<u8>,
    /// When it was created and last changed: columns of PostgreSQL's listing indexes (SQLite
    /// keeps the listing as entries of its own).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) created_at: i64,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) updated_at: i64,
}

/// The claim as its five nullable columns: generation, token, epoch, expiry, owner.
pub(crate) type ClaimColumns<'a> = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<&'a str>,
);

impl Row {
    /// The claim's columns, each `NULL` when the task is unclaimed.
    pub(crate) fn claim_columns(&self) -> ClaimColumns<'_> {
        let c = self.claim.as_ref();
        (
            c.map(|c| c.generation),
            c.map(|c| c.token),
            c.map(|c| c.epoch),
            c.map(|c| c.expires_at),
            c.map(|c| c.owner.as_str()),
        )
    }
}

/// Every column of a task row but the work, as references in the order both adapters'
/// INSERT and UPDATE statements number their parameters (INSERT adds the work last).
/// `$id` is the id as bytes and `$claim` what [`Row::claim_columns`] returned; the caller's
/// array type gives the driver's parameter type.
macro_rules! task_columns {
    ($id:expr, $row:expr, $claim:expr) => {
        [
            &$id,
            &$row.scope,
            &$row.status,
            &$row.live,
            &$row.due_at,
            &$row.expires_at,
            &$claim.0,
            &$claim.1,
            &$claim.2,
            &$claim.3,
            &$claim.4,
            &$row.body,
        ]
    };
}
pub(crate) use task_columns;

/// The claim columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimCols {
    pub(crate) generation: i64,
    pub(crate) token: i64,
    pub(crate) epoch: i64,
    pub(crate) expires_at: i64,
    pub(crate) owner: String,
}

impl ClaimCols {
    fn of(c: &Claim) -> Self {
        Self {
            generation: c.generation as i64,
            token: c.token as i64,
            epoch: c.epoch as i64,
            expires_at: c.expires_at.as_millis() as i64,
            owner: c.owner.clone(),
        }
    }

    /// The claim, from columns read back.
    pub(crate) fn into_claim(self) -> Claim {
        Claim {
            generation: self.generation as u64,
            token: self.token as u64,
            epoch: self.epoch as u64,
            expires_at: Timestamp(self.expires_at as u64),
            owner: self.owner,
        }
    }
}

#[derive(Serialize)]
struct BodyOut<'a> {
    v: u32,
    task: &'a Task,
}

#[derive(Deserialize)]
struct BodyIn {
    v: u32,
    task: Task,
}

#[derive(Serialize)]
struct WorkOut<'a> {
    v: u32,
    work: &'a Work,
}

#[derive(Deserialize)]
struct WorkIn {
    v: u32,
    work: Work,
}

fn millis(t: Timestamp) -> i64 {
    // Store times are milliseconds since 1970; i64 holds them for 292 million years.
    t.as_millis() as i64
}

/// The row for `task`.
pub(crate) fn row_of(task: &Task) -> StoreResult<Row> {
    let mut bare = task.clone();
    let claim = bare.claim.take().as_ref().map(ClaimCols::of);
    let body = serde_json::to_vec(&BodyOut {
        v: BODY_VERSION,
        task: &bare,
    })
    .map_err(|e| StoreError::invalid(format!("the task cannot be encoded: {e}")))?;
    Ok(Row {
        id: *task.id.as_bytes(),
        scope: task.scope.as_str().to_owned(),
        status: task.status.as_str(),
        live: !task.status.is_terminal(),
        due_at: task.due_at().map(millis),
        expires_at: task.expires_at().map(millis),
        claim,
        body,
        created_at: millis(task.created_at),
        updated_at: millis(task.last_updated_at),
    })
}

/// The work body.
pub(crate) fn encode_work(work: &Work) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(&WorkOut {
        v: BODY_VERSION,
        work,
    })
    .map_err(|e| StoreError::invalid(format!("the work descriptor cannot be encoded: {e}")))
}

fn incompatible(v: u32) -> StoreError {
    StoreError::IncompatibleSchema(
        format!("a stored task has layout version {v}; this build reads version {BODY_VERSION}")
            .into(),
    )
}

fn check_version(v: u32) -> StoreResult<()> {
    if v == BODY_VERSION {
        Ok(())
    } else {
        Err(incompatible(v))
    }
}

#[derive(Deserialize)]
struct VersionProbe {
    v: u32,
}

/// Why a body did not decode: written by a newer build, or damaged.
fn unreadable(bytes: &[u8], what: &str, e: serde_json::Error) -> StoreError {
    match serde_json::from_slice::<VersionProbe>(bytes) {
        Ok(p) if p.v != BODY_VERSION => incompatible(p.v),
        _ => StoreError::corrupt(format!("unreadable {what}: {e}")),
    }
}

/// The task from its body and claim columns.
pub(crate) fn decode_task(body: &[u8], claim: Option<ClaimCols>) -> StoreResult<Task> {
    let b: BodyIn = serde_json::from_slice(body).map_err(|e| unreadable(body, "task record", e))?;
    check_version(b.v)?;
    let mut task = b.task;
    task.claim = claim.map(ClaimCols::into_claim);
    Ok(task)
}

/// What a client may see of the task in a body (the view needs no claim column).
#[cfg(feature = "sqlite")]
pub(crate) fn decode_view(body: &[u8]) -> StoreResult<crate::model::TaskView> {
    let b: super::record::ViewIn =
        serde_json::from_slice(body).map_err(|e| unreadable(body, "task record", e))?;
    check_version(b.v)?;
    Ok(b.task)
}

/// The record from its bodies and claim columns.
pub(crate) fn decode_record(
    body: &[u8],
    work: &[u8],
    claim: Option<ClaimCols>,
) -> StoreResult<Record> {
    let task = decode_task(body, claim)?;
    let w: WorkIn =
        serde_json::from_slice(work).map_err(|e| unreadable(work, "work descriptor", e))?;
    check_version(w.v)?;
    Ok(Record { task, work: w.work })
}

/// A head from its columns.
pub(crate) fn head_of(scope: String, expires_at: Option<i64>) -> Head {
    Head {
        scope: Scope::new(scope),
        expires_at: expires_at.map(|t| Timestamp(t as u64)),
    }
}

/// A task id from a key column.
pub(crate) fn id_of(bytes: &[u8]) -> StoreResult<TaskId> {
    let b: [u8; 16] = bytes
        .try_into()
        .map_err(|_| StoreError::corrupt("a stored task id is not 16 bytes"))?;
    Ok(TaskId::from_bytes(b))
}

/// Whether `name` is a safe SQL identifier for a schema: it is spliced into statements, so
/// it is held to lowercase letters, digits and `_`, starting with a letter or `_`, at most
/// 63 bytes (PostgreSQL's limit).
#[cfg(feature = "postgres")]
pub(crate) fn check_identifier(name: &str) -> StoreResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(StoreError::invalid(format!(
            "schema name {name:?} must be 1-63 lowercase letters, digits or `_`, not starting with a digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{TaskStatus, Work};
    use serde_json::json;

    #[test]
    fn a_task_survives_its_row_with_the_claim_in_columns() {
        let mut task: Task = serde_json::from_value(json!({
            "id": TaskId::generate().to_string(), "scope": "acme", "status": "working",
            "createdAt": 5, "lastUpdatedAt": 6, "ttlMs": 1000, "revision": 3, "attempt": 1,
            "retryCount": 0, "generation": 2
        }))
        .expect("task");
        task.claim = Some(Claim {
            generation: 2,
            token: u64::MAX - 3,
            epoch: 7,
            expires_at: Timestamp(99),
            owner: "node-a".into(),
        });
        let row = row_of(&task).expect("row");
        assert!(!String::from_utf8_lossy(&row.body).contains("node-a"));
        assert_eq!(row.due_at, Some(99));
        assert_eq!(row.expires_at, Some(1005));
        assert!(row.live);
        assert_eq!(
            decode_task(&row.body, row.claim.clone()).expect("decode"),
            task
        );
        task.status = TaskStatus::Completed;
        task.claim = None;
        let row = row_of(&task).expect("row");
        assert_eq!(
            (row.live, row.due_at, row.status),
            (false, None, "completed")
        );
        let work = Work::new("snodo/tool-call", json!({"tool": "t"}), "k");
        let rec = decode_record(&row.body, &encode_work(&work).expect("w"), None).expect("rec");
        assert_eq!((rec.task, rec.work), (task, work));
    }

    #[test]
    fn a_newer_body_is_refused_and_garbage_is_corrupt() {
        let body = br#"{"v":2,"task":{}}"#;
        assert!(matches!(
            decode_task(body, None),
            Err(StoreError::IncompatibleSchema(_))
        ));
        assert!(matches!(
            decode_task(b"nope", None),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn schema_names_are_plain_identifiers() {
        for ok in ["snodo", "snodo_test_1", "_x"] {
            assert!(check_identifier(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1x", "Snodo", "a-b", "a;drop", "\"x\"", &"a".repeat(64)] {
            assert!(check_identifier(bad).is_err(), "{bad}");
        }
    }
}
