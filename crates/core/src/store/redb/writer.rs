//! The writer thread: queued operations applied in one write transaction and made durable
//! with one fsync (group commit); nobody hears back before that fsync returned.

use std::sync::mpsc;

use redb::Durability;

use super::super::StoreError;
use super::super::group_commit::{BatchTxn, Ran, Reply, WriteJob, fail_all, next_batch, settle};
use super::tables::WriteTables;
use super::*;

pub(super) struct Writer {
    pub(super) db: Arc<Database>,
    /// The store's boot: each batch runs at one reading of its clock.
    pub(super) boot: Arc<FileBoot>,
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
        let ctx = self.boot.ctx();
        let mut txn = match self.db.begin_write() {
            Ok(t) => t,
            Err(e) => return fail_all(batch, backend(e)),
        };
        if let Err(e) = txn.set_durability(Durability::Immediate) {
            return fail_all(batch, backend(e));
        }
        let mut replies: Vec<Box<dyn Reply>> = Vec::with_capacity(batch.len());
        let mut failure = None;
        let mut jobs = batch.into_iter();
        {
            let mut tables = match WriteTables::open(&txn) {
                Ok(t) => t,
                Err(e) => return fail_all(jobs.collect(), e),
            };
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
        }
        settle(failure, jobs, replies, txn);
    }
}

impl BatchTxn for redb::WriteTransaction {
    fn commit(self) -> StoreResult<()> {
        redb::WriteTransaction::commit(self).map_err(backend)
    }

    fn abandon(self) {
        let _ = self.abort();
    }
}
