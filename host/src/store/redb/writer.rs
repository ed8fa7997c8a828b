//! The writer thread: queued operations applied in one write transaction and made durable
//! with one fsync (group commit); nobody hears back before that fsync returned.

use std::sync::mpsc;

use tokio::sync::oneshot;

use super::super::engine::Ctx;
use super::super::{StoreError, StoreResult};
use super::tables::WriteTables;
use super::*;

/// One queued write: run inside the batch's transaction, then told whether it committed.
pub(super) trait WriteJob: Send {
    /// Applies the operation. Returns whether it failed in the backend (which poisons the
    /// whole batch) and the continuation that delivers its answer after the commit.
    fn run(self: Box<Self>, tables: &mut WriteTables<'_>, ctx: &Ctx) -> (bool, Box<dyn Reply>);
    /// The batch failed before this job ran.
    fn fail(self: Box<Self>, err: StoreError);
}

pub(super) trait Reply: Send {
    fn deliver(self: Box<Self>, commit: Result<(), StoreError>);
}

pub(super) struct Job<F, T> {
    pub(super) f: F,
    pub(super) tx: oneshot::Sender<StoreResult<T>>,
}

pub(super) struct Pending<T> {
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
    fn run(self: Box<Self>, tables: &mut WriteTables<'_>, ctx: &Ctx) -> (bool, Box<dyn Reply>) {
        let result = (self.f)(tables, ctx);
        let backend_failure = matches!(
            result,
            Err(StoreError::Unavailable(_)
                | StoreError::Corrupt(_)
                | StoreError::IncompatibleSchema(_))
        );
        (
            backend_failure,
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

pub(super) struct Writer {
    pub(super) db: Arc<Database>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) epoch: u64,
    pub(super) issuer: u64,
}

impl Writer {
    pub(super) fn run(self, rx: mpsc::Receiver<Box<dyn WriteJob>>) {
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
    /// A backend failure or a panic in any job aborts the whole transaction: every job
    /// then gets the error and nothing of the batch is written.
    fn commit_batch(&self, batch: Vec<Box<dyn WriteJob>>) {
        let ctx = Ctx {
            now: self.clock.now(),
            epoch: self.epoch,
            issuer: self.issuer,
        };
        let mut txn = match self.db.begin_write() {
            Ok(t) => t,
            Err(e) => return fail_all(batch, backend(e)),
        };
        if let Err(e) = txn.set_durability(Durability::Immediate) {
            return fail_all(batch, backend(e));
        }
        let mut replies: Vec<Box<dyn Reply>> = Vec::with_capacity(batch.len());
        let mut failure = None;
        {
            let mut tables = match WriteTables::open(&txn) {
                Ok(t) => t,
                Err(e) => return fail_all(batch, e),
            };
            let mut jobs = batch.into_iter();
            for job in jobs.by_ref() {
                match catch_unwind(AssertUnwindSafe(|| job.run(&mut tables, &ctx))) {
                    Ok((false, reply)) => replies.push(reply),
                    Ok((true, reply)) => {
                        failure = Some(StoreError::unavailable(
                            "a write in the same commit failed in the backend; nothing was written",
                        ));
                        replies.push(reply);
                        break;
                    }
                    Err(_) => {
                        failure = Some(StoreError::unavailable(
                            "a store operation panicked; its commit was abandoned",
                        ));
                        break;
                    }
                }
            }
            if let Some(err) = &failure {
                fail_all(jobs.collect(), err.clone());
            }
        }
        let outcome = match failure {
            Some(err) => {
                let _ = txn.abort();
                Err(err)
            }
            None => txn.commit().map_err(backend),
        };
        for reply in replies {
            reply.deliver(outcome.clone());
        }
    }
}

pub(super) fn fail_all(batch: Vec<Box<dyn WriteJob>>, err: StoreError) {
    for job in batch {
        job.fail(err.clone());
    }
}
