//! The `snodo` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use snodo::bench::{self, BenchBackend, StoreBenchOptions};

#[derive(Parser)]
#[command(name = "snodo", version, about = "A durable task host for MCP")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure performance; prints figures (medians over rounds).
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// create / claim_next / transition operations per second on the task stores.
    Store {
        /// Which store adapters to measure.
        #[arg(long, value_enum, default_value_t = BenchBackend::All)]
        backend: BenchBackend,
        /// Tasks per round.
        #[arg(long, default_value_t = 2_000)]
        tasks: usize,
        /// Concurrent callers, one run per value.
        #[arg(long, value_delimiter = ',', default_value = "1,16")]
        concurrency: Vec<usize>,
        /// Rounds per figure (the median is reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Directory for the redb files (a fresh subdirectory, removed afterwards).
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("snodo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Bench {
            what:
                BenchCommand::Store {
                    backend,
                    tasks,
                    concurrency,
                    rounds,
                    dir,
                    json,
                },
        } => {
            let opts = StoreBenchOptions {
                backend,
                tasks: tasks.max(1),
                concurrency,
                rounds: rounds.max(1),
                dir,
            };
            match runtime.block_on(bench::store(&opts)) {
                Ok(figures) if json => {
                    match serde_json::to_string_pretty(&figures) {
                        Ok(s) => println!("{s}"),
                        Err(e) => {
                            eprintln!("snodo: {e}");
                            return ExitCode::FAILURE;
                        }
                    }
                    ExitCode::SUCCESS
                }
                Ok(figures) => {
                    println!(
                        "store benchmark: {} tasks per round, median of {} rounds",
                        opts.tasks, opts.rounds
                    );
                    println!(
                        "{:<8} {:<11} {:>11} {:>14}",
                        "backend", "operation", "concurrency", "ops/s (median)"
                    );
                    for f in figures {
                        println!(
                            "{:<8} {:<11} {:>11} {:>14.0}",
                            f.backend, f.operation, f.concurrency, f.median_ops_per_sec
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("snodo: store benchmark failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
