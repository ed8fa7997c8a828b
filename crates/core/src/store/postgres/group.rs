//! Requests grouped into one statement or transaction: at most a few groups in flight,
//! each taking what queued while the others ran.
//!
//! A request that arrives while a slot is free goes out at once, alone; under load the
//! queue fills while every slot is busy, and the next free slot takes all of it (up to a
//! bound). Nothing waits for a group to fill, so grouping adds no latency of its own.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use crate::store::{StoreError, StoreResult};

/// The queue of requests of one kind, and the task that groups them.
pub(super) struct Groups<J> {
    queue: mpsc::UnboundedSender<J>,
}

impl<J: Send + 'static> Groups<J> {
    /// Serves the queue with `serve`, at most `in_flight` groups at once (at least one),
    /// each of at most `max` requests. Once every sender is gone, the groups already
    /// queued are served and the task ends.
    pub(super) fn start<F, Fut>(in_flight: usize, max: usize, serve: F) -> Self
    where
        F: Fn(Vec<J>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (queue, mut rx) = mpsc::unbounded_channel::<J>();
        let slots = Arc::new(Semaphore::new(in_flight.max(1)));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let Some(first) = rx.recv().await else {
                    return;
                };
                let mut group = vec![first];
                while group.len() < max {
                    match rx.try_recv() {
                        Ok(job) => group.push(job),
                        Err(_) => break,
                    }
                }
                let served = serve(group);
                tokio::spawn(async move {
                    served.await;
                    drop(slot);
                });
            }
        });
        Self { queue }
    }

    /// Queues `job`.
    pub(super) fn send(&self, job: J) -> StoreResult<()> {
        self.queue
            .send(job)
            .map_err(|_| StoreError::unavailable("the store is closing"))
    }
}
