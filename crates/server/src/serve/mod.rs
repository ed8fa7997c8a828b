//! `snodo serve`: wiring a store, the wasm host, a runner and the HTTP server together.
//!
//! In order: open the store (reporting the claims it recovered), serve its deployment
//! (`deploy::start`, then `deploy::follow` until shutdown; [`serve_reloading`] also takes
//! configurations reloaded on SIGHUP), start the runner and then HTTP. A listener off
//! loopback with neither bearer tokens nor OAuth is refused. SIGTERM and SIGINT drain: a
//! guest waiting for input parks at once (`TaskIo::parked_when`), open connections get the
//! runner's drain timeout. Failures are a typed `ServeError` (settings, listening, store,
//! components; a `DeployError` becomes the kind it names), each with its own exit code.
//! [`spawn`] runs the same server in the background of the caller's runtime and answers a
//! [`Running`]: the benchmarks and the tests serve through it. Under a service manager
//! (`NOTIFY_SOCKET`), `notify` tells it when the node is ready, alive and stopping.

mod notify;
mod options;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::http::{self, HttpConfig};
use crate::identity;
use crate::mcp::{McpServer, ServerConfig};
use crate::telemetry::{Metrics, MetricsAndTracing};
use snodo_core::store::{ObservedStore, OpenedStore, Store, StoreConfig};
use snodo_runner::{Catalog, Catalogs, Runner};
use tokio_util::sync::CancellationToken;

use crate::deploy::{self, Deployer, DeployerSettings};
use options::needs_restart;

pub use crate::deploy::ToolSettings;
pub use options::{ServeError, ServeOptions, TracingOptions, default_node_id, tenants_in};
pub use snodo_runner::DEFAULT_TTL_MS;

/// Loads everything, serves until `shutdown` resolves, then drains the runner.
/// `ready` receives the bound address once the server accepts connections.
pub async fn serve(
    opts: ServeOptions,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_reloading(opts, ready, shutdown, None).await
}

