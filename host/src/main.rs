//! The `snodo` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use snodo::bench::{self, BenchBackend, RunnerBenchOptions, StoreBenchOptions, WasmBenchOptions};

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
    /// Resident memory of parked tasks and live guests; time from cancel to a stopped guest.
    Runner {
        /// The fixtures component.
        #[arg(long, default_value_t = format!("{GUESTS_DIR}/fixtures.wasm"))]
        fixtures: String,
        /// The hostile component.
        #[arg(long, default_value_t = format!("{GUESTS_DIR}/hostile.wasm"))]
        hostile: String,
        /// Parked-task counts.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        parked: Vec<usize>,
        /// Live-guest counts, for comparison.
        #[arg(long, value_delimiter = ',', default_value = "1000")]
        live: Vec<usize>,
        /// Cancellations to time.
        #[arg(long, default_value_t = 20)]
        cancels: usize,
        /// Cancel grace period in ms.
        #[arg(long, default_value_t = 100)]
        grace_ms: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Cold compile, cache load, and warm instantiate + trivial execute of a component.
    Wasm {
        /// The component (e.g. target/guests/wasm32-wasip2/release/fixtures.wasm).
        #[arg(long)]
        component: PathBuf,
        /// A tool of it that does almost nothing.
        #[arg(long, default_value = "test_simple_text")]
        tool: String,
        /// Warm executions per allocator.
        #[arg(long, default_value_t = 5_000)]
        iterations: usize,
        /// Cold compilations.
        #[arg(long, default_value_t = 5)]
        compiles: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Where `cargo build -p snodo-test-guests` puts the example guests.
const GUESTS_DIR: &str = "target/guests/wasm32-wasip2/release";

fn print_json<T: serde::Serialize>(value: &T) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("snodo: {e}");
            ExitCode::FAILURE
        }
    }
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
                Ok(figures) if json => print_json(&figures),
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
        Command::Bench {
            what:
                BenchCommand::Runner {
                    fixtures,
                    hostile,
                    parked,
                    live,
                    cancels,
                    grace_ms,
                    json,
                },
        } => {
            let opts = RunnerBenchOptions {
                fixtures: fixtures.into(),
                hostile: hostile.into(),
                parked,
                live,
                cancels,
                grace_ms,
            };
            match runtime.block_on(bench::runner(&opts)) {
                Ok(figures) if json => print_json(&figures),
                Ok(figures) => {
                    println!("runner benchmark");
                    for f in figures {
                        println!("{:<72} {:>10.2} {}", f.what, f.value, f.unit);
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("snodo: runner benchmark failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bench {
            what:
                BenchCommand::Wasm {
                    component,
                    tool,
                    iterations,
                    compiles,
                    json,
                },
        } => {
            let opts = WasmBenchOptions {
                component,
                tool,
                iterations,
                compiles,
            };
            match runtime.block_on(bench::wasm(&opts)) {
                Ok(figures) if json => print_json(&figures),
                Ok(figures) => {
                    println!("wasm benchmark: {}", opts.component.display());
                    println!(
                        "{:<44} {:>12} {:>12} {:>8}",
                        "what", "median (us)", "p99 (us)", "samples"
                    );
                    for f in figures {
                        println!(
                            "{:<44} {:>12.1} {:>12.1} {:>8}",
                            f.what, f.median_us, f.p99_us, f.samples
                        );
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("snodo: wasm benchmark failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
