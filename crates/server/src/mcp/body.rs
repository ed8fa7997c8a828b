//! Large request bodies: parsed on the blocking pool in their caller's CPU turn, with their
//! memory held in the caller's share of the engine while the request is handled; a share
//! that cannot hold one refuses it before it is parsed.

use std::sync::Arc;

use serde_json::Value;

use crate::identity::Caller;
use crate::protocol::{self, RpcError};
use snodo_runner::budget::{Over, Refusal};

use super::{McpServer, Reply};

/// Bodies larger than this are parsed on the blocking pool in the caller's CPU turn, and
/// [`BODY_MEMORY_FACTOR`] times their size is held in the caller's memory share while
/// their request is handled.
pub const LARGE_BODY_BYTES: usize = 64 << 10;

/// The host memory counted per byte of a large body: its parsed values (a JSON number of
/// two bytes becomes a 32-byte value) and the copies a call makes of its arguments.
pub const BODY_MEMORY_FACTOR: usize = 16;

/// A body parsed: the message, or the error to answer with the id it carried.
pub(super) type ParsedBody = Result<protocol::Incoming, (Value, RpcError)>;

/// The `id` of the JSON-RPC message in `body`, read without building the rest (`null` when
/// it has none or is not JSON): what a refusal before parsing answers to.
fn request_id(body: &[u8]) -> Value {
    #[derive(serde::Deserialize)]
    struct IdOnly {
        #[serde(default)]
        id: Value,
    }
    serde_json::from_slice::<IdOnly>(body).map_or(Value::Null, |m| m.id)
}

/// The cap a memory limit names, in bytes.
fn limit_bytes(limit: &snodo_wasm::Limit) -> u64 {
    match limit {
        snodo_wasm::Limit::TenantMemory { bytes } | snodo_wasm::Limit::MemoryBudget { bytes } => {
            *bytes
        }
        _ => 0,
    }
}

impl McpServer {
    /// A body past [`LARGE_BODY_BYTES`], parsed on the blocking pool in one of the caller's
    /// CPU turns, with [`BODY_MEMORY_FACTOR`] times its size held in the caller's memory
    /// share (the hold is kept until the request is answered). `None` for a small body or a
    /// server without an engine; `Err` is the refusal when the share is full: nothing was
    /// accepted, the client may try again.
    pub(super) async fn parse_large(
        &self,
        caller: &Caller,
        body: &[u8],
    ) -> Result<Option<(ParsedBody, snodo_wasm::MemoryHold)>, Reply> {
        let Some(engine) = &self.engine else {
            return Ok(None);
        };
        if body.len() <= LARGE_BODY_BYTES {
            return Ok(None);
        }
        let tenant: Arc<str> = Arc::from(caller.principal.tenant.as_str());
        let wanted = body.len().saturating_mul(BODY_MEMORY_FACTOR);
        let held = match engine.hold_host_memory(&tenant, wanted) {
            Ok(held) => held,
            Err(limit) => {
                // The id is read in the tenant's turn too: a scan of a large body is work
                // its sender pays for.
                let owned = body.to_vec();
                let id = engine
                    .cpu()
                    .run_blocking(&tenant, move || request_id(&owned))
                    .await
                    .unwrap_or(Value::Null);
                return Err(self.memory_refusal(&id, &limit));
            }
        };
        let owned = body.to_vec();
        match engine
            .cpu()
            .run_blocking(&tenant, move || protocol::parse(&owned))
            .await
        {
            Ok(parsed) => Ok(Some((parsed, held))),
            Err(e) => {
                tracing::error!(error = %e, "parsing a body failed to run");
                Err(Reply::error(
                    &Value::Null,
                    &RpcError::internal("the request could not be read"),
                ))
            }
        }
    }

    /// The refusal of a large body whose memory the tenant's share (or the total) cannot
    /// hold: -32000 naming the limit's key, answered to the request's `id`.
    fn memory_refusal(&self, id: &Value, limit: &snodo_wasm::Limit) -> Reply {
        let (key, over) = match limit {
            snodo_wasm::Limit::TenantMemory { .. } => {
                ("limits.guest_memory_per_tenant_bytes", Over::Tenant)
            }
            _ => ("limits.guest_memory_total_bytes", Over::Global),
        };
        let refusal = Refusal {
            limit: key,
            max: limit_bytes(limit),
            over,
        };
        Reply::error(id, &self.refuse(&refusal))
    }
}
