//! The task state machine: applying one event to a task is a pure function of the task,
//! the event, the retry policy and the commit time. The store loads, authorizes and saves
//! around it; every adapter commits what this decides.
//!
//! ```text
//! working        -> input_required | completed | failed | cancelled
//! input_required -> working | completed | failed | cancelled
//! completed | failed | cancelled: terminal, never change
//! ```

use serde_json::Value;

use super::history::{HistoryKind, history_text};
use super::task::{AppliedEvent, InputEntry, Outcome, ScheduledRetry, Task, TaskStatus};
use super::{EventKind, JsonRpcError, RetryPolicy, TaskEvent, Timestamp};

/// How many `status_message` event ids a task remembers for replay. Older ones are
/// forgotten (a replay of a forgotten one applies the same message again, which changes
/// nothing a client can tell from a repeat), so a guest that sets its status in a loop
/// cannot grow its task record without bound.
pub const REMEMBERED_STATUS_EVENTS: usize = 16;

/// The state of one input request after `input_requested`.
#[derive(Debug, Clone, PartialEq)]
pub enum InputReply {
    /// No answer yet: wait for one.
    Pending,
    /// The task already holds the accepted answer.
    Answered(Value),
}

/// What applying an event did, beyond the new state.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// The event was applied as described by its kind.
    Applied,
    /// `input_requested`: whether the request is answered.
    Input(InputReply),
    /// `input_accepted`: the keys accepted (possibly none) and whether that left no input
    /// outstanding.
    Accepted {
        /// Keys taken into the inbox, in key order.
        keys: Vec<String>,
        /// No input is outstanding any more.
        complete: bool,
    },
    /// `retry_requested` with an entry left.
    RetryScheduled {
        /// When the retry may run.
        retry_at: Timestamp,
        /// Retries consumed so far, this one included.
        retry_count: u32,
    },
    /// `retry_requested` with no entry left: the task failed.
    RetryExhausted,
}

/// Why an event cannot apply to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// The task is terminal: it never changes again.
    Terminal(TaskStatus),
    /// The key was used before for a different request.
    InputConflict(String),
    /// The event id was committed before for a different event, or by another claim.
    EventIdReused(String),
}

/// What [`Task::apply`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The effect.
    pub effect: Effect,
    /// Whether the task changed (and so the event is committed with a new revision). An
    /// event that changes nothing (the same question asked again, answers to no open
    /// question) leaves the task as it was, revision included.
    pub changed: bool,
}

impl Task {
    /// The earlier commit of `event`, if its id was committed: its revision and what a
    /// repeat reports. Repeating an event returns its first commit; reusing its id for a
    /// different event, or from another claim `generation`, is refused.
    pub fn replay_of(
        &self,
        event: &TaskEvent,
        generation: Option<u64>,
    ) -> Result<Option<(u64, Effect)>, Rejected> {
        let Some(applied) = self.events.iter().find(|e| e.id == event.id.as_str()) else {
            return Ok(None);
        };
        if applied.digest != event.digest() || applied.generation != generation {
            return Err(Rejected::EventIdReused(applied.id.clone()));
        }
        let effect = match &event.kind {
            EventKind::InputRequested { key, .. } => Effect::Input(self.input_reply(key)),
            EventKind::RetryRequested { .. } => match applied.retry {
                Some(retry) => Effect::RetryScheduled {
                    retry_at: retry.at,
                    retry_count: retry.count,
                },
                None => Effect::RetryExhausted,
            },
            _ => Effect::Applied,
        };
        Ok(Some((applied.revision, effect)))
    }

