//! Shared by the host's integration tests: one way to build an engine and load the example
//! guests, one way to wait for a state without sleeping, one way to serve in the test's own
//! process, and one answer to whether the machine's PostgreSQL is there.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

pub(crate) mod process;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use snodo::budget::TenantLimits;
use snodo::mcp::{McpServer, ServerConfig};
use snodo::runner::{Catalog, NoInstrumentation, Runner, RunnerOptions};
use snodo::serve::{ServeError, ServeOptions};
use snodo::store::{MemoryStore, ObservedStore, Store};
use snodo::wasm::{Component, ComponentLoader, EngineConfig, WasmEngine};

/// The example guests, loaded into one engine.
pub(crate) struct Guests {
    pub(crate) loader: ComponentLoader,
    pub(crate) fixtures: Arc<Component>,
    pub(crate) examples: Arc<Component>,
    pub(crate) hostile: Arc<Component>,
}

/// A pooling engine with `max_instances` slots of `max_memory_bytes`, and the guests.
pub(crate) async fn load_guests(max_instances: u32, max_memory_bytes: usize) -> Guests {
    load_guests_with(EngineConfig {
        max_instances,
        max_memory_bytes,
        ..EngineConfig::default()
    })
    .await
}

/// An engine built with `config`, and the guests.
pub(crate) async fn load_guests_with(config: EngineConfig) -> Guests {
    let engine = WasmEngine::new(config).expect("engine");
    let loader = ComponentLoader::new(engine, None).expect("loader");
    let fixtures = loader
        .load(snodo_test_guests::FIXTURES)
        .await
        .expect("fixtures");
    let examples = loader
        .load(snodo_test_guests::EXAMPLES)
        .await
        .expect("examples");
    let hostile = loader
        .load(snodo_test_guests::HOSTILE)
        .await
        .expect("hostile");
    Guests {
        loader,
        fixtures,
        examples,
        hostile,
    }
}

/// Probes until it returns `Some`, re-probing every [`tick`]; fails the test after a
/// minute naming `what`.
pub(crate) async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            tick().await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Awaits the stored task `id` satisfying `pred`, re-reading it every [`tick`]; fails the
/// test after a minute naming `what`.
pub(crate) async fn await_stored(
    store: &dyn Store,
    id: &snodo::model::TaskId,
    what: &str,
    pred: impl Fn(&snodo::model::Task) -> bool,
) -> snodo::model::Task {
    eventually(what, || async {
        let (t, _) = store.inspect(id).await.expect("inspect").expect("present");
        pred(&t).then_some(t)
    })
    .await
}

/// Awaits what the spawned `handle` returns; fails the test, saying `what`, if it has not
/// ended within twenty seconds.
pub(crate) async fn join_soon<T>(handle: tokio::task::JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(20), handle)
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .expect("join")
}

/// The pace of re-probing a state that has no event of its own. The test waits for the
/// state, never for time: the tick only keeps the wait from spinning against the guests it
/// waits for on a machine with two cores.
pub(crate) async fn tick() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// An MCP server over a fresh memory store (announcing its changes to subscriptions) and a
/// runner, both serving `catalog` under `limits`. Returns the server and its store.
pub(crate) fn mcp_server(
    catalog: Catalog,
    limits: TenantLimits,
) -> (Arc<McpServer>, Arc<dyn Store>) {
    let observed = Arc::new(ObservedStore::new(Arc::new(MemoryStore::new()), 1_024));
    let store: Arc<dyn Store> = observed.clone();
    let catalog = Arc::new(catalog);
    let options = RunnerOptions {
        poll_interval: Duration::from_millis(10),
        ..RunnerOptions::default()
    };
    let (server, _) = server_over(&store, catalog.clone(), catalog, limits, options);
    (Arc::new(server.with_change_feed(observed)), store)
}

