//! `snodo:tasks/timers@0.5.0`: sleeps the host decides. The execution's IO decides where a
//! sleep waits (in place, or parked in the store with the guest stopped); this module takes
//! the sleep's journal position and turns the IO's answer into the guest's result or the
//! stop that ends the attempt.

use snodo_core::model::SleepAsk;
use wasmtime::Result as WtResult;

use crate::bindings::v5::snodo::tasks0_5_0::timers::{self, SleepError};
use crate::host::HostState;
use crate::io::SleepFailure;
use crate::{HostStop, Limit};

impl HostState {
    async fn sleep(&mut self, ask: SleepAsk) -> WtResult<Result<(), SleepError>> {
        if self.cancel.is_cancelled() {
            return Ok(Err(SleepError::Cancelled));
        }
        let seq = self.hooks.take_position();
        let io = self.io.clone();
        let cancel = self.cancel.clone();
        let stop = match io.sleep(seq, ask, &cancel).await {
            Ok(()) => return Ok(Ok(())),
            Err(SleepFailure::Cancelled) => return Ok(Err(SleepError::Cancelled)),
            Err(SleepFailure::Parked { until, wait }) => HostStop::Slept {
                until_ms: until,
                wait_ms: wait,
            },
            Err(SleepFailure::PastTtl { until, expires_at }) => HostStop::Limit(Limit::Ttl {
                until_ms: until,
                expires_at_ms: expires_at,
            }),
            Err(SleepFailure::Stop(reason)) => HostStop::Lost(reason),
            Err(SleepFailure::Diverged(why)) => {
                tracing::warn!(target: "snodo::outbound", tool = %self.logs.origin.tool, "journal divergence: {why}");
                self.hooks.diverge(why);
                return Err(wasmtime::Error::msg("journal divergence at a sleep"));
            }
            Err(SleepFailure::Unrecorded(reason)) => {
                return Err(wasmtime::Error::msg(format!(
                    "the sleep could not be recorded: {}",
                    crate::io::guest_text(&reason)
                )));
            }
        };
        self.stop = Some(stop.clone());
        Err(wasmtime::Error::new(stop))
    }
}

impl timers::Host for HostState {
    async fn sleep_until(&mut self, at_ms: u64) -> WtResult<Result<(), SleepError>> {
        self.sleep(SleepAsk::Until(at_ms)).await
    }

    async fn sleep_for(&mut self, ms: u64) -> WtResult<Result<(), SleepError>> {
        self.sleep(SleepAsk::For(ms)).await
    }
}
