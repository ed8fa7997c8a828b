//! The queue the embedded durable adapters' writer threads serve: operations submitted by
//! async callers, applied in batches by one thread in one transaction each (group commit),
//! and answered only after the batch's commit returned.
//!
//! The adapters differ in how they begin, guard and commit a batch (redb's durability
//! setting, SQLite's savepoint per operation); what a job is, how its answer waits for the
//! commit, and how callers reach the queue is the same, and lives here. PostgreSQL's
//! grouped writes (`postgres/write.rs`) hold their answers the same way ([`pending`]).

use std::sync::mpsc;

use tokio::sync::oneshot;

use super::engine::{Ctx, Txn};
use super::{StoreError, StoreResult};

/// How one job went inside its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It succeeded: its writes stay in the batch.
    Ok,
    /// A rule refused it: it wrote nothing (the engine decides before it writes); the
    /// batch goes on.
    Refused,
    /// It failed in the backend, which poisons the whole batch.
    Failed,
}

/// One queued write: run inside the batch's transaction, then told whether it committed.
pub(crate) trait WriteJob: Send {
    /// Applies the operation and returns how it went, with the continuation that delivers
    /// its answer after the commit.
    fn run(self: Box<Self>, txn: &mut dyn Txn, ctx: &Ctx) -> (Ran, Box<dyn Reply>);
    /// The batch failed before this job ran.
    fn fail(self: Box<Self>, err: StoreError);
}

/// A job's answer, held until the batch's commit returned.
pub(crate) trait Reply: Send {
    /// Sends the answer: the job's own result when `commit` succeeded, else the commit's
    /// error.
    fn deliver(self: Box<Self>, commit: Result<(), StoreError>);
}

/// A closure to run in the writer's transaction and the channel its caller waits on.
struct Job<F, T> {
    f: F,
    tx: oneshot::Sender<StoreResult<T>>,
}

struct Pending<T> {
    result: StoreResult<T>,
    tx: oneshot::Sender<StoreResult<T>>,
}

/// A job's `result`, to be sent on `tx` once the commit it waits on returned.
pub(crate) fn pending<T: Send + 'static>(
    result: StoreResult<T>,
    tx: oneshot::Sender<StoreResult<T>>,
) -> Box<dyn Reply> {
    Box::new(Pending { result, tx })
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
    fn run(self: Box<Self>, txn: &mut dyn Txn, ctx: &Ctx) -> (Ran, Box<dyn Reply>) {
        let result = (self.f)(txn, ctx);
        let ran = match &result {
            Ok(_) => Ran::Ok,
            Err(
                StoreError::Unavailable(_)
                | StoreError::Corrupt(_)
                | StoreError::IncompatibleSchema(_),
            ) => Ran::Failed,
            Err(_) => Ran::Refused,
        };
        (ran, pending(result, self.tx))
    }

    fn fail(self: Box<Self>, err: StoreError) {
        let _ = self.tx.send(Err(err));
    }
}

/// The sending side of a writer thread's queue.
pub(crate) type Queue = mpsc::Sender<Box<dyn WriteJob>>;

/// A job running `f`, and the receiver of its answer.
pub(crate) fn job<T, F>(f: F) -> (Box<dyn WriteJob>, oneshot::Receiver<StoreResult<T>>)
where
    F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    (Box::new(Job { f, tx }), rx)
}

/// A running writer thread and the queue it serves.
///
/// Dropping it closes the queue, lets the thread finish every write already queued (their
/// callers are still owed an answer) and joins it, so whatever the thread owns (the file, the
/// write connection) is closed when the drop returns and the same process can reopen the
/// store at once.
pub(crate) struct WriterThread {
    /// `None` only while dropping.
    queue: Option<Queue>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WriterThread {
    /// Starts a thread named `name` that runs `serve` over the queue's receiving side.
    pub(crate) fn spawn<S>(name: &str, serve: S) -> StoreResult<Self>
    where
        S: FnOnce(mpsc::Receiver<Box<dyn WriteJob>>) + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(rx))
            .map_err(|e| StoreError::unavailable(format!("cannot start the writer thread: {e}")))?;
        Ok(Self {
            queue: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `f` and waits for its answer, which comes only after the batch it ran in was
    /// committed (or failed).
    pub(crate) async fn submit<T, F>(&self, f: F) -> StoreResult<T>
    where
        F: FnOnce(&mut dyn Txn, &Ctx) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let (job, rx) = job(f);
        self.queue
            .as_ref()
            .ok_or_else(|| StoreError::unavailable("the store is closing"))?
            .send(job)
            .map_err(|_| StoreError::unavailable("the store's writer thread has stopped"))?;
        rx.await
            .map_err(|_| StoreError::unavailable("the store's writer thread has stopped"))?
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The next batch: waits for one job, then takes what else is queued, up to `max`. `None`
/// once every sender is gone.
pub(crate) fn next_batch(
    rx: &mpsc::Receiver<Box<dyn WriteJob>>,
    max: usize,
) -> Option<Vec<Box<dyn WriteJob>>> {
    let first = rx.recv().ok()?;
    let mut batch = vec![first];
    while batch.len() < max {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// The backend transaction a writer thread applies one batch in.
pub(crate) trait BatchTxn {
    /// Commits it durably.
    fn commit(self) -> StoreResult<()>;
    /// Abandons it: nothing of the batch is written.
    fn abandon(self);
}

/// Ends a batch's transaction. After a `failure` the jobs not yet run hear it, the
/// transaction is abandoned and every job that ran hears the failure too: nothing of the
/// batch was written. Otherwise it commits and every job hears how that went, so nobody
/// is answered before the commit is durable.
pub(crate) fn settle(
    failure: Option<StoreError>,
    unrun: impl Iterator<Item = Box<dyn WriteJob>>,
    replies: Vec<Box<dyn Reply>>,
    txn: impl BatchTxn,
) {
    let outcome = match failure {
        Some(err) => {
            fail_all(unrun.collect(), err.clone());
            txn.abandon();
            Err(err)
        }
        None => txn.commit(),
    };
    for reply in replies {
        reply.deliver(outcome.clone());
    }
}

/// Answers every job of `batch` with `err` (nothing of it ran).
pub(crate) fn fail_all(batch: Vec<Box<dyn WriteJob>>, err: StoreError) {
    for job in batch {
        job.fail(err.clone());
    }
}
