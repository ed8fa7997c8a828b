//! A task's history: what happened to it and when, as the store committed it.
//!
//! Every entry is written in the same commit as the change it describes, with that commit's
//! store time, so the history is exactly as durable as the task and never disagrees with
//! it. It is for operators (the admin API, the console, `snodo tasks show`): it names what
//! happened and carries small facts (an attempt number, a claim's owner, a retry's due
//! time, an error's code and message) but never an argument, an answer or a result.
//!
//! A task that talks a lot (a guest setting its status in a loop) cannot grow its record
//! without bound: a history keeps at most [`MAX_HISTORY`] entries, the first
//! [`HISTORY_HEAD`] and the newest after them, and counts what it dropped in between.

use serde::{Deserialize, Serialize};

use super::Timestamp;

/// The most entries a task's history keeps.
pub const MAX_HISTORY: usize = 64;

/// How many of the first entries are always kept (creation, the first claims): the start of
/// a task's life explains the rest.
pub const HISTORY_HEAD: usize = 8;

/// The longest text an entry keeps (a status message, an error message), in bytes; longer
/// text is cut at a character boundary.
pub const MAX_HISTORY_TEXT: usize = 200;

/// One thing that happened to a task, at its commit time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The store time of the commit that made it.
    pub at: Timestamp,
    /// What happened.
    #[serde(flatten)]
    pub kind: HistoryKind,
}

/// What happened. Serialized with its name in `event`, snake_case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "event",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum HistoryKind {
    /// The task was created.
    Created,
    /// A runner claimed it.
    Claimed {
        /// The claim's generation (fencing token).
        generation: u64,
        /// Who holds the claim.
        owner: String,
        /// How long it had been due before this claim (its queue delay), in ms.
        waited_ms: u64,
        /// The previous claim's lease had run out without its worker letting go.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        recovered: bool,
    },
    /// An attempt started (or a replay of the task resumed after an answer or a crash).
    Started {
        /// The attempt's number, from 1.
        attempt: u32,
    },
    /// The status message changed.
    Status {
        /// The new message (cut to [`MAX_HISTORY_TEXT`] bytes).
        message: String,
    },
    /// The task asked its client a question.
    InputRequested {
        /// The question's key.
        key: String,
    },
    /// Answers were accepted.
    InputAnswered {
        /// The keys answered.
        keys: Vec<String>,
        /// Whether that left no question open (the task is due again).
        resumed: bool,
    },
    /// The attempt asked to be retried later.
    RetryScheduled {
        /// When the retry may run.
        due_at: Timestamp,
        /// Retries used so far, this one included.
        retry: u32,
        /// The error the attempt gave.
        code: i64,
        /// Its message (cut to [`MAX_HISTORY_TEXT`] bytes).
        message: String,
    },
    /// The attempt went to sleep: its claim was given up and the task is due at `until`.
    Sleeping {
        /// When it wakes.
        until: Timestamp,
    },
    /// An operator made a task waiting out its retry delay due at once.
    RetryNow {
        /// When the retry would have run.
        was_due_at: Timestamp,
    },
    /// The claim was given up while questions are open: the task waits for answers with
    /// no guest running.
    Parked,
    /// The claim was given up without an outcome (the task is due again at once, or at
    /// its retry time).
    Released,
    /// A claim of an earlier process was fenced when its store opened: the task is due
    /// again.
    Fenced {
        /// The fenced claim's generation.
        generation: u64,
    },
    /// Finished with a result.
    Completed,
    /// Finished with an error.
    Failed {
        /// The JSON-RPC error code.
        code: i64,
        /// Its message (cut to [`MAX_HISTORY_TEXT`] bytes).
        message: String,
    },
    /// Cancelled.
    Cancelled {
        /// Why, if given (cut to [`MAX_HISTORY_TEXT`] bytes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
}

impl HistoryKind {
    /// The entry's name, as serialized in `event`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Claimed { .. } => "claimed",
            Self::Started { .. } => "started",
            Self::Status { .. } => "status",
            Self::InputRequested { .. } => "input_requested",
            Self::InputAnswered { .. } => "input_answered",
            Self::RetryScheduled { .. } => "retry_scheduled",
            Self::Sleeping { .. } => "sleeping",
            Self::RetryNow { .. } => "retry_now",
            Self::Parked => "parked",
            Self::Released => "released",
            Self::Fenced { .. } => "fenced",
            Self::Completed => "completed",
            Self::Failed { .. } => "failed",
            Self::Cancelled { .. } => "cancelled",
        }
    }
}

/// A task's history as stored: the kept entries, oldest first, and how many were dropped
/// between the head and the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// The kept entries, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<HistoryEntry>,
    /// Entries dropped after the first [`HISTORY_HEAD`] to keep the bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u64,
}

impl History {
    /// Whether nothing was ever recorded (a record written before histories were kept).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.dropped == 0
    }

    /// Appends `kind` at `at`, dropping the oldest entry after the head past the bound.
    pub fn push(&mut self, at: Timestamp, kind: HistoryKind) {
        if self.entries.len() >= MAX_HISTORY {
            self.entries.remove(HISTORY_HEAD);
            self.dropped += 1;
        }
        self.entries.push(HistoryEntry { at, kind });
    }
}

/// `text` cut to at most [`MAX_HISTORY_TEXT`] bytes at a character boundary.
pub fn history_text(text: &str) -> String {
    if text.len() <= MAX_HISTORY_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_HISTORY_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_keeps_its_head_and_newest_entries_and_counts_the_rest() {
        let mut h = History::default();
        for i in 0..(MAX_HISTORY as u64 + 10) {
            h.push(
                Timestamp(i),
                HistoryKind::Status {
                    message: format!("m{i}"),
                },
            );
        }
        assert_eq!(h.entries.len(), MAX_HISTORY);
        assert_eq!(h.dropped, 10);
        let times: Vec<u64> = h.entries.iter().map(|e| e.at.as_millis()).collect();
        assert_eq!(&times[..HISTORY_HEAD], &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(times[HISTORY_HEAD], HISTORY_HEAD as u64 + 10);
        assert_eq!(*times.last().unwrap_or(&0), MAX_HISTORY as u64 + 9);
    }

    #[test]
    fn entries_serialize_flat_with_their_name() {
        let e = HistoryEntry {
            at: Timestamp(5),
            kind: HistoryKind::RetryScheduled {
                due_at: Timestamp(9),
                retry: 1,
                code: -32603,
                message: "boom".into(),
            },
        };
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"at": 5, "event": "retry_scheduled", "dueAt": 9, "retry": 1,
                "code": -32603, "message": "boom"})
        );
        assert_eq!(e.kind.name(), "retry_scheduled");
        let back: HistoryEntry = serde_json::from_value(v).unwrap_or(HistoryEntry {
            at: Timestamp(0),
            kind: HistoryKind::Created,
        });
        assert_eq!(back, e);
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_HISTORY_TEXT);
        let cut = history_text(&long);
        assert!(cut.len() <= MAX_HISTORY_TEXT);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(history_text("short"), "short");
    }
}
