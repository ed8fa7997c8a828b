//! The `snodo` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use snodo::bench::{
    self, BenchBackend, McpBenchOptions, RunnerBenchOptions, StoreBenchOptions, WasmBenchOptions,
};

#[derive(Parser)]
#[command(name = "snodo", version, about = "A durable task host for MCP")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve MCP over Streamable HTTP with durable tasks.
    Serve {
        /// Address to listen on (MCP_PORT overrides the port).
        #[arg(long, default_value = "127.0.0.1:3001")]
        listen: std::net::SocketAddr,
        /// Task store: `redb` (durable, in --data) or `memory` (volatile).
        #[arg(long, default_value = "redb")]
        store: String,
        /// Data directory for the redb store and the compiled-component cache.
        #[arg(long, default_value = ".snodo")]
        data: PathBuf,
        /// Component files to serve (default: the example guests under target/guests).
        #[arg(long = "component")]
        components: Vec<PathBuf>,
        /// Bearer token and principal, as TOKEN=TENANT:SUBJECT (repeatable).
        #[arg(long = "token")]
        tokens: Vec<String>,
        /// Retry policy for a tool, as TOOL=DELAY_MS,DELAY_MS,... (repeatable).
        #[arg(long = "retry")]
        retries: Vec<String>,
        /// Log as JSON lines.
        #[arg(long)]
        log_json: bool,
    },
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
    /// Latency of tools/call -> CreateTaskResult and of tasks/get over loopback HTTP.
    Mcp {
        /// `redb` (in a temporary directory) or `memory`.
        #[arg(long, default_value = "redb")]
        store: String,
        /// Concurrent keep-alive clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Requests per phase.
        #[arg(long, default_value_t = 4_000)]
        requests: usize,
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

fn print_figures(
    title: &str,
    figures: Result<Vec<bench::LatencyFigure>, String>,
    json: bool,
) -> ExitCode {
    match figures {
        Ok(figures) if json => print_json(&figures),
        Ok(figures) => {
            println!("{title}");
            println!(
                "{:<64} {:>12} {:>12} {:>8}",
                "what", "median (us)", "p99 (us)", "samples"
            );
            for f in figures {
                println!(
                    "{:<64} {:>12.1} {:>12.1} {:>8}",
                    f.what, f.median_us, f.p99_us, f.samples
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("snodo: {title} failed: {e}");
            ExitCode::FAILURE
        }
    }
}

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

fn parse_token(s: &str) -> Result<(String, snodo::model::Principal), String> {
    let (token, who) = s.split_once('=').ok_or("a token is TOKEN=TENANT:SUBJECT")?;
    let (tenant, subject) = who
        .split_once(':')
        .ok_or("a token is TOKEN=TENANT:SUBJECT")?;
    if token.len() < 16 {
        return Err("a bearer token must be at least 16 characters".into());
    }
    Ok((
        token.to_owned(),
        snodo::model::Principal::new(tenant, subject),
    ))
}

fn parse_retry(s: &str) -> Result<(String, snodo::model::RetryPolicy), String> {
    let (tool, delays) = s
        .split_once('=')
        .ok_or("a retry policy is TOOL=DELAY_MS,DELAY_MS,...")?;
    let delays: Result<Vec<i64>, _> = delays
        .split(',')
        .filter(|d| !d.is_empty())
        .map(str::parse)
        .collect();
    let delays = delays.map_err(|e| format!("retry delays for {tool}: {e}"))?;
    let policy = snodo::model::RetryPolicy::new(delays)
        .map_err(|e| format!("retry policy for {tool}: {e}"))?;
    Ok((tool.to_owned(), policy))
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

#[allow(clippy::too_many_arguments)]
fn run_serve(
    runtime: &tokio::runtime::Runtime,
    mut listen: std::net::SocketAddr,
    store: String,
    data: PathBuf,
    mut components: Vec<PathBuf>,
    tokens: Vec<String>,
    retries: Vec<String>,
    log_json: bool,
) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let fail = |m: String| {
        eprintln!("snodo serve: {m}");
        ExitCode::FAILURE
    };
    if let Ok(port) = std::env::var("MCP_PORT") {
        match port.parse::<u16>() {
            Ok(p) => listen.set_port(p),
            Err(_) => return fail(format!("MCP_PORT={port:?} is not a port number")),
        }
    }
    if components.is_empty() {
        for name in ["fixtures.wasm", "examples.wasm"] {
            let p = PathBuf::from(GUESTS_DIR).join(name);
            if p.exists() {
                components.push(p);
            }
        }
        if components.is_empty() {
            return fail(format!(
                "no components: pass --component, or build the example guests (cargo build -p snodo-test-guests puts them in {GUESTS_DIR})"
            ));
        }
    }
    let mut opts = snodo::serve::ServeOptions::new(data, components);
    opts.listen = listen;
    opts.store = match store.as_str() {
        "memory" => snodo::serve::StoreChoice::Memory,
        "redb" => opts.store,
        other => return fail(format!("--store {other:?}: use redb or memory")),
    };
    for t in &tokens {
        match parse_token(t) {
            Ok(t) => opts.tokens.push(t),
            Err(e) => return fail(e),
        }
    }
    for r in &retries {
        match parse_retry(r) {
            Ok(r) => opts.retry_policies.push(r),
            Err(e) => return fail(e),
        }
    }
    match runtime.block_on(snodo::serve::serve(opts, |_| {}, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
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
        Command::Serve {
            listen,
            store,
            data,
            components,
            tokens,
            retries,
            log_json,
        } => run_serve(
            &runtime, listen, store, data, components, tokens, retries, log_json,
        ),
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
                BenchCommand::Mcp {
                    store,
                    clients,
                    requests,
                    json,
                },
        } => {
            let opts = McpBenchOptions {
                components: vec![PathBuf::from(GUESTS_DIR).join("examples.wasm")],
                store,
                clients,
                requests,
            };
            print_figures("mcp benchmark", runtime.block_on(bench::mcp(&opts)), json)
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
            print_figures(
                &format!("wasm benchmark: {}", opts.component.display()),
                runtime.block_on(bench::wasm(&opts)),
                json,
            )
        }
    }
}
