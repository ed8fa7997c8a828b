//! The gateway: serves an upstream MCP server's tools as Snodo tools. The host lists the
//! upstream's tools and serves each under its own name on this component, telling it
//! through the tool's environment where the upstream is, which of its tools the name stands
//! for, which protocol revision it speaks and whether a person confirms each call; the
//! host adds the upstream's credential to the requests itself (the guest never sees it).
//!
//! A call, run as a task:
//! 1. asks for confirmation first when the tool is confirmed (`await-input`: the task
//!    waits, holding nothing, and a replay is answered from the stored answer);
//! 2. sends the upstream's `tools/call` through the host's `wasi:http`, after the handshake
//!    a 2025-11-25 upstream needs, with an idempotency key that is the same on every
//!    attempt: the task's in `_meta`, and in the `Idempotency-Key` header the host's key of
//!    the journaled request (`<task id>-<position>`), or the task's where nothing is
//!    journaled;
//! 3. follows an upstream that answers with a task of its own (2026-07-28 Tasks) with
//!    `tasks/get` between durable sleeps, until it finishes.
//!
//! Every request goes through the task's journal, so a replay (a crash, a park, a sleep)
//! is answered from it at the same position and sends nothing twice that was answered.
//! The requests are the same on every replay given the same answers: fixed JSON-RPC ids,
//! no clock and no randomness in what is sent.
//!
//! An upstream that cannot be reached, times out or answers 401, 408, 429, 500, 502, 503
//! or 504 is tried again on the tool's retry list (the same idempotency key each time); an
//! upstream's JSON-RPC error fails the task with that error, its code and message as
//! the upstream gave them.

use serde_json::{Map, Value, json};
use snodo_guest::http::{self, HttpError, Response};
use snodo_guest::{
    Content, Context, Dispatch, Form, InputError, InputRequest, Outcome, RpcError, Tool,
    ToolResult, ToolSpec,
};

/// The revision a 2025-11-25 upstream is asked for in its handshake.
const V2025: &str = "2025-11-25";
/// The stateless revision, with the Tasks extension.
const V2026: &str = "2026-07-28";
/// The Tasks extension's capability key.
const TASKS: &str = "io.modelcontextprotocol/tasks";
/// Where the call's idempotency key goes in `_meta`, beside the header.
const IDEMPOTENCY_META: &str = "io.snodo/idempotencyKey";
/// The JSON-RPC id of the discovery, the handshake, the call and the first poll (later
/// polls count up).
const DISCOVER_ID: u64 = 0;
const INITIALIZE_ID: u64 = 1;
const CALL_ID: u64 = 2;
const FIRST_POLL_ID: u64 = 3;
/// The bounds put on an upstream task's suggested poll interval.
const MIN_POLL_MS: u64 = 100;
/// The most rounds of questions one call may ask before it is failed.
const MAX_ROUNDS: u64 = 16;
const MAX_POLL_MS: u64 = 60_000;

/// The component's own tool, which a host serving upstream tools never lists: it
/// describes what every served name does.
pub struct Gateway;

impl Tool for Gateway {
    const NAME: &'static str = "gateway";
    type Args = Value;

    fn spec() -> ToolSpec {
        ToolSpec::with_input_schema(json!({"type": "object"})).description(
            "Calls an upstream MCP server's tool; served under each upstream tool's own name",
        )
    }

    fn run(cx: &Context, args: Value) -> Outcome {
        Self::dispatch(cx, Self::NAME, args)
    }
}

impl Dispatch for Gateway {
    fn dispatch(cx: &Context, tool: &str, arguments: Value) -> Outcome {
        let mut upstream = match Upstream::from_env(tool) {
            Ok(u) => u,
            Err(e) => return Outcome::Failed(e),
        };
        upstream.client = cx.client_capabilities();
        if upstream.confirm {
            match confirmed(cx, &upstream, &arguments) {
                Ok(true) => {}
                Ok(false) => {
                    return ToolResult::error(format!(
                        "not confirmed: nothing was sent to {}",
                        upstream.name
                    ))
                    .into();
                }
                Err(e) => return e,
            }
        }
        cx.set_status(&format!("calling {} on {}", upstream.tool, upstream.name));
        if Upstream::asked()
            && let Err(e) = upstream.discover()
        {
            return e;
        }
        match upstream.call(cx, arguments) {
            Ok(result) => Outcome::Completed(result),
            Err(e) => e,
        }
    }
}

