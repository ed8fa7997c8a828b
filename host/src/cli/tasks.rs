//! `snodo tasks`: the admin API from a terminal (for people) or a script (for agents: every
//! subcommand takes `--json` and prints exactly what the API answered).
//!
//! It speaks to a running server (`--url`, or `SNODO_URL`, or `--config FILE`'s `listen`)
//! with an admin token (`--token-env NAME`, default `SNODO_ADMIN_TOKEN`; a server without
//! authentication on loopback needs none). Exit codes: 0 done, 1 refused or failed (the API's message on
//! stderr), 2 the server could not be reached.

use std::net::SocketAddr;
use std::process::ExitCode;

use http_body_util::Full;
use hyper::body::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use snodo::admin::{AnswerBody, BulkBody, BulkOutcome, CancelBody, TaskDetail};
use snodo::client::{Connection, Events};
use snodo::model::{HistoryEntry, TaskStatus, Timestamp};
use snodo::store::{ALL_STATUSES, TaskCounts, TaskFilter, TaskPage, TaskSummary};

use super::table;

/// Operate on a running server's tasks through its admin API.
#[derive(Debug, clap::Args)]
pub(crate) struct TasksArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: TasksCommand,
}

/// Where a server is looked for when neither `--url` nor `--config` says.
const DEFAULT_URL: &str = "http://127.0.0.1:3001";

/// Which server's admin API, as whom, and how its answers are printed: what `snodo tasks`
/// and `snodo schedules` share.
#[derive(Debug, clap::Args)]
pub(super) struct ApiArgs {
    /// The server, `http://HOST:PORT` (plain HTTP: reach a remote one through a tunnel or
    /// its local address); default: `--config`'s `listen`, else `http://127.0.0.1:3001`.
    #[arg(long, env = "SNODO_URL", global = true)]
    url: Option<String>,
    /// The server's configuration file: its `listen` is where to reach it.
    #[arg(long, global = true)]
    config: Option<std::path::PathBuf>,
    /// The environment variable holding the admin token.
    #[arg(long, default_value = "SNODO_ADMIN_TOKEN", global = true)]
    token_env: String,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    pub(super) json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum TasksCommand {
    /// List tasks, newest first.
    List(ListArgs),
    /// Counts by status and by tool.
    Counts(TenantArg),
    /// One task: its summary, questions and history.
    Show(IdArg),
    /// Cancel one task, or (with filters and --all) every live task they select.
    Cancel(CancelArgs),
    /// Answer a waiting task's question.
    Answer(AnswerArgs),
    /// Run a task waiting out its retry delay now.
    Retry(IdArg),
    /// Follow changes as they happen (until interrupted).
    Watch(FilterArgs),
}

#[derive(Debug, clap::Args)]
struct FilterArgs {
    /// Only this tenant (a cross-tenant operator's choice; others see their own).
    #[arg(long)]
    tenant: Option<String>,
    /// working, input_required, completed, failed or cancelled.
    #[arg(long)]
    status: Option<String>,
    /// Only calls of this tool.
    #[arg(long)]
    tool: Option<String>,
    /// Created at or after (ms since the epoch).
    #[arg(long)]
    created_after: Option<u64>,
    /// Created before (ms since the epoch).
    #[arg(long)]
    created_before: Option<u64>,
}

impl FilterArgs {
    fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let mut push = |k, v: Option<String>| {
            if let Some(v) = v {
                q.push((k, v));
            }
        };
        push("tenant", self.tenant.clone());
        push("status", self.status.clone());
        push("tool", self.tool.clone());
        push("created_after", self.created_after.map(|t| t.to_string()));
        push("created_before", self.created_before.map(|t| t.to_string()));
        q
    }

