//! The `snodo` command line.
//!
//! One [`Command`] variant per subcommand, each holding the `clap::Args` struct of its file
//! under `cli/`, whose `run` it calls. Option structs that a library function also takes
//! (`StressOptions`, the benchmarks' options) derive `Args` themselves and are flattened,
//! never restated. The modules declared here (`heap`, `bench`, `scaffold`, `scratch`,
//! `guests`, `cli`) belong to the binary, not the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod heap;

#[global_allocator]
static ALLOCATOR: heap::Heap = heap::Heap;

// The measurements behind `snodo bench`: part of the command, not of the library's API.
mod bench;
// `snodo new`: the tool-crate template.
mod scaffold;
// The store a stress run or a benchmark opens for itself.
mod scratch;
// The example guests the build makes, used when no component is named.
mod guests;
// One file per subcommand.
mod cli;

#[derive(Parser)]
#[command(name = "snodo", version, about = "A durable task host for MCP")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over Streamable HTTP with durable tasks.
    Serve(cli::serve::ServeArgs),
    /// Configuration files.
    Config(cli::config::ConfigArgs),
    /// Create a tool crate that builds into a component (then build and serve it with the
    /// commands it prints).
    New(cli::new::NewArgs),
    /// List the tools a configuration (or the given components) serves.
    Tools(cli::tools::ToolsArgs),
    /// Operate on a running server's tasks (its admin API): list, counts, show, cancel,
    /// answer, retry, watch; `--json` for scripts.
    Tasks(cli::tasks::TasksArgs),
    /// Operate on a running server's schedules (its admin API): list, show, pause, resume,
    /// run-now, remove; `--json` for scripts.
    Schedules(cli::schedules::SchedulesArgs),
    /// Operate on a running server's webhook subscriptions (its admin API): list, show,
    /// pause, resume, rotate, redeliver dead letters, read the outbox by cursor.
    Webhooks(cli::webhooks::WebhooksArgs),
    /// Show a task: from a redb or SQLite store file without a running server, or from the
    /// store a configuration names (PostgreSQL included; a read that touches no claim).
    Inspect(cli::inspect::InspectArgs),
    /// Create or upgrade the PostgreSQL schema a configuration names (`[store] kind =
    /// "postgres"`), then exit. Safe to run from several nodes at once.
    Migrate(cli::migrate::MigrateArgs),
    /// Deploy components to the store a configuration names: every node serving it swaps
    /// them in without a restart, and tasks created before keep their version.
    Deploy(cli::deploy::DeployArgs),
    /// List the deployments and the stored components, with the tasks pinned to each.
    Deployments(cli::deploy::DeploymentsArgs),
    /// Deploy again what an earlier deployment named.
    Rollback(cli::deploy::RollbackArgs),
    /// Copy a redb or SQLite store to a new file while its server runs (a snapshot of one
    /// commit, read back and counted before success is reported).
    Backup(cli::backup::BackupArgs),
    /// Put a backup in place of a stopped node's store (the replaced store is kept aside).
    Restore(cli::backup::RestoreArgs),
    /// Read tasks back from the archive (`[archive]`) after the reaper removed them.
    Archive(cli::archive::ArchiveArgs),
    /// Ask a node's `/readyz` (or `--path /healthz`): exit 0 when it answers 200, else 1
    /// with what it answered (the container image's health check).
    Probe(cli::probe::ProbeArgs),
    /// Sign a component for `deploy.trusted_keys` (writes COMPONENT.sig).
    Sign(cli::deploy::SignArgs),
    /// Make an Ed25519 key pair for signing components (prints the public key).
    Keygen(cli::deploy::KeygenArgs),
    /// Run a seeded correctness workload against a store and print every invariant with
    /// its exact count and PASS/FAIL (exit code 1 when any fails). See docs/stress.md.
    Stress(cli::stress::StressArgs),
    /// Measure performance; prints figures (medians over rounds).
    Bench(cli::bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `serve` sizes its runtime from its configuration; every other command from the
    // defaults.
    if let Command::Serve(args) = cli.command {
        return cli::serve::run(args);
    }
    let runtime = match runtime(snodo::wasm::EngineConfig::default().executing) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match cli.command {
        Command::Serve(_) => unreachable!("served above"),
        Command::Config(args) => cli::config::run(&runtime, args),
        Command::New(args) => cli::new::run(args),
        Command::Tools(args) => cli::tools::run(&runtime, args),
        Command::Inspect(args) => cli::inspect::run(&runtime, args),
        Command::Tasks(args) => cli::tasks::run(&runtime, args),
        Command::Schedules(args) => cli::schedules::run(&runtime, args),
        Command::Webhooks(args) => cli::webhooks::run(&runtime, args),
        Command::Migrate(args) => cli::migrate::run(&runtime, args),
        Command::Deploy(args) => cli::deploy::run_deploy(&runtime, args),
        Command::Deployments(args) => cli::deploy::run_deployments(&runtime, args),
        Command::Rollback(args) => cli::deploy::run_rollback(&runtime, args),
        Command::Backup(args) => cli::backup::run_backup(&runtime, args),
        Command::Restore(args) => cli::backup::run_restore(args),
        Command::Archive(args) => cli::archive::run(&runtime, args),
        Command::Probe(args) => cli::probe::run(&runtime, args),
        Command::Sign(args) => cli::deploy::run_sign(args),
        Command::Keygen(args) => cli::deploy::run_keygen(args),
        Command::Stress(args) => cli::stress::run(&runtime, args),
        Command::Bench(args) => cli::bench::run(&runtime, args),
    }
}

/// The async runtime, with one worker more than guests may execute at once
/// (`limits.executing`): a guest holds its worker for up to an epoch tick, and request
/// handling must always find a worker no guest holds.
fn runtime(executing: usize) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(executing.max(1) + 1)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("snodo: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}
