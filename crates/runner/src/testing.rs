//! Helpers for tests of the runner and the crates above it (cargo feature `testing`).

use std::sync::Arc;

use snodo_core::model::ExecutionLimits;
use snodo_wasm::Component;

use crate::{Catalog, CatalogSource, CatalogTool};

/// A catalog of every tool of `components`, each with `limits` and a ten-minute TTL, and
/// every resource and prompt they serve.
pub fn catalog_of(components: &[&Arc<Component>], limits: ExecutionLimits) -> Catalog {
    let mut catalog = Catalog::new();
    for c in components {
        for info in c.tools() {
            let mut tool = CatalogTool::new((*c).clone(), info.clone());
            tool.ttl_ms = Some(600_000);
            tool.poll_interval_ms = 500;
            tool.limits = limits;
            catalog.add(tool).expect("unique tool names");
        }
        catalog
            .add_source(CatalogSource {
                component: (*c).clone(),
                limits,
                grants: Default::default(),
            })
            .expect("unique resources and prompts");
    }
    catalog
}