/// Where a served name leads: read from the tool's environment, which the host sets.
struct Upstream {
    /// The upstream's name in the host's configuration.
    name: String,
    /// Its MCP endpoint.
    url: String,
    /// The upstream's own name for the tool.
    tool: String,
    /// The revision it speaks.
    protocol: String,
    /// Whether each call is confirmed by a person first.
    confirm: bool,
    /// The capabilities of the client that called (for a task, the one that created it).
    client: Value,
}

impl Upstream {
    fn from_env(served: &str) -> Result<Self, RpcError> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| {
                RpcError::internal(format!(
                    "{served:?} is not served as an upstream tool: {name} is not in its \
                     environment (the host sets it for the tools of [[upstreams]])"
                ))
            })
        };
        let protocol = var("SNODO_UPSTREAM_PROTOCOL")?;
        if protocol != V2025 && protocol != V2026 && protocol != "auto" {
            return Err(RpcError::internal(format!(
                "SNODO_UPSTREAM_PROTOCOL is {protocol:?}: the gateway speaks {V2025} and {V2026} \
                 (or \"auto\": asked)"
            )));
        }
        let mut upstream = Self {
            name: var("SNODO_UPSTREAM_NAME")?,
            url: var("SNODO_UPSTREAM_URL")?,
            tool: var("SNODO_UPSTREAM_TOOL")?,
            protocol,
            confirm: std::env::var("SNODO_UPSTREAM_CONFIRM").is_ok_and(|v| v == "true"),
            client: Value::Null,
        };
        if upstream.protocol == "auto" {
            upstream.protocol = V2026.into();
        }
        Ok(upstream)
    }

    /// Whether the host did not know the revision (the upstream had not been listed when
    /// the task ran): then `server/discover` decides, and an upstream that does not take
    /// it is spoken to as 2025-11-25.
    fn asked() -> bool {
        std::env::var("SNODO_UPSTREAM_PROTOCOL").is_ok_and(|p| p == "auto")
    }

    /// `server/discover`: whether the upstream speaks 2026-07-28. No answer at all is a
    /// failure (tried again on the retry list); an answer that is not a discovery means
    /// an earlier revision.
    fn discover(&mut self) -> Result<(), Outcome> {
        let mut params = json!({});
        params["_meta"] = Value::Object(self.request_meta());
        match self.request(DISCOVER_ID, "server/discover", params, None, None) {
            Ok(found) => {
                let listed = found["supportedVersions"].as_array();
                if !listed.is_some_and(|v| v.iter().any(|v| v == V2026)) {
                    self.protocol = V2025.into();
                }
                Ok(())
            }
            Err(Sent::Http(e)) => Err(self.failure(Sent::Http(e))),
            Err(Sent::Busy(status, body)) => Err(self.failure(Sent::Busy(status, body))),
            Err(_) => {
                self.protocol = V2025.into();
                Ok(())
            }
        }
    }

    /// The call, and the upstream task it became when it did, followed to its end.
    fn call(&self, cx: &Context, arguments: Value) -> Result<ToolResult, Outcome> {
        let mut session = if self.protocol == V2025 {
            self.handshake()?
        } else {
            None
        };
        let done = self.converse(cx, arguments, &mut session);
        // A 2025-11-25 session lives on the upstream until it is told otherwise: ended here,
        // once the call and any task it started are over. (A task parked in a long sleep or
        // waiting for input never reaches this line in that instance; its replay does.) An
        // upstream that keeps sessions until they expire answers 405, which is as good.
        if let Some(s) = session {
            let _ = http::delete(&self.url)
                .header("mcp-session-id", &s)
                .header("mcp-protocol-version", V2025)
                .send();
        }
        done
    }

    /// The call on `session` (a 2025-11-25 upstream's, replaced if the upstream forgets
    /// it): its rounds of questions, then the task it started, if it started one.
    fn converse(
        &self,
        cx: &Context,
        arguments: Value,
        session: &mut Option<String>,
    ) -> Result<ToolResult, Outcome> {
        let mut meta = Map::new();
        meta.insert(IDEMPOTENCY_META.into(), cx.idempotency_key().into());
        if self.protocol == V2026 {
            meta.extend(self.request_meta());
        }
        let mut params = json!({"name": self.tool, "arguments": arguments, "_meta": meta});
        // In a journaled task the host keys the request itself (`<task id>-<position>`, the
        // same on every attempt) and refuses the header from a guest; elsewhere the call
        // carries the task's key.
        let journaled = cx.task_id().is_some()
            && std::env::var("SNODO_UPSTREAM_JOURNAL").is_ok_and(|j| j == "true");
        let key = (!journaled).then(|| cx.idempotency_key());
        // Each round of an upstream that asks (an incomplete result) is the call again,
        // with the answers: the same request id keeps the rounds the same on a replay.
        for round in 0..=MAX_ROUNDS {
            let id = CALL_ID + 1_000 * round;
            let result = self.on_session(session, id, "tools/call", params.clone(), key)?;
            match result.get("resultType").and_then(Value::as_str) {
                Some("task") => return self.follow(cx, &result, session),
                Some("input_required") => {
                    let answers = self.ask(cx, &format!("upstream-{round}"), &result)?;
                    params["inputResponses"] = Value::Object(answers);
                    match result.get("requestState") {
                        Some(state) => params["requestState"] = state.clone(),
                        None => {
                            if let Some(p) = params.as_object_mut() {
                                p.remove("requestState");
                            }
                        }
                    }
                }
                _ => return Ok(tool_result(&result)),
            }
        }
        Err(Outcome::Failed(RpcError::internal(format!(
            "{} asked for input more than {MAX_ROUNDS} times during {}",
            self.name, self.tool
        ))))
    }

    /// Asks the client the questions of an upstream's `inputRequests` (of an incomplete
    /// result or a task waiting for input), as this task's questions under keys beginning
    /// with `prefix`: the answers by the upstream's keys. A replay gets the stored answers
    /// back without asking again.
    fn ask(
        &self,
        cx: &Context,
        prefix: &str,
        asking: &Value,
    ) -> Result<Map<String, Value>, Outcome> {
        let Some(requests) = asking.get("inputRequests").and_then(Value::as_object) else {
            return Err(Outcome::Failed(RpcError::internal(format!(
                "{} asked for input during {} without inputRequests",
                self.name, self.tool
            ))));
        };
        let mut keys = Vec::new();
        let mut questions = Vec::new();
        for (key, request) in requests {
            let question = input_request(request).map_err(|why| {
                Outcome::Failed(RpcError::internal(format!(
                    "{} asked during {} for what the gateway cannot forward: {why}",
                    self.name, self.tool
                )))
            })?;
            keys.push((key.clone(), format!("{prefix}-{key}")));
            questions.push(question);
        }
        let asked: Vec<(&str, InputRequest)> = (keys.iter())
            .map(|(_, ours)| ours.as_str())
            .zip(questions)
            .collect();
        let answers = cx.await_inputs(&asked).map_err(|e| match e {
            InputError::Cancelled => Outcome::Failed(RpcError::new(-32800, "cancelled")),
            e => Outcome::Failed(RpcError::internal(format!(
                "{} asked during {}, and the question cannot be put to this client: {e}",
                self.name, self.tool
            ))),
        })?;
        Ok(keys
            .into_iter()
            .map(|(theirs, _)| theirs)
            .zip(answers)
            .collect())
    }

    /// A 2025-11-25 upstream's handshake: `initialize`, then `notifications/initialized`;
    /// the session it gave, if any.
    fn handshake(&self) -> Result<Option<String>, Outcome> {
        let params = json!({
            "protocolVersion": V2025,
            "capabilities": {},
            "clientInfo": {"name": "snodo-gateway", "version": env!("CARGO_PKG_VERSION")},
        });
        let response = self
            .post(
                &envelope(INITIALIZE_ID, "initialize", params),
                None,
                None,
                &[],
            )
            .map_err(|e| self.failure(e))?;
        let session = response.header("mcp-session-id").map(str::to_owned);
        answer_of(&response, INITIALIZE_ID).map_err(|e| self.failure(e))?;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let headers = [("mcp-protocol-version", V2025)];
        self.post(&note, session.as_deref(), None, &headers)
            .map_err(|e| self.failure(e))?;
        Ok(session)
    }

    /// `_meta` every 2026-07-28 request carries: the revision and the client's
    /// capabilities: those of the client that called (what it can be asked, which the
    /// gateway forwards) and the Tasks extension (the upstream may answer with a task,
    /// which the gateway follows).
    fn request_meta(&self) -> Map<String, Value> {
        let mut meta = Map::new();
        meta.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            V2026.into(),
        );
        let mut caps = match &self.client {
            Value::Object(c) => c.clone(),
            _ => Map::new(),
        };
        let extensions = caps.entry("extensions").or_insert_with(|| json!({}));
        if let Some(e) = extensions.as_object_mut() {
            e.insert(TASKS.into(), json!({}));
        }
        meta.insert(
            "io.modelcontextprotocol/clientCapabilities".into(),
            Value::Object(caps),
        );
        meta.insert(
            "io.modelcontextprotocol/clientInfo".into(),
            json!({"name": "snodo-gateway", "version": env!("CARGO_PKG_VERSION")}),
        );
        meta
    }

    /// Polls an upstream task until it finishes, sleeping its suggested interval between
    /// polls (a sleep the host keeps: a long one parks this task, and the replay that
    /// wakes it is answered from the journal up to here).
    fn follow(
        &self,
        cx: &Context,
        created: &Value,
        session: &mut Option<String>,
    ) -> Result<ToolResult, Outcome> {
        let Some(task_id) = created.get("taskId").and_then(Value::as_str) else {
            return Err(Outcome::Failed(RpcError::internal(format!(
                "{} answered a task without a taskId",
                self.name
            ))));
        };
        let mut state = created.clone();
        let mut id = FIRST_POLL_ID;
        loop {
            let wait = state
                .get("pollIntervalMs")
                .and_then(Value::as_u64)
                .unwrap_or(1_000)
                .clamp(MIN_POLL_MS, MAX_POLL_MS);
            cx.set_status(&format!(
                "{} on {}: upstream task {task_id} is {}",
                self.tool,
                self.name,
                state["status"].as_str().unwrap_or("working")
            ));
            if cx.sleep(std::time::Duration::from_millis(wait)).is_err() {
                // This task is cancelled: so is the upstream's, as far as it listens.
                let mut params = json!({"taskId": task_id});
                params["_meta"] = Value::Object(self.request_meta());
                let _ = self.on_session(session, id, "tasks/cancel", params, None);
                return Err(Outcome::Failed(RpcError::new(-32800, "cancelled")));
            }
            let mut params = json!({"taskId": task_id});
            params["_meta"] = Value::Object(self.request_meta());
            state = self.on_session(session, id, "tasks/get", params, None)?;
            id += 1;
            match state.get("status").and_then(Value::as_str) {
                Some("completed") => return Ok(tool_result(&state["result"])),
                Some("failed") => {
                    let error = &state["error"];
                    return Err(self.upstream_error(error));
                }
                Some("cancelled") => {
                    return Err(Outcome::Failed(RpcError::internal(format!(
                        "{}'s task {task_id} for {} was cancelled upstream",
                        self.name, self.tool
                    ))));
                }
                Some("input_required") => {
                    let answers = self.ask(cx, &format!("upstream-task-{id}"), &state)?;
                    let mut params = json!({"taskId": task_id, "inputResponses": answers});
                    params["_meta"] = Value::Object(self.request_meta());
                    self.on_session(session, id, "tasks/update", params, None)?;
                    id += 1;
                }
                _ => {}
            }
        }
    }

    /// One request on `session` and its answer's `result`, or what its failure makes of
    /// the task. A 2025-11-25 upstream that forgot the session (it restarted, or expired
    /// it while a task slept) gets a new one and the request again.
    fn on_session(
        &self,
        session: &mut Option<String>,
        id: u64,
        method: &str,
        params: Value,
        idempotency_key: Option<&str>,
    ) -> Result<Value, Outcome> {
        let answer = match self.request(
            id,
            method,
            params.clone(),
            session.as_deref(),
            idempotency_key,
        ) {
            Err(Sent::SessionGone) if session.is_some() => {
                *session = self.handshake()?;
                self.request(id, method, params, session.as_deref(), idempotency_key)
            }
            other => other,
        };
        answer.map_err(|e| self.failure(e))
    }

    /// One JSON-RPC request and its answer's `result`.
    fn request(
        &self,
        id: u64,
        method: &str,
        params: Value,
        session: Option<&str>,
        idempotency_key: Option<&str>,
    ) -> Result<Value, Sent> {
        let name = params.get("name").or_else(|| params.get("taskId")).cloned();
        let mut headers: Vec<(&str, &str)> = vec![("mcp-protocol-version", &self.protocol)];
        if self.protocol == V2026 {
            headers.push(("mcp-method", method));
            if let Some(Value::String(n)) = &name {
                headers.push(("mcp-name", n));
            }
        }
        let response = self.post(
            &envelope(id, method, params.clone()),
            session,
            idempotency_key,
            &headers,
        )?;
        if response.status == 404 && session.is_some() {
            return Err(Sent::SessionGone);
        }
        answer_of(&response, id)
    }

    /// POSTs `message` to the upstream.
    fn post(
        &self,
        message: &Value,
        session: Option<&str>,
        idempotency_key: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Response, Sent> {
        let mut request = http::post(&self.url)
            .header("accept", "application/json, text/event-stream")
            .json(message);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(s) = session {
            request = request.header("mcp-session-id", s);
        }
        if let Some(k) = idempotency_key {
            request = request.header("idempotency-key", k);
        }
        let response = request.send().map_err(Sent::Http)?;
        // 401 too: the host renews an upstream's access token before it expires, and a
        // request that raced the renewal goes again with the new one.
        if matches!(response.status, 401 | 408 | 429 | 500 | 502 | 503 | 504) {
            return Err(Sent::Busy(response.status, excerpt(&response.text())));
        }
        Ok(response)
    }

    /// What a request that got no usable answer makes of the task.
    fn failure(&self, sent: Sent) -> Outcome {
        let again = |why: String| {
            let message = format!("upstream {}: {why}", self.name);
            Outcome::retry(RpcError::internal(message.clone()), message)
        };
        match sent {
            Sent::Http(HttpError::Request(why)) => again(format!("no answer ({why})")),
            Sent::Http(HttpError::Body(why)) => again(format!("the answer broke off ({why})")),
            Sent::Busy(status, body) => again(format!("answered HTTP {status}: {body}")),
            Sent::Http(HttpError::Denied(why)) => Outcome::Failed(RpcError::internal(format!(
                "upstream {}: the host refused the request: {why}",
                self.name
            ))),
            Sent::Http(e) => {
                Outcome::Failed(RpcError::internal(format!("upstream {}: {e:?}", self.name)))
            }
            Sent::SessionGone => Outcome::Failed(RpcError::internal(format!(
                "upstream {}: the session ended again at once",
                self.name
            ))),
            Sent::Malformed(why) => Outcome::Failed(RpcError::internal(format!(
                "upstream {} answered what is not MCP: {why}",
                self.name
            ))),
            Sent::Error(error) => self.upstream_error(&error),
        }
    }

    /// The upstream's JSON-RPC error, as it gave it, failing the task; the status message
    /// names the upstream.
    fn upstream_error(&self, error: &Value) -> Outcome {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(-32603);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("an error without a message")
            .to_owned();
        let status = format!("upstream {} failed {}: {message}", self.name, self.tool);
        let mut e = RpcError::new(code, message);
        if let Some(data) = error.get("data") {
            e = e.with_data(data.clone());
        }
        Outcome::failed_with_status(e, status)
    }
}

