//! `snodo bench`: measure performance; prints figures (medians over rounds), never asserts.

use std::process::ExitCode;

use crate::bench::{
    FairnessFigure, FairnessOptions, GatewayBenchOptions, GatewayFigure, LatencyFigure,
    ListingBenchOptions, ListingFigure, McpBenchOptions, OutboundBenchOptions, OutboundFigure,
    RunnerBenchOptions, RunnerFigure, SleepersOptions, StoreBenchOptions, StoreFigure,
    WasmBenchOptions, WasmFigure, WebhooksOptions,
};

use super::print_table;

/// Measure performance; prints figures (medians over rounds).
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    what: BenchCommand,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum BenchCommand {
    /// create / claim_next / transition operations per second on the task stores.
    Store(StoreBenchOptions),
    /// Latency of tools/call -> CreateTaskResult and of tasks/get over loopback HTTP.
    Mcp(McpBenchOptions),
    /// Resident memory of parked tasks and live guests; time from cancel to a stopped guest.
    Runner(RunnerBenchOptions),
    /// Many tasks asleep in the store at once, then woken at a steady rate: what they hold
    /// and how late they wake (docs/time.md).
    Sleepers(SleepersOptions),
    /// Task events delivered to a receiver: the time from a transition's commit to its
    /// receipt, and deliveries a second, on each store.
    Webhooks(WebhooksOptions),
    /// Per component (Rust, Python, JavaScript side by side): cold compile, load on
    /// restart, the warm call, and the memory of a live instance.
    Wasm(WasmBenchOptions),
    /// A victim tenant's latency while another floods the node (docs/performance.md).
    Fairness(FairnessOptions),
    /// A guest's HTTP request against the same request made natively, and the journal's
    /// cost per request on redb and PostgreSQL.
    Outbound(OutboundBenchOptions),
    /// A call of an upstream MCP server's tool fronted by the gateway, against calling the
    /// upstream directly (docs/gateway.md).
    Gateway(GatewayBenchOptions),
    /// The operators' queries (first pages, counts) on a store holding many tasks.
    Listing(ListingBenchOptions),
    /// An OTLP collector (http/protobuf and gRPC on one port) that counts and discards
    /// what it receives, until interrupted: the collector `scripts/bench-tracing` measures
    /// tracing's cost against.
    OtlpSink(OtlpSinkOptions),
}

/// `snodo bench otlp-sink`.
#[derive(Debug, clap::Args)]
struct OtlpSinkOptions {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:4318")]
    listen: std::net::SocketAddr,
}

/// Runs the counting collector until SIGINT or SIGTERM, then prints what it received.
fn otlp_sink(runtime: &tokio::runtime::Runtime, opts: &OtlpSinkOptions, json: bool) -> ExitCode {
    runtime.block_on(async {
        let sink = match snodo_otel::receiver::Receiver::on(opts.listen, false).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "snodo: bench otlp-sink: cannot listen on {}: {e}",
                    opts.listen
                );
                return ExitCode::FAILURE;
            }
        };
        eprintln!("otlp sink: listening on {}", opts.listen);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        if json {
            println!("{{\"spans\":{}}}", sink.count());
        } else {
            println!("otlp sink: {} spans received", sink.count());
        }
        ExitCode::SUCCESS
    })
}

/// Runs the benchmark and prints its figures.
pub(crate) fn run(runtime: &tokio::runtime::Runtime, args: BenchArgs) -> ExitCode {
    let json = args.json;
    match args.what {
        BenchCommand::OtlpSink(opts) => otlp_sink(runtime, &opts, json),
        BenchCommand::Store(opts) => store(runtime, &opts, json),
        BenchCommand::Listing(opts) => listing(runtime, &opts, json),
        BenchCommand::Fairness(opts) => fairness(runtime, &opts, json),
        BenchCommand::Outbound(opts) => outbound(runtime, &opts, json),
        BenchCommand::Gateway(opts) => report(
            "gateway benchmark",
            runtime.block_on(crate::bench::gateway(&opts)),
            json,
            |figures: &[GatewayFigure]| {
                println!(
                    "gateway benchmark: upstream answers after {} ms, {} calls per figure, one at a time",
                    opts.service_ms, opts.calls
                );
                print_table(
                    ["what", ">median µs", ">p99 µs", ">× direct"],
                    figures.iter().map(|f| {
                        [
                            f.what.clone(),
                            format!("{:.0}", f.median_us),
                            format!("{:.0}", f.p99_us),
                            format!("{:.2}", f.ratio),
                        ]
                    }),
                );
            },
        ),
        BenchCommand::Mcp(opts) => figures(
            "mcp benchmark",
            runtime.block_on(crate::bench::mcp(&opts)),
            json,
        ),
        BenchCommand::Runner(opts) => runner(runtime, &opts, json),
        BenchCommand::Sleepers(opts) => report(
            "sleepers benchmark",
            runtime.block_on(crate::bench::sleepers(&opts)),
            json,
            |figures: &[RunnerFigure]| figure_table("sleepers benchmark", figures),
        ),
        BenchCommand::Webhooks(opts) => report(
            "webhooks benchmark",
            runtime.block_on(crate::bench::webhooks(&opts)),
            json,
            |figures: &[RunnerFigure]| figure_table("webhooks benchmark", figures),
        ),
        BenchCommand::Wasm(opts) => wasm(runtime, &opts, json),
    }
}