    /// Applies `event` at `now`, committed by claim `generation` (worker events) or by a
    /// request (`None`); `retry` is the task's retry policy. Pure: the task is all it
    /// reads and all it changes.
    ///
    /// Who may commit the event (lease, access), whether it was committed before
    /// ([`Task::replay_of`]) and the expected revision are the store's to check first. On
    /// `Err` the task is unchanged.
    pub fn apply(
        &mut self,
        event: TaskEvent,
        generation: Option<u64>,
        retry: &RetryPolicy,
        now: Timestamp,
    ) -> Result<Step, Rejected> {
        if self.status.is_terminal() {
            return Err(Rejected::Terminal(self.status));
        }
        // What the task remembers of the event, taken before its content moves into the task.
        let digest = event.digest();
        let is_status = matches!(event.kind, EventKind::StatusMessage { .. });
        let (note, effect) = match self.change(event.kind, retry, now)? {
            Change::Made(note, effect) => (note, effect),
            Change::Unchanged(effect) => {
                return Ok(Step {
                    effect,
                    changed: false,
                });
            }
        };
        let retry = match effect {
            Effect::RetryScheduled {
                retry_at,
                retry_count,
            } => Some(ScheduledRetry {
                at: retry_at,
                count: retry_count,
            }),
            _ => None,
        };
        self.record(event.id.as_str(), digest, is_status, retry, generation, now);
        self.history.push(now, note);
        Ok(Step {
            effect,
            changed: true,
        })
    }

    /// What an event of `kind` does to the (non-terminal) task, by kind.
    fn change(
        &mut self,
        kind: EventKind,
        retry: &RetryPolicy,
        now: Timestamp,
    ) -> Result<Change, Rejected> {
        Ok(match kind {
            EventKind::Started => self.start(),
            EventKind::StatusMessage { message } => {
                let note = HistoryKind::Status {
                    message: history_text(&message),
                };
                self.status_message = Some(message);
                Change::Made(note, Effect::Applied)
            }
            EventKind::InputRequested { key, request } => self.ask(key, request)?,
            EventKind::InputAccepted { responses } => self.take_answers(responses),
            EventKind::RetryRequested {
                error,
                status_message,
            } => self.retry_or_fail(error, status_message, retry, now),
            EventKind::Sleeping { until } => self.sleep(until),
            EventKind::Completed { result } => {
                self.finish(TaskStatus::Completed, Some(Outcome::Result(result)), None);
                Change::Made(HistoryKind::Completed, Effect::Applied)
            }
            EventKind::Failed {
                error,
                status_message,
            } => {
                let note = failed_note(&error);
                let message = status_message.or_else(|| Some(error.message.clone()));
                self.finish(TaskStatus::Failed, Some(Outcome::Error(error)), message);
                Change::Made(note, Effect::Applied)
            }
            EventKind::Cancelled { status_message } => {
                let note = HistoryKind::Cancelled {
                    message: status_message.as_deref().map(history_text),
                };
                self.finish(TaskStatus::Cancelled, None, status_message);
                Change::Made(note, Effect::Applied)
            }
        })
    }

    /// `started`: one more attempt, working unless inputs are still outstanding.
    fn start(&mut self) -> Change {
        self.attempt = self.attempt.saturating_add(1);
        self.status = if self.has_outstanding_inputs() {
            TaskStatus::InputRequired
        } else {
            TaskStatus::Working
        };
        let note = HistoryKind::Started {
            attempt: self.attempt,
        };
        Change::Made(note, Effect::Applied)
    }

    /// `input_requested`: a new key opens a question; the same key with the same request
    /// is a replayed guest reattaching, and with another request a conflict.
    fn ask(&mut self, key: String, request: Value) -> Result<Change, Rejected> {
        if let Some(existing) = self.inputs.get(&key) {
            if existing.request != request {
                return Err(Rejected::InputConflict(key));
            }
            return Ok(Change::Unchanged(Effect::Input(self.input_reply(&key))));
        }
        let note = HistoryKind::InputRequested { key: key.clone() };
        self.inputs.insert(
            key,
            InputEntry {
                request,
                response: None,
            },
        );
        self.status = TaskStatus::InputRequired;
        Ok(Change::Made(note, Effect::Input(InputReply::Pending)))
    }

