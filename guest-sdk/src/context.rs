//! [`Context`]: what an execution can ask of the host: cancellation, input, status, logs.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::bindings::snodo::tasks0_1_0::{context as host, types};
use crate::bindings::snodo::tasks0_5_0::timers;

/// The execution was asked to stop.
///
/// ```
/// use snodo_guest::{Cancelled, Context};
/// fn step(cx: &Context) -> Result<(), Cancelled> {
///     cx.check_cancelled()?;
///     Ok(())
/// }
/// # let _ = step;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the execution was cancelled")
    }
}

impl std::error::Error for Cancelled {}

/// Why input could not be obtained.
///
/// ```
/// use snodo_guest::{Context, Form, InputError, ToolResult};
/// fn ask(cx: &Context) -> ToolResult {
///     match cx.elicit("name", Form::new("Name?").string("name", "Name")) {
///         Ok(a) => ToolResult::text(a.str("name").unwrap_or("?")),
///         Err(InputError::Unsupported(_)) => ToolResult::text("this client cannot be asked"),
///         Err(e) => ToolResult::error(e.to_string()),
///     }
/// }
/// # let _ = ask;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputError {
    /// The execution is being cancelled; return promptly.
    Cancelled,
    /// The client did not declare the capability the request needs.
    Unsupported(String),
    /// The key was used before with a different request.
    KeyConflict(String),
    /// The request is malformed.
    Invalid(String),
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cancelled => f.write_str("cancelled while waiting for input"),
            Self::Unsupported(m) => write!(f, "the client cannot answer this request: {m}"),
            Self::KeyConflict(k) => {
                write!(f, "input key {k:?} was already used for another request")
            }
            Self::Invalid(m) => write!(f, "invalid input request: {m}"),
        }
    }
}

impl std::error::Error for InputError {}

/// Log severity.
///
/// ```
/// # fn f(cx: &snodo_guest::Context) {
/// cx.log(snodo_guest::LogLevel::Warning, "the export is larger than usual");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Detail for debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Worth noticing.
    Notice,
    /// Something looks wrong.
    Warning,
    /// Something failed.
    Error,
}

/// An elicitation form: a message and the fields to fill in.
///
/// ```
/// use snodo_guest::Form;
/// let form = Form::new("Export 1,200 rows to accounting?")
///     .boolean("confirm", "Export now")
///     .string("note", "A note for the audit log")
///     .require("confirm");
/// # let _ = form;
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Form {
    message: String,
    properties: Map<String, Value>,
    required: Vec<String>,
}

impl Form {
    /// A form showing `message`, with no fields yet.
    ///
    /// ```
    /// let form = snodo_guest::Form::new("Continue?");
    /// # let _ = form;
    /// ```
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            properties: Map::new(),
            required: Vec::new(),
        }
    }

    /// Adds a yes/no field.
    ///
    /// ```
    /// let form = snodo_guest::Form::new("Delete?").boolean("confirm", "Delete the file");
    /// # let _ = form;
    /// ```
    pub fn boolean(self, name: &str, title: &str) -> Self {
        self.field(name, json!({"type": "boolean", "title": title}))
    }

    /// Adds a text field.
    ///
    /// ```
    /// let form = snodo_guest::Form::new("Who?").string("name", "Your name");
    /// # let _ = form;
    /// ```
    pub fn string(self, name: &str, title: &str) -> Self {
        self.field(name, json!({"type": "string", "title": title}))
    }

    /// Adds a field with its own JSON Schema (a primitive type, as MCP forms allow).
    ///
    /// ```
    /// let form = snodo_guest::Form::new("How many?")
    ///     .field("count", serde_json::json!({"type": "integer", "minimum": 1}));
    /// # let _ = form;
    /// ```
    pub fn field(mut self, name: &str, schema: Value) -> Self {
        self.properties.insert(name.to_owned(), schema);
        self
    }

    /// Marks a field as required.
    ///
    /// ```
    /// let form = snodo_guest::Form::new("Who?").string("name", "Name").require("name");
    /// # let _ = form;
    /// ```
    pub fn require(mut self, name: &str) -> Self {
        self.required.push(name.to_owned());
        self
    }

    fn schema(&self) -> Value {
        let mut schema = json!({"type": "object", "properties": self.properties});
        if !self.required.is_empty() {
            schema["required"] = json!(self.required);
        }
        schema
    }
}