/// Why a request gave no result.
enum Sent {
    /// It was refused or not answered.
    Http(HttpError),
    /// The upstream answered a status worth trying again.
    Busy(u16, String),
    /// A 2025-11-25 upstream no longer knows the session.
    SessionGone,
    /// The answer is not a JSON-RPC answer to the request.
    Malformed(String),
    /// The upstream's JSON-RPC error.
    Error(Value),
}

fn envelope(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// The answer to request `id` in `response`: its body as JSON, or the event of a
/// `text/event-stream` that answers it (notifications before it are passed over).
fn answer_of(response: &Response, id: u64) -> Result<Value, Sent> {
    let text = response.text();
    let sse = response
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let messages: Vec<Value> = if sse {
        events(&text)
            .filter_map(|data| serde_json::from_str(&data).ok())
            .collect()
    } else {
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(batch)) => batch,
            Ok(one) => vec![one],
            Err(_) if response.status >= 400 => {
                return Err(Sent::Malformed(format!(
                    "HTTP {}: {}",
                    response.status,
                    excerpt(&text)
                )));
            }
            Err(e) => return Err(Sent::Malformed(format!("{e}: {}", excerpt(&text)))),
        }
    };
    let answer = messages
        .into_iter()
        .find(|m| m.get("id").and_then(Value::as_u64) == Some(id) && m.get("method").is_none());
    match answer {
        Some(mut m) => {
            if let Some(error) = m.get_mut("error") {
                return Err(Sent::Error(error.take()));
            }
            match m.get_mut("result") {
                Some(result) => Ok(result.take()),
                None => Err(Sent::Malformed(
                    "an answer with neither result nor error".into(),
                )),
            }
        }
        None => Err(Sent::Malformed(format!(
            "HTTP {} without an answer to request {id}: {}",
            response.status,
            excerpt(&text)
        ))),
    }
}