    /// `input_accepted`: answers to open questions are kept (unknown and answered keys are
    /// ignored); with none left open the task works again.
    fn take_answers(&mut self, responses: serde_json::Map<String, Value>) -> Change {
        let mut keys = Vec::new();
        for (key, response) in responses {
            if let Some(entry) = self.inputs.get_mut(&key)
                && entry.response.is_none()
            {
                entry.response = Some(response);
                keys.push(key);
            }
        }
        let complete = !self.has_outstanding_inputs();
        if keys.is_empty() {
            return Change::Unchanged(Effect::Accepted { keys, complete });
        }
        if complete {
            self.status = TaskStatus::Working;
        }
        let note = HistoryKind::InputAnswered {
            keys: keys.clone(),
            resumed: complete,
        };
        Change::Made(note, Effect::Accepted { keys, complete })
    }

    /// `retry_requested`: with an entry left in `retry`, the claim is released and the
    /// retry scheduled; with none, the task fails with `error`.
    fn retry_or_fail(
        &mut self,
        error: JsonRpcError,
        status_message: Option<String>,
        retry: &RetryPolicy,
        now: Timestamp,
    ) -> Change {
        let Some(delay) = retry.delay_for(self.retry_count) else {
            let note = failed_note(&error);
            self.finish(
                TaskStatus::Failed,
                Some(Outcome::Error(error)),
                status_message,
            );
            return Change::Made(note, Effect::RetryExhausted);
        };
        let retry_at = now.plus_ms(delay);
        self.retry_count += 1;
        self.retry_at = Some(retry_at);
        self.claim = None;
        self.status = TaskStatus::Working;
        if status_message.is_some() {
            self.status_message = status_message;
        }
        let note = HistoryKind::RetryScheduled {
            due_at: retry_at,
            retry: self.retry_count,
            code: error.code,
            message: history_text(&error.message),
        };
        let effect = Effect::RetryScheduled {
            retry_at,
            retry_count: self.retry_count,
        };
        Change::Made(note, effect)
    }

    /// `sleeping`: the claim is given up and the task is due at `until`, working, with a
    /// status message that says until when. The guest's journal holds the sleep, so the
    /// attempt that claims it then replays to this point and goes on at once.
    fn sleep(&mut self, until: Timestamp) -> Change {
        self.claim = None;
        self.wake_at = Some(until);
        self.status = TaskStatus::Working;
        self.status_message = Some(format!("sleeping until {}", until.rfc3339()));
        Change::Made(HistoryKind::Sleeping { until }, Effect::Applied)
    }

    /// The next revision, its time and the event's id with what a replay reports (the
    /// retry it scheduled). Only the newest [`REMEMBERED_STATUS_EVENTS`] status messages
    /// are remembered.
    fn record(
        &mut self,
        id: &str,
        digest: u64,
        is_status: bool,
        retry: Option<ScheduledRetry>,
        generation: Option<u64>,
        now: Timestamp,
    ) {
        self.revision += 1;
        self.last_updated_at = now;
        self.events.push(AppliedEvent {
            id: id.to_owned(),
            revision: self.revision,
            digest,
            generation,
            status: is_status,
            retry,
        });
        if is_status
            && self.events.iter().filter(|e| e.status).count() > REMEMBERED_STATUS_EVENTS
            && let Some(oldest) = self.events.iter().position(|e| e.status)
        {
            self.events.remove(oldest);
        }
    }

    /// Makes the task terminal. Its status message becomes the terminal event's own (or
    /// none): a message set while it ran ("waiting for your answer…") described a state
    /// that is over.
    fn finish(&mut self, status: TaskStatus, outcome: Option<Outcome>, message: Option<String>) {
        self.status = status;
        self.outcome = outcome;
        self.claim = None;
        self.retry_at = None;
        self.wake_at = None;
        self.status_message = message;
    }

