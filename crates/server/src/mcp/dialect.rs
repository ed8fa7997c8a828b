//! What a handler is given besides its typed parameters ([`Ctx`]), and the [`Dialect`]
//! that shapes its replies for the protocol revision the request speaks.
//!
//! Handlers never branch on the revision: where 2026-07-28 and 2025-11-25 differ in what a
//! reply looks like, the handler asks the request's dialect. 2026-07-28's is [`STATELESS`]
//! here; 2025-11-25's is the `legacy` adapter's, which also translates that revision's
//! requests into the same typed requests.

use std::sync::Arc;

use serde_json::Value;

use crate::identity::Caller;
use crate::protocol::{self, RequestMeta, ResultObject, RpcError};
use snodo_core::model::{Principal, TaskStatus, TaskView};
use snodo_wasm::TaskMode;

use super::session::Outstanding;
use super::{Reply, RoutingHeaders, wire};

/// One request, as every handler sees it.
pub(crate) struct Ctx<'a> {
    /// The JSON-RPC id, echoed in the reply.
    pub(crate) id: &'a Value,
    /// Who sent it.
    pub(crate) principal: &'a Principal,
    /// Who sent it, with the scopes and forwarded claims it was granted.
    pub(crate) caller: &'a Caller,
    /// What it declared (2026-07-28: its `_meta`; 2025-11-25: its session).
    pub(crate) meta: RequestMeta,
    /// Whether its `Accept` allows an event stream.
    pub(crate) accepts_sse: bool,
    /// The size of its body: what parsing and checking its parameters may cost.
    pub(crate) body_bytes: usize,
    /// How its replies are shaped.
    pub(crate) dialect: &'static dyn Dialect,
    /// Where a guest's questions on the request path go as server requests on the call's
    /// event stream, answered by the client's posted responses (2025-11-25), and the
    /// session whose responses may answer them. `None`: they are answered by an MRTR
    /// `input_required` result (2026-07-28).
    pub(crate) asks: Option<(Arc<Outstanding>, Option<String>)>,
    /// The `Mcp-Param-*` headers a tool's marked arguments are checked against (SEP-2243);
    /// `None` where the revision has no such headers (2025-11-25).
    pub(crate) param_headers: Option<&'a [(String, Result<String, ()>)]>,
    /// What the request's span shows, when it is traced.
    pub(crate) notes: Option<&'a super::trace::TraceNotes>,
}

impl<'a> Ctx<'a> {
    /// Shows on the request's span that it is about task `id` (linked to `span`).
    pub(crate) fn note_task(
        &self,
        id: &snodo_core::model::TaskId,
        span: Option<&snodo_core::model::TaskSpan>,
    ) {
        if let Some(n) = self.notes {
            n.task(id.to_string(), span);
        }
    }

    /// A 2026-07-28 request: request `id` from `caller`, declaring `meta`, with the
    /// transport's `headers`, parsed from a body of `body_bytes`.
    pub(crate) fn stateless(
        id: &'a Value,
        caller: &'a Caller,
        meta: RequestMeta,
        headers: &'a RoutingHeaders,
        body_bytes: usize,
    ) -> Self {
        Self {
            id,
            principal: &caller.principal,
            caller,
            meta,
            accepts_sse: headers.accepts_sse,
            body_bytes,
            dialect: &STATELESS,
            asks: None,
            param_headers: Some(&headers.params),
            notes: None,
        }
    }
}

