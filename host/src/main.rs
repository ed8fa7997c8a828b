//! The `snodo` command line.

use std::path::PathBuf;
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

use bench::{
    BenchBackend, McpBenchOptions, RunnerBenchOptions, StoreBenchOptions, WasmBenchOptions,
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
        /// A configuration file (TOML); when given, the flags below except --log-json are
        /// ignored. See docs/configuration.md.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on (MCP_PORT overrides the port).
        #[arg(long, default_value = "127.0.0.1:3001")]
        listen: std::net::SocketAddr,
        /// Task store: `redb` (durable, in --data), `sqlite` (durable, in --data) or
        /// `memory` (volatile). PostgreSQL is configured with --config.
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
    /// Configuration files.
    Config {
        #[command(subcommand)]
        what: ConfigCommand,
    },
    /// Create a tool crate that builds into a component (then build and serve it with the
    /// commands it prints).
    New {
        /// The crate's name (ASCII letters, digits, '-' and '_').
        name: String,
        /// Where to create it (default: ./NAME).
        #[arg(long)]
        path: Option<PathBuf>,
        /// The snodo-guest crate to depend on (default: guest-sdk/ of the checkout this
        /// binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// List the tools a configuration (or the given components) serves.
    Tools {
        /// A configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Component files (when no configuration is given; default: the example guests).
        #[arg(long = "component")]
        components: Vec<PathBuf>,
    },
    /// Show a task: from a redb or SQLite store file without a running server, or from the
    /// store a configuration names (PostgreSQL included; a read that touches no claim).
    Inspect {
        /// The task id.
        task_id: String,
        /// The store file (redb or SQLite, told apart by its header).
        #[arg(long, default_value = ".snodo/tasks.redb")]
        store: PathBuf,
        /// A configuration file: inspect the store it names instead of --store.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Create or upgrade the PostgreSQL schema a configuration names (`[store] kind =
    /// "postgres"`), then exit. Safe to run from several nodes at once.
    Migrate {
        /// The configuration file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a seeded correctness workload against a store and print every invariant with
    /// its exact count and PASS/FAIL (exit code 1 when any fails). See docs/stress.md.
    Stress {
        /// `contention` (writers racing on shared tasks) or `runner` (mixed batches of real
        /// guests through a runner).
        #[arg(long, default_value = "contention")]
        mode: String,
        /// `memory`, `redb`, `sqlite` or `postgres`.
        #[arg(long, default_value = "memory")]
        store: String,
        /// Runner mode: the fixtures and examples components (default: the example guests).
        #[arg(long = "component")]
        components: Vec<PathBuf>,
        /// The redb or SQLite file (default: a fresh temporary file, removed after).
        #[arg(long)]
        path: Option<PathBuf>,
        /// PostgreSQL: the connection string (a fresh schema is made and dropped after).
        #[arg(
            long,
            default_value = "host=127.0.0.1 port=5432 user=postgres dbname=test"
        )]
        pg_url: String,
        /// Concurrent writers per shared task.
        #[arg(long, default_value_t = 8)]
        writers: usize,
        /// Shared tasks per round (runner mode: tasks per batch, at least one of each kind;
        /// crash mode: tasks each client creates per round at most).
        #[arg(long, default_value_t = 16)]
        tasks: usize,
        /// Compare-and-set attempts per writer and task.
        #[arg(long, default_value_t = 8)]
        ops: usize,
        /// Rounds (runner mode: batches).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The seed: the same seed makes the same workload.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Crash mode: `snodo serve` children on the store (redb, sqlite or postgres) are
        /// killed with SIGKILL `--rounds` times at seeded moments under a mixed workload
        /// of `--writers` clients, restarted, and every acknowledged reply is checked.
        #[arg(long)]
        kill: bool,
        /// Crash mode on PostgreSQL: how many nodes share the store (one is killed each
        /// round).
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure performance; prints figures (medians over rounds).
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a configuration file: syntax, values, and that every configured tool exists.
    Validate {
        /// The file.
        file: PathBuf,
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
        /// Store for the memory figures: memory, redb, sqlite or postgres.
        #[arg(long, default_value = "memory")]
        store: String,
        /// PostgreSQL: the connection string (a fresh schema is made and dropped after).
        #[arg(
            long,
            default_value = "host=127.0.0.1 port=5432 user=postgres dbname=test"
        )]
        pg_url: String,
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

/// Joins `items` with commas, or `-` for none.
fn listed<T: AsRef<str>>(items: impl IntoIterator<Item = T>) -> String {
    let joined: Vec<T> = items.into_iter().collect();
    if joined.is_empty() {
        "-".to_owned()
    } else {
        joined
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Prints a table under `header`, each column as wide as its widest cell. A header
/// written `>name` is a column of figures, aligned right as `format!`'s `>` would.
fn print_table<const N: usize>(header: [&str; N], rows: impl IntoIterator<Item = [String; N]>) {
    let right = header.map(|h| h.starts_with('>'));
    let header = header.map(|h| h.trim_start_matches('>'));
    let rows: Vec<[String; N]> = rows.into_iter().collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; N]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let w = widths[i];
            if i > 0 {
                out.push(' ');
            }
            if right[i] {
                out.push_str(&format!("{cell:>w$}"));
            } else if i + 1 < N {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(cell);
            }
        }
        println!("{out}");
    };
    line(header);
    for row in &rows {
        line(row.each_ref().map(String::as_str));
    }
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
        Ok(figures) if json => print_json(&figures),
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
    let principal = snodo::model::Principal::new(tenant, subject);
    snodo::http::check_token(token, &principal, &[])
        .map_err(|e| format!("--token TOKEN=TENANT:SUBJECT: {e}"))?;
    Ok((token.to_owned(), principal))
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

fn default_components() -> Result<Vec<PathBuf>, String> {
    let found: Vec<PathBuf> = ["fixtures.wasm", "examples.wasm"]
        .iter()
        .map(|n| PathBuf::from(GUESTS_DIR).join(n))
        .filter(|p| p.exists())
        .collect();
    if found.is_empty() {
        return Err(format!(
            "no components: pass --component, or build the example guests (cargo build -p snodo-test-guests puts them in {GUESTS_DIR})"
        ));
    }
    Ok(found)
}

fn load_config(file: &std::path::Path) -> Result<snodo::serve::ServeOptions, String> {
    let name = file.display().to_string();
    let config = snodo::config::Config::load(file).map_err(|e| e.to_string())?;
    config.to_serve_options(&name).map_err(|e| e.to_string())
}

/// Which workload `snodo stress` runs.
struct Workload<'a> {
    mode: &'a str,
    components: &'a [PathBuf],
    opts: &'a snodo::stress::StressOptions,
    nodes: usize,
}

impl Workload<'_> {
    async fn run(
        &self,
        store: std::sync::Arc<dyn snodo::store::Store>,
        name: &str,
    ) -> Result<snodo::stress::StressReport, String> {
        match self.mode {
            "contention" => Ok(snodo::stress::contention(store, name, self.opts).await),
            "runner" => {
                snodo::stress::runner_batches(store, name, self.components, self.opts).await
            }
            other => Err(format!("--mode {other:?}: use contention or runner")),
        }
    }
}

