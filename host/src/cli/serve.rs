//! `snodo serve`: serve MCP over Streamable HTTP with durable tasks.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use snodo::model::{Principal, RetryPolicy};
use snodo::serve::ServeOptions;
use snodo::store::{StoreConfig, StoreKind};

/// Serve MCP over Streamable HTTP with durable tasks.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// A configuration file (TOML); when given, the flags below except --log-json are
    /// ignored. See docs/configuration.md.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on (MCP_PORT overrides the port).
    #[arg(long, default_value = "127.0.0.1:3001")]
    listen: SocketAddr,
    /// Task store: `redb` (durable, in --data), `sqlite` (durable, in --data) or
    /// `memory` (volatile). PostgreSQL is configured with --config.
    #[arg(long, value_enum, default_value_t = StoreKind::Redb)]
    store: StoreKind,
    /// Data directory for the redb store and the compiled-component cache.
    #[arg(long, default_value = ".snodo")]
    data: PathBuf,
    /// Component files to serve (default: the example guests under target/guests).
    #[arg(long = "component")]
    components: Vec<PathBuf>,
    /// Bearer token and principal, as TOKEN=TENANT:SUBJECT (repeatable).
    #[arg(long = "token", value_parser = parse_token)]
    tokens: Vec<(String, Principal)>,
    /// Retry policy for a tool, as TOOL=DELAY_MS,DELAY_MS,... (repeatable).
    #[arg(long = "retry", value_parser = parse_retry)]
    retries: Vec<(String, RetryPolicy)>,
    /// Keep a caller's W3C trace context with the tasks it creates (`[telemetry]
    /// trace_context`; turn it on once every node sharing the store runs this build).
    #[arg(long)]
    trace_context: bool,
    /// Export spans over OTLP to this collector (`[telemetry.otlp] endpoint`: the traces
    /// URL for http/protobuf, the address for gRPC); implies --trace-context.
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// `http/protobuf` or `grpc` (`[telemetry.otlp] protocol`).
    #[arg(long, default_value = "http/protobuf")]
    otlp_protocol: String,
    /// The share of traces recorded, 0 to 1 (`[telemetry.otlp] sampling_ratio`).
    #[arg(long, default_value_t = 1.0)]
    trace_sampling: f64,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

/// Runs the server until SIGTERM or SIGINT, then drains. SIGHUP reloads the
/// configuration file (or, without one, the component files the flags name).
pub(crate) fn run(args: ServeArgs) -> ExitCode {
    init_logging(args.log_json);
    let config = args.config.clone();
    // Settings problems found here are configuration errors (exit code 2, as in
    // `ServeError::exit_code`).
    let opts = match options(args) {
        Ok(opts) => opts,
        Err(m) => {
            eprintln!("snodo serve: {m}");
            return ExitCode::from(2);
        }
    };
    let runtime = match crate::runtime(opts.engine.executing) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let (reload_tx, reloads) = tokio::sync::mpsc::channel(1);
    let initial = opts.clone();
    let hangups = runtime.spawn(reload_on_hangup(config, initial, reload_tx));
    let served = runtime.block_on(snodo::serve::serve_reloading(
        opts,
        |_| {},
        shutdown_signal(),
        Some(reloads),
    ));
    hangups.abort();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("snodo serve: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        // Colour only on a terminal: escape codes in a log file or a collector are noise.
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
        tracing_subscriber::fmt()
            .with_ansi(terminal)
            .with_env_filter(filter)
            .init();
    }
}