/// The `data` of each event of an event stream, its lines joined.
fn events(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split("\n\n")
        .flat_map(|event| event.split("\r\n\r\n"))
        .map(|event| {
            event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|data| !data.is_empty())
}

/// At most 200 characters of `text`, for a message.
fn excerpt(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &t[..at]),
        None => t.to_owned(),
    }
}

/// Asks a person to confirm the call, showing the arguments; whether they did.
fn confirmed(cx: &Context, upstream: &Upstream, arguments: &Value) -> Result<bool, Outcome> {
    let shown = serde_json::to_string_pretty(arguments).unwrap_or_else(|_| arguments.to_string());
    let form = Form::new(format!(
        "Send {} to {} with these arguments?\n{shown}",
        upstream.tool, upstream.name
    ))
    .boolean("confirm", "Send it")
    .require("confirm");
    match cx.elicit("confirm", form) {
        Ok(answer) => Ok(answer.accepted() && answer.bool("confirm") == Some(true)),
        Err(InputError::Cancelled) => Err(Outcome::Failed(RpcError::new(-32800, "cancelled"))),
        Err(e) => Err(Outcome::Failed(RpcError::internal(format!(
            "{} needs a confirmation before it is sent to {}: {e}",
            upstream.tool, upstream.name
        )))),
    }
}