/// Opens the store `kind` names (fresh unless a file is given), runs the workload on it,
/// and removes what it made.
async fn stress(
    kind: &str,
    path: Option<PathBuf>,
    pg_url: &str,
    run: &Workload<'_>,
) -> Result<snodo::stress::StressReport, String> {
    use snodo::store::PgOptions;
    let scratch = scratch::temp_dir("stress")?;
    let file = |name: &str| path.clone().unwrap_or_else(|| scratch.join(name));
    let err = |e: snodo::store::StoreError| e.to_string();
    if run.mode == "kill" {
        let bin = std::env::current_exe().map_err(|e| format!("where is snodo? {e}"))?;
        if run.nodes > 1 && kind != "postgres" {
            return Err("--nodes: only a PostgreSQL store is shared by several nodes".into());
        }
        let (crash_store, reader) = match kind {
            "redb" => {
                let path = file("stress.redb");
                (
                    snodo::stress::CrashStore::Redb(path.clone()),
                    Reader::Redb(path),
                )
            }
            "sqlite" => {
                let path = file("stress.sqlite");
                (
                    snodo::stress::CrashStore::Sqlite(path.clone()),
                    Reader::Sqlite(path),
                )
            }
            "postgres" => {
                let mut pg = PgOptions::new(pg_url, snodo::serve::default_node_id());
                pg.schema = format!("snodo_stress_kill_{}", std::process::id());
                pg.migrate = false;
                let store = snodo::stress::CrashStore::Postgres {
                    url: pg_url.to_owned(),
                    schema: pg.schema.clone(),
                };
                (store, Reader::Postgres(pg))
            }
            other => {
                return Err(format!(
                    "--kill --store {other:?}: crash mode needs a durable store: redb, sqlite or postgres"
                ));
            }
        };
        let open = || reader.open();
        let report = snodo::stress::crash(
            &bin,
            crash_store,
            run.nodes,
            run.components,
            run.opts,
            kind,
            open,
        )
        .await;
        if let Reader::Postgres(pg) = &reader {
            snodo::store::drop_postgres_schema(pg).await.map_err(err)?;
        }
        let _ = std::fs::remove_dir_all(&scratch);
        return report;
    }
    let file = match kind {
        "sqlite" => file("stress.sqlite"),
        _ => file("stress.redb"),
    };
    let schema = format!("snodo_stress_{}", std::process::id());
    let opened = scratch::ScratchStore::open(kind, &file, pg_url, schema).await?;
    let report = run.run(opened.store.clone(), kind).await;
    opened.remove().await?;
    let report = report?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(report)
}

