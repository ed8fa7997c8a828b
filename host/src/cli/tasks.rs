//! `snodo tasks`: the admin API from a terminal (for people) or a script (for agents: every
//! subcommand takes `--json` and prints exactly what the API answered).
//!
//! It speaks to a running server (`--url`, or `SNODO_URL`) with an admin token
//! (`--token-env NAME`, default `SNODO_ADMIN_TOKEN`; a server without authentication on
//! loopback needs none). Exit codes: 0 done, 1 refused or failed (the API's message on
//! stderr), 2 the server could not be reached.

use std::net::SocketAddr;
use std::process::ExitCode;

use http_body_util::Full;
use hyper::body::Bytes;
use serde_json::{Value, json};

use snodo::client::{Connection, Events};

use super::print_table;

/// Operate on a running server's tasks through its admin API.
#[derive(Debug, clap::Args)]
pub(crate) struct TasksArgs {
    /// The server, `http://HOST:PORT` (plain HTTP: reach a remote one through a tunnel or
    /// its local address).
    #[arg(
        long,
        env = "SNODO_URL",
        default_value = "http://127.0.0.1:3001",
        global = true
    )]
    url: String,
    /// The environment variable holding the admin token.
    #[arg(long, default_value = "SNODO_ADMIN_TOKEN", global = true)]
    token_env: String,
    /// Print the API's JSON answer instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: TasksCommand,
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

    fn body(&self) -> Value {
        let mut f = serde_json::Map::new();
        for (k, v) in self.query() {
            let key = match k {
                "created_after" => "createdAfter",
                "created_before" => "createdBefore",
                other => other,
            };
            let value = v.parse::<u64>().map_or(json!(v), |n| {
                if key.starts_with("created") {
                    json!(n)
                } else {
                    json!(v)
                }
            });
            f.insert(key.to_owned(), value);
        }
        Value::Object(f)
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
    match runtime.block_on(dispatch(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Refused(m)) => {
            eprintln!("snodo tasks: {m}");
            ExitCode::from(1)
        }
        Err(Failure::Unreachable(m)) => {
            eprintln!("snodo tasks: {m}");
            ExitCode::from(2)
        }
    }
}

enum Failure {
    Refused(String),
    Unreachable(String),
}

/// The admin API of one server.
struct Api {
    addr: SocketAddr,
    host: String,
    token: Option<String>,
}

