//! `snodo schedules`: a running server's schedules through its admin API: list them with
//! their next and last firings, show one, pause, resume, fire one now, remove one the API
//! declared. `--json` prints exactly what the API answered; the exit codes are `snodo
//! tasks`' (0 done, 1 refused or failed, 2 the server could not be reached).

use std::process::ExitCode;

use serde_json::{Map, Value};

use snodo::admin::{ScheduleRun, ScheduleView};

use super::tasks::{Api, ApiArgs, Failure, exit, print, time};

/// Operate on a running server's schedules through its admin API.
#[derive(Debug, clap::Args)]
pub(crate) struct SchedulesArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(subcommand)]
    command: SchedulesCommand,
}

#[derive(Debug, clap::Subcommand)]
enum SchedulesCommand {
    /// Every schedule: cadence, next firing, last firing and its task.
    List,
    /// One schedule, with its next firings.
    Show(NameArg),
    /// Stop firing (until resumed; the firings of the pause are not missed ones).
    Pause(NameArg),
    /// Fire again from the next firing on.
    Resume(NameArg),
    /// Fire once now, outside the cadence, and print the task.
    RunNow(NameArg),
    /// Remove a schedule the admin API declared (its tasks stay).
    Remove(NameArg),
}

#[derive(Debug, clap::Args)]
struct NameArg {
    /// The schedule's name.
    name: String,
}

/// Runs the subcommand.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: SchedulesArgs) -> ExitCode {
    exit("schedules", runtime.block_on(dispatch(&args)))
}

async fn dispatch(args: &SchedulesArgs) -> Result<(), Failure> {
    let api = Api::new(&args.api).await?;
    let json = args.api.json;
    let path = |name: &str, action: &str| format!("/admin/v1/schedules/{name}{action}");
    let none = Map::new();
    match &args.command {
        SchedulesCommand::List => {
            let v = api.get("/admin/v1/schedules").await?;
            print(json, v, list_text)
        }
        SchedulesCommand::Show(n) => {
            let v = api.get(&path(&n.name, "")).await?;
            print(json, v, show_text)
        }
        SchedulesCommand::Pause(n) => {
            let v = api.post(&path(&n.name, "/pause"), &none).await?;
            print(json, v, show_text)
        }
        SchedulesCommand::Resume(n) => {
            let v = api.post(&path(&n.name, "/resume"), &none).await?;
            print(json, v, show_text)
        }
        SchedulesCommand::RunNow(n) => {
            let v = api.post(&path(&n.name, "/run"), &none).await?;
            print(json, v, |r: &ScheduleRun| {
                format!(
                    "{} fired now: task {} ({})\n",
                    r.schedule.schedule.spec.name, r.task.summary.id, r.task.summary.status
                )
            })
        }
        SchedulesCommand::Remove(n) => {
            let v = api.delete(&path(&n.name, "")).await?;
            print(json, v, |_: &Value| format!("{} removed\n", n.name))
        }
    }
}

#[derive(serde::Deserialize)]
struct List {
    schedules: Vec<ScheduleView>,
}

fn list_text(list: &List) -> String {
    if list.schedules.is_empty() {
        return "no schedules\n".into();
    }
    let rows = list
        .schedules
        .iter()
        .map(|v| {
            let s = &v.schedule;
            [
                s.spec.name.clone(),
                s.spec.tool.clone(),
                s.spec.tenant.clone(),
                v.cadence_text.clone(),
                if s.paused {
                    "paused".into()
                } else {
                    s.next_at.map_or_else(|| "-".into(), time)
                },
                last_text(v),
            ]
        })
        .collect::<Vec<_>>();
    super::table(["NAME", "TOOL", "TENANT", "CADENCE", "NEXT", "LAST"], rows)
}

fn last_text(v: &ScheduleView) -> String {
    match (&v.schedule.last, &v.last_task) {
        (Some(last), Some(task)) => format!("{} {} {}", time(last.at), task.id, task.status),
        (Some(last), None) => format!("{} {} (gone)", time(last.at), last.task_id),
        (None, _) => "-".into(),
    }
}

fn show_text(v: &ScheduleView) -> String {
    let s = &v.schedule;
    let mut out = format!(
        "{}: {} for {} as {}, {} ({:?} from {:?})\n",
        s.spec.name,
        s.spec.tool,
        s.spec.tenant,
        s.spec.subject,
        v.cadence_text,
        s.origin,
        s.revision
    );
    out.push_str(&format!(
        "  {}; missed firings: {:?}; fired {}, skipped {}\n",
        if s.paused { "paused" } else { "active" },
        s.spec.missed,
        s.fired,
        s.skipped
    ));
    out.push_str(&format!("  last: {}\n", last_text(v)));
    if let Some(e) = &s.last_error {
        out.push_str(&format!("  last refusal: {e}\n"));
    }
    for at in &v.upcoming {
        out.push_str(&format!("  next: {at}\n"));
    }
    out
}
