//! Tools to copy: a quick report that runs inline or as a task, a durable export that asks
//! for confirmation and deduplicates its effect by idempotency key, and a flaky tool that
//! asks for retries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use snodo_guest::{
    ChooseMode, Content, ModeCall, ModeChoice, Contents, Context, Form, LogLevel, Mode, Outcome, Prompt, PromptResult, PromptSpec, Resource, ResourceSpec,
    Role, RpcError, Tool, ToolResult, ToolSpec, Vars,
};

/// `quick_report`: sums a synthetic table. Small tables run inline; large ones (more than
/// 100,000 rows) become a task when the client supports tasks.
pub struct QuickReport;

/// The report to compute.
#[derive(Deserialize, JsonSchema)]
pub struct ReportArgs {
    /// How many synthetic rows to sum (at most 100,000,000).
    rows: u64,
}

/// The report.
#[derive(Serialize, JsonSchema)]
pub struct Report {
    /// Rows summed.
    rows: u64,
    /// Their sum.
    sum: u64,
}

impl Tool for QuickReport {
    const NAME: &'static str = "quick_report";
    type Args = ReportArgs;

    fn spec() -> ToolSpec {
        // The input schema comes from `ReportArgs`; the bound a type cannot say is added.
        ToolSpec::new()
            .refine_input(|schema| schema["properties"]["rows"]["maximum"] = json!(100_000_000u64))
            .title("Quick report")
            .description("Sums a synthetic table of the given size")
            .output::<Report>()
            .mode(Mode::Optional)
    }

    fn run(cx: &Context, args: ReportArgs) -> Outcome {
        let rows = args.rows.min(100_000_000);
        let mut sum: u64 = 0;
        for i in 0..rows {
            sum = sum.wrapping_add(i % 97);
            if i % 1_000_000 == 0 && i > 0 {
                if cx.is_cancelled() {
                    return ToolResult::error("the report was cancelled").into();
                }
                cx.set_status(&format!("summed {i} of {rows} rows"));
            }
        }
        ToolResult::structured_from(&Report { rows, sum }).into()
    }
}

/// Small tables answer on the call; large ones become a task (for clients with tasks).
impl ChooseMode for QuickReport {
    fn choose_mode(args: &ReportArgs, _call: &ModeCall) -> ModeChoice {
        if args.rows > 100_000 { Mode::Optional.into() } else { Mode::Sync.into() }
    }
}

/// `durable_export`: asks for confirmation, then "exports" under the idempotency key, so a
/// recovered or retried execution repeats the same export instead of making a second one.
pub struct DurableExport;

/// What to export.
#[derive(Deserialize, JsonSchema)]
pub struct ExportArgs {
    /// The dataset's name.
    dataset: String,
}

impl Tool for DurableExport {
    const NAME: &'static str = "durable_export";
    type Args = ExportArgs;

    fn spec() -> ToolSpec {
        ToolSpec::new()
        .title("Durable export")
        .description("Exports a dataset after the user confirms")
        .mode(Mode::Required)
    }

    fn run(cx: &Context, args: ExportArgs) -> Outcome {
        let form = Form::new(format!("Export {} now?", args.dataset))
            .boolean("confirm", "Export")
            .require("confirm");
        let answer = match cx.elicit("export-confirmation", form) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e.to_string()).into(),
        };
        if !answer.accepted() || answer.bool("confirm") != Some(true) {
            return ToolResult::text(format!("Export of {} was not confirmed", args.dataset)).into();
        }
        cx.set_status(&format!("exporting {}", args.dataset));
        cx.log(LogLevel::Info, &format!("export {} keyed {}", args.dataset, cx.idempotency_key()));
        // A real tool would send the key with its request (e.g. an Idempotency-Key header),
        // so the remote side performs the export once however often this runs.
        ToolResult::structured(json!({
            "dataset": args.dataset,
            "exportId": format!("export-{}", cx.idempotency_key()),
            "attempt": cx.attempt(),
        }))
        .into()
    }
}

/// `flaky`: fails with a retry request until the given attempt, then succeeds. Shows the
/// retry policy at work (each retry waits the next delay of the task's policy).
pub struct Flaky;

/// When to stop failing.
#[derive(Deserialize, JsonSchema)]
pub struct FlakyArgs {
    /// The attempt that succeeds (3 by default).
    #[serde(default = "default_succeed_on")]
    #[schemars(range(min = 1))]
    succeed_on_attempt: u32,
}