/// [`serve`], taking reloaded configurations from `reloads` (SIGHUP): their tool
/// settings and component files apply while serving, and the settings a running node
/// cannot take are logged as needing a restart (see [`crate::deploy`]).
pub async fn serve_reloading(
    mut opts: ServeOptions,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    reloads: Option<tokio::sync::mpsc::Receiver<ServeOptions>>,
) -> Result<(), ServeError> {
    check_exposure(&opts)?;
    tracing::info!(node = %opts.node, "node identity");
    let archive = opts
        .archive
        .as_ref()
        .map(crate::archive::TaskArchive::open)
        .transpose()
        .map_err(|e| ServeError::Config(e.to_string()))?;
    if let Some(a) = &archive {
        tracing::info!(
            archive = a.place(),
            "tasks past their TTL are archived before the reaper removes them"
        );
    }
    let exporter = start_exporter(&mut opts)?;
    let opened = open_store(&opts).await?;
    let (store, remote) = (opened.store, opened.remote);
    let deployer = Arc::new(Deployer::new(&opts.deployer_settings())?);
    tracing::info!(
        pagemap_scan = deployer.engine().pagemap_scan_active(),
        "wasm engine ready (recycled instance slots reset with PAGEMAP_SCAN when the kernel has it)"
    );
    let gateway = match opts.upstreams.is_empty() {
        true => None,
        false => Some(
            crate::gateway::Gateway::start(
                deployer.clone(),
                deployer.engine().outbound().clone(),
                opts.upstreams.clone(),
                opts.gateway.clone(),
            )
            .await?,
        ),
    };
    let rotating = gateway.clone();
    let (catalogs, revision) = deploy::start(&deployer, &*store).await?;
    let (nudge, nudged) = tokio::sync::mpsc::channel(1);
    let (server, runner, following) = start_node(
        &opts,
        store.clone(),
        remote,
        catalogs.clone(),
        &deployer,
        nudge.clone(),
        archive,
    );
    server.set_deploying(deploy::operate::Deploying {
        deployer: deployer.clone(),
        nudge,
    });
    let http_config = http_config(&opts);
    let (listener, addr) = listen(&opts).await?;
    let authenticator = authenticator(&opts, addr)?;
    // Tools may not call this server back unless an entry names it (docs/outbound.md).
    deployer.engine().outbound().listening_on(addr);
    let stop_following = CancellationToken::new();
    let (rebuild, rebuilds) = tokio::sync::mpsc::channel(16);
    let upstreams = gateway.map(|g| {
        let stop = stop_following.clone();
        tokio::spawn(g.run(
            move |change| {
                // Rebuilds are rare (a listing that changed, a renewed credential): a full
                // queue means several wait already, each building from the latest tools.
                let _ = rebuild.try_send(change == crate::deploy::UpstreamChange::Tools);
            },
            stop,
        ))
    });
    let told = server.clone();
    let deployments = tokio::spawn(deploy::follow(
        deploy::Following {
            deployer: deployer.clone(),
            store,
            catalogs,
            revision,
            settings: opts.deploy.clone(),
        },
        deploy::Inbox {
            deployed: Some(nudged),
            reloads: reloads.map(|r| deployer_reloads(opts.clone(), r, rotating)),
            rebuilds: Some(rebuilds),
        },
        move || told.catalog_changed(),
        stop_following.clone(),
    ));
    let stop_schedules = CancellationToken::new();
    let schedules = server
        .start_schedules(&opts.schedules, stop_schedules.clone())
        .await
        .map_err(|e| match e {
            crate::ScheduleError::Store(e) => ServeError::Store(e),
            other => ServeError::Config(other.to_string()),
        })?;
    let stop_webhooks = CancellationToken::new();
    let webhooks = server
        .start_webhooks(
            deployer.engine().outbound().clone(),
            opts.webhooks.clone(),
            &opts.node,
            stop_webhooks.clone(),
        )
        .await
        .map_err(|e| match e {
            crate::WebhookError::Store(e) => ServeError::Store(e),
            other => ServeError::Config(other.to_string()),
        })?;
    ready(addr);
    let manager = notify::Manager::ready(addr, server.tasks().store().clone());
    let app = match authenticator {
        Authentication::Static => http::router(server.clone(), http_config),
        Authentication::OAuth(rs) => http::router_oauth(server.clone(), http_config, rs),
    };
    serve_until_drained(listener, app, &server, &opts, shutdown).await?;
    tracing::info!("shutting down: draining the runner");
    manager.stopping().await;
    stop_schedules.cancel();
    let _ = schedules.await;
    stop_webhooks.cancel();
    let _ = webhooks.await;
    stop_following.cancel();
    let _ = deployments.await;
    if let Some(listing) = upstreams {
        let _ = listing.await;
    }
    let released = runner.shutdown().await;
    if let Some(following) = following {
        following.abort();
        let _ = following.await;
    }
    if let Some(exporter) = exporter {
        exporter.shutdown().await;
    }
    tracing::info!(released, "stopped");
    Ok(())
}

/// Starts the OTLP exporter when `[telemetry.otlp]` is configured, and points the node's
/// tracer at it.
fn start_exporter(opts: &mut ServeOptions) -> Result<Option<snodo_otel::Exporter>, ServeError> {
    let Some(t) = &opts.otlp else {
        return Ok(None);
    };
    let mut config = t.otlp.clone();
    config.node.clone_from(&opts.node);
    let (sink, exporter) = snodo_otel::start(&config).map_err(ServeError::Config)?;
    opts.tracer = snodo_core::spans::Tracer::new(sink, t.sampling_ratio, t.follow_parent);
    tracing::info!(
        endpoint = %config.endpoint,
        protocol = ?config.protocol,
        sampling_ratio = t.sampling_ratio,
        "telemetry: exporting spans over OTLP"
    );
    Ok(Some(exporter))
}