    /// The filter of a bulk cancel's body. A status is checked here, as the listing's
    /// query string is by the server.
    fn filter(&self) -> Result<TaskFilter, Failure> {
        let status = match &self.status {
            Some(s) => Some(TaskStatus::parse(s).ok_or_else(|| {
                Failure::Refused(format!(
                    "status is one of working, input_required, completed, failed, cancelled; got {s:?}"
                ))
            })?),
            None => None,
        };
        Ok(TaskFilter {
            tenant: self.tenant.clone(),
            status,
            tool: self.tool.clone(),
            created_after: self.created_after.map(Timestamp),
            created_before: self.created_before.map(Timestamp),
            ..TaskFilter::default()
        })
    }
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    #[command(flatten)]
    filter: FilterArgs,
    /// At most this many (1 to 500).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Continue after this cursor (a previous page's `next`).
    #[arg(long)]
    cursor: Option<String>,
}

#[derive(Debug, clap::Args)]
struct TenantArg {
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
}

#[derive(Debug, clap::Args)]
struct IdArg {
    /// The task id.
    id: String,
}

#[derive(Debug, clap::Args)]
struct CancelArgs {
    /// The task id (leave out with --all).
    id: Option<String>,
    /// Why (shown as the task's last status message).
    #[arg(long)]
    message: Option<String>,
    /// Cancel every live task the filters select (at most --cap).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    filter: FilterArgs,
    /// With --all: only count what would be cancelled.
    #[arg(long)]
    preview: bool,
    /// With --all: the most tasks to cancel (default 1000).
    #[arg(long)]
    cap: Option<usize>,
}

#[derive(Debug, clap::Args)]
struct AnswerArgs {
    /// The task id.
    id: String,
    /// The question's key (default: the only open one).
    #[arg(long)]
    key: Option<String>,
    /// Accept, with this JSON object as the form's content.
    #[arg(long, conflicts_with_all = ["decline", "response"])]
    accept: Option<String>,
    /// Decline the question.
    #[arg(long)]
    decline: bool,
    /// The whole response, as JSON (for questions that are not forms).
    #[arg(long)]
    response: Option<String>,
}

/// Runs the subcommand.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: TasksArgs) -> ExitCode {
    exit("tasks", runtime.block_on(dispatch(&args)))
}

/// The exit code of a `snodo NAME` command that spoke to the admin API, its failure on
/// stderr: 0 done, 1 refused or failed, 2 the server could not be reached.
pub(super) fn exit(name: &str, done: Result<(), Failure>) -> ExitCode {
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Refused(m)) => {
            eprintln!("snodo {name}: {m}");
            ExitCode::from(1)
        }
        Err(Failure::Unreachable(m)) => {
            eprintln!("snodo {name}: {m}");
            ExitCode::from(2)
        }
    }
}

pub(super) enum Failure {
    Refused(String),
    Unreachable(String),
}

async fn dispatch(args: &TasksArgs) -> Result<(), Failure> {
    let api = Api::new(&args.api).await?;
    let json = args.api.json;
    match &args.command {
        TasksCommand::List(l) => list(&api, json, l).await,
        TasksCommand::Counts(t) => counts(&api, json, t).await,
        TasksCommand::Show(i) => show(&api, json, &i.id).await,
        TasksCommand::Cancel(c) => cancel(&api, json, c).await,
        TasksCommand::Answer(a) => answer(&api, json, a).await,
        TasksCommand::Retry(i) => retry(&api, json, &i.id).await,
        TasksCommand::Watch(f) => watch(&api, json, f).await,
    }
}

/// `snodo tasks list`: a page of tasks ([`TaskPage`]).
async fn list(api: &Api, json: bool, l: &ListArgs) -> Result<(), Failure> {
    let mut q = l.filter.query();
    q.push(("limit", l.limit.to_string()));
    if let Some(c) = &l.cursor {
        q.push(("cursor", c.clone()));
    }
    let v = api
        .get(&format!("/admin/v1/tasks?{}", query_string(&q)))
        .await?;
    print(json, v, page_text)
}

/// `snodo tasks counts`: tasks by status and tool ([`TaskCounts`]).
async fn counts(api: &Api, json: bool, t: &TenantArg) -> Result<(), Failure> {
    let q: Vec<(&str, String)> = t.tenant.iter().map(|t| ("tenant", t.clone())).collect();
    let v = api
        .get(&format!("/admin/v1/counts?{}", query_string(&q)))
        .await?;
    print(json, v, counts_text)
}