/// What the flags (or the configuration file they name) ask to serve.
fn options(args: ServeArgs) -> Result<ServeOptions, String> {
    let port = match std::env::var("MCP_PORT") {
        Ok(port) => Some(
            port.parse::<u16>()
                .map_err(|_| format!("MCP_PORT={port:?} is not a port number"))?,
        ),
        Err(_) => None,
    };
    if let Some(file) = &args.config {
        let mut opts = super::load_config(file)?;
        if let Some(p) = port {
            opts.listen.set_port(p);
        }
        return Ok(opts);
    }
    let mut listen = args.listen;
    if let Some(p) = port {
        listen.set_port(p);
    }
    let components = match args.components {
        c if c.is_empty() => super::default_components()?,
        c => c,
    };
    let sqlite_file = args.data.join("tasks.sqlite");
    let mut opts = ServeOptions::new(args.data, components);
    opts.listen = listen;
    opts.trace_context = args.trace_context || args.otlp_endpoint.is_some();
    if let Some(endpoint) = &args.otlp_endpoint {
        opts.otlp = Some(super::otlp_flags(
            endpoint,
            &args.otlp_protocol,
            args.trace_sampling,
        )?);
    }
    opts.store = match args.store {
        StoreKind::Memory => StoreConfig::Memory,
        StoreKind::Redb => opts.store,
        StoreKind::Sqlite => StoreConfig::Sqlite(sqlite_file),
        StoreKind::Postgres => {
            return Err(
                "--store postgres: a PostgreSQL store is configured in a file (--config; see docs/configuration.md)".into(),
            );
        }
    };
    for (i, (token, principal)) in args.tokens.into_iter().enumerate() {
        if let Err(e) = snodo::http::check_token(&token, &principal, &opts.tokens) {
            return Err(match e {
                snodo::http::TokenError::Duplicate { first } => format!(
                    "--token #{} repeats the token of --token #{}; tokens must be unique",
                    i + 1,
                    first + 1
                ),
                other => format!("--token #{}: {other}", i + 1),
            });
        }
        opts.tokens.push((token, principal));
    }
    // A node serving several tenants gets the defaults sized for sharing.
    let tenants = snodo::serve::tenants_in(&opts.tokens);
    opts.limits = snodo::budget::TenantLimits::for_tenants(tenants);
    opts.engine.max_tenant_memory_bytes = snodo::serve::shared_memory(&opts.engine, tenants);
    for (tool, policy) in args.retries {
        opts.tool_settings.entry(tool).or_default().retry_policy = Some(policy);
    }
    Ok(opts)
}

fn parse_token(s: &str) -> Result<(String, Principal), String> {
    let (token, who) = s.split_once('=').ok_or("a token is TOKEN=TENANT:SUBJECT")?;
    let (tenant, subject) = who
        .split_once(':')
        .ok_or("a token is TOKEN=TENANT:SUBJECT")?;
    let principal = Principal::new(tenant, subject);
    snodo::http::check_token(token, &principal, &[]).map_err(|e| e.to_string())?;
    Ok((token.to_owned(), principal))
}

fn parse_retry(s: &str) -> Result<(String, RetryPolicy), String> {
    let (tool, delays) = s
        .split_once('=')
        .ok_or("a retry policy is TOOL=DELAY_MS,DELAY_MS,...")?;
    let delays: Result<Vec<i64>, _> = delays
        .split(',')
        .filter(|d| !d.is_empty())
        .map(str::parse)
        .collect();
    let delays = delays.map_err(|e| format!("retry delays for {tool}: {e}"))?;
    let policy = RetryPolicy::new(delays).map_err(|e| format!("retry policy for {tool}: {e}"))?;
    Ok((tool.to_owned(), policy))
}

/// At every SIGHUP: reads the configuration file again and hands it to the server, or
/// logs why it was refused (the server keeps what it runs). Without a file, the options the
/// flags gave are handed again: the component files they name are read anew.
async fn reload_on_hangup(
    config: Option<PathBuf>,
    initial: ServeOptions,
    reloads: tokio::sync::mpsc::Sender<ServeOptions>,
) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        return;
    };
    while hangups.recv().await.is_some() {
        let next = match &config {
            Some(file) => super::load_config(file).map(|mut o| {
                // As at start: MCP_PORT names the port.
                if let Some(p) = std::env::var("MCP_PORT").ok().and_then(|p| p.parse().ok()) {
                    o.listen.set_port(p);
                }
                o
            }),
            None => Ok(initial.clone()),
        };
        match next {
            Ok(o) => {
                tracing::info!("SIGHUP: reloading the configuration");
                if reloads.send(o).await.is_err() {
                    return;
                }
            }
            Err(e) => tracing::error!(
                error = %e,
                "SIGHUP: the configuration does not validate; still serving the one before"
            ),
        }
    }
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