/// A question for the client.
///
/// ```
/// use snodo_guest::{Form, InputRequest};
/// let form = InputRequest::Form(Form::new("Proceed?").boolean("ok", "OK"));
/// let sampling = InputRequest::Sampling(serde_json::json!({
///     "messages": [{"role": "user", "content": {"type": "text", "text": "Summarize"}}],
///     "maxTokens": 100
/// }));
/// let roots = InputRequest::Roots;
/// # let _ = (form, sampling, roots);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum InputRequest {
    /// An elicitation form.
    Form(Form),
    /// An elicitation that sends the user to a URL.
    Url {
        /// What to tell the user.
        message: String,
        /// Where to send them.
        url: String,
        /// Correlates the completion notification.
        elicitation_id: String,
    },
    /// A `sampling/createMessage` request; the params as JSON.
    Sampling(Value),
    /// A `roots/list` request.
    Roots,
}

/// How the user answered an elicitation.
///
/// ```
/// use snodo_guest::{ElicitAction, Elicited};
/// let a = Elicited::from_json(&serde_json::json!({"action": "decline"}));
/// assert_eq!(a.action, ElicitAction::Decline);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitAction {
    /// Submitted the form.
    Accept,
    /// Said no.
    Decline,
    /// Dismissed it.
    Cancel,
}

/// An elicitation answer.
///
/// ```
/// # use serde_json::json;
/// let answer = snodo_guest::Elicited::from_json(&json!({"action": "accept", "content": {"confirm": true}}));
/// assert!(answer.accepted());
/// assert_eq!(answer.bool("confirm"), Some(true));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Elicited {
    /// What the user did.
    pub action: ElicitAction,
    /// The submitted fields (empty unless accepted).
    pub content: Map<String, Value>,
}

impl Elicited {
    /// Reads an `ElicitResult`. Anything unreadable counts as cancelled: a tool must never
    /// act on an answer it could not read.
    ///
    /// ```
    /// let a = snodo_guest::Elicited::from_json(&serde_json::json!({"nonsense": 1}));
    /// assert!(!a.accepted());
    /// ```
    pub fn from_json(v: &Value) -> Self {
        let action = match v.get("action").and_then(Value::as_str) {
            Some("accept") => ElicitAction::Accept,
            Some("decline") => ElicitAction::Decline,
            _ => ElicitAction::Cancel,
        };
        let content = v
            .get("content")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        Self { action, content }
    }

    /// The user submitted the form.
    ///
    /// ```
    /// # let a = snodo_guest::Elicited::from_json(&serde_json::json!({"action": "decline"}));
    /// assert!(!a.accepted());
    /// ```
    pub fn accepted(&self) -> bool {
        self.action == ElicitAction::Accept
    }

    /// A boolean field.
    ///
    /// ```
    /// # let a = snodo_guest::Elicited::from_json(&serde_json::json!({"action": "accept", "content": {"ok": false}}));
    /// assert_eq!(a.bool("ok"), Some(false));
    /// ```
    pub fn bool(&self, name: &str) -> Option<bool> {
        self.content.get(name).and_then(Value::as_bool)
    }

    /// A text field.
    ///
    /// ```
    /// # let a = snodo_guest::Elicited::from_json(&serde_json::json!({"action": "accept", "content": {"name": "Ada"}}));
    /// assert_eq!(a.str("name"), Some("Ada"));
    /// ```
    pub fn str(&self, name: &str) -> Option<&str> {
        self.content.get(name).and_then(Value::as_str)
    }
}

/// The execution's view of the host.
///
/// ```
/// use snodo_guest::{Context, Form, ToolResult};
///
/// fn run(cx: &Context) -> ToolResult {
///     let answer = match cx.elicit("confirm", Form::new("Go?").boolean("confirm", "Go")) {
///         Ok(a) => a,
///         Err(e) => return ToolResult::error(e.to_string()),
///     };
///     if !answer.accepted() || answer.bool("confirm") != Some(true) {
///         return ToolResult::text("nothing done");
///     }
///     cx.set_status("working on it");
///     ToolResult::text(format!("done (key {})", cx.idempotency_key()))
/// }
/// # let _ = run;
/// ```
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) task_id: Option<String>,
    pub(crate) idempotency_key: String,
    pub(crate) attempt: u32,
}

