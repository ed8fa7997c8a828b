//! Tools that reach the world through the host's `wasi:http`, written with `wstd` (an
//! off-the-shelf async HTTP client for components): a plain fetch, and `open_ticket`, which
//! reads a template, asks the user to confirm, then creates the ticket; `await_job`, which
//! starts a job and polls it with durable sleeps between polls. Run as a task, its
//! requests are journaled: a replay after a crash, a park or a sleep is answered from the
//! journal, so the template is fetched once, the ticket created once, the job started once
//! and each poll sent once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use snodo_guest::{
    Contents, Context, Form, Mode, Outcome, Prepare, Prompt, PromptResult, PromptSpec, Resource,
    ResourceSpec, RpcError, Tool, ToolResult, ToolSpec, Vars,
};
use wstd::http::{Body, Client, Method, Request};

/// One request's result, or the host's refusal as the guest sees it.
fn send(method: Method, url: &str, body: Option<Value>) -> Result<(u16, String), String> {
    wstd::runtime::block_on(async move {
        let builder = Request::builder().method(method).uri(url);
        let request = match body {
            Some(b) => builder
                .header("content-type", "application/json")
                .body(Body::from(b.to_string())),
            None => builder.body(Body::empty()),
        }
        .map_err(|e| format!("bad request: {e}"))?;
        let response = Client::new()
            .send(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let text = body
            .str_contents()
            .await
            .map_err(|e| format!("reading the body: {e:?}"))?
            .to_owned();
        Ok((status, text))
    })
}

/// `fetch`: GETs a URL and returns its status and body.
pub struct Fetch;

/// What to fetch.
#[derive(Deserialize, JsonSchema)]
pub struct FetchArgs {
    /// The URL.
    url: String,
    /// Send this JSON with a POST instead of a GET.
    #[serde(default)]
    post: Option<Value>,
    /// Send the request this many times, one after the other (1 by default); the last
    /// answer is returned, the first failure ends the run.
    #[serde(default)]
    repeat: Option<u32>,
    /// Headers to set (`fetch_sdk` only).
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    /// Ask for a retry (the task's retry policy) when the last answer is a 5xx (`fetch`
    /// only).
    #[serde(default)]
    retry_on_5xx: bool,
}

impl Tool for Fetch {
    const NAME: &'static str = "fetch";
    type Args = FetchArgs;

    fn spec() -> ToolSpec {
        ToolSpec::new()
            .description("Fetches a URL through the host")
            .mode(Mode::Optional)
    }

    fn run(cx: &Context, args: FetchArgs) -> Outcome {
        let mut last = None;
        for _ in 0..args.repeat.unwrap_or(1).max(1) {
            let method = if args.post.is_some() {
                Method::POST
            } else {
                Method::GET
            };
            match send(method, &args.url, args.post.clone()) {
                Ok(answer) => last = Some(answer),
                Err(e) => return ToolResult::error(format!("request failed: {e}")).into(),
            }
        }
        let (status, body) = last.unwrap_or_default();
        if args.retry_on_5xx && status >= 500 {
            return Outcome::retry(
                RpcError::internal(format!("HTTP {status}")),
                format!("HTTP {status}; retrying"),
            );
        }
        cx.log(snodo_guest::LogLevel::Info, &format!("fetched: {body}"));
        ToolResult::structured(json!({"status": status, "body": body})).into()
    }
}

/// `open_ticket`: reads the template, asks to confirm, creates the ticket.
pub struct OpenTicket;

/// Where the ticket service is.
#[derive(Deserialize, JsonSchema)]
pub struct TicketArgs {
    /// The service's base URL, e.g. `http://127.0.0.1:8080`.
    base: String,
    /// The ticket's title.
    title: String,
}

impl Tool for OpenTicket {
    const NAME: &'static str = "open_ticket";
    type Args = TicketArgs;

    fn spec() -> ToolSpec {
        ToolSpec::new()
            .title("Open a ticket")
            .description("Reads the ticket template, asks to confirm, then opens the ticket")
            .mode(Mode::Required)
    }

    fn run(cx: &Context, args: TicketArgs) -> Outcome {
        let template = match send(Method::GET, &format!("{}/template", args.base), None) {
            Ok((200, body)) => body,
            Ok((status, _)) => return ToolResult::error(format!("template: HTTP {status}")).into(),
            Err(e) => return ToolResult::error(format!("template: {e}")).into(),
        };
        let form = Form::new(format!("Open the ticket {:?}?", args.title))
            .boolean("confirm", "Open it")
            .require("confirm");
        match cx.elicit("confirm-ticket", form) {
            Ok(a) if a.accepted() && a.bool("confirm") == Some(true) => {}
            Ok(_) => return ToolResult::text("The ticket was not opened").into(),
            Err(e) => return ToolResult::error(e.to_string()).into(),
        }
        let ticket = json!({"title": args.title, "template": template});
        match send(
            Method::POST,
            &format!("{}/tickets", args.base),
            Some(ticket),
        ) {
            Ok((status, body)) if status < 300 => ToolResult::structured(json!({
                "status": status,
                "ticket": serde_json::from_str::<Value>(&body).unwrap_or(Value::String(body)),
            }))
            .into(),
            Ok((status, body)) => ToolResult::error(format!("HTTP {status}: {body}")).into(),
            Err(e) => ToolResult::error(format!("creating the ticket: {e}")).into(),
        }
    }
}

/// `await_job`: starts a job on a job service (`POST {base}/jobs`), then polls it (`GET
/// {base}/jobs/{id}`) until it says `done`, sleeping `every_ms` between polls: a sleep the
/// host keeps, so the task holds no guest while it waits, and the polls before it are
/// answered from the journal when a fresh guest takes over.
pub struct AwaitJob;

/// The job service and the polling.
#[derive(Deserialize, JsonSchema)]
pub struct JobArgs {
    /// The service's base URL, e.g. `http://127.0.0.1:8080`.
    base: String,
    /// Between polls, in ms (2,000 by default).
    #[serde(default)]
    every_ms: Option<u64>,
    /// Polls before giving up (30 by default).
    #[serde(default)]
    max_polls: Option<u32>,
}

impl Tool for AwaitJob {
    const NAME: &'static str = "await_job";
    type Args = JobArgs;

    fn spec() -> ToolSpec {
        ToolSpec::new()
            .title("Run a job")
            .description("Starts a job, then polls it with durable sleeps until it is done")
            .mode(Mode::Required)
    }

    fn run(cx: &Context, args: JobArgs) -> Outcome {
        let every = std::time::Duration::from_millis(args.every_ms.unwrap_or(2_000));
        let max_polls = args.max_polls.unwrap_or(30);
        let job = match send(Method::POST, &format!("{}/jobs", args.base), Some(json!({}))) {
            Ok((status, body)) if status < 300 => {
                match serde_json::from_str::<Value>(&body).ok().and_then(|v| v["id"].as_str().map(str::to_owned)) {
                    Some(id) => id,
                    None => return ToolResult::error(format!("the job service answered {body}")).into(),
                }
            }
            Ok((status, body)) => return ToolResult::error(format!("starting the job: HTTP {status}: {body}")).into(),
            Err(e) => return ToolResult::error(format!("starting the job: {e}")).into(),
        };
        for poll in 1..=max_polls {
            let state = match send(Method::GET, &format!("{}/jobs/{job}", args.base), None) {
                Ok((200, body)) => serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
                Ok((status, body)) => return ToolResult::error(format!("polling the job: HTTP {status}: {body}")).into(),
                Err(e) => return ToolResult::error(format!("polling the job: {e}")).into(),
            };
            if state["state"] == "done" {
                return ToolResult::structured(json!({"job": job, "polls": poll, "result": state["result"], "attempt": cx.attempt()})).into();
            }
            cx.set_status(&format!("job {job} running after {poll} polls"));
            if cx.sleep(every).is_err() {
                return ToolResult::error("cancelled while waiting for the job").into();
            }
        }
        ToolResult::error(format!("job {job} was not done after {max_polls} polls")).into()
    }
}

/// `fetch_sdk`: the same as `fetch`, through the SDK's client (`snodo_guest::http`, on
/// the `wasi:http` bindings of the `wasip2` crate) and its JSON helpers, with the headers
/// the guest sets and the response's headers in its answer.
pub struct FetchSdk;

impl Tool for FetchSdk {
    const NAME: &'static str = "fetch_sdk";
    type Args = FetchArgs;

    fn spec() -> ToolSpec {
        ToolSpec::new()
            .description("Fetches a URL through the host with the SDK's client")
            .mode(Mode::Optional)
    }

    fn run(_cx: &Context, args: FetchArgs) -> Outcome {
        let mut request = match &args.post {
            Some(body) => snodo_guest::http::post(&args.url).json(body),
            None => snodo_guest::http::get(&args.url),
        };
        for (name, value) in &args.headers {
            request = request.header(name, value);
        }
        match request.send() {
            Ok(r) => {
                let json = r.json::<Value>().ok();
                ToolResult::structured(json!({
                    "status": r.status,
                    "headers": r.headers,
                    "body": r.text(),
                    "json": json,
                }))
                .into()
            }
            Err(e) => ToolResult::error(e.to_string()).into(),
        }
    }
}

/// `reveal`: reads an environment variable (a secret the tool may read) and tries to hand
/// it out every way a tool can: its prepared arguments, its log, its status, and its
/// result (as a value and as an object key). The resource `env://{name}` and the prompt
/// `reveal` read it too.
pub struct Reveal;

/// Which variable.
#[derive(Deserialize, Serialize, JsonSchema)]
pub struct RevealArgs {
    /// The variable's name.
    name: String,
    /// Set by `prepare`: the value, as the prepared arguments carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seen: Option<String>,
}

impl Tool for Reveal {
    const NAME: &'static str = "reveal";
    type Args = RevealArgs;

    fn spec() -> ToolSpec {
        // Optional: a prepare phase runs only where a task may follow.
        ToolSpec::new()
            .description("Reads an environment variable and returns it")
            .mode(Mode::Optional)
    }

    fn run(cx: &Context, args: RevealArgs) -> Outcome {
        let value = std::env::var(&args.name).unwrap_or_default();
        cx.log(
            snodo_guest::LogLevel::Info,
            &format!("the value is {value}"),
        );
        println!("stdout: {value}");
        cx.set_status(&format!("revealing {value}"));
        let mut keyed = serde_json::Map::new();
        keyed.insert(format!("key-{value}"), json!(1));
        ToolResult::structured(json!({
            "value": value,
            "nested": [format!("v={value}")],
            "keyed": keyed,
        }))
        .into()
    }
}

impl Prepare for Reveal {
    fn prepare(_cx: &Context, args: RevealArgs) -> Result<RevealArgs, RpcError> {
        let seen = std::env::var(&args.name).ok();
        Ok(RevealArgs { seen, ..args })
    }
}

/// `env://{name}`: an environment variable, read as a resource.
pub struct EnvResource;

impl Resource for EnvResource {
    const URI: &'static str = "env://{name}";

    fn spec() -> ResourceSpec {
        ResourceSpec::new("An environment variable").mime_type("text/plain")
    }

    fn read(_cx: &Context, uri: &str, vars: &Vars) -> Result<Vec<Contents>, RpcError> {
        let value = std::env::var(vars.get("name").unwrap_or_default()).unwrap_or_default();
        Ok(vec![Contents::text(uri, format!("the value is {value}"))])
    }
}

/// `reveal`: a prompt quoting an environment variable.
pub struct RevealPrompt;

/// The prompt's argument.
#[derive(Deserialize)]
pub struct RevealPromptArgs {
    /// The variable's name.
    name: String,
}

impl Prompt for RevealPrompt {
    const NAME: &'static str = "reveal";
    type Args = RevealPromptArgs;

    fn spec() -> PromptSpec {
        PromptSpec::new()
            .description("Quotes an environment variable")
            .argument("name", "The variable", true)
    }

    fn get(_cx: &Context, args: RevealPromptArgs) -> Result<PromptResult, RpcError> {
        let value = std::env::var(&args.name).unwrap_or_default();
        Ok(PromptResult::user(format!("the value is {value}")).description(value))
    }
}

snodo_guest::export!(
    tools: [Fetch, OpenTicket, AwaitJob, FetchSdk, Reveal],
    resources: [EnvResource],
    prompts: [RevealPrompt],
);
