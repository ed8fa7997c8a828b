//! State-transition events: versioned, validated, JSON-safe, each with an id.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Invalid;
use super::task::{JsonRpcError, MAX_INPUT_KEY_LEN};

/// The schema version this build writes for [`TaskEvent`].
pub const EVENT_SCHEMA_VERSION: u32 = 1;

const MAX_EVENT_ID_LEN: usize = 128;
const INPUT_METHODS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

/// The id of one event. Repeating an event with the same id returns the first commit
/// instead of applying it twice; reusing an id for a different event is rejected.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventId(String);

impl EventId {
    /// An event id chosen by the caller: 1 to 128 printable ASCII characters.
    pub fn new(id: impl Into<String>) -> Result<Self, Invalid> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_EVENT_ID_LEN || !id.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Invalid::new(format!(
                "an event id is 1..={MAX_EVENT_ID_LEN} printable ASCII characters"
            )));
        }
        Ok(Self(id))
    }

    /// The id of a worker's `what` event in claim `generation` (`g{generation}-{what}`):
    /// deterministic, so a commit retried after an unknown reply is a replay.
    pub fn for_claim(generation: u64, what: &'static str) -> Self {
        debug_assert!(
            !what.is_empty() && what.len() <= 64 && what.bytes().all(|b| b.is_ascii_graphic()),
            "a worker event name is short printable ASCII"
        );
        // At most 20 digits, a `g`, a `-` and 64 characters: within MAX_EVENT_ID_LEN.
        Self(format!("g{generation}-{what}"))
    }

    /// A fresh random event id.
    pub fn random() -> Self {
        Self(format!("e-{}", super::TaskId::generate()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What happened. Worker events need the lease of the current claim; `input_accepted` and
/// `cancelled` come from requests and need an access value for that action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum EventKind {
    /// An attempt started or resumed (worker).
    Started,
    /// The executor changed the status message (worker).
    StatusMessage {
        /// The new message.
        message: String,
    },
    /// The executor needs input from the client (worker).
    InputRequested {
        /// Lifetime-unique key.
        key: String,
        /// The MCP input request (`{"method": ..., "params": ...}`).
        request: Value,
    },
    /// The client answered input requests (request, `update` access).
    InputAccepted {
        /// Responses by key; only keys still outstanding are accepted.
        responses: Map<String, Value>,
    },
    /// The executor asked to try again later (worker).
    RetryRequested {
        /// The error to fail with if no retry is left.
        error: JsonRpcError,
        /// The status message shown while waiting.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status_message: Option<String>,
    },
    /// The executor sleeps until `until` (store clock): the claim is given up and the task
    /// is due again then, with no guest running meanwhile (worker).
    Sleeping {
        /// When it wakes.
        until: super::Timestamp,
    },
    /// The executor finished with a result (worker).
    Completed {
        /// The `CallToolResult`.
        result: Value,
    },
    /// The executor or the runner failed the task (worker).
    Failed {
        /// The JSON-RPC error.
        error: JsonRpcError,
        /// Why, for humans.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status_message: Option<String>,
    },
    /// The client cancelled the task (request, `cancel` access).
    Cancelled {
        /// Why, for humans.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status_message: Option<String>,
    },
}

impl EventKind {
    /// The kind's name, for errors and instrumentation.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::StatusMessage { .. } => "status_message",
            Self::InputRequested { .. } => "input_requested",
            Self::InputAccepted { .. } => "input_accepted",
            Self::RetryRequested { .. } => "retry_requested",
            Self::Sleeping { .. } => "sleeping",
            Self::Completed { .. } => "completed",
            Self::Failed { .. } => "failed",
            Self::Cancelled { .. } => "cancelled",
        }
    }

    /// Whether the event needs a worker lease (as opposed to request access).
    pub fn is_worker_event(&self) -> bool {
        !matches!(self, Self::InputAccepted { .. } | Self::Cancelled { .. })
    }
}

