//! The writer thread: it owns the one write connection, applies the queued operations in
//! one `BEGIN IMMEDIATE` transaction and commits them together (group commit: one WAL
//! sync for the batch); nobody hears back before that commit returned.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use crate::model::Clock;

use super::super::engine::{Ctx, Txn};
use super::super::{StoreError, StoreResult};
use super::MAX_BATCH;
use super::rows::{Rows, backend};

/// One queued write: run inside the batch's transaction, then told whether it committed.
pub(super) trait WriteJob: Send {
    /// Applies the operation and returns how it went, with the continuation that delivers
    /// its answer after the commit.
    fn run(self: Box<Self>, rows: &mut Rows<'_>, ctx: &Ctx) -> (Ran, Box<dyn Reply>);
    /// The batch failed before this job ran.
    fn fail(self: Box<Self>, err: StoreError);
}

/// How one job went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ran {
    /// It succeeded: its writes stay in the batch.
    Ok,
    /// It refused (a rule said no): its writes, if any, are rolled back; the batch goes on.
    Refused,
    /// It failed in the backend, which poisons the whole batch.
    Failed,
}

/// A job's answer, held until the batch's commit returned.
pub(super) trait Reply: Send {
    fn deliver(self: Box<Self>, commit: Result<(), StoreError>);
}

/// A closure to run in the writer's transaction and the channel its caller waits on.
pub(super) struct Job<F, T> {
    pub(super) f: F,
    pub(super) tx: oneshot::Sender<StoreResult<T>>,
}

struct Pending<T> {
    result: StoreResult<T>,
    tx: oneshot::Sender<StoreResult<T>>,
}

impl<T: Send> Reply for Pending<T> {
    fn deliver(self: Box<Self>, commit: Result<(), StoreError>) {
        let answer = match commit {
            Ok(()) => self.result,
            Err(e) => Err(e),
        };
        // The caller may have stopped waiting; the write stands either way.
        let _ = self.tx.send(answer);
    }
}

impl<F, T> WriteJob for Job<F, T>
where
    F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send,
    T: Send + 'static,
{
    fn run(self: Box<Self>, rows: &mut Rows<'_>, ctx: &Ctx) -> (Ran, Box<dyn Reply>) {
        let result = (self.f)(rows, ctx);
        let ran = match &result {
            Ok(_) => Ran::Ok,
            Err(
                StoreError::Unavailable(_)
                | StoreError::Corrupt(_)
                | StoreError::IncompatibleSchema(_),
            ) => Ran::Failed,
            Err(_) => Ran::Refused,
        };
        (
            ran,
            Box::new(Pending {
                result,
                tx: self.tx,
            }),
        )
    }

    fn fail(self: Box<Self>, err: StoreError) {
        let _ = self.tx.send(Err(err));
    }
}

/// The writer thread's state.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) epoch: u64,
    pub(super) issuer: u64,
}

impl Writer {
    /// Serves the queue until every sender is gone, then closes the connection.
    pub(super) fn run(mut self, rx: mpsc::Receiver<Box<dyn WriteJob>>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
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
        let ctx = Ctx {
            now: self.clock.now(),
            epoch: self.epoch,
            issuer: self.issuer,
        };
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
        if let Some(err) = &failure {
            fail_all(jobs.collect(), err.clone());
        }
        let outcome = match failure {
            Some(err) => {
                let _ = txn.rollback();
                Err(err)
            }
            None => txn.commit().map_err(backend),
        };
        for reply in replies {
            reply.deliver(outcome.clone());
        }
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

fn fail_all(batch: Vec<Box<dyn WriteJob>>, err: StoreError) {
    for job in batch {
        job.fail(err.clone());
    }
}
