//! The writer thread: it owns the one write connection, applies the queued operations in
//! one `BEGIN IMMEDIATE` transaction and commits them together (group commit: one WAL
//! sync for the batch); nobody hears back before that commit returned.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;

use rusqlite::{Connection, TransactionBehavior};

use super::super::embedded::FileBoot;
use super::super::group_commit::{BatchTxn, Ran, Reply, WriteJob, fail_all, next_batch, settle};
use super::super::{StoreError, StoreResult};
use super::MAX_BATCH;
use super::rows::{Rows, backend};

/// The writer thread's state.
pub(super) struct Writer {
    pub(super) conn: Connection,
    /// The store's boot: each batch runs at one reading of its clock.
    pub(super) boot: Arc<FileBoot>,
}

impl Writer {
    /// Serves the queue until every sender is gone, then closes the connection.
    pub(super) fn run(mut self, rx: mpsc::Receiver<Box<dyn WriteJob>>) {
        while let Some(batch) = next_batch(&rx, MAX_BATCH) {
            self.commit_batch(batch);
        }
    }

    /// Applies `batch` in one write transaction and answers every job after the commit.
    ///
    /// Each job runs inside a savepoint, so a job that is refused leaves nothing behind
    /// even if it wrote before deciding (the engine decides before it writes; this makes
    /// that hold whatever a job does). A backend failure or a panic in any job aborts the
    /// whole transaction: every job then gets the error and nothing of the batch is
    /// written.
    pub(super) fn commit_batch(&mut self, batch: Vec<Box<dyn WriteJob>>) {
        let ctx = self.boot.ctx();
        let txn = match self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
        {
            Ok(t) => t,
            Err(e) => return fail_all(batch, backend(e)),
        };
        let mut replies: Vec<Box<dyn Reply>> = Vec::with_capacity(batch.len());
        // The job whose backend failure aborted the batch: it is answered with its own
        // error, the others with `failure`.
        let mut culprit: Option<Box<dyn Reply>> = None;
        let mut failure = None;
        let mut jobs = batch.into_iter();
        for job in jobs.by_ref() {
            if let Err(e) = statement(&txn, "SAVEPOINT job") {
                failure = Some(e.clone());
                job.fail(e);
                break;
            }
            let ran = catch_unwind(AssertUnwindSafe(|| {
                let mut rows = Rows::new(&txn);
                job.run(&mut rows, &ctx)
            }));
            let settled = match ran {
                Ok((Ran::Ok, reply)) => {
                    replies.push(reply);
                    statement(&txn, "RELEASE job")
                }
                Ok((Ran::Refused, reply)) => {
                    replies.push(reply);
                    statement(&txn, "ROLLBACK TO job").and_then(|()| statement(&txn, "RELEASE job"))
                }
                Ok((Ran::Failed, reply)) => {
                    culprit = Some(reply);
                    Err(StoreError::unavailable(
                        "a write in the same commit failed in the backend; nothing was written",
                    ))
                }
                Err(_) => Err(StoreError::unavailable(
                    "a store operation panicked; its commit was abandoned",
                )),
            };
            if let Err(e) = settled {
                failure = Some(e);
                break;
            }
        }
        settle(failure, jobs, replies, txn);
        if let Some(reply) = culprit {
            // Its result is the backend error itself; "committed" passes that through.
            reply.deliver(Ok(()));
        }
    }
}

/// Runs one parameterless statement (savepoint control) through the statement cache.
fn statement(conn: &Connection, sql: &str) -> StoreResult<()> {
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute([]))
        .map(|_| ())
        .map_err(backend)
}

impl BatchTxn for rusqlite::Transaction<'_> {
    fn commit(self) -> StoreResult<()> {
        rusqlite::Transaction::commit(self).map_err(backend)
    }

    fn abandon(self) {
        let _ = self.rollback();
    }
}