/// One state-transition event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskEvent {
    /// [`EVENT_SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// The idempotency id.
    pub id: EventId,
    /// What happened.
    pub kind: EventKind,
}

impl TaskEvent {
    /// An event of `kind` with id `id`.
    pub fn new(id: EventId, kind: EventKind) -> Self {
        Self {
            schema_version: EVENT_SCHEMA_VERSION,
            id,
            kind,
        }
    }

    /// An event of `kind` with a fresh random id.
    pub fn random(kind: EventKind) -> Self {
        Self::new(EventId::random(), kind)
    }

    /// Checks the event's own rules (shapes and sizes); state rules are the store's.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.schema_version != EVENT_SCHEMA_VERSION {
            return Err(Invalid::new(format!(
                "event schema version {} is not supported (this build reads {EVENT_SCHEMA_VERSION})",
                self.schema_version
            )));
        }
        EventId::new(self.id.0.clone())?;
        let message = |m: &Option<String>| check_message(m.as_deref());
        match &self.kind {
            EventKind::Started => Ok(()),
            EventKind::StatusMessage { message: m } => check_message(Some(m)),
            EventKind::InputRequested { key, request } => {
                check_input_key(key)?;
                check_input_request(request)
            }
            // Values are not validated: keys that are not outstanding are ignored whatever
            // they hold, and accepted answers are the guest's to interpret.
            EventKind::InputAccepted { .. } | EventKind::Sleeping { .. } => Ok(()),
            EventKind::RetryRequested {
                error,
                status_message,
            }
            | EventKind::Failed {
                error,
                status_message,
            } => {
                error.validate()?;
                message(status_message)
            }
            EventKind::Completed { result } => check_result(result),
            EventKind::Cancelled { status_message } => message(status_message),
        }
    }

    /// A stable digest of the event's content (not its id), to recognise a replay.
    pub fn digest(&self) -> u64 {
        // serde_json writes object keys in sorted order (no `preserve_order`), so equal
        // events serialise to equal bytes.
        // SHA-256, cut to 64 bits: a different event under a reused id must not pass for
        // a replay, which a non-cryptographic hash would allow by construction.
        use sha2::{Digest, Sha256};
        let bytes = serde_json::to_vec(&self.kind).unwrap_or_default();
        let h = Sha256::digest(&bytes);
        let mut first = [0u8; 8];
        first.copy_from_slice(&h[..8]);
        u64::from_le_bytes(first)
    }
}

/// The longest status message, in bytes (UTF-8): what the store accepts, and what a guest's
/// messages (status, retry, progress lines) are cut to before they reach it.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 4 * 1024;

/// Refuses a status message over [`MAX_STATUS_MESSAGE_BYTES`].
pub(crate) fn check_message(m: Option<&str>) -> Result<(), Invalid> {
    match m {
        Some(m) if m.len() > MAX_STATUS_MESSAGE_BYTES => Err(Invalid::new(format!(
            "a status message is at most {MAX_STATUS_MESSAGE_BYTES} bytes, got {}",
            m.len()
        ))),
        _ => Ok(()),
    }
}