/// `snodo tasks show`: one task ([`TaskDetail`]).
async fn show(api: &Api, json: bool, id: &str) -> Result<(), Failure> {
    let v = api.get(&format!("/admin/v1/tasks/{id}")).await?;
    print(json, v, detail_text)
}

/// `snodo tasks cancel`: one task ([`CancelBody`]), or every live task the filters select
/// ([`BulkBody`]).
async fn cancel(api: &Api, json: bool, c: &CancelArgs) -> Result<(), Failure> {
    match (&c.id, c.all) {
        (Some(id), false) => {
            let body = CancelBody {
                message: c.message.clone(),
            };
            let v = api
                .post(&format!("/admin/v1/tasks/{id}/cancel"), &body)
                .await?;
            print(json, v, status_text)
        }
        (None, true) => {
            let body = BulkBody {
                filter: c.filter.filter()?,
                cap: c.cap,
                preview: c.preview,
                message: c.message.clone(),
            };
            let v = api.post("/admin/v1/cancel", &body).await?;
            print(json, v, bulk_text)
        }
        _ => Err(Failure::Refused(
            "give a task id, or --all with filters (and --preview to count first)".into(),
        )),
    }
}

/// `snodo tasks answer`: one question's response ([`AnswerBody`]).
async fn answer(api: &Api, json: bool, a: &AnswerArgs) -> Result<(), Failure> {
    let key = match &a.key {
        Some(k) => k.clone(),
        None => only_question(api, &a.id).await?,
    };
    let response = response_of(a)?;
    let body = AnswerBody {
        responses: Map::from_iter([(key, response)]),
    };
    let v = api
        .post(&format!("/admin/v1/tasks/{}/answer", a.id), &body)
        .await?;
    print(json, v, status_text)
}

/// The key of the one question task `id` waits on.
async fn only_question(api: &Api, id: &str) -> Result<String, Failure> {
    let task: TaskDetail = decode(api.get(&format!("/admin/v1/tasks/{id}")).await?)?;
    match task.summary.waiting_on.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Failure::Refused("the task waits on no question".into())),
        many => Err(Failure::Refused(format!(
            "the task waits on several questions; pick one with --key: {}",
            many.join(", ")
        ))),
    }
}

/// The response `--accept`, `--decline` or `--response` gives (an MCP elicitation result,
/// or any JSON for questions that are not forms).
fn response_of(a: &AnswerArgs) -> Result<Value, Failure> {
    let parse = |text: &str, what: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|e| Failure::Refused(format!("{what} is not JSON: {e}")))
    };
    match (&a.accept, a.decline, &a.response) {
        (Some(content), false, None) => {
            Ok(json!({"action": "accept", "content": parse(content, "--accept")?}))
        }
        (None, true, None) => Ok(json!({"action": "decline"})),
        (None, false, Some(r)) => parse(r, "--response"),
        _ => Err(Failure::Refused(
            "give one of --accept JSON, --decline or --response JSON".into(),
        )),
    }
}

/// `snodo tasks retry`: the task runs now ([`TaskDetail`]).
async fn retry(api: &Api, json: bool, id: &str) -> Result<(), Failure> {
    let v = api
        .post(&format!("/admin/v1/tasks/{id}/retry"), &Map::new())
        .await?;
    print(json, v, |t: &TaskDetail| {
        format!("{} is due now\n", t.summary.id)
    })
}