    fn input_reply(&self, key: &str) -> InputReply {
        match self.inputs.get(key).and_then(|e| e.response.clone()) {
            Some(answer) => InputReply::Answered(answer),
            None => InputReply::Pending,
        }
    }
}

/// What one event did to the task.
enum Change {
    /// The task changed: what its history notes, and the effect.
    Made(HistoryKind, Effect),
    /// Nothing changed (a question asked again, answers to no open question): the effect
    /// alone.
    Unchanged(Effect),
}

fn failed_note(error: &JsonRpcError) -> HistoryKind {
    HistoryKind::Failed {
        code: error.code,
        message: history_text(&error.message),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;
    use crate::model::{Claim, EventId, JsonRpcError, Scope, TaskId};

    const NOW: Timestamp = Timestamp(1_000_000);

    /// A task in `status`: working (claimed), waiting on the open question `q`, or ended.
    fn task_in(status: TaskStatus) -> Task {
        let mut t = Task {
            id: TaskId::generate(),
            scope: Scope::new("acme"),
            status,
            status_message: Some("before".into()),
            created_at: Timestamp(0),
            last_updated_at: Timestamp(0),
            ttl_ms: None,
            poll_interval_ms: None,
            revision: 3,
            attempt: 1,
            retry_count: 0,
            retry_at: None,
            wake_at: None,
            inputs: Default::default(),
            outcome: None,
            generation: 1,
            recoveries: 0,
            journal_entries: 0,
            journal_bytes: 0,
            stored_bytes: 0,
            claim: Some(Claim {
                generation: 1,
                token: 7,
                epoch: 1,
                expires_at: Timestamp(2_000_000),
                owner: "w".into(),
            }),
            client_capabilities: json!({}),
            events: Vec::new(),
            history: Default::default(),
            span: None,
            notify: Vec::new(),
        };
        if status == TaskStatus::InputRequired {
            t.inputs.insert(
                "q".into(),
                InputEntry {
                    request: question(),
                    response: None,
                },
            );
        }
        if status.is_terminal() {
            t.claim = None;
        }
        t
    }

    fn question() -> Value {
        json!({"method": "elicitation/create", "params": {"message": "ok?"}})
    }

    fn error() -> JsonRpcError {
        JsonRpcError::new(-32000, "no")
    }

    /// One event of every kind, by name.
    fn every_kind() -> Vec<EventKind> {
        let answers = Map::from_iter([("q".to_owned(), json!({"action": "accept"}))]);
        vec![
            EventKind::Started,
            EventKind::StatusMessage {
                message: "now".into(),
            },
            EventKind::InputRequested {
                key: "r".into(),
                request: question(),
            },
            EventKind::InputAccepted { responses: answers },
            EventKind::RetryRequested {
                error: error(),
                status_message: Some("again soon".into()),
            },
            EventKind::Completed {
                result: json!({"content": [], "isError": false}),
            },
            EventKind::Failed {
                error: error(),
                status_message: None,
            },
            EventKind::Cancelled {
                status_message: Some("stop".into()),
            },
        ]
    }

    const STATES: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// What every event kind does to a task in every state: the status after it and
    /// whether it changed the task, or the rejection.
    #[test]
    fn every_state_against_every_event_kind() {
        use TaskStatus::{Cancelled, Completed, Failed, InputRequired, Working};
        let retry = RetryPolicy::new([5_000]).expect("policy");
        // Rows: states in STATES' order. Columns: kinds in every_kind()'s order.
        // `None`: rejected as terminal. `Some((status, changed))` otherwise.
        let w = |s| Some((s, true));
        let same = |s| Some((s, false));
        let expected: [[Option<(TaskStatus, bool)>; 8]; 5] = [
            // started, status, requested, accepted, retry, completed, failed, cancelled
            [
                w(Working),
                w(Working),
                w(InputRequired),
                same(Working),
                w(Working),
                w(Completed),
                w(Failed),
                w(Cancelled),
            ],
            [
                w(InputRequired),
                w(InputRequired),
                w(InputRequired),
                w(Working),
                w(Working),
                w(Completed),
                w(Failed),
                w(Cancelled),
            ],
            [None; 8],
            [None; 8],
            [None; 8],
        ];
        for (row, state) in STATES.into_iter().enumerate() {
            for (col, kind) in every_kind().into_iter().enumerate() {
                let name = kind.name();
                let mut t = task_in(state);
                let before = t.clone();
                let event = TaskEvent::new(EventId::new("e").expect("id"), kind);
                let got = t.apply(event, Some(1), &retry, NOW);
                match expected[row][col] {
                    None => {
                        assert_eq!(got, Err(Rejected::Terminal(state)), "{state} + {name}");
                        assert_eq!(t, before, "{state} + {name}: a rejection changes nothing");
                    }
                    Some((status, changed)) => {
                        let step = got.unwrap_or_else(|e| panic!("{state} + {name}: {e:?}"));
                        assert_eq!(t.status, status, "{state} + {name}");
                        assert_eq!(step.changed, changed, "{state} + {name}");
                        if changed {
                            assert_eq!(t.revision, before.revision + 1, "{state} + {name}");
                            assert_eq!(t.last_updated_at, NOW, "{state} + {name}");
                            assert_eq!(t.events.len(), 1, "{state} + {name}");
                            assert_eq!(t.events[0].generation, Some(1));
                        } else {
                            assert_eq!(t, before, "{state} + {name}: nothing changed");
                        }
                        if status.is_terminal() {
                            assert!(t.claim.is_none() && t.retry_at.is_none(), "{name}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn what_each_transition_records() {
        let retry = RetryPolicy::new([5_000]).expect("policy");
        let ev = |kind| TaskEvent::new(EventId::new("e").expect("id"), kind);

        let mut t = task_in(TaskStatus::Working);
        t.apply(ev(EventKind::Started), Some(1), &retry, NOW)
            .expect("start");
        assert_eq!(t.attempt, 2);

        let mut t = task_in(TaskStatus::Working);
        let step = t
            .apply(ev(every_kind().remove(4)), Some(1), &retry, NOW)
            .expect("retry");
        let retry_at = NOW.plus_ms(5_000);
        assert_eq!(
            step.effect,
            Effect::RetryScheduled {
                retry_at,
                retry_count: 1
            }
        );
        assert_eq!(
            (t.retry_at, t.claim.is_none(), t.status_message.as_deref()),
            (Some(retry_at), true, Some("again soon"))
        );
        // The policy has one entry: the second request fails the task with its error.
        t.claim = task_in(TaskStatus::Working).claim;
        let step = t
            .apply(ev(every_kind().remove(4)), Some(1), &retry, NOW)
            .expect("exhausted");
        assert_eq!(step.effect, Effect::RetryExhausted);
        assert_eq!(t.status, TaskStatus::Failed);
        assert_eq!(t.outcome, Some(Outcome::Error(error())));

        // A failure without its own message shows the error's; the tool's own wins.
        let mut t = task_in(TaskStatus::Working);
        t.apply(ev(every_kind().remove(6)), Some(1), &retry, NOW)
            .expect("fail");
        assert_eq!(t.status_message.as_deref(), Some("no"));
        let mut t = task_in(TaskStatus::Working);
        let own = EventKind::Failed {
            error: error(),
            status_message: Some("the tool's words".into()),
        };
        t.apply(ev(own), Some(1), &retry, NOW).expect("fail");
        assert_eq!(t.status_message.as_deref(), Some("the tool's words"));
        // Completion clears what the running task said.
        let mut t = task_in(TaskStatus::Working);
        t.apply(ev(every_kind().remove(5)), Some(1), &retry, NOW)
            .expect("complete");
        assert_eq!(t.status_message, None);

        // The same question again changes nothing; another request under its key is refused.
        let mut t = task_in(TaskStatus::InputRequired);
        let again = EventKind::InputRequested {
            key: "q".into(),
            request: question(),
        };
        let step = t.apply(ev(again), Some(1), &retry, NOW).expect("again");
        assert_eq!(
            (step.effect, step.changed),
            (Effect::Input(InputReply::Pending), false)
        );
        let other = EventKind::InputRequested {
            key: "q".into(),
            request: json!({"method": "roots/list"}),
        };
        assert_eq!(
            t.apply(ev(other), Some(1), &retry, NOW),
            Err(Rejected::InputConflict("q".into()))
        );
    }

    #[test]
    fn a_repeated_event_replays_its_first_commit_and_a_reused_id_is_refused() {
        let retry = RetryPolicy::none();
        let mut t = task_in(TaskStatus::Working);
        let event = TaskEvent::new(
            EventId::new("g1-status").expect("id"),
            EventKind::StatusMessage {
                message: "half".into(),
            },
        );
        assert_eq!(t.replay_of(&event, Some(1)), Ok(None));
        t.apply(event.clone(), Some(1), &retry, NOW).expect("apply");
        assert_eq!(t.replay_of(&event, Some(1)), Ok(Some((4, Effect::Applied))));
        assert_eq!(
            t.replay_of(&event, Some(2)),
            Err(Rejected::EventIdReused("g1-status".into())),
            "another claim's event"
        );
        let different = TaskEvent::new(
            event.id.clone(),
            EventKind::StatusMessage {
                message: "other".into(),
            },
        );
        assert_eq!(
            t.replay_of(&different, Some(1)),
            Err(Rejected::EventIdReused("g1-status".into()))
        );
    }

    /// A retry commit tried again after an unknown reply learns the schedule its first
    /// commit made (or that it ended the task), not a bare "applied" that reads as neither.
    #[test]
    fn a_replayed_retry_reports_the_schedule_or_the_exhaustion_it_committed() {
        let retry = RetryPolicy::new([5_000]).expect("policy");
        let again = |id: &str| {
            TaskEvent::new(
                EventId::new(id).expect("id"),
                EventKind::RetryRequested {
                    error: error(),
                    status_message: None,
                },
            )
        };
        let mut t = task_in(TaskStatus::Working);
        let first = again("g1-outcome");
        let step = t.apply(first.clone(), Some(1), &retry, NOW).expect("apply");
        let scheduled = Effect::RetryScheduled {
            retry_at: NOW.plus_ms(5_000),
            retry_count: 1,
        };
        assert_eq!(step.effect, scheduled);
        // The retry ran since (another claim, another clock): the replay is still the
        // first commit's.
        t.retry_at = None;
        t.generation = 2;
        assert_eq!(
            t.replay_of(&first, Some(1)),
            Ok(Some((t.revision, scheduled)))
        );
        let last = again("g2-outcome");
        let step = t.apply(last.clone(), Some(2), &retry, NOW).expect("apply");
        assert_eq!(step.effect, Effect::RetryExhausted);
        assert_eq!(
            t.replay_of(&last, Some(2)),
            Ok(Some((t.revision, Effect::RetryExhausted)))
        );
    }

    #[test]
    fn only_the_newest_status_messages_are_remembered() {
        let retry = RetryPolicy::none();
        let mut t = task_in(TaskStatus::Working);
        for i in 0..REMEMBERED_STATUS_EVENTS + 5 {
            let event = TaskEvent::new(
                EventId::new(format!("s{i}")).expect("id"),
                EventKind::StatusMessage {
                    message: format!("{i}"),
                },
            );
            t.apply(event.clone(), Some(1), &retry, NOW).expect("apply");
        }
        assert_eq!(t.events.len(), REMEMBERED_STATUS_EVENTS);
        assert_eq!(t.events[0].id, "s5");
    }
}