/// An upstream's input request as a question this task asks its client.
fn input_request(request: &Value) -> Result<InputRequest, String> {
    let params = &request["params"];
    let text = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_owned);
    match request["method"].as_str() {
        Some("elicitation/create") if params["mode"] == "url" => Ok(InputRequest::Url {
            message: text("message").unwrap_or_default(),
            url: text("url").ok_or("a url elicitation without a url")?,
            elicitation_id: text("elicitationId").unwrap_or_default(),
        }),
        Some("elicitation/create") => {
            let schema = &params["requestedSchema"];
            let mut form = Form::new(text("message").unwrap_or_default());
            for (name, field) in schema["properties"].as_object().into_iter().flatten() {
                form = form.field(name, field.clone());
            }
            for name in schema["required"].as_array().into_iter().flatten() {
                if let Some(name) = name.as_str() {
                    form = form.require(name);
                }
            }
            Ok(InputRequest::Form(form))
        }
        Some("sampling/createMessage") => Ok(InputRequest::Sampling(params.clone())),
        Some("roots/list") => Ok(InputRequest::Roots),
        Some(other) => Err(format!("{other:?}")),
        None => Err("a request without a method".into()),
    }
}

/// An upstream `CallToolResult` as this host's: every content block it can carry, the
/// structured content and `isError`; a block of a kind it cannot carry becomes its JSON
/// as text, so nothing is dropped.
fn tool_result(result: &Value) -> ToolResult {
    let blocks = result["content"].as_array().cloned().unwrap_or_default();
    let mut out = ToolResult {
        content: blocks.iter().map(content).collect(),
        structured_content: result.get("structuredContent").cloned(),
        is_error: result["isError"].as_bool().unwrap_or(false),
    };
    if out.content.is_empty() && out.structured_content.is_none() {
        out.content.push(Content::Text(String::new()));
    }
    out
}