impl Context {
    /// The task's id, or `None` when the call runs synchronously.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// let in_task = cx.task_id().is_some();
    /// # let _ = in_task; }
    /// ```
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    /// The identity to deduplicate external effects by: the same for every attempt of a
    /// task (recovered and retried ones included).
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// let header = format!("Idempotency-Key: {}", cx.idempotency_key());
    /// # let _ = header; }
    /// ```
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// 1 for a task's first execution, one more for every later execution of the same
    /// task: a retry the tool asked for, a recovery after a crash or a lost lease, and a
    /// replay after the guest was released while waiting for input (it waited longer than
    /// the host's `runner.park_after_ms`, and the answer started a fresh execution). So
    /// `attempt` counts executions, not failures: a tool that must tell retries apart
    /// keeps its own count, e.g. in its status or its outcome's data.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// let first = cx.attempt() == 1;
    /// # let _ = first; }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Who the tool runs for: for a task, the principal stored when it was created, the
    /// same on every attempt. Never a credential.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// let tenant = cx.caller().tenant;
    /// # let _ = tenant; }
    /// ```
    pub fn caller(&self) -> crate::Caller {
        crate::Caller::current()
    }

    /// The capabilities the calling client declared (a JSON object): for a task, those of
    /// the client that created it.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// let can_ask = cx.client_capabilities().get("elicitation").is_some();
    /// # let _ = can_ask; }
    /// ```
    pub fn client_capabilities(&self) -> serde_json::Value {
        crate::caller::client_capabilities()
    }

    /// Whether the host asked this execution to stop.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// while !cx.is_cancelled() {
    ///     break; // one unit of work
    /// }
    /// # }
    /// ```
    pub fn is_cancelled(&self) -> bool {
        host::is_cancelled()
    }

    /// `Err(Cancelled)` once the host asked this execution to stop, for use with `?`.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) -> Result<(), snodo_guest::Cancelled> {
    /// cx.check_cancelled()?;
    /// # Ok(()) }
    /// ```
    pub fn check_cancelled(&self) -> Result<(), Cancelled> {
        if self.is_cancelled() {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }

    /// Sleeps for `duration`, waking early with `Err(Cancelled)` when the execution is
    /// cancelled.
    ///
    /// The host keeps the time. In a task, a sleep at least as long as the host's threshold
    /// (`runner.sleep_park_after_ms`, 1 s by default) parks the task: this guest is stopped
    /// here and never returns from the call, the task holds no execution slot while it
    /// sleeps, and when the time comes a fresh guest runs the tool again from the start,
    /// with every journaled request and every answer handed back, and this call returns at
    /// once. So what the tool does before a long sleep must be safe to do again, or go
    /// through the journal (outbound requests) or `await_input`. Shorter sleeps, and sleeps
    /// of synchronous calls, wait in place.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) -> Result<(), snodo_guest::Cancelled> {
    /// cx.sleep(std::time::Duration::from_secs(60))?;
    /// # Ok(()) }
    /// ```
    pub fn sleep(&self, duration: Duration) -> Result<(), Cancelled> {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        timers::sleep_for(ms).map_err(|timers::SleepError::Cancelled| Cancelled)
    }

    /// Sleeps until `at` (the host's clock), as [`Context::sleep`] does; a time already past
    /// returns at once.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) -> Result<(), snodo_guest::Cancelled> {
    /// let tomorrow = std::time::SystemTime::now() + std::time::Duration::from_secs(86_400);
    /// cx.sleep_until(tomorrow)?;
    /// # Ok(()) }
    /// ```
    pub fn sleep_until(&self, at: std::time::SystemTime) -> Result<(), Cancelled> {
        let ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        timers::sleep_until(ms).map_err(|timers::SleepError::Cancelled| Cancelled)
    }

    /// Asks the client for input and waits for the answer (the MCP result as JSON).
    ///
    /// In a task the question is recorded before waiting; the task shows `input_required`
    /// until the client answers with `tasks/update`. Asking again with the same key and the
    /// same request returns the stored answer at once.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) -> Result<(), snodo_guest::InputError> {
    /// let roots = cx.await_input("roots", snodo_guest::InputRequest::Roots)?;
    /// # let _ = roots; Ok(()) }
    /// ```
    pub fn await_input(&self, key: &str, request: InputRequest) -> Result<Value, InputError> {
        let answer = host::await_input(key, &to_wit_request(&request)).map_err(from_wit_error)?;
        Ok(parse_answer(&answer))
    }

    /// Asks several questions at once (the client sees them together) and waits for all
    /// the answers, returned in the order asked.
    ///
    /// ```
    /// use snodo_guest::{Form, InputRequest};
    /// # fn f(cx: &snodo_guest::Context) -> Result<(), snodo_guest::InputError> {
    /// let answers = cx.await_inputs(&[
    ///     ("a", InputRequest::Form(Form::new("First?").string("name", "Name"))),
    ///     ("b", InputRequest::Form(Form::new("Second?").boolean("confirm", "Sure"))),
    /// ])?;
    /// assert_eq!(answers.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn await_inputs(
        &self,
        requests: &[(&str, InputRequest)],
    ) -> Result<Vec<Value>, InputError> {
        let wit: Vec<(String, types::InputRequest)> = requests
            .iter()
            .map(|(k, r)| ((*k).to_owned(), to_wit_request(r)))
            .collect();
        let answers = host::await_inputs(&wit).map_err(from_wit_error)?;
        Ok(answers.iter().map(|a| parse_answer(a)).collect())
    }

