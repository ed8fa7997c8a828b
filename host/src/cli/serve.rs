//! `snodo serve`: serve MCP over Streamable HTTP with durable tasks.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use snodo::config::{COMMAND_LINE, ComponentSection, Config, RetrySection, TokenSection};
use snodo::model::{Principal, RetryPolicy};
use snodo::serve::ServeOptions;
use snodo::store::StoreKind;

/// Serve MCP over Streamable HTTP with durable tasks.
///
/// The settings are the defaults, then the file (--config), then the environment
/// (`SNODO_<SECTION>__<KEY>`), then these flags: each flag given overrides the key it names.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    /// A configuration file (TOML). See docs/configuration.md.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on (`listen`; default 127.0.0.1:3001; MCP_PORT overrides the port).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Task store (`[store] kind`): `redb` (durable, in the data directory; the default),
    /// `sqlite` (durable, in the data directory), `postgres` (its URL from the file or
    /// SNODO_STORE__URL) or `memory` (volatile).
    #[arg(long, value_enum)]
    store: Option<StoreKind>,
    /// Data directory for a file store and the compiled-component cache (`data_dir`;
    /// default .snodo).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Component files to serve, in place of the file's `[[components]]` (default without
    /// either: the example guests under target/guests).
    #[arg(long = "component")]
    components: Vec<PathBuf>,
    /// Bearer token and principal, as TOKEN=TENANT:SUBJECT (repeatable; in place of the
    /// file's `[[auth.tokens]]`).
    #[arg(long = "token", value_parser = parse_token)]
    tokens: Vec<(String, Principal)>,
    /// Retry policy for a tool, as TOOL=DELAY_MS,DELAY_MS,... (repeatable; `[tools.TOOL]
    /// retry`).
    #[arg(long = "retry", value_parser = parse_retry)]
    retries: Vec<(String, Vec<i64>)>,
    /// Keep a caller's W3C trace context with the tasks it creates (`[telemetry]
    /// trace_context`; turn it on once every node sharing the store runs this build).
    #[arg(long)]
    trace_context: bool,
    /// Export spans over OTLP to this collector (`[telemetry.otlp] endpoint`: the traces
    /// URL for http/protobuf, the address for gRPC); implies --trace-context.
    #[arg(long)]
    otlp_endpoint: Option<String>,
    /// `http/protobuf` (the default) or `grpc` (`[telemetry.otlp] protocol`).
    #[arg(long)]
    otlp_protocol: Option<String>,
    /// The share of traces recorded, 0 to 1 (`[telemetry.otlp] sampling_ratio`; default 1).
    #[arg(long)]
    trace_sampling: Option<f64>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
}