/// The deployer's settings of each reloaded configuration, in order. A reload's changes to
/// what a running node cannot take are logged, against the configuration the node started
/// with (what its listener, store and runner were built from); upstreams' rotated
/// credentials go to the `gateway` at once.
fn deployer_reloads(
    started: ServeOptions,
    mut reloads: tokio::sync::mpsc::Receiver<ServeOptions>,
    gateway: Option<Arc<crate::gateway::Gateway>>,
) -> tokio::sync::mpsc::Receiver<DeployerSettings> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while let Some(next) = reloads.recv().await {
            let restart = needs_restart(&started, &next);
            if !restart.is_empty() {
                tracing::warn!(
                    settings = %restart.join(", "),
                    "changed settings apply after a restart"
                );
            }
            if let Some(g) = &gateway
                && let crate::gateway::Rotation::Rotated(names) = g.rotate(&next.upstreams)
            {
                tracing::info!(
                    upstreams = %names.join(", "),
                    "upstream credentials rotated: the next requests carry the new ones"
                );
            }
            if tx.send(next.deployer_settings()).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// Serves `app` on `listener` until `shutdown` resolves and the connections close, or the
/// runner's drain timeout passes after it (then the server stops anyway).
async fn serve_until_drained(
    listener: tokio::net::TcpListener,
    app: http::App,
    server: &Arc<McpServer>,
    opts: &ServeOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let drain = opts.runner.drain_timeout;
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let closer = server.clone();
    let graceful = async move {
        shutdown.await;
        tracing::info!("shutdown requested: closing streams, finishing requests");
        closer.close_streams();
        let _ = stopping_tx.send(());
    };
    let serving = http::serve(listener, app, &opts.http_limits, graceful);
    tokio::pin!(serving);
    // Requests in flight get the drain timeout to finish; then the server stops anyway.
    let forced = async {
        if stopping_rx.await.is_ok() {
            tokio::time::sleep(drain).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        r = &mut serving => r.map_err(|e| ServeError::Listen(e.to_string()))?,
        () = forced => tracing::warn!("connections did not close within the drain timeout"),
    }
    Ok(())
}

/// Refuses a listener no one guards (no bearer token, off loopback) and bearer tokens
/// that are unusable.
fn check_exposure(opts: &ServeOptions) -> Result<(), ServeError> {
    if opts.tokens.is_empty() && opts.oauth.is_none() && !opts.listen.ip().is_loopback() {
        return Err(ServeError::Config(format!(
            "refusing to listen on {} without authentication: configure bearer tokens or OAuth ([auth.oauth]), or listen on loopback",
            opts.listen
        )));
    }
    for (i, (token, principal)) in opts.tokens.iter().enumerate() {
        identity::check_token(token, principal, &opts.tokens[..i])
            .map_err(|e| ServeError::Config(format!("bearer token #{}: {e}", i + 1)))?;
    }
    if let Some(oauth) = &opts.oauth {
        identity::oauth::check(oauth).map_err(ServeError::Config)?;
    }
    if opts.oauth.is_none() && !opts.scopes.is_empty() {
        return Err(ServeError::Config(
            "auth.scopes needs [auth.oauth]: static tokens and the local principal hold every scope".into(),
        ));
    }
    Ok(())
}

/// Opens the configured store, its claims named after this node, and logs what opened.
async fn open_store(opts: &ServeOptions) -> Result<OpenedStore, ServeError> {
    let mut config = opts.store.clone();
    if let StoreConfig::Postgres(o) = &mut config {
        // Claims are named after this node.
        o.node = opts.node.clone();
    }
    // A file store creates its directory (0700) and file (0600) if missing.
    let opened = config.open().await?;
    match &config {
        StoreConfig::Memory => tracing::info!("store: memory (volatile)"),
        StoreConfig::Redb(path) | StoreConfig::Sqlite(path) => tracing::info!(
            path = %path.display(),
            epoch = opened.epoch.unwrap_or_default(),
            recovered = opened.recovered,
            "store: {}",
            opened.kind
        ),
        StoreConfig::Postgres(o) => tracing::info!(
            schema = %o.schema,
            pool = o.pool_size,
            recovered = opened.recovered,
            "store: postgres"
        ),
    }
    Ok(opened)
}

/// Starts this node's runner on `store` and builds the MCP server over both; with a
/// shared store, also the task that follows other nodes' `remote` changes.
fn start_node(
    opts: &ServeOptions,
    store: Arc<dyn Store>,
    remote: Option<snodo_core::store::RemoteChanges>,
    catalog: Arc<Catalogs>,
    deployer: &Deployer,
    deployed: tokio::sync::mpsc::Sender<()>,
    archive: Option<crate::archive::TaskArchive>,
) -> (Arc<McpServer>, Runner, Option<tokio::task::JoinHandle<()>>) {
    let engine = deployer.engine();
    // A commit that ends a task writes the task's span.
    let store: Arc<dyn Store> = if opts.tracer.enabled() {
        Arc::new(snodo_core::store::TracedStore::over(
            store,
            snodo_core::store::TaskSpans::new(opts.tracer.clone()),
        ))
    } else {
        store
    };
    // Every commit is announced to subscription streams through this wrapper.
    let observed = Arc::new(ObservedStore::new(store, 4_096));
    let store: Arc<dyn Store> = observed.clone();
    let metrics = Arc::new(Metrics::new());
    metrics.set_node(&opts.node);
    // Every component runs on one engine; its outbound side counts for the node.
    metrics.set_outbound(engine.outbound().clone());
    metrics.set_trust(deployer.trust_counters().clone());
    metrics.set_upstreams(deployer.upstream_counters().clone());
    if let Some(counters) = opts.tracer.counters() {
        metrics.set_spans(counters);
    }
    let mut runner_opts = opts.runner.clone();
    runner_opts.owner = opts.node.clone();
    if opts.store.kind() == snodo_core::store::StoreKind::Postgres {
        runner_opts.claim_batch = runner_opts
            .claim_batch
            .or(Some(snodo_runner::CLAIM_BATCH_SHARED));
    }
    // Journal appends count in their tenant's stored bytes, as creations do.
    runner_opts.stored_bytes_per_tenant = Some(opts.limits.stored_bytes_per_tenant);
    runner_opts.tracer = opts.tracer.clone();
    if let Some(archive) = archive {
        runner_opts.archive = Some(Arc::new(archive.keeping(store.clone(), metrics.clone())));
        if let Some(ms) = opts.archive.as_ref().and_then(|a| a.interval_ms) {
            runner_opts.reap_interval = Some(std::time::Duration::from_millis(ms));
        }
    }
    let runner = Runner::start(
        store.clone(),
        catalog.clone(),
        runner_opts,
        Arc::new(MetricsAndTracing(metrics.clone())),
    );
    // Ended after the runner drained: remote cancellations reach attempts until then.
    let following = remote.map(|changes| {
        tokio::spawn(follow_remote_changes(
            changes,
            observed.clone(),
            runner.clone(),
            deployed,
        ))
    });
    let server = Arc::new(
        McpServer::new(
            store,
            runner.clone(),
            ServerConfig {
                name: "snodo".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                catalog,
                limits: opts.limits.clone(),
                scopes: opts.scopes.clone(),
                trace_context: opts.trace_context,
                tracer: opts.tracer.clone(),
            },
        )
        .with_change_feed(observed)
        .with_engine(engine.clone())
        .with_metrics(metrics),
    );
    (server, runner, following)
}

/// Who may call: the OAuth resource server (with the static tokens beside it) when
/// configured, else the static tokens. The resource server learns the bound address, which
/// names the resource when none is configured.
enum Authentication {
    /// The configured tokens (`HttpConfig::tokens`), or none on loopback.
    Static,
    OAuth(Arc<identity::ResourceServer>),
}

fn authenticator(opts: &ServeOptions, addr: SocketAddr) -> Result<Authentication, ServeError> {
    let Some(oauth) = &opts.oauth else {
        return Ok(Authentication::Static);
    };
    let mut config = oauth.clone();
    config.challenge_scopes = opts.scopes.ordinary();
    config.scopes_supported = opts.scopes.all();
    let server =
        identity::ResourceServer::new(config, &opts.tokens, identity::oauth::system_clock())
            .map_err(ServeError::Config)?;
    server.listening_on(addr);
    tracing::info!(resource = %server.resource(), "OAuth: accepting access tokens for this resource");
    Ok(Authentication::OAuth(Arc::new(server)))
}

/// The HTTP transport's settings: the tokens and limits configured, and on a public
/// listener any `Host`.
fn http_config(opts: &ServeOptions) -> HttpConfig {
    let http_config = HttpConfig {
        tokens: opts.tokens.clone(),
        max_body_bytes: opts.max_body_bytes,
        body_timeout: opts.http_limits.body_timeout,
        metrics_token: opts.metrics_token.clone(),
        oauth: opts.oauth.is_some(),
        admin: crate::admin::AdminConfig {
            // An operator needs the admin scope unless others are configured.
            scopes: if opts.scopes.admin.is_empty() {
                vec!["admin".into()]
            } else {
                opts.scopes.admin.clone()
            },
            ..opts.admin.clone()
        },
        ..HttpConfig::default()
    };
    if opts.listen.ip().is_loopback() {
        http_config
    } else {
        // A public listener is named by whatever the proxy or client uses; auth guards it.
        HttpConfig {
            allowed_hosts: Vec::new(),
            ..http_config
        }
    }
}

/// Binds the listen address, warns about what is left open on it, and logs where MCP is
/// served.
async fn listen(opts: &ServeOptions) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| ServeError::Listen(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Listen(e.to_string()))?;
    let guarded = !opts.tokens.is_empty() || opts.oauth.is_some();
    if !guarded {
        tracing::warn!(%addr, "no authentication configured: serving loopback only");
    }
    if opts.metrics_token.is_none() && guarded {
        tracing::warn!(%addr, "GET /metrics is closed until [metrics] token_env is set");
    }
    tracing::info!(%addr, "serving MCP at http://{addr}/mcp");
    Ok((listener, addr))
}

/// A server started by [`spawn`] on the current runtime. Dropping it asks the server to
/// shut down without waiting; [`Running::stop`] waits until it has.
#[derive(Debug)]
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Shuts the server down gracefully (draining as [`serve`] does) and answers how it
    /// ended.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        ended(&mut self.done).await
    }
}