/// An MCP server serving `catalog` over `store` under the default budgets, and its runner,
/// which resolves work with the same catalog under `options`.
pub(crate) fn server_with(
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
pub(crate) fn server_over(
    store: &Arc<dyn Store>,
    executors: Arc<dyn snodo::runner::Executors>,
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
    let config = ServerConfig {
        name: "snodo-test".into(),
        version: "0".into(),
        catalog,
        limits,
    };
    (
        McpServer::new(store.clone(), runner.clone(), config),
        runner,
    )
}

/// A catalog of every tool of `components`, each with `limits` and a ten-minute TTL.
pub(crate) fn catalog_of(
    components: &[&Arc<Component>],
    limits: snodo::model::ExecutionLimits,
) -> Catalog {
    let mut catalog = Catalog::new();
    for c in components {
        for info in c.tools() {
            let mut tool = snodo::runner::CatalogTool::new((*c).clone(), info.clone());
            tool.ttl_ms = Some(600_000);
            tool.poll_interval_ms = 500;
            tool.limits = limits;
            catalog.add(tool).expect("unique tool names");
        }
        catalog
            .add_source(snodo::runner::CatalogSource {
                component: (*c).clone(),
                limits,
                grants: Default::default(),
            })
            .expect("unique resources and prompts");
    }
    catalog
}

/// A gate that a test's store layer holds operations at: each [`Gate::hold`] counts itself
/// and waits until the test opens the gate, which then stays open.
#[derive(Default, Clone)]
pub(crate) struct Gate {
    open: Arc<tokio::sync::Notify>,
    opened: Arc<std::sync::atomic::AtomicBool>,
    held: Arc<std::sync::atomic::AtomicU64>,
    arrived: Arc<tokio::sync::Notify>,
}

impl Gate {
    /// Waits here until the gate is open.
    pub(crate) async fn hold(&self) {
        use std::sync::atomic::Ordering;
        let opened = self.open.notified();
        self.held.fetch_add(1, Ordering::AcqRel);
        self.arrived.notify_waiters();
        if !self.opened.load(Ordering::Acquire) {
            opened.await;
        }
    }

    /// Waits until `n` operations were held, or fails the test after a minute.
    pub(crate) async fn until_held(&self, n: u64) {
        use std::sync::atomic::Ordering;
        let reached = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let arrived = self.arrived.notified();
                if self.held.load(Ordering::Acquire) >= n {
                    return;
                }
                arrived.await;
            }
        })
        .await;
        reached.unwrap_or_else(|_| panic!("{n} operations were never held at the gate"));
    }

    /// Lets every held operation, and every later one, through.
    pub(crate) fn open(&self) {
        self.opened
            .store(true, std::sync::atomic::Ordering::Release);
        self.open.notify_waiters();
    }
}

/// Answers the `confirm` question of task `id` (tenant `acme`) with yes, as a client's
/// `tasks/update` would: the store accepts it; waking a waiter is the caller's business.
pub(crate) async fn confirm(
    store: &dyn Store,
    id: &snodo::model::TaskId,
) -> snodo::store::Committed {
    let access = store
        .authorize(
            &snodo::model::Principal::new("acme", "u"),
            snodo::store::Action::Update,
            &id.to_string(),
        )
        .await
        .expect("authorize");
    let answer = serde_json::Map::from_iter([(
        "confirm".to_owned(),
        serde_json::json!({"action": "accept", "content": {"confirm": true}}),
    )]);
    store
        .accept_input(&access, snodo::model::EventId::random(), answer)
        .await
        .expect("accept")
}

/// Whether the PostgreSQL server of the machine answers at 127.0.0.1:5432. Where it does
/// not, the test fails under `CI=true` (which requires it) and otherwise says loudly that
/// `what` did not run.
pub(crate) fn postgres_reachable(what: &str) -> bool {
    let up = std::net::TcpStream::connect_timeout(
        &"127.0.0.1:5432".parse().expect("address"),
        Duration::from_secs(2),
    )
    .is_ok();
    if !up {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "PostgreSQL is required under CI=true and 127.0.0.1:5432 does not answer"
        );
        eprintln!("SKIPPED: PostgreSQL is not reachable; {what} did not run");
    }
    up
}

/// `snodo::serve::serve` running in the test's own process, on a real socket.
pub(crate) struct Served {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    running: snodo::serve::Running,
}

impl Served {
    /// Serves `opts` in the background; returns once the server listens.
    pub(crate) async fn start(opts: ServeOptions) -> Self {
        let running = tokio::time::timeout(Duration::from_secs(120), snodo::serve::spawn(opts))
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
    pub(crate) async fn stop(self, patience: Duration) -> Result<(), ServeError> {
        tokio::time::timeout(patience, self.running.stop())
            .await
            .expect("the server stops within the patience")
    }
}