/// Opens, in this process, the store crash mode's children used: the verdict reads it
/// through the contract once they are gone.
enum Reader {
    Redb(PathBuf),
    Sqlite(PathBuf),
    Postgres(snodo::store::PgOptions),
}

impl Reader {
    async fn open(&self) -> Result<std::sync::Arc<dyn snodo::store::Store>, String> {
        let err = |e: snodo::store::StoreError| e.to_string();
        Ok(match self {
            Reader::Redb(p) => std::sync::Arc::new(snodo::store::RedbStore::open(p).map_err(err)?),
            Reader::Sqlite(p) => {
                std::sync::Arc::new(snodo::store::SqliteStore::open(p).map_err(err)?)
            }
            Reader::Postgres(pg) => {
                std::sync::Arc::new(snodo::store::PgStore::open(pg.clone()).await.map_err(err)?)
            }
        })
    }
}

/// Applies the PostgreSQL migrations of the store `file` configures.
fn migrate(runtime: &tokio::runtime::Runtime, file: &std::path::Path) -> Result<String, String> {
    let opts = load_config(file)?;
    let snodo::serve::StoreChoice::Postgres(pg) = opts.store else {
        return Err(format!(
            "{}: store.kind: migrations are for a PostgreSQL store (kind = \"postgres\"); the embedded stores upgrade themselves on open",
            file.display()
        ));
    };
    let applied = runtime
        .block_on(snodo::store::migrate_postgres(&pg))
        .map_err(|e| e.to_string())?;
    Ok(if applied.is_empty() {
        format!(
            "schema {:?} is at version {}: nothing to do",
            pg.schema,
            snodo::store::POSTGRES_SCHEMA_VERSION
        )
    } else {
        format!(
            "schema {:?}: applied version(s) {:?}; now at version {}",
            pg.schema,
            applied,
            snodo::store::POSTGRES_SCHEMA_VERSION
        )
    })
}

