//! `snodo archive show`: a task read back from the archive a configuration names
//! (`[archive]`), after the reaper removed it from the store, printed as `snodo tasks show`
//! prints a stored one.

use std::path::PathBuf;
use std::process::ExitCode;

use snodo::archive::{ArchivedTask, TaskArchive};
use snodo::model::TaskId;

/// Read archived tasks.
#[derive(Debug, clap::Args)]
pub(crate) struct ArchiveArgs {
    #[command(subcommand)]
    command: ArchiveCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ArchiveCommand {
    /// One archived task: its summary, arguments, outcome and history (and journal, when
    /// the archive keeps journals).
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The task's id.
    id: String,
    /// The configuration file (its `[archive]`).
    #[arg(long)]
    config: PathBuf,
    /// Print the archived record as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: ArchiveArgs) -> ExitCode {
    match args.command {
        ArchiveCommand::Show(show) => {
            let done = runtime.block_on(show_one(&show));
            super::exit("snodo archive show", done, 1)
        }
    }
}

async fn show_one(args: &ShowArgs) -> Result<(), String> {
    let opts = super::load_config_read_only(&args.config)?;
    let settings = opts.archive.as_ref().ok_or_else(|| {
        format!(
            "{} has no [archive] section: tasks are removed at their TTL unkept",
            args.config.display()
        )
    })?;
    let id = TaskId::parse(&args.id)
        .ok_or_else(|| format!("{:?} is not a task id (32 lower-case hex digits)", args.id))?;
    let archive = TaskArchive::open(settings).map_err(|e| e.to_string())?;
    let record = archive.read(&id).await.map_err(|e| e.to_string())?;
    let Some(record) = record else {
        return Err(format!(
            "task {id} is not in the archive at {} (a task is archived when the reaper \
             removes it, after its TTL; `snodo tasks show {id}` reads one still stored)",
            archive.place()
        ));
    };
    if args.json {
        let _ = super::print_json(&record);
        return Ok(());
    }
    print!("{}", text(&record));
    Ok(())
}

/// What `snodo tasks show` prints, then the journal's entries, one a line.
fn text(record: &ArchivedTask) -> String {
    let mut out = super::tasks::detail_text(&record.task);
    if let Some(journal) = &record.journal {
        out.push_str("journal\n");
        for e in journal {
            out.push_str(&format!(
                "  {}  {} {}  {}\n",
                e.seq, e.request.method, e.request.url, e.status
            ));
        }
    }
    out
}