/// How a protocol revision shapes what handlers produce.
pub(crate) trait Dialect: Sync {
    /// A complete result.
    fn complete(&self, result: ResultObject) -> Value;
    /// A complete list or read result that may not be cached: components may answer
    /// differently per call.
    fn complete_uncached(&self, result: ResultObject) -> Value;
    /// The HTTP status of a reply that is a JSON-RPC error.
    fn error_status(&self, error: &RpcError) -> u16;
    /// Whether a `tools/call` of `tool` runs as a task: `asked` is whether the call asked
    /// for one by its own parameters, `mode` the mode decided for this call and `declared`
    /// the one `tools/list` shows. A call that cannot run the way it asked is refused.
    fn runs_as_task(
        &self,
        tool: &str,
        asked: bool,
        meta: &RequestMeta,
        mode: TaskMode,
        declared: TaskMode,
    ) -> Result<bool, RpcError>;
    /// The reply of a `tools/call` of `tool` whose prepare phase asks for input before the
    /// task exists: `asked` is the MRTR `input_required` result that asks it.
    fn input_before_task(&self, tool: &str, asked: Value) -> Result<Value, RpcError>;

    /// Whether a call, which asked for a task by its own parameters or not (`asked`), comes
    /// from a client that follows tasks: a handle is for one that does not. A listing asks
    /// with `asked` false.
    fn follows_tasks(&self, asked: bool, meta: &RequestMeta) -> bool;
    /// What `tools/list` says of a tool's task support (its `execution`), if anything.
    fn tool_execution(&self, declared: TaskMode) -> Option<Value>;
    /// The reply to request `id` that carries `task`: as created, as read, or as cancelled.
    fn task(&self, id: &Value, task: &TaskView, reply: TaskReply) -> Reply;
    /// The reply to a `tasks/cancel` of a task already finished with `status`.
    fn cancel_finished(&self, id: &Value, status: TaskStatus) -> Result<Reply, RpcError>;
}

/// Which reply carries a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskReply {
    /// A `tools/call` created it.
    Created,
    /// `tasks/get` read it.
    Got,
    /// `tasks/cancel` cancelled it.
    Cancelled,
}

/// 2026-07-28: results say `resultType`, lists and reads carry caching hints, errors map to
/// HTTP statuses as Streamable HTTP says.
pub(crate) struct Stateless;

/// The dialect of 2026-07-28.
pub(crate) static STATELESS: Stateless = Stateless;

impl Dialect for Stateless {
    fn complete(&self, result: ResultObject) -> Value {
        protocol::complete(result)
    }

    fn complete_uncached(&self, result: ResultObject) -> Value {
        protocol::complete_uncached(result)
    }

    fn error_status(&self, error: &RpcError) -> u16 {
        protocol::http_status(error)
    }

    /// The declared tasks extension decides: a task-only tool needs it, and with it every
    /// tool whose mode is not `sync` runs as a task.
    fn runs_as_task(
        &self,
        tool: &str,
        _asked: bool,
        meta: &RequestMeta,
        mode: TaskMode,
        _declared: TaskMode,
    ) -> Result<bool, RpcError> {
        let declared = meta.declares_tasks();
        if mode == TaskMode::Required && !declared {
            return Err(protocol::refusal::task_only_undeclared(tool));
        }
        Ok(declared && mode != TaskMode::Sync)
    }

    fn input_before_task(&self, _: &str, asked: Value) -> Result<Value, RpcError> {
        Ok(asked)
    }

    /// The declared extension says it.
    fn follows_tasks(&self, _asked: bool, meta: &RequestMeta) -> bool {
        meta.declares_tasks()
    }

    fn tool_execution(&self, _: TaskMode) -> Option<Value> {
        None
    }

    fn task(&self, id: &Value, task: &TaskView, reply: TaskReply) -> Reply {
        match reply {
            TaskReply::Created => Reply::result(id, wire::create_task_result(task)),
            TaskReply::Got => Reply::result(id, wire::get_task_result(task)),
            TaskReply::Cancelled => Reply::result(id, self.complete(ResultObject::new())),
        }
    }

    /// Cancelling a finished task is acknowledged and changes nothing.
    fn cancel_finished(&self, id: &Value, _: TaskStatus) -> Result<Reply, RpcError> {
        Ok(Reply::result(id, self.complete(ResultObject::new())))
    }
}
