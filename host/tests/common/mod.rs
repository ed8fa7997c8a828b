//! Shared by the host's integration tests: one way to build an engine and load the example
//! guests, and one way to wait for a state without sleeping.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

pub(crate) mod process;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use snodo::budget::TenantLimits;
use snodo::mcp::{McpServer, ServerConfig};
use snodo::runner::{Catalog, NoInstrumentation, Runner, RunnerOptions};
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
    let runner = Runner::start(
        store.clone(),
        catalog.clone(),
        RunnerOptions {
            poll_interval: Duration::from_millis(10),
            ..RunnerOptions::default()
        },
        Arc::new(NoInstrumentation),
    );
    let config = ServerConfig {
        name: "snodo-test".into(),
        version: "0".into(),
        catalog,
        limits,
    };
    let server = McpServer::new(store.clone(), runner, config).with_change_feed(observed);
    (Arc::new(server), store)
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