/// `snodo bench store`.
fn store(runtime: &tokio::runtime::Runtime, opts: &StoreBenchOptions, json: bool) -> ExitCode {
    report(
        "store benchmark",
        runtime
            .block_on(crate::bench::store(opts))
            .map_err(|e| e.to_string()),
        json,
        |figures: &[StoreFigure]| {
            println!(
                "store benchmark: {} tasks per round, median of {} rounds",
                opts.tasks, opts.rounds
            );
            print_table(
                ["backend", "operation", ">concurrency", ">ops/s (median)"],
                figures.iter().map(|f| {
                    [
                        f.backend.to_string(),
                        f.operation.to_string(),
                        f.concurrency.to_string(),
                        format!("{:.0}", f.median_ops_per_sec),
                    ]
                }),
            );
        },
    )
}

/// `snodo bench listing`.
fn listing(runtime: &tokio::runtime::Runtime, opts: &ListingBenchOptions, json: bool) -> ExitCode {
    report(
        "listing benchmark",
        runtime.block_on(crate::bench::listing(opts)),
        json,
        |figures: &[ListingFigure]| {
            println!(
                "listing benchmark: {} tasks stored, {} repetitions per query",
                opts.tasks, opts.repeat
            );
            print_table(
                [
                    "store",
                    "query",
                    ">rows",
                    ">p50 (ms)",
                    ">p99 (ms)",
                    ">fill (s)",
                ],
                figures.iter().map(|f| {
                    [
                        f.store.clone(),
                        f.query.to_owned(),
                        f.rows.to_string(),
                        format!("{:.2}", f.p50_ms),
                        format!("{:.2}", f.p99_ms),
                        format!("{:.0}", f.fill_s),
                    ]
                }),
            );
        },
    )
}

/// `snodo bench fairness`.
fn fairness(runtime: &tokio::runtime::Runtime, opts: &FairnessOptions, json: bool) -> ExitCode {
    report(
        "fairness benchmark",
        runtime.block_on(crate::bench::fairness(opts)),
        json,
        |figures: &[FairnessFigure]| {
            println!(
                "fairness benchmark: tenant b's greet while tenant a floods, {} s per scenario",
                opts.seconds
            );
            print_table(
                [
                    "scenario",
                    ">p50 (ms)",
                    ">p99 (ms)",
                    ">p99 / baseline",
                    ">calls",
                    ">failed",
                ],
                figures.iter().map(|f| {
                    [
                        f.scenario.clone(),
                        format!("{:.2}", f.p50_ms),
                        format!("{:.2}", f.p99_ms),
                        format!("{:.1}", f.p99_vs_baseline),
                        f.samples.to_string(),
                        f.errors.to_string(),
                    ]
                }),
            );
        },
    )
}

/// `snodo bench outbound`.
fn outbound(
    runtime: &tokio::runtime::Runtime,
    opts: &OutboundBenchOptions,
    json: bool,
) -> ExitCode {
    report(
        "outbound benchmark",
        runtime.block_on(crate::bench::outbound(opts)),
        json,
        |figures: &[OutboundFigure]| {
            println!(
                "outbound benchmark: {} requests per round, median of {} rounds",
                opts.requests, opts.rounds
            );
            print_table(
                [
                    "what",
                    ">per request (us)",
                    ">CPU per request (us)",
                    ">requests",
                ],
                figures.iter().map(|f| {
                    [
                        f.what.clone(),
                        format!("{:.1}", f.median_us),
                        format!("{:.1}", f.cpu_us),
                        f.requests.to_string(),
                    ]
                }),
            );
        },
    )
}

/// `snodo bench runner`.
fn runner(runtime: &tokio::runtime::Runtime, opts: &RunnerBenchOptions, json: bool) -> ExitCode {
    report(
        "runner benchmark",
        runtime.block_on(crate::bench::runner(opts)),
        json,
        |figures: &[RunnerFigure]| figure_table("runner benchmark", figures),
    )
}

/// Prints `figures` under `title`: what, value, unit.
fn figure_table(title: &str, figures: &[RunnerFigure]) {
    println!("{title}");
    print_table(
        ["what", ">value", "unit"],
        figures.iter().map(|f| {
            [
                f.what.clone(),
                format!("{:.2}", f.value),
                f.unit.to_string(),
            ]
        }),
    );
}

/// `snodo bench wasm`.
fn wasm(runtime: &tokio::runtime::Runtime, opts: &WasmBenchOptions, json: bool) -> ExitCode {
    report(
        "wasm benchmark",
        runtime.block_on(crate::bench::wasm(opts)),
        json,
        |figures: &[WasmFigure]| {
            println!("wasm benchmark");
            print_table(
                ["component", "what", ">median", ">p99", "unit", ">samples"],
                figures.iter().map(|f| {
                    [
                        f.component.clone(),
                        f.what.clone(),
                        format!("{:.2}", f.median),
                        f.p99.map_or_else(String::new, |p| format!("{p:.2}")),
                        f.unit.to_string(),
                        f.samples.to_string(),
                    ]
                }),
            );
        },
    )
}

/// Latency figures as JSON or as a table.
fn figures(title: &str, figures: Result<Vec<LatencyFigure>, String>, json: bool) -> ExitCode {
    report(title, figures, json, |figures| {
        println!("{title}");
        print_table(
            ["what", ">median (us)", ">p99 (us)", ">samples"],
            figures.iter().map(|f| {
                [
                    f.what.clone(),
                    format!("{:.1}", f.median_us),
                    format!("{:.1}", f.p99_us),
                    f.samples.to_string(),
                ]
            }),
        );
    })
}

/// Prints a benchmark's figures as JSON or as the table `table` writes, or says why the
/// benchmark failed.
fn report<T: serde::Serialize>(
    title: &str,
    figures: Result<Vec<T>, String>,
    json: bool,
    table: impl FnOnce(&[T]),
) -> ExitCode {
    match figures {
        Ok(figures) if json => super::print_json(&figures),
        Ok(figures) => {
            table(&figures);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("snodo: {title} failed: {e}");
            ExitCode::FAILURE
        }
    }
}