/// `snodo tasks watch`: one line per change ([`TaskSummary`]) until interrupted.
async fn watch(api: &Api, json: bool, f: &FilterArgs) -> Result<(), Failure> {
    let mut c = api.connect().await?;
    let path = format!("/admin/v1/events?{}", query_string(&f.query()));
    let mut req = api.request("GET", &path, None);
    req.headers_mut().insert(
        "accept",
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    let response = c.send(req).await.map_err(Failure::Unreachable)?;
    if response.status() != 200 {
        let status = response.status().as_u16();
        return Err(Failure::Refused(format!(
            "the event stream was refused (HTTP {status})"
        )));
    }
    let mut events = Events::of(response).map_err(Failure::Refused)?;
    while let Some(v) = events.next().await {
        if json {
            println!("{v}");
            continue;
        }
        // A `task` event's data is a summary; a `lagged` event's (`{}`) is none.
        match serde_json::from_value::<TaskSummary>(v) {
            Ok(t) => println!(
                "{}  {}  {}  {}  {}",
                time(t.last_updated_at),
                t.id,
                t.tool,
                t.status,
                t.status_message.as_deref().unwrap_or("")
            ),
            Err(_) => println!("(changes may have been missed: list again)"),
        }
    }
    Ok(())
}

/// A request's body: its content type, its bytes, and the headers that go with it.
type Body<'a> = (&'a str, Bytes, Vec<(&'static str, String)>);

/// The admin API of one server.
pub(super) struct Api {
    addr: SocketAddr,
    host: String,
    token: Option<String>,
}

/// The body of a refusal, `{"error": {"code", "message"}}` (`AdminError`'s).
#[derive(serde::Deserialize)]
struct Refusal {
    error: RefusalError,
}

#[derive(serde::Deserialize)]
struct RefusalError {
    code: Option<String>,
    message: Option<String>,
}

impl ApiArgs {
    /// The admin API of the server whose configuration is `path` (its `listen`, unless
    /// `SNODO_URL` names it), with the token in `SNODO_ADMIN_TOKEN`: what the commands that
    /// otherwise open the store themselves speak to when a server holds it.
    pub(super) fn of_config(path: &std::path::Path) -> Self {
        Self {
            url: std::env::var("SNODO_URL").ok().filter(|u| !u.is_empty()),
            config: Some(path.to_owned()),
            token_env: "SNODO_ADMIN_TOKEN".into(),
            json: false,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(m) | Self::Unreachable(m) => f.write_str(m),
        }
    }
}

impl Api {
    pub(super) async fn new(args: &ApiArgs) -> Result<Self, Failure> {
        let url = match (&args.url, &args.config) {
            (Some(url), _) => url.clone(),
            (None, Some(path)) => {
                let config = snodo::config::Config::load(path)
                    .map_err(|e| Failure::Refused(e.to_string()))?;
                let listen = config.listen.ok_or_else(|| {
                    Failure::Refused(format!("{}: no listen address; give --url", path.display()))
                })?;
                // A server listening on every interface is reached on loopback.
                let ip = if listen.ip().is_unspecified() {
                    std::net::IpAddr::from([127, 0, 0, 1])
                } else {
                    listen.ip()
                };
                format!("http://{}", SocketAddr::new(ip, listen.port()))
            }
            (None, None) => DEFAULT_URL.to_owned(),
        };
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            Failure::Refused(format!("--url {url}: only http://HOST:PORT is spoken here"))
        })?;
        let host = rest.trim_end_matches('/').to_owned();
        let addr = tokio::net::lookup_host(&host)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| Failure::Unreachable(format!("cannot resolve {host}")))?;
        Ok(Self {
            addr,
            host,
            token: std::env::var(&args.token_env)
                .ok()
                .filter(|t| !t.is_empty()),
        })
    }

    /// A request of `path`, with a JSON `body` if given.
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> hyper::Request<Full<Bytes>> {
        let typed = body.map(|text| ("application/json", Bytes::from(text), Vec::new()));
        self.typed_request(method, path, typed)
    }

    /// A request of `path` with a body of the given type and extra headers.
    fn typed_request(
        &self,
        method: &str,
        path: &str,
        body: Option<Body<'_>>,
    ) -> hyper::Request<Full<Bytes>> {
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header("accept", "application/json");
        if let Some(t) = &self.token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let bytes = match body {
            Some((content_type, bytes, headers)) => {
                b = b.header("content-type", content_type);
                for (k, v) in headers {
                    b = b.header(k, v);
                }
                bytes
            }
            None => Bytes::new(),
        };
        b.body(Full::new(bytes))
            .unwrap_or_else(|_| hyper::Request::new(Full::new(Bytes::new())))
    }

    async fn connect(&self) -> Result<Connection, Failure> {
        Connection::open(self.addr).await.map_err(|e| {
            Failure::Unreachable(format!(
                "{}: {e}; is the server there? Name it with --url http://HOST:PORT (or \
                 SNODO_URL), or --config FILE to use the file's listen",
                self.host
            ))
        })
    }

    pub(super) async fn get(&self, path: &str) -> Result<Value, Failure> {
        self.call("GET", path, None).await
    }

    pub(super) async fn delete(&self, path: &str) -> Result<Value, Failure> {
        self.call("DELETE", path, None).await
    }

    pub(super) async fn post(&self, path: &str, body: &impl Serialize) -> Result<Value, Failure> {
        let text = serde_json::to_string(body)
            .map_err(|e| Failure::Refused(format!("the request's body: {e}")))?;
        self.call("POST", path, Some(text)).await
    }

    /// `POST path` with `bytes` of `content_type` and `headers`: the JSON answer.
    pub(super) async fn post_bytes(
        &self,
        path: &str,
        content_type: &str,
        bytes: Vec<u8>,
        headers: Vec<(&'static str, String)>,
    ) -> Result<Value, Failure> {
        let request = self.typed_request("POST", path, Some((content_type, bytes.into(), headers)));
        self.exchange(request).await
    }

    /// One exchange: the JSON answer of a 2xx, else the API's error message.
    async fn call(&self, method: &str, path: &str, body: Option<String>) -> Result<Value, Failure> {
        self.exchange(self.request(method, path, body)).await
    }

    async fn exchange(&self, request: hyper::Request<Full<Bytes>>) -> Result<Value, Failure> {
        let mut c = self.connect().await?;
        let (status, bytes) = c.exchange(request).await.map_err(Failure::Unreachable)?;
        let v: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        if (200..300).contains(&status) {
            return Ok(v);
        }
        let refusal = serde_json::from_value::<Refusal>(v.clone()).ok();
        let (code, message) = refusal.map_or((None, None), |r| (r.error.code, r.error.message));
        let message = message.unwrap_or_else(|| v.to_string());
        let code = code.as_deref().unwrap_or("error");
        Err(Failure::Refused(format!(
            "{message} (HTTP {status} {code})"
        )))
    }
}

