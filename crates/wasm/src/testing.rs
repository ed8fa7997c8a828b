//! Helpers for tests of the crates that run guests (cargo feature `testing`): one way to
//! build an engine and load the example guests into it.

use std::sync::Arc;

use crate::{Component, ComponentLoader, EngineConfig, WasmEngine};

/// The example guests (built by `snodo-test-guests`), loaded into one engine.
pub struct Guests {
    /// The loader they were loaded with (its engine and caches).
    pub loader: ComponentLoader,
    /// The conformance fixture tools, resources and prompts.
    pub fixtures: Arc<Component>,
    /// The example tools.
    pub examples: Arc<Component>,
    /// The hostile guests: loops, memory hogs, traps.
    pub hostile: Arc<Component>,
}

/// A pooling engine with `max_instances` slots of `max_memory_bytes`, and the guests.
pub async fn load_guests(max_instances: u32, max_memory_bytes: usize) -> Guests {
    load_guests_with(EngineConfig {
        max_instances,
        max_memory_bytes,
        ..EngineConfig::default()
    })
    .await
}

/// An engine built with `config`, and the guests.
pub async fn load_guests_with(config: EngineConfig) -> Guests {
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