/// `message` cut to at most [`MAX_STATUS_MESSAGE_BYTES`] bytes, at a character boundary: a
/// guest's message is shortened, never refused.
pub fn truncate_status_message(mut message: String) -> String {
    if message.len() > MAX_STATUS_MESSAGE_BYTES {
        let mut end = MAX_STATUS_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

/// Input keys are lifetime-unique names chosen by the executor.
pub(crate) fn check_input_key(key: &str) -> Result<(), Invalid> {
    if key.is_empty() || key.len() > MAX_INPUT_KEY_LEN {
        return Err(Invalid::new(format!(
            "an input key is 1..={MAX_INPUT_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

fn check_input_request(request: &Value) -> Result<(), Invalid> {
    let method = request.get("method").and_then(Value::as_str);
    match method {
        Some(m) if INPUT_METHODS.contains(&m) => {}
        _ => {
            return Err(Invalid::new(format!(
                "an input request is {{\"method\": one of {INPUT_METHODS:?}, \"params\": {{...}}}}"
            )));
        }
    }
    match request.get("params") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(Invalid::new("an input request's params must be an object")),
    }
}

fn check_result(result: &Value) -> Result<(), Invalid> {
    let content = result.get("content").and_then(Value::as_array);
    match content {
        Some(c) if c.iter().all(Value::is_object) => Ok(()),
        _ => Err(Invalid::new(
            "a completed result is a CallToolResult: an object with a `content` array of content blocks",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_guests_status_message_is_cut_to_the_stored_limit_in_bytes_at_a_character_boundary() {
        // Four-byte characters: a cut counted in characters would keep four times the limit.
        let long = "\u{1F600}".repeat(MAX_STATUS_MESSAGE_BYTES);
        let cut = truncate_status_message(long);
        assert_eq!(
            cut.len(),
            MAX_STATUS_MESSAGE_BYTES,
            "4096 is a multiple of 4"
        );
        assert!(check_message(Some(&cut)).is_ok());
        // A cut that would split a character stops before it.
        let odd = format!("a{}", "\u{e9}".repeat(MAX_STATUS_MESSAGE_BYTES));
        let cut = truncate_status_message(odd);
        assert_eq!(cut.len(), MAX_STATUS_MESSAGE_BYTES - 1);
        assert!(check_message(Some(&format!("{cut}ab"))).is_err());
        assert_eq!(truncate_status_message("short".into()), "short");
    }

    fn ev(kind: EventKind) -> TaskEvent {
        TaskEvent::new(EventId::new("e1").unwrap(), kind)
    }

    #[test]
    fn events_have_a_stable_json_form() {
        let e = ev(EventKind::InputRequested {
            key: "confirm".into(),
            request: json!({"method": "elicitation/create", "params": {"message": "ok?"}}),
        });
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["schemaVersion"], 1);
        assert_eq!(v["kind"]["type"], "input_requested");
        let back: Option<TaskEvent> = serde_json::from_value(v).ok();
        assert_eq!(back, Some(e));
    }

    #[test]
    fn validation_rejects_bad_shapes() {
        assert!(EventId::new("").is_err());
        assert!(EventId::new("has space").is_err());
        assert!(EventId::new("x".repeat(129)).is_err());
        let bad_method = ev(EventKind::InputRequested {
            key: "k".into(),
            request: json!({"method": "tools/call"}),
        });
        assert!(bad_method.validate().is_err());
        let empty_key = ev(EventKind::InputRequested {
            key: String::new(),
            request: json!({"method": "roots/list"}),
        });
        assert!(empty_key.validate().is_err());
        let no_content = ev(EventKind::Completed {
            result: json!({"text": "hi"}),
        });
        assert!(no_content.validate().is_err());
        let ok = ev(EventKind::Completed {
            result: json!({"content": [{"type": "text", "text": "hi"}], "isError": true}),
        });
        assert_eq!(ok.validate(), Ok(()));
        let empty_error = ev(EventKind::Failed {
            error: JsonRpcError::new(-32603, ""),
            status_message: None,
        });
        assert!(empty_error.validate().is_err());
        let mut newer = ok.clone();
        newer.schema_version = 2;
        assert!(newer.validate().is_err());
    }

    #[test]
    fn digest_ignores_id_and_key_order() {
        let a = TaskEvent::new(
            EventId::new("a").unwrap(),
            EventKind::Completed {
                result: json!({"content": [], "x": 1, "y": 2}),
            },
        );
        let b: TaskEvent = serde_json::from_str(
            r#"{"schemaVersion":1,"id":"b","kind":{"type":"completed","result":{"y":2,"x":1,"content":[]}}}"#,
        )
        .unwrap();
        assert_eq!(a.digest(), b.digest());
        let c = ev(EventKind::Completed {
            result: json!({"content": [], "x": 2}),
        });
        assert_ne!(a.digest(), c.digest());
    }
}