/// `s` with every byte outside the URL's unreserved set percent-encoded.
pub(super) fn encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn query_string(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encoded(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// An answer read as the admin API's type `T`.
pub(super) fn decode<T: DeserializeOwned>(answer: Value) -> Result<T, Failure> {
    serde_json::from_value(answer).map_err(|e| {
        Failure::Refused(format!(
            "the server's answer is not what this version of the admin API gives: {e}"
        ))
    })
}

/// Prints an answer: with `--json` exactly as the API gave it, else read as its type `T`
/// and written as the text `text` makes of it.
pub(super) fn print<T: DeserializeOwned>(
    json: bool,
    answer: Value,
    text: impl FnOnce(&T) -> String,
) -> Result<(), Failure> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
    } else {
        print!("{}", text(&decode(answer)?));
    }
    Ok(())
}

pub(super) fn time(t: Timestamp) -> String {
    snodo_server::rfc3339(t)
}

fn s(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

fn page_text(page: &TaskPage) -> String {
    let rows = page.tasks.iter().map(|t| {
        // A waiting task shows what it asks: that is what an operator answers.
        let message = match t.asking.first().filter(|q| !q.is_empty()) {
            Some(q) if t.asking.len() > 1 => format!("asks: {q} (+{} more)", t.asking.len() - 1),
            Some(q) => format!("asks: {q}"),
            None => t.status_message.clone().unwrap_or_default(),
        };
        [
            t.id.to_string(),
            t.tenant.clone(),
            t.tool.clone(),
            t.status.to_string(),
            time(t.created_at),
            message,
        ]
    });
    let mut out = table(
        ["id", "tenant", "tool", "status", "created", "message"],
        rows,
    );
    if let Some(next) = &page.next {
        out.push_str(&format!("next page: --cursor {}\n", next.encode()));
    }
    out
}

fn counts_text(counts: &TaskCounts) -> String {
    let row = |name: &str, by: &std::collections::BTreeMap<TaskStatus, u64>| -> [String; 6] {
        let [a, b, c, d, e] = ALL_STATUSES.map(|st| by.get(&st).copied().unwrap_or(0).to_string());
        [name.to_owned(), a, b, c, d, e]
    };
    let mut rows = vec![row("(all)", &counts.by_status)];
    for (tool, by) in &counts.by_tool {
        rows.push(row(tool, by));
    }
    table(
        [
            "tool",
            ">working",
            ">input_required",
            ">completed",
            ">failed",
            ">cancelled",
        ],
        rows,
    )
}

pub(super) fn detail_text(t: &TaskDetail) -> String {
    let summary = &t.summary;
    let mut lines = vec![
        format!("task      {}", summary.id),
        format!("tool      {}", summary.tool),
        format!("tenant    {}", summary.tenant),
        format!("status    {}", summary.status),
    ];
    if let Some(m) = &summary.status_message {
        lines.push(format!("message   {m}"));
    }
    lines.push(format!("attempt   {}", summary.attempt));
    if let Some(at) = summary.retry_at {
        lines.push(format!("retry at  {}", time(at)));
    }
    if let Some(at) = summary.wake_at {
        lines.push(format!("wakes at  {}", time(at)));
    }
    for q in t.questions.iter().filter(|q| !q.answered) {
        lines.push(format!(
            "waiting   {} ({})",
            q.key,
            s(&q.request["params"]["message"])
        ));
    }
    if let Some(outcome) = &t.outcome {
        lines.extend(outcome_lines(outcome));
    }
    lines.push("history".to_owned());
    lines.extend(t.history.entries.iter().map(history_line));
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// A finished task's outcome: a tool result's text and structured content, or the error.
fn outcome_lines(outcome: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(error) = outcome.get("error") {
        out.push(format!(
            "error     {} {}",
            s(&error["code"]),
            s(&error["message"])
        ));
        return out;
    }
    let result = outcome.get("result").unwrap_or(outcome);
    if result["isError"] == Value::Bool(true) {
        out.push("result    (the tool reported an error)".to_owned());
    }
    for c in result["content"].as_array().into_iter().flatten() {
        match c["type"].as_str() {
            Some("text") => out.push(format!("result    {}", s(&c["text"]))),
            Some(kind) => out.push(format!("result    ({kind} content)")),
            None => {}
        }
    }
    if let Some(structured) = result.get("structuredContent") {
        out.push(format!("result    {structured}"));
    }
    if out.is_empty() {
        out.push(format!("result    {result}"));
    }
    out
}

/// One history entry: its time, its event, and its fields as sorted `key=value` pairs.
fn history_line(e: &HistoryEntry) -> String {
    let fields = serde_json::to_value(&e.kind).unwrap_or_default();
    let mut details: Vec<String> = fields
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k != "event")
        .map(|(k, v)| format!("{k}={}", s(v)))
        .collect();
    details.sort();
    format!("  {}  {}  {}", time(e.at), e.kind.name(), details.join(" "))
}

fn status_text(t: &TaskDetail) -> String {
    format!("{} is {}\n", t.summary.id, t.summary.status)
}

fn bulk_text(b: &BulkOutcome) -> String {
    if b.preview {
        let capped = if b.capped {
            " (at least: the cap was reached)"
        } else {
            ""
        };
        return format!("{} live task(s) match{capped}\n", b.matched);
    }
    let capped = if b.capped {
        "; more match than the cap: run again"
    } else {
        ""
    };
    format!(
        "cancelled {} of {} matched; {} already finished; {} failed{capped}\n",
        b.cancelled,
        b.matched,
        b.already_finished,
        b.failed.len()
    )
}
