//! `snodo backup` and `snodo restore`: an online copy of a redb or SQLite store, taken while
//! its server serves (through the server when it holds the file), and a copy put back in
//! place of a stopped node's store. PostgreSQL is backed up with its own tools
//! (docs/operators.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use snodo::admin::BackupBody;
use snodo::store::{Backup, FileKind, StoreConfig, backup};

use super::reach::{Reached, reach};
use super::tasks::decode;

/// Copy the store a configuration names, as of one commit, to a new file while its server
/// runs and writes; the copy is read back and counted before this reports success.
#[derive(Debug, clap::Args)]
pub(crate) struct BackupArgs {
    /// The configuration file (its store).
    #[arg(long)]
    config: PathBuf,
    /// The new file to write (it must not exist).
    #[arg(long)]
    to: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Put a backup in place of the store a configuration names, on a stopped node: the backup
/// is checked first, and the store it replaces is kept beside it.
#[derive(Debug, clap::Args)]
pub(crate) struct RestoreArgs {
    /// The backup file.
    backup: PathBuf,
    /// The configuration file (its store).
    #[arg(long)]
    config: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run_backup(runtime: &tokio::runtime::Runtime, args: BackupArgs) -> ExitCode {
    let done = runtime.block_on(take(&args));
    super::exit("snodo backup", done, 1)
}

/// `path` made absolute against this process's directory: a server on this machine writes
/// where the operator meant.
fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
}

async fn take(args: &BackupArgs) -> Result<(), String> {
    let opts = super::load_config_read_only(&args.config)?;
    let to = absolute(&args.to)?;
    let (done, through) = match reach(&opts, &args.config).await? {
        Reached::Store(store) => (store.backup(&to).await.map_err(|e| e.to_string())?, ""),
        Reached::Server(api) => {
            let answer = api
                .post("/admin/v1/backup", &BackupBody { to })
                .await
                .map_err(|f| f.to_string())?;
            let b: Backup = decode(answer).map_err(|f| f.to_string())?;
            (b, " (by the server holding the store, while it served)")
        }
    };
    if args.json {
        let _ = super::print_json(&done);
        return Ok(());
    }
    println!(
        "backed up {} task{} ({} bytes, {}) to {}{through}",
        done.tasks,
        if done.tasks == 1 { "" } else { "s" },
        done.bytes,
        done.kind,
        done.path.display()
    );
    println!("read back and counted: {}", rows(&done));
    Ok(())
}

/// `table=rows` for every table with rows.
fn rows(b: &Backup) -> String {
    super::listed(b.rows.iter().map(|(t, n)| format!("{t}={n}")))
}

pub(crate) fn run_restore(args: RestoreArgs) -> ExitCode {
    let done = restore(&args);
    super::exit("snodo restore", done, 1)
}

fn restore(args: &RestoreArgs) -> Result<(), String> {
    let opts = super::load_config_read_only(&args.config)?;
    let (path, kind) = match &opts.store {
        StoreConfig::Redb(p) => (p.clone(), FileKind::Redb),
        StoreConfig::Sqlite(p) => (p.clone(), FileKind::Sqlite),
        _ => {
            return Err(
                "snodo restores a redb or SQLite store: restore PostgreSQL with pg_restore, \
                 then run snodo migrate (docs/operators.md)"
                    .into(),
            );
        }
    };
    let done = backup::restore(&args.backup, &path, kind).map_err(|e| e.to_string())?;
    if args.json {
        let _ = super::print_json(&done);
        return Ok(());
    }
    println!(
        "restored {} task{} from {} to {}",
        done.backup.tasks,
        if done.backup.tasks == 1 { "" } else { "s" },
        args.backup.display(),
        path.display()
    );
    println!("read back and counted: {}", rows(&done.backup));
    match &done.kept_aside {
        Some(aside) => println!("the store it replaced is kept at {}", aside.display()),
        None => println!("there was no store at that path before"),
    }
    println!("the next start releases the claims the copy held: its running tasks run again");
    Ok(())
}