    /// Shows `form` to the user and waits for the answer.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) -> Result<(), snodo_guest::InputError> {
    /// let answer = cx.elicit("name", snodo_guest::Form::new("Your name?").string("name", "Name"))?;
    /// let name = answer.str("name").unwrap_or("stranger");
    /// # let _ = name; Ok(()) }
    /// ```
    pub fn elicit(&self, key: &str, form: Form) -> Result<Elicited, InputError> {
        let answer = self.await_input(key, InputRequest::Form(form))?;
        Ok(Elicited::from_json(&answer))
    }

    /// Sets the task's status message (ignored for synchronous calls). The host commits at
    /// most about four a second per attempt (the newest wins); when the task finishes, its
    /// status message is replaced by the end's (none for a result, the error's message for
    /// a failure).
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// cx.set_status("exported 500 of 1,200 rows");
    /// # }
    /// ```
    pub fn set_status(&self, message: &str) {
        host::set_status(message);
    }

    /// Reports progress. One call serves both modes:
    /// - on a synchronous call, the client receives `notifications/progress` when its request
    ///   carried `_meta.progressToken` and accepts `text/event-stream`; otherwise it is
    ///   dropped;
    /// - in a task, it becomes the task's status message (`"half way (50 of 100)"` below),
    ///   coalesced as [`Context::set_status`] is, since a polling client sees no
    ///   notifications.
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// cx.progress(50.0, Some(100.0), Some("half way"));
    /// # }
    /// ```
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        host::progress(progress, total, message);
    }

    /// Writes a line to the host's logs, at once and at this level, marked as guest output
    /// with the tool and the task (on synchronous calls too). The host keeps at most 1,000
    /// lines per execution. Clients do not see it: for them, use [`Context::set_status`] or
    /// [`Context::progress`].
    ///
    /// ```
    /// # fn f(cx: &snodo_guest::Context) {
    /// cx.log(snodo_guest::LogLevel::Info, "starting export");
    /// # }
    /// ```
    pub fn log(&self, level: LogLevel, message: &str) {
        let level = match level {
            LogLevel::Debug => types::LogLevel::Debug,
            LogLevel::Info => types::LogLevel::Info,
            LogLevel::Notice => types::LogLevel::Notice,
            LogLevel::Warning => types::LogLevel::Warning,
            LogLevel::Error => types::LogLevel::Error,
        };
        host::log(level, message);
    }
}

fn parse_answer(answer: &str) -> Value {
    // The host hands over what the store accepted; it is JSON by construction.
    serde_json::from_str(answer).unwrap_or(Value::Null)
}

fn to_wit_request(r: &InputRequest) -> types::InputRequest {
    match r {
        InputRequest::Form(form) => types::InputRequest::ElicitForm(types::ElicitForm {
            message: form.message.clone(),
            requested_schema: form.schema().to_string(),
        }),
        InputRequest::Url {
            message,
            url,
            elicitation_id,
        } => types::InputRequest::ElicitUrl(types::ElicitUrl {
            message: message.clone(),
            url: url.clone(),
            elicitation_id: elicitation_id.clone(),
        }),
        InputRequest::Sampling(params) => types::InputRequest::Sampling(params.to_string()),
        InputRequest::Roots => types::InputRequest::Roots,
    }
}

fn from_wit_error(e: types::InputError) -> InputError {
    match e {
        types::InputError::Cancelled => InputError::Cancelled,
        types::InputError::Unsupported(m) => InputError::Unsupported(m),
        types::InputError::KeyConflict(k) => InputError::KeyConflict(k),
        types::InputError::Invalid(m) => InputError::Invalid(m),
    }
}
