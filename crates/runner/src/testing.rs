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

/// The execution of `tool` with `arguments` for the attempt holding `lease`, as the runner
/// builds it: its input recorded in `store` (the creating client declared elicitation), its
/// task id and idempotency key the task's.
pub fn attempt_execution(
    store: Arc<dyn snodo_core::store::Store>,
    lease: &snodo_core::store::Lease,
    waiters: Arc<crate::InputWaiters>,
    tool: &str,
    arguments: serde_json::Value,
) -> snodo_wasm::Execution {
    let io = Arc::new(crate::TaskIo::new(
        store,
        lease.clone(),
        serde_json::json!({"elicitation": {}}),
        waiters,
    ));
    let mut exec = snodo_wasm::Execution::new(tool, arguments, io);
    exec.task_id = Some(lease.task_id().to_string());
    exec.idempotency_key = lease.task_id().to_string();
    exec
}

/// Creates an `acme` task calling `tool` with `arguments`, its creating client declaring
/// elicitation (what [`attempt_execution`] assumes).
pub async fn create_tool_task(
    store: &dyn snodo_core::store::Store,
    tool: &str,
    arguments: serde_json::Value,
) -> snodo_core::model::TaskId {
    let id = snodo_core::model::TaskId::generate();
    let work = crate::tool_call_work(&id, tool, arguments);
    let mut new = snodo_core::store::NewTask::new(id, snodo_core::model::Scope::new("acme"), work);
    new.client_capabilities = serde_json::json!({"elicitation": {}});
    store.create(new).await.expect("create").id
}
