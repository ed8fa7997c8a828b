//! What an execution's imports talk to: [`ExecutionIo`]. Its implementations live with
//! the layer that owns the input: `mcp::SyncIo` (a synchronous call: MRTR round trips) and
//! `runner::TaskIo` (a task attempt: input recorded in the store). [`NoInput`] serves the
//! exports that never ask for input (describe, the mode rule).

use async_trait::async_trait;
use serde_json::Value;

use snodo_core::model::{ClientCapabilities, JournalEntry};

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
    async fn set_status(&self, message: String) -> Result<(), String>;

    /// Reports progress.
    async fn progress(&self, progress: Progress);

    /// Whether this execution has a journal (a task attempt does; a synchronous call has
    /// nothing to replay).
    fn journaled(&self) -> bool {
        false
    }

    /// The journal's entry at `seq`, if one was recorded.
    async fn journal_entry(&self, _seq: u32) -> Result<Option<JournalEntry>, String> {
        Ok(None)
    }

    /// Holds `bytes` of the task's journal for the entry at `seq` before its request is
    /// sent, so a request whose answer could not be recorded is never sent. An error says
    /// why there is no room, naming the bound and its configuration key.
    async fn journal_reserve(&self, _seq: u32, _bytes: u64) -> Result<(), String> {
        Err("this execution has no journal".into())
    }

    /// Gives back what [`journal_reserve`](Self::journal_reserve) held for `seq` when no
    /// entry is recorded there. Releasing a position that holds nothing does nothing.
    fn journal_release(&self, _seq: u32) {}

    /// Records `entry` before its response reaches the guest, in the room reserved for its
    /// position. An error fails the request.
    async fn journal_append(&self, _entry: JournalEntry) -> Result<(), String> {
        Err("this execution has no journal".into())
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

    async fn set_status(&self, _message: String) -> Result<(), String> {
        Ok(())
    }

    async fn progress(&self, _progress: Progress) {}
}