fn content(block: &Value) -> Content {
    let s = |k: &str| block.get(k).and_then(Value::as_str).map(str::to_owned);
    let media = |make: fn(String, String) -> Content| match (s("data"), s("mimeType")) {
        (Some(d), Some(m)) => Some(make(d, m)),
        _ => None,
    };
    let made = match block["type"].as_str() {
        Some("text") => s("text").map(Content::Text),
        Some("image") => media(|data, mime_type| Content::Image { data, mime_type }),
        Some("audio") => media(|data, mime_type| Content::Audio { data, mime_type }),
        Some("resource_link") => match (s("uri"), s("name")) {
            (Some(uri), Some(name)) => Some(Content::ResourceLink { uri, name }),
            _ => None,
        },
        Some("resource") => {
            let r = &block["resource"];
            let rs = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
            match (rs("uri"), rs("text"), rs("blob")) {
                (Some(uri), Some(text), _) => Some(Content::Resource {
                    uri,
                    mime_type: rs("mimeType"),
                    text,
                }),
                (Some(uri), None, Some(blob)) => Some(Content::ResourceBlob {
                    uri,
                    mime_type: rs("mimeType"),
                    blob,
                }),
                _ => None,
            }
        }
        _ => None,
    };
    made.unwrap_or_else(|| Content::Text(block.to_string()))
}

snodo_guest::export_dispatch!(Gateway);