/// Starts [`serve`] on the current runtime and answers once it listens, or with the error
/// that kept it from starting.
pub async fn spawn(opts: ServeOptions) -> Result<Running, ServeError> {
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let ready = move |addr| {
        let _ = addr_tx.send(addr);
    };
    // A dropped sender ends the server as a sent one does.
    let shutdown = async move {
        let _ = stop_rx.await;
    };
    let mut done = tokio::spawn(serve(opts, ready, shutdown));
    match addr_rx.await {
        Ok(addr) => Ok(Running {
            addr,
            stop: Some(stop_tx),
            done,
        }),
        Err(_) => Err(ended(&mut done)
            .await
            .err()
            .unwrap_or_else(|| ServeError::Listen("the server ended before it listened".into()))),
    }
}

async fn ended(
    done: &mut tokio::task::JoinHandle<Result<(), ServeError>>,
) -> Result<(), ServeError> {
    done.await
        .unwrap_or_else(|e| Err(ServeError::Listen(format!("the server task failed: {e}"))))
}

/// Hands other nodes' announced changes to this node's subscription streams and runner.
async fn follow_remote_changes(
    mut changes: snodo_core::store::RemoteChanges,
    observed: Arc<ObservedStore>,
    runner: Runner,
    deployed: tokio::sync::mpsc::Sender<()>,
) {
    use snodo_core::store::{ChangeKind, RemoteChange};
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match changes.recv().await {
            Ok(RemoteChange::Task { id, kind }) => {
                observed.announce(id);
                match kind {
                    ChangeKind::InputAccepted => runner.remote_input_accepted(&id),
                    ChangeKind::Cancelled => runner.remote_cancelled(&id).await,
                    // The creating node starts its tasks; other changes concern
                    // subscribers only.
                    ChangeKind::Created | ChangeKind::Other => {}
                }
            }
            // Missed announcements: subscription streams re-send what they watch, and the
            // runner looks for due work now.
            Ok(RemoteChange::Resync) | Err(RecvError::Lagged(_)) => {
                observed.announce_unknown();
                runner.wake();
                let _ = deployed.try_send(());
            }
            Ok(RemoteChange::Deployed) => {
                let _ = deployed.try_send(());
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// Loads the configured component files and applies the per-tool settings: what a
/// configuration serves, checked (a setting naming a tool no component provides is an
/// error). Used by the operator commands that validate a configuration; `serve` serves
/// the store's deployment instead (see [`crate::deploy`]).
pub async fn load_tools(opts: &ServeOptions) -> Result<Catalog, ServeError> {
    let deployer = Arc::new(Deployer::new(&opts.deployer_settings())?);
    if !opts.upstreams.is_empty() {
        // The upstreams' tools are listed as a node lists them, so that their settings
        // are checked against what they are.
        crate::gateway::Gateway::start(
            deployer.clone(),
            deployer.engine().outbound().clone(),
            opts.upstreams.clone(),
            opts.gateway.clone(),
        )
        .await?;
    }
    let components = deployer.load_files().await?;
    Ok(deployer.catalog_of(&components, true)?)
}