/// Runs the server until SIGTERM or SIGINT, then drains. SIGHUP reloads the
/// configuration file (or, without one, the component files the flags name).
pub(crate) fn run(args: ServeArgs) -> ExitCode {
    init_logging(args.log_json);
    // Settings problems found here are configuration errors (exit code 2, as in
    // `ServeError::exit_code`).
    let opts = match options(&args) {
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
    let hangups = runtime.spawn(reload_on_hangup(args, reload_tx));
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

/// What the file, the environment and the flags ask to serve, through the one road from a
/// [`Config`] to [`ServeOptions`].
fn options(args: &ServeArgs) -> Result<ServeOptions, String> {
    let port = match std::env::var("MCP_PORT") {
        Ok(port) => Some(
            port.parse::<u16>()
                .map_err(|_| format!("MCP_PORT={port:?} is not a port number"))?,
        ),
        Err(_) => None,
    };
    let (loaded, file) = match &args.config {
        Some(f) => (Config::load(f), f.display().to_string()),
        None => (Config::from_environment(), COMMAND_LINE.to_owned()),
    };
    let mut config = loaded.map_err(|e| e.to_string())?;
    args.override_config(&mut config)?;
    if args.config.is_none() && config.components.is_empty() {
        config.components = super::default_components()?
            .into_iter()
            .map(|path| ComponentSection { path })
            .collect();
    }
    let mut opts = config.to_serve_options(&file).map_err(|e| e.to_string())?;
    if let Some(p) = port {
        opts.listen.set_port(p);
    }
    Ok(opts)
}

impl ServeArgs {
    /// Lays the flags given over `config`: each replaces the key it names.
    fn override_config(&self, config: &mut Config) -> Result<(), String> {
        // Paths on the command line are the working directory's, not the file's.
        let absolute = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
        if let Some(l) = self.listen {
            config.listen = Some(l);
            config.given_by_flag("listen", "--listen");
        }
        if let Some(kind) = self.store {
            config.store.kind = kind;
            config.given_by_flag("store.kind", "--store");
        }
        if let Some(d) = &self.data {
            config.data_dir = Some(absolute(d));
            config.given_by_flag("data_dir", "--data");
        }
        if !self.components.is_empty() {
            config.components = (self.components.iter())
                .map(|p| ComponentSection { path: absolute(p) })
                .collect();
            config.given_by_flag("components", "--component");
        }
        if !self.tokens.is_empty() {
            config.auth.tokens.clear();
            for (i, (token, principal)) in self.tokens.iter().enumerate() {
                config.auth.tokens.push(TokenSection {
                    token: Some(token.clone()),
                    token_env: None,
                    tenant: principal.tenant.clone(),
                    subject: principal.subject.clone(),
                });
                config.given_by_flag(&format!("auth.tokens[{i}]"), &format!("--token #{}", i + 1));
            }
        }
        for (tool, delays) in &self.retries {
            let section = config.tools.entry(tool.clone()).or_default();
            section.retry = Some(RetrySection::List(delays.clone()));
            config.given_by_flag(&format!("tools.{tool}.retry"), "--retry");
        }
        if self.trace_context {
            config.telemetry.trace_context = Some(true);
            config.given_by_flag("telemetry.trace_context", "--trace-context");
        }
        self.override_otlp(config)
    }

    /// `--otlp-endpoint`, `--otlp-protocol` and `--trace-sampling` over `[telemetry.otlp]`.
    fn override_otlp(&self, config: &mut Config) -> Result<(), String> {
        if let Some(endpoint) = &self.otlp_endpoint {
            let otlp = (config.telemetry.otlp)
                .get_or_insert_with(|| snodo_otel::OtlpSection::new(endpoint.clone()));
            otlp.endpoint.clone_from(endpoint);
            config.given_by_flag("telemetry.otlp.endpoint", "--otlp-endpoint");
        }
        let flags = [
            ("protocol", "--otlp-protocol", self.otlp_protocol.is_some()),
            (
                "sampling_ratio",
                "--trace-sampling",
                self.trace_sampling.is_some(),
            ),
        ];
        let Some(otlp) = config.telemetry.otlp.as_mut() else {
            return match flags.iter().find(|(_, _, given)| *given) {
                Some((_, flag, _)) => Err(format!(
                    "{flag} needs --otlp-endpoint (or [telemetry.otlp] in the file)"
                )),
                None => Ok(()),
            };
        };
        if let Some(p) = &self.otlp_protocol {
            otlp.protocol = p.parse().map_err(|e| format!("--otlp-protocol: {e}"))?;
        }
        if let Some(r) = self.trace_sampling {
            otlp.sampling_ratio = r;
        }
        for (key, flag, given) in flags {
            if given {
                config.given_by_flag(&format!("telemetry.otlp.{key}"), flag);
            }
        }
        Ok(())
    }
}

fn parse_token(s: &str) -> Result<(String, Principal), String> {
    let (token, who) = s.split_once('=').ok_or("a token is TOKEN=TENANT:SUBJECT")?;
    let (tenant, subject) = who
        .split_once(':')
        .ok_or("a token is TOKEN=TENANT:SUBJECT")?;
    let principal = Principal::new(tenant, subject);
    snodo::identity::check_token(token, &principal, &[]).map_err(|e| e.to_string())?;
    Ok((token.to_owned(), principal))
}

fn parse_retry(s: &str) -> Result<(String, Vec<i64>), String> {
    let (tool, delays) = s
        .split_once('=')
        .ok_or("a retry policy is TOOL=DELAY_MS,DELAY_MS,...")?;
    let delays: Result<Vec<i64>, _> = delays
        .split(',')
        .filter(|d| !d.is_empty())
        .map(str::parse)
        .collect();
    let delays = delays.map_err(|e| format!("retry delays for {tool}: {e}"))?;
    RetryPolicy::new(delays.iter().copied())
        .map_err(|e| format!("retry policy for {tool}: {e}"))?;
    Ok((tool.to_owned(), delays))
}

/// At every SIGHUP: reads the configuration again (the file, the environment and the
/// flags, as at start: the component files are read anew) and hands it to the server, or
/// logs why it was refused (the server keeps what it runs).
async fn reload_on_hangup(args: ServeArgs, reloads: tokio::sync::mpsc::Sender<ServeOptions>) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        return;
    };
    while hangups.recv().await.is_some() {
        match options(&args) {
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
