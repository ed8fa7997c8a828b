//! Helpers for tests of the server and of the binary (cargo feature `testing`): one way to
//! assemble an MCP server over a store and a runner, and one way to serve in the test's own
//! process on a real socket; and a test identity provider ([`idp`]).

pub mod idp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use snodo_core::store::{MemoryStore, ObservedStore, Store};
use snodo_runner::budget::TenantLimits;
use snodo_runner::{Catalog, Executors, NoInstrumentation, Runner, RunnerOptions};

use crate::mcp::{McpServer, ScopePolicy, ServerConfig};
use crate::serve::{Running, ServeError, ServeOptions};

/// An MCP server over a fresh memory store (announcing its changes to subscriptions) and a
/// runner, both serving `catalog` under `limits`. Returns the server and its store.
pub fn mcp_server(catalog: Catalog, limits: TenantLimits) -> (Arc<McpServer>, Arc<dyn Store>) {
    mcp_server_scoped(catalog, limits, ScopePolicy::default())
}

/// [`mcp_server`], each operation needing the scopes `scopes` names.
pub fn mcp_server_scoped(
    catalog: Catalog,
    limits: TenantLimits,
    scopes: ScopePolicy,
) -> (Arc<McpServer>, Arc<dyn Store>) {
    let observed = Arc::new(ObservedStore::new(Arc::new(MemoryStore::new()), 1_024));
    let store: Arc<dyn Store> = observed.clone();
    let catalog = Arc::new(catalog);
    let options = RunnerOptions {
        poll_interval: Duration::from_millis(10),
        ..RunnerOptions::default()
    };
    let (server, _) = server_over(&store, catalog.clone(), catalog, limits, options);
    let server = server.with_change_feed(observed).with_scopes(scopes);
    (Arc::new(server), store)
}

/// An MCP server serving `catalog` over `store` under the default budgets, and its runner,
/// which resolves work with the same catalog under `options`.
pub fn server_with(
    store: &Arc<dyn Store>,
    catalog: Arc<Catalog>,
    options: RunnerOptions,
) -> (McpServer, Runner) {
    server_over(
        store,
        catalog.clone(),
        catalog,
        TenantLimits::default(),
        options,
    )
}

/// An MCP server serving `catalog` over `store`, and its runner, which resolves work with
/// `executors` under `options`.
pub fn server_over(
    store: &Arc<dyn Store>,
    executors: Arc<dyn Executors>,
    catalog: Arc<Catalog>,
    limits: TenantLimits,
    options: RunnerOptions,
) -> (McpServer, Runner) {
    let runner = Runner::start(
        store.clone(),
        executors,
        options,
        Arc::new(NoInstrumentation),
    );
    // Every component of a catalog runs on one engine: large bodies are parsed and held
    // in the caller's share of it, as `serve` does.
    let engine = catalog
        .tools()
        .first()
        .map(|t| t.component.engine().clone());
    let config = ServerConfig {
        name: "snodo-test".into(),
        version: "0".into(),
        catalog: Arc::new(snodo_runner::Catalogs::new(catalog)),
        limits,
        scopes: Default::default(),
        // The tests exercise what the option turns on.
        trace_context: true,
        tracer: Default::default(),
    };
    let server = McpServer::new(store.clone(), runner.clone(), config);
    let server = match engine {
        Some(engine) => server.with_engine(engine),
        None => server,
    };
    (server, runner)
}

/// [`crate::serve::serve`] running in the test's own process, on a real socket.
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    running: Running,
}

impl Served {
    /// Serves `opts` in the background; returns once the server listens.
    pub async fn start(opts: ServeOptions) -> Self {
        let running = tokio::time::timeout(Duration::from_secs(120), crate::serve::spawn(opts))
            .await
            .expect("serving")
            .expect("the server started");
        Self {
            addr: running.addr,
            running,
        }
    }

    /// Asks the server to stop and waits, at most `patience`, for `serve` to return: what it
    /// returned.
    pub async fn stop(self, patience: Duration) -> Result<(), ServeError> {
        tokio::time::timeout(patience, self.running.stop())
            .await
            .expect("the server stops within the patience")
    }
}