/// Loads the tools `opts` describe and prints them.
fn print_tools(
    runtime: &tokio::runtime::Runtime,
    opts: &snodo::serve::ServeOptions,
) -> Result<(), String> {
    // An operator command inspects; it never writes a compile cache into whatever
    // directory it was run from (only `serve` keeps one, beside its data).
    let mut opts = opts.clone();
    opts.cache_dir = None;
    let catalog = runtime
        .block_on(snodo::serve::load_tools(&opts))
        .map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for t in catalog.tools() {
        // The SDK's words: the configured or declared mode, and the `Tool` methods the
        // component runs before a call is decided (`choose_mode` only where the
        // configuration leaves the mode to the tool).
        let mode = t.mode.unwrap_or(t.info.mode).as_str();
        let mut hooks = Vec::new();
        if t.info.has_mode_rule
            && t.mode.is_none()
            && t.info.mode == snodo::wasm::TaskMode::Optional
        {
            hooks.push("choose_mode");
        }
        if t.info.has_prepare {
            hooks.push("prepare");
        }
        rows.push([
            t.info.name.clone(),
            mode.to_owned(),
            listed(hooks),
            t.retry_policy.delays_ms().len().to_string(),
            t.ttl_ms.map_or("none".to_owned(), |v| v.to_string()),
            t.component.path().display().to_string(),
        ]);
    }
    print_table(
        ["tool", "mode", "hooks", ">retries", ">ttl_ms", "component"],
        rows,
    );
    let sources = catalog.sources();
    let mut rows = Vec::new();
    for s in sources {
        let c = s.component.catalog();
        let path = s.component.path().display().to_string();
        for r in &c.resources {
            rows.push([r.uri.clone(), "fixed".into(), path.clone()]);
        }
        for t in &c.templates {
            rows.push([t.template.as_str().into(), "template".into(), path.clone()]);
        }
    }
    if !rows.is_empty() {
        println!();
        print_table(["resource", "kind", "component"], rows);
    }
    // Required arguments are marked with `*`.
    let mut rows = Vec::new();
    for s in sources {
        for p in &s.component.catalog().prompts {
            let args = p
                .arguments
                .iter()
                .map(|(n, required)| format!("{n}{}", if *required { "*" } else { "" }));
            let path = s.component.path().display().to_string();
            rows.push([p.name.clone(), listed(args), path]);
        }
    }
    if !rows.is_empty() {
        println!();
        print_table(["prompt", "arguments", "component"], rows);
    }
    Ok(())
}

/// Reads a task from a store file (redb or SQLite) without opening it as a store.
fn inspect_file(
    store: &std::path::Path,
    id: &snodo::model::TaskId,
) -> Result<Option<(snodo::model::Task, snodo::model::Work)>, String> {
    use std::io::Read;
    let mut head = [0u8; 16];
    let sqlite = std::fs::File::open(store)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0";
    if sqlite {
        snodo::store::SqliteStore::inspect_file(store, id)
    } else {
        snodo::store::RedbStore::inspect_file(store, id)
    }
    .map_err(|e| e.to_string())
}

