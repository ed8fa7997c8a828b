//! What an execution's imports talk to: [`ExecutionIo`]. Its implementations live with
//! the layer that owns the input: `mcp::SyncIo` (a synchronous call: MRTR round trips) and
//! `runner::TaskIo` (a task attempt: input recorded in the store). [`NoInput`] serves the
//! exports that never ask for input (describe, the mode rule).

use async_trait::async_trait;
use serde_json::Value;

use snodo_core::model::{ClientCapabilities, JournalEntry, SleepAsk};
use snodo_core::store::StoreError;

use super::CancelToken;

/// The questions one `await-input` call asks together: (key, MCP input request JSON), in
/// the guest's order.
pub type InputRequests = Vec<(String, Value)>;

/// The answers to [`InputRequests`], in the same order, or why there are none.
pub type InputAnswers = Result<Vec<Value>, InputFailure>;

/// Why an input request did not produce answers.
#[derive(Debug, Clone, PartialEq)]
pub enum InputFailure {
    /// The execution is being cancelled (the guest sees `input-error::cancelled`).
    Cancelled,
    /// The client did not declare the capability the request needs.
    Unsupported(String),
    /// The key was used before with a different request.
    KeyConflict(String),
    /// The request is malformed.
    Invalid(String),
    /// The answers must come from the client first: stop the guest, the host answers the
    /// request with `input_required` and the listed questions.
    Suspend(InputRequests),
    /// The attempt lost its right to continue (lease lost, task finished or gone).
    Stop(String),
    /// The guest has waited longer than the park limit: release it (the store keeps the
    /// questions and will keep the answers).
    Park,
}

/// Why a sleep did not run to its end in the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SleepFailure {
    /// The execution is being cancelled (the guest sees `sleep-error::cancelled`).
    Cancelled,
    /// The task sleeps in the store: its claim was given up with the wake time (ms since
    /// the epoch, store clock). Stop the guest; a fresh one replays the task then.
    Parked {
        /// When it wakes.
        until: u64,
        /// How long that was from the commit, by the store's clock.
        wait: u64,
    },
    /// A replay asked for another sleep than the journal recorded at its position, or
    /// slept where the journal recorded a request.
    Diverged(String),
    /// The sleep would end at or after the task's TTL.
    PastTtl {
        /// When it would end.
        until: u64,
        /// When the task expires.
        expires_at: u64,
    },
    /// The attempt lost its right to continue (lease lost, task finished or gone).
    Stop(String),
    /// The sleep could not be recorded (a bound of the journal or of the tenant's store):
    /// the task fails with this reason.
    Unrecorded(String),
}

/// Waits until `until` (ms since the epoch, this host's wall clock), or until `cancel`.
pub(crate) async fn sleep_in_place(until: u64, cancel: &CancelToken) -> Result<(), SleepFailure> {
    let left = until.saturating_sub(snodo_core::model::wall_millis());
    tokio::select! {
        () = tokio::time::sleep(std::time::Duration::from_millis(left)) => Ok(()),
        () = cancel.cancelled() => Err(SleepFailure::Cancelled),
    }
}

/// Why an [`ExecutionIo`] call other than input failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The execution keeps no journal (a synchronous call has nothing to replay).
    #[error("this execution has no journal")]
    NoJournal,
    /// The task's journal has no room for the entry a request could need.
    #[error(
        "the task's journal holds {recorded} of its {bound} bytes (outbound.journal_task_bytes) \
         and its requests in flight reserved {held}; recording this answer needs up to {needed}"
    )]
    JournalFull {
        /// What the recorded entries take.
        recorded: u64,
        /// The bound (`outbound.journal_task_bytes`).
        bound: u64,
        /// What requests in flight hold.
        held: u64,
        /// What this request asked for.
        needed: u64,
    },
    /// The store refused or failed the step (a lost lease, a finished task, an outage).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A progress report from a guest.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Progress so far.
    pub progress: f64,
    /// The total, if known.
    pub total: Option<f64>,
    /// A message.
    pub message: Option<String>,
}