impl Api {
    async fn new(args: &TasksArgs) -> Result<Self, Failure> {
        let rest = args.url.strip_prefix("http://").ok_or_else(|| {
            Failure::Refused(format!(
                "--url {}: only http://HOST:PORT is spoken here",
                args.url
            ))
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

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
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
            Some(v) => {
                b = b.header("content-type", "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        b.body(Full::new(bytes))
            .unwrap_or_else(|_| hyper::Request::new(Full::new(Bytes::new())))
    }

    async fn connect(&self) -> Result<Connection, Failure> {
        Connection::open(self.addr)
            .await
            .map_err(|e| Failure::Unreachable(format!("{}: {e}", self.host)))
    }

    /// One exchange: the JSON answer of a 2xx, else the API's error message.
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, Failure> {
        let mut c = self.connect().await?;
        let (status, bytes) = c
            .exchange(self.request(method, path, body))
            .await
            .map_err(Failure::Unreachable)?;
        let v: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        if (200..300).contains(&status) {
            return Ok(v);
        }
        let message = v["error"]["message"]
            .as_str()
            .map_or_else(|| v.to_string(), str::to_owned);
        let code = v["error"]["code"].as_str().unwrap_or("error");
        Err(Failure::Refused(format!(
            "{message} (HTTP {status} {code})"
        )))
    }
}

fn query_string(pairs: &[(&str, String)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn print(args: &TasksArgs, v: &Value, human: impl FnOnce(&Value)) {
    if args.json {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    } else {
        human(v);
    }
}

fn time(v: &Value) -> String {
    v.as_u64()
        .map(|t| snodo_server::rfc3339(snodo::model::Timestamp(t)))
        .unwrap_or_else(|| "-".into())
}

fn s(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

fn rows(tasks: &Value) -> Vec<[String; 6]> {
    tasks
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    [
                        s(&t["id"]),
                        s(&t["tenant"]),
                        s(&t["tool"]),
                        s(&t["status"]),
                        time(&t["createdAt"]),
                        t["statusMessage"].as_str().unwrap_or("").to_owned(),
                    ]
                })
                .collect()
        })
        .unwrap_or_default()
}

fn show(t: &Value) {
    println!("task      {}", s(&t["id"]));
    println!("tool      {}", s(&t["tool"]));
    println!("tenant    {}", s(&t["tenant"]));
    println!("status    {}", s(&t["status"]));
    if let Some(m) = t["statusMessage"].as_str() {
        println!("message   {m}");
    }
    println!("attempt   {}", t["attempt"]);
    if t["retryAt"].is_number() {
        println!("retry at  {}", time(&t["retryAt"]));
    }
    for q in t["questions"].as_array().into_iter().flatten() {
        if q["answered"] != true {
            println!(
                "waiting   {} ({})",
                s(&q["key"]),
                s(&q["request"]["params"]["message"])
            );
        }
    }
    println!("history");
    for e in t["history"]["entries"].as_array().into_iter().flatten() {
        let mut details: Vec<String> = e
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| *k != "at" && *k != "event")
            .map(|(k, v)| format!("{k}={}", s(v)))
            .collect();
        details.sort();
        println!(
            "  {}  {}  {}",
            time(&e["at"]),
            s(&e["event"]),
            details.join(" ")
        );
    }
}

async fn dispatch(args: &TasksArgs) -> Result<(), Failure> {
    let api = Api::new(args).await?;
    match &args.command {
        TasksCommand::List(l) => {
            let mut q = l.filter.query();
            q.push(("limit", l.limit.to_string()));
            if let Some(c) = &l.cursor {
                q.push(("cursor", c.clone()));
            }
            let v = api
                .call(
                    "GET",
                    &format!("/admin/v1/tasks?{}", query_string(&q)),
                    None,
                )
                .await?;
            print(args, &v, |v| {
                print_table(
                    ["id", "tenant", "tool", "status", "created", "message"],
                    rows(&v["tasks"]),
                );
                if let Some(next) = v["next"].as_str() {
                    println!("next page: --cursor {next}");
                }
            });
        }
        TasksCommand::Counts(t) => {
            let q: Vec<(&str, String)> = t.tenant.iter().map(|t| ("tenant", t.clone())).collect();
            let v = api
                .call(
                    "GET",
                    &format!("/admin/v1/counts?{}", query_string(&q)),
                    None,
                )
                .await?;
            print(args, &v, |v| {
                let statuses = [
                    "working",
                    "input_required",
                    "completed",
                    "failed",
                    "cancelled",
                ];
                let row = |name: &str, by: &Value| -> [String; 6] {
                    let n = |st: &str| by[st].as_u64().unwrap_or(0).to_string();
                    [
                        name.to_owned(),
                        n(statuses[0]),
                        n(statuses[1]),
                        n(statuses[2]),
                        n(statuses[3]),
                        n(statuses[4]),
                    ]
                };
                let mut table = vec![row("(all)", &v["byStatus"])];
                for (tool, by) in v["byTool"].as_object().into_iter().flatten() {
                    table.push(row(tool, by));
                }
                print_table(
                    [
                        "tool",
                        ">working",
                        ">input_required",
                        ">completed",
                        ">failed",
                        ">cancelled",
                    ],
                    table,
                );
            });
        }
        TasksCommand::Show(i) => {
            let v = api
                .call("GET", &format!("/admin/v1/tasks/{}", i.id), None)
                .await?;
            print(args, &v, show);
        }
        TasksCommand::Cancel(c) => match (&c.id, c.all) {
            (Some(id), false) => {
                let body = json!({"message": c.message});
                let v = api
                    .call("POST", &format!("/admin/v1/tasks/{id}/cancel"), Some(&body))
                    .await?;
                print(args, &v, |v| {
                    println!("{} is {}", s(&v["id"]), s(&v["status"]))
                });
            }
            (None, true) => {
                let body = json!({"filter": c.filter.body(), "preview": c.preview, "cap": c.cap, "message": c.message});
                let v = api.call("POST", "/admin/v1/cancel", Some(&body)).await?;
                print(args, &v, |v| {
                    if v["preview"] == true {
                        println!(
                            "{} live task(s) match{}",
                            v["matched"],
                            if v["capped"] == true {
                                " (at least: the cap was reached)"
                            } else {
                                ""
                            }
                        );
                    } else {
                        println!(
                            "cancelled {} of {} matched; {} already finished; {} failed{}",
                            v["cancelled"],
                            v["matched"],
                            v["alreadyFinished"],
                            v["failed"].as_array().map_or(0, Vec::len),
                            if v["capped"] == true {
                                "; more match than the cap: run again"
                            } else {
                                ""
                            }
                        );
                    }
                });
            }
            _ => {
                return Err(Failure::Refused(
                    "give a task id, or --all with filters (and --preview to count first)".into(),
                ));
            }
        },
        TasksCommand::Answer(a) => {
            let key = match &a.key {
                Some(k) => k.clone(),
                None => {
                    let t = api
                        .call("GET", &format!("/admin/v1/tasks/{}", a.id), None)
                        .await?;
                    let open: Vec<String> = t["waitingOn"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|k| k.as_str().map(str::to_owned))
                        .collect();
                    match open.as_slice() {
                        [one] => one.clone(),
                        [] => return Err(Failure::Refused("the task waits on no question".into())),
                        many => {
                            return Err(Failure::Refused(format!(
                                "the task waits on several questions; pick one with --key: {}",
                                many.join(", ")
                            )));
                        }
                    }
                }
            };
            let parse = |text: &str, what: &str| {
                serde_json::from_str::<Value>(text)
                    .map_err(|e| Failure::Refused(format!("{what} is not JSON: {e}")))
            };
            let response = match (&a.accept, a.decline, &a.response) {
                (Some(content), false, None) => {
                    json!({"action": "accept", "content": parse(content, "--accept")?})
                }
                (None, true, None) => json!({"action": "decline"}),
                (None, false, Some(r)) => parse(r, "--response")?,
                _ => {
                    return Err(Failure::Refused(
                        "give one of --accept JSON, --decline or --response JSON".into(),
                    ));
                }
            };
            let body = json!({"responses": {key: response}});
            let v = api
                .call(
                    "POST",
                    &format!("/admin/v1/tasks/{}/answer", a.id),
                    Some(&body),
                )
                .await?;
            print(args, &v, |v| {
                println!("{} is {}", s(&v["id"]), s(&v["status"]))
            });
        }
        TasksCommand::Retry(i) => {
            let v = api
                .call(
                    "POST",
                    &format!("/admin/v1/tasks/{}/retry", i.id),
                    Some(&json!({})),
                )
                .await?;
            print(args, &v, |v| println!("{} is due now", s(&v["id"])));
        }
        TasksCommand::Watch(f) => {
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
                if args.json {
                    println!("{v}");
                } else if v.get("id").is_some() {
                    println!(
                        "{}  {}  {}  {}  {}",
                        time(&v["lastUpdatedAt"]),
                        s(&v["id"]),
                        s(&v["tool"]),
                        s(&v["status"]),
                        v["statusMessage"].as_str().unwrap_or("")
                    );
                } else {
                    println!("(changes may have been missed: list again)");
                }
            }
        }
    }
    Ok(())
}