fn default_succeed_on() -> u32 {
    3
}

impl Tool for Flaky {
    const NAME: &'static str = "flaky";
    type Args = FlakyArgs;

    fn spec() -> ToolSpec {
        ToolSpec::new()
        .title("Flaky")
        .description("Asks for retries until the given attempt")
        .mode(Mode::Required)
    }

    fn run(cx: &Context, args: FlakyArgs) -> Outcome {
        if cx.attempt() < args.succeed_on_attempt {
            return Outcome::retry(
                RpcError::new(-32000, "the upstream service is unavailable")
                    .with_data(json!({"attempt": cx.attempt()})),
                format!("attempt {} failed; retrying", cx.attempt()),
            );
        }
        ToolResult::text(format!("succeeded on attempt {}", cx.attempt())).into()
    }
}

/// `reports://{dataset}`: a dataset's report card, as JSON.
pub struct ReportCard;

impl Resource for ReportCard {
    const URI: &'static str = "reports://{dataset}";

    fn spec() -> ResourceSpec {
        ResourceSpec::new("Report card").description("A dataset's size and owner").mime_type("application/json")
    }

    fn read(_cx: &Context, uri: &str, vars: &Vars) -> Result<Vec<Contents>, RpcError> {
        let dataset = vars.get("dataset").unwrap_or_default();
        let rows = dataset.bytes().map(u64::from).sum::<u64>() * 1_000;
        let card = json!({"dataset": dataset, "rows": rows, "owner": "analytics"});
        Ok(vec![Contents::text(uri, card.to_string()).with_mime_type("application/json")])
    }

    fn complete(variable: &str, value: &str) -> Vec<String> {
        if variable != "dataset" {
            return Vec::new();
        }
        DATASETS.iter().filter(|d| d.starts_with(value)).map(|d| d.to_string()).collect()
    }
}

const DATASETS: [&str; 3] = ["sales", "support", "signups"];

#[derive(Deserialize)]
pub struct BriefArgs {
    dataset: String,
}

/// `report_brief(dataset)`: asks the model for a brief of a dataset, with its report card
/// embedded.
pub struct ReportBrief;

impl Prompt for ReportBrief {
    const NAME: &'static str = "report_brief";
    type Args = BriefArgs;

    fn spec() -> PromptSpec {
        PromptSpec::new().title("Report brief").description("A one-paragraph brief of a dataset").argument(
            "dataset",
            "The dataset to brief on",
            true,
        )
    }

    fn get(_cx: &Context, args: BriefArgs) -> Result<PromptResult, RpcError> {
        Ok(PromptResult::default()
            .with(
                Role::User,
                Content::Resource {
                    uri: format!("reports://{}", args.dataset),
                    mime_type: Some("application/json".into()),
                    text: json!({"dataset": args.dataset}).to_string(),
                },
            )
            .with(Role::User, Content::Text(format!("Write a one-paragraph brief of the {} dataset.", args.dataset))))
    }

    fn complete(argument: &str, value: &str, _context: &serde_json::Map<String, Value>) -> Vec<String> {
        ReportCard::complete(if argument == "dataset" { "dataset" } else { "" }, value)
    }
}

/// `import_pages`: imports pages up to a quota; past it the task fails, and its last status
/// message says what was done and what is left (the error says what went wrong).
pub struct ImportPages;

/// What to import.
#[derive(Deserialize, JsonSchema)]
pub struct ImportArgs {
    /// Pages to import.
    pages: u32,
    /// Pages the quota allows.
    quota: u32,
}

impl Tool for ImportPages {
    const NAME: &'static str = "import_pages";
    type Args = ImportArgs;

    fn spec() -> ToolSpec {
        ToolSpec::new()
            .description("Imports pages up to a quota")
            .mode(Mode::Required)
    }

    fn run(cx: &Context, args: ImportArgs) -> Outcome {
        let done = args.pages.min(args.quota);
        cx.set_status(&format!("imported {done} of {} pages", args.pages));
        if done < args.pages {
            return Outcome::failed_with_status(
                RpcError::internal("the import quota is exhausted"),
                format!(
                    "imported {done} of {} pages; the other {} need a larger quota",
                    args.pages,
                    args.pages - done
                ),
            );
        }
        ToolResult::text(format!("imported {done} pages")).into()
    }
}

snodo_guest::export!(
    tools: [QuickReport, DurableExport, Flaky, ImportPages],
    resources: [ReportCard],
    prompts: [ReportBrief],
);