/// The host side of an execution's imports.
#[async_trait]
pub trait ExecutionIo: Send + Sync {
    /// Obtains answers to `requests`, in order.
    async fn await_inputs(&self, requests: InputRequests, cancel: &CancelToken) -> InputAnswers;

    /// Sets the status message. An error stops the attempt.
    async fn set_status(&self, message: String) -> Result<(), IoError>;

    /// Reports progress.
    async fn progress(&self, progress: Progress);

    /// Whether this execution has a journal (a task attempt does; a synchronous call has
    /// nothing to replay).
    fn journaled(&self) -> bool {
        false
    }

    /// The journal's entry at `seq`, if one was recorded.
    async fn journal_entry(&self, _seq: u32) -> Result<Option<JournalEntry>, IoError> {
        Ok(None)
    }

    /// Holds `bytes` of the task's journal for the entry at `seq` before its request is
    /// sent, so a request whose answer could not be recorded is never sent. An error says
    /// why there is no room, naming the bound and its configuration key.
    async fn journal_reserve(&self, _seq: u32, _bytes: u64) -> Result<(), IoError> {
        Err(IoError::NoJournal)
    }

    /// Gives back what [`journal_reserve`](Self::journal_reserve) held for `seq` when no
    /// entry is recorded there. Releasing a position that holds nothing does nothing.
    fn journal_release(&self, _seq: u32) {}

    /// Records `entry` before its response reaches the guest, in the room reserved for its
    /// position. An error fails the request.
    async fn journal_append(&self, _entry: JournalEntry) -> Result<(), IoError> {
        Err(IoError::NoJournal)
    }

    /// Sleeps as `ask` says, at journal position `seq`. The default waits in place on this
    /// host's clock (a synchronous call: nothing to park, nothing to replay).
    async fn sleep(
        &self,
        _seq: u32,
        ask: SleepAsk,
        cancel: &CancelToken,
    ) -> Result<(), SleepFailure> {
        sleep_in_place(ask.ends(snodo_core::model::wall_millis()), cancel).await
    }

    /// A line the guest logged (`debug` … `error`), for the client where the protocol
    /// carries logs to it. The operator's log has it already; the default sends it nowhere.
    fn log(&self, _level: &'static str, _message: &str) {}
}

/// What a guest is shown of a failure the host's side reported (an [`ExecutionIo`] error, a
/// store's message): its first line only. A cause is one line; what follows a newline is a
/// Debug dump or a backtrace (`RUST_BACKTRACE` set), which is the host's, not the guest's.
pub(crate) fn guest_text(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim_end();
    // An error's Debug form on one line still names its backtrace field.
    match line
        .find(" backtrace: ")
        .or_else(|| line.find("Stack backtrace:"))
    {
        Some(at) => line[..at].trim_end().to_owned(),
        None => line.to_owned(),
    }
}

/// The client capability an input request needs, as a path into `ClientCapabilities`.
/// Checks `requests` against the client's declared capabilities.
pub fn check_capabilities(
    capabilities: &Value,
    requests: &[(String, Value)],
) -> Result<(), InputFailure> {
    let caps = ClientCapabilities::of(capabilities);
    for (key, request) in requests {
        if let Err(what) = caps.can_answer(request) {
            return Err(InputFailure::Unsupported(format!(
                "input {key:?} needs the client capability `{what}`, which the calling client \
                 did not declare, so it was not asked; a client that declares `{what}` in its \
                 capabilities is asked instead"
            )));
        }
    }
    Ok(())
}

/// IO for the exports that cannot ask for input (`describe`, `choose-mode`): any question
/// is refused, status and progress go nowhere.
pub(crate) struct NoInput;

#[async_trait]
impl ExecutionIo for NoInput {
    async fn await_inputs(&self, _requests: InputRequests, _cancel: &CancelToken) -> InputAnswers {
        Err(InputFailure::Invalid(
            "this export cannot ask for input".into(),
        ))
    }

    async fn set_status(&self, _message: String) -> Result<(), IoError> {
        Ok(())
    }

    async fn progress(&self, _progress: Progress) {}
}