fn inspect(
    runtime: &tokio::runtime::Runtime,
    store: &std::path::Path,
    config: Option<&std::path::Path>,
    task_id: &str,
) -> Result<(), String> {
    let id = snodo::model::TaskId::parse(task_id).ok_or("a task id is 32 lowercase hex digits")?;
    let (found, place) = match config {
        None => (inspect_file(store, &id)?, store.display().to_string()),
        Some(file) => {
            let opts = load_config(file)?;
            match opts.store {
                snodo::serve::StoreChoice::Redb(p) | snodo::serve::StoreChoice::Sqlite(p) => {
                    (inspect_file(&p, &id)?, p.display().to_string())
                }
                snodo::serve::StoreChoice::Postgres(mut pg) => {
                    // A one-off identity: opening under a serving node's name would release
                    // that node's claims.
                    pg.node = snodo::serve::default_node_id();
                    pg.migrate = false;
                    let place = format!("schema {:?}", pg.schema);
                    let found = runtime.block_on(async {
                        use snodo::store::Store;
                        snodo::store::PgStore::open(pg).await?.inspect(&id).await
                    });
                    (found.map_err(|e| e.to_string())?, place)
                }
                snodo::serve::StoreChoice::Memory => {
                    return Err("a memory store lives only inside its server".into());
                }
            }
        }
    };
    let (task, work) = found.ok_or_else(|| format!("no task {id} in {place}"))?;
    let view = serde_json::json!({
        "taskId": id.to_string(),
        "scope": task.scope,
        "status": task.status,
        "statusMessage": task.status_message,
        "createdAt": snodo::protocol::rfc3339(task.created_at),
        "lastUpdatedAt": snodo::protocol::rfc3339(task.last_updated_at),
        "ttlMs": task.ttl_ms,
        "revision": task.revision,
        "attempt": task.attempt,
        "generation": task.generation,
        "claim": task.claim.as_ref().map(|c| serde_json::json!({
            "generation": c.generation, "owner": c.owner,
            "leaseExpiresAt": snodo::protocol::rfc3339(c.expires_at), "bootEpoch": c.epoch})),
        "retry": {
            "policyMs": work.retry_policy.delays_ms(),
            "consumed": task.retry_count,
            "nextAt": task.retry_at.map(snodo::protocol::rfc3339),
        },
        "inputsOutstanding": task.outstanding_inputs().map(|(k, _)| k).collect::<Vec<_>>(),
        "inputsAnswered": task.inputs.iter().filter(|(_, e)| e.response.is_some()).map(|(k, _)| k).collect::<Vec<_>>(),
        "work": {"type": work.kind, "tool": work.input.get("tool"), "idempotencyKey": work.idempotency_key},
    });
    let text = serde_json::to_string_pretty(&view).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
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
    config: Option<PathBuf>,
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
    // Settings problems found here are configuration errors (exit code 2, as in
    // `ServeError::exit_code`).
    let fail = |m: String| {
        eprintln!("snodo serve: {m}");
        ExitCode::from(2)
    };
    let failed = |e: snodo::serve::ServeError| {
        eprintln!("snodo serve: {e}");
        ExitCode::from(e.exit_code())
    };
    let port = match std::env::var("MCP_PORT") {
        Ok(port) => match port.parse::<u16>() {
            Ok(p) => Some(p),
            Err(_) => return fail(format!("MCP_PORT={port:?} is not a port number")),
        },
        Err(_) => None,
    };
    if let Some(file) = config {
        let mut opts = match load_config(&file) {
            Ok(o) => o,
            Err(e) => return fail(e),
        };
        if let Some(p) = port {
            opts.listen.set_port(p);
        }
        return match runtime.block_on(snodo::serve::serve(opts, |_| {}, shutdown_signal())) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => failed(e),
        };
    }
    if let Some(p) = port {
        listen.set_port(p);
    }
    if components.is_empty() {
        match default_components() {
            Ok(c) => components = c,
            Err(e) => return fail(e),
        }
    }
    let sqlite_file = data.join("tasks.sqlite");
    let mut opts = snodo::serve::ServeOptions::new(data, components);
    opts.listen = listen;
    opts.store = match store.as_str() {
        "memory" => snodo::serve::StoreChoice::Memory,
        "redb" => opts.store,
        "sqlite" => snodo::serve::StoreChoice::Sqlite(sqlite_file),
        other => {
            return fail(format!(
                "--store {other:?}: use redb, sqlite or memory (PostgreSQL is configured in a file: --config)"
            ));
        }
    };
    for (i, t) in tokens.iter().enumerate() {
        let (token, principal) = match parse_token(t) {
            Ok(t) => t,
            Err(e) => return fail(e),
        };
        if let Err(e) = snodo::http::check_token(&token, &principal, &opts.tokens) {
            let e = match e {
                snodo::http::TokenError::Duplicate { first } => format!(
                    "--token #{} repeats the token of --token #{}; tokens must be unique",
                    i + 1,
                    first + 1
                ),
                other => format!("--token #{}: {other}", i + 1),
            };
            return fail(e);
        }
        opts.tokens.push((token, principal));
    }
    for r in &retries {
        match parse_retry(r) {
            Ok((tool, policy)) => {
                opts.tool_settings.entry(tool).or_default().retry_policy = Some(policy);
            }
            Err(e) => return fail(e),
        }
    }
    match runtime.block_on(snodo::serve::serve(opts, |_| {}, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(e),
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
            config,
            listen,
            store,
            data,
            components,
            tokens,
            retries,
            log_json,
        } => run_serve(
            &runtime, config, listen, store, data, components, tokens, retries, log_json,
        ),
        Command::Stress {
            mode,
            store,
            components,
            path,
            pg_url,
            writers,
            tasks,
            ops,
            rounds,
            seed,
            kill,
            nodes,
            json,
        } => {
            let mode = if kill { "kill".to_owned() } else { mode };
            let opts = snodo::stress::StressOptions {
                writers,
                tasks,
                ops,
                rounds,
                seed,
            };
            let components = if mode != "contention" && components.is_empty() {
                match default_components() {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("snodo stress: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                components
            };
            let run = Workload {
                mode: &mode,
                components: &components,
                opts: &opts,
                nodes,
            };
            match runtime.block_on(stress(&store, path, &pg_url, &run)) {
                Ok(report) => {
                    if json {
                        print_json(&report);
                    } else {
                        print!("{}", report.render());
                    }
                    if report.passed() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("snodo stress: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Migrate { config } => match migrate(&runtime, &config) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("snodo migrate: {e}");
                ExitCode::from(2)
            }
        },
        Command::Config {
            what: ConfigCommand::Validate { file },
        } => match load_config(&file).and_then(|opts| {
            print_tools(&runtime, &opts).map_err(|e| format!("{}: {e}", file.display()))
        }) {
            Ok(()) => {
                println!("{}: valid", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("snodo config validate: {e}");
                ExitCode::FAILURE
            }
        },
        Command::New { name, path, sdk } => {
            let dir = path.unwrap_or_else(|| PathBuf::from(&name));
            let Some(sdk) = sdk.or_else(scaffold::default_sdk) else {
                eprintln!(
                    "error: where is the snodo-guest crate? Pass --sdk PATH (guest-sdk/ in the Snodo repository)"
                );
                return ExitCode::from(2);
            };
            match scaffold::scaffold(&name, &dir, &sdk) {
                Ok(made) => {
                    println!(
                        "Created {} (crate {name}: one tool, count_words, in src/lib.rs).\n\nNext:\n  cd {}\n  rustup target add wasm32-wasip2   # once\n  cargo build --release --target wasm32-wasip2\n  snodo serve --component {}",
                        made.dir.display(),
                        made.dir.display(),
                        made.component.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Tools { config, components } => {
            let opts = match config {
                Some(file) => load_config(&file),
                None if components.is_empty() => default_components()
                    .map(|c| snodo::serve::ServeOptions::new(PathBuf::from(".snodo"), c)),
                None => Ok(snodo::serve::ServeOptions::new(
                    PathBuf::from(".snodo"),
                    components,
                )),
            };
            match opts.and_then(|o| print_tools(&runtime, &o)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("snodo tools: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Inspect {
            task_id,
            store,
            config,
        } => match inspect(&runtime, &store, config.as_deref(), &task_id) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("snodo inspect: {e}");
                ExitCode::FAILURE
            }
        },
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
            report(
                "store benchmark",
                runtime
                    .block_on(bench::store(&opts))
                    .map_err(|e| e.to_string()),
                json,
                |figures: &[bench::StoreFigure]| {
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
                    store,
                    pg_url,
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
                store,
                pg_url,
            };
            report(
                "runner benchmark",
                runtime.block_on(bench::runner(&opts)),
                json,
                |figures: &[bench::RunnerFigure]| {
                    println!("runner benchmark");
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
                },
            )
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
