//! `snodo webhooks`: a running server's webhook subscriptions through its admin API: list
//! them with where their deliveries stand, show one with its retries and dead letters,
//! pause, resume, rotate the secret, redeliver dead letters, and read the outbox after a
//! cursor. `--json` prints exactly what the API answered; the exit codes are `snodo tasks`'
//! (0 done, 1 refused or failed, 2 the server could not be reached).

use std::process::ExitCode;

use serde_json::{Map, Value, json};

use snodo::admin::{EventPage, WebhookView};

use super::tasks::{Api, ApiArgs, Failure, exit, print, time};

/// Operate on a running server's webhook subscriptions through its admin API.
#[derive(Debug, clap::Args)]
pub(crate) struct WebhooksArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: WebhooksCommand,
}

#[derive(Debug, clap::Subcommand)]
enum WebhooksCommand {
    /// Every subscription: its endpoint, what it hears, and where its deliveries stand.
    List,
    /// One subscription, with its retries and dead letters.
    Show(NameArg),
    /// Stop delivering (events wait in the outbox).
    Pause(NameArg),
    /// Deliver again, from where it stopped.
    Resume(NameArg),
    /// A new signing secret (printed once); the old one signs beside it for
    /// `webhooks.rotation_grace_ms`.
    Rotate(NameArg),
    /// Send dead letters once more: the one whose event id is given, or every one.
    Redeliver(RedeliverArgs),
    /// The outbox's events after a cursor, in commit order, and the next cursor.
    Events(EventsArgs),
}

#[derive(Debug, clap::Args)]
struct NameArg {
    /// The subscription's name.
    name: String,
}

#[derive(Debug, clap::Args)]
struct RedeliverArgs {
    /// The subscription's name.
    name: String,
    /// The dead letter's event id (default: every dead letter).
    #[arg(long)]
    event: Option<String>,
}

#[derive(Debug, clap::Args)]
struct EventsArgs {
    /// The cursor: events numbered after it (0: from the oldest kept).
    #[arg(long, default_value_t = 0)]
    after: u64,
    /// One tenant's events (an operator of one tenant sees only its own).
    #[arg(long)]
    tenant: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    limit: usize,
}

/// Runs the subcommand.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: WebhooksArgs) -> ExitCode {
    exit("webhooks", runtime.block_on(dispatch(&args)))
}

async fn dispatch(args: &WebhooksArgs) -> Result<(), Failure> {
    let api = Api::new(&args.api).await?;
    let json = args.api.json;
    let path = |name: &str, action: &str| format!("/admin/v1/webhooks/{name}{action}");
    let none = Map::new();
    match &args.command {
        WebhooksCommand::List => {
            let v = api.get("/admin/v1/webhooks").await?;
            print(json, v, list_text)
        }
        WebhooksCommand::Show(n) => {
            let v = api.get(&path(&n.name, "")).await?;
            print(json, v, show_text)
        }
        WebhooksCommand::Pause(n) => {
            let v = api.post(&path(&n.name, "/pause"), &none).await?;
            print(json, v, show_text)
        }
        WebhooksCommand::Resume(n) => {
            let v = api.post(&path(&n.name, "/resume"), &none).await?;
            print(json, v, show_text)
        }
        WebhooksCommand::Rotate(n) => {
            let v = api.post(&path(&n.name, "/rotate"), &none).await?;
            print(json, v, |w: &WebhookView| {
                format!(
                    "{}: new secret {}\n  the previous one signs beside it until the rotation's grace runs out\n",
                    w.webhook.spec.name,
                    w.secret.as_deref().unwrap_or("-")
                )
            })
        }
        WebhooksCommand::Redeliver(r) => {
            let mut body = Map::new();
            if let Some(e) = &r.event {
                body.insert("event".into(), json!(e));
            }
            let v = api.post(&path(&r.name, "/redeliver"), &body).await?;
            print(json, v, |v: &Value| {
                format!(
                    "{}: {} dead letter(s) sent again at the next look\n",
                    r.name, v["redelivering"]
                )
            })
        }
        WebhooksCommand::Events(e) => {
            let mut query = format!("/admin/v1/events?after={}&limit={}", e.after, e.limit);
            if let Some(t) = &e.tenant {
                query.push_str(&format!("&tenant={t}"));
            }
            let v = api.get(&query).await?;
            print(json, v, events_text)
        }
    }
}

#[derive(serde::Deserialize)]
struct List {
    webhooks: Vec<WebhookView>,
}

fn list_text(list: &List) -> String {
    if list.webhooks.is_empty() {
        return "no webhook subscriptions\n".into();
    }
    let rows = list
        .webhooks
        .iter()
        .map(|v| {
            let w = &v.webhook;
            [
                w.spec.name.clone(),
                w.spec.tenant.clone(),
                w.spec.url.clone(),
                if w.paused {
                    "paused".into()
                } else {
                    "active".into()
                },
                w.delivered.to_string(),
                w.retrying.len().to_string(),
                w.dead.len().to_string(),
            ]
        })
        .collect::<Vec<_>>();
    super::table(
        [
            "NAME",
            "TENANT",
            "URL",
            "STATE",
            "DELIVERED",
            "RETRYING",
            "DEAD",
        ],
        rows,
    )
}

fn show_text(v: &WebhookView) -> String {
    let w = &v.webhook;
    let hears = |list: Vec<String>| {
        if list.is_empty() {
            "every".to_owned()
        } else {
            list.join(", ")
        }
    };
    let mut out = format!(
        "{}: {} for tenant {} ({:?}, revision {})\n",
        w.spec.name, w.spec.url, w.spec.tenant, w.origin, w.revision
    );
    out.push_str(&format!(
        "  hears: {} event(s) of {} tool(s){}\n",
        hears(
            w.spec
                .events
                .iter()
                .map(|e| e.as_str().to_owned())
                .collect()
        ),
        hears(w.spec.tools.clone()),
        if w.spec.on_request {
            ", for calls that ask for it"
        } else {
            ""
        }
    ));
    out.push_str(&format!(
        "  {}; cursor {}; delivered {}, failed tries {}\n",
        if w.paused { "paused" } else { "active" },
        w.cursor,
        w.delivered,
        w.failures
    ));
    if let Some(at) = w.last_delivered_at {
        out.push_str(&format!("  last delivered: {}\n", time(at)));
    }
    if let Some(e) = &w.last_error {
        out.push_str(&format!("  last error: {e}\n"));
    }
    for r in &w.retrying {
        out.push_str(&format!(
            "  retrying event {} (try {} failed: {}), next at {}\n",
            r.seq,
            r.attempts,
            r.error,
            time(r.next_at)
        ));
    }
    for d in &w.dead {
        out.push_str(&format!(
            "  dead letter {} ({} of task {}), {} tries, last: {}\n",
            d.event.id,
            d.event.event.wire_type(),
            d.event.task_id,
            d.attempts,
            d.error
        ));
    }
    out
}

fn events_text(page: &EventPage) -> String {
    let mut out = String::new();
    for e in &page.events {
        out.push_str(&format!(
            "{} {} {} task {} -> {}\n",
            e.seq,
            e.id,
            e.payload["type"].as_str().unwrap_or_default(),
            e.payload["data"]["taskId"].as_str().unwrap_or_default(),
            e.to.join(", ")
        ));
    }
    out.push_str(&format!("next: --after {}\n", page.next));
    out
}
