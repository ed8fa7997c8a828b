//! The writer thread: queued operations applied in one write transaction and made durable
//! with one fsync (group commit); nobody hears back before that fsync returned.

use std::sync::mpsc;

use super::super::StoreError;
use super::super::engine::Ctx;
use super::super::group_commit::{Ran, Reply, WriteJob, fail_all, next_batch};
use super::tables::WriteTables;
use super::*;

pub(super) struct Writer {
    pub(super) db: Arc<Database>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) epoch: u64,
    pub(super) issuer: u64,
}

impl Writer {
    pub(super) fn run(self, rx: mpsc::Receiver<Box<dyn WriteJob>>) {
        while let Some(batch) = next_batch(&rx, MAX_BATCH) {
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
                    // A refused operation wrote nothing (the engine decides first).
                    Ok((Ran::Ok | Ran::Refused, reply)) => replies.push(reply),
                    Ok((Ran::Failed, reply)) => {
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
