//! `tools/call`, in its phases: check the arguments, decide the mode, prepare (the MRTR
//! rounds before a task exists), then either create the task (`create`) or run the tool
//! synchronously (`sync`).

mod create;
mod sync;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::tenant_of;
use crate::protocol::{self, RpcError};
use snodo_core::model::{ClientCapabilities, Grant, Principal};
use snodo_runner::CatalogTool;
use snodo_runner::budget::Slot;
use snodo_wasm::headers::check_headers;
use snodo_wasm::{ArgumentsRefused, CheckBudget, GuestCaller, ModeChoice};

use crate::identity::{Caller, Scopes};
use snodo_wasm::{AttemptError, Execution, ExecutionIo, Limit, TaskMode};

use super::mrtr::{self, given_answers};
use super::request::ToolsCall;
use super::{Ctx, Handled, McpServer, Reply, SyncIo};

/// Bodies up to this size have their arguments checked on the request's own task; larger
/// ones on the blocking pool, inside the tenant's request-path budget.
const INLINE_CHECK_BYTES: usize = 64 << 10;

/// What one `tools/call` has settled so far: the tool, its checked arguments, the answers
/// its MRTR rounds carried, and the request-path slot once a guest has run for it.
struct Calling<'a> {
    tool: &'a CatalogTool,
    arguments: Value,
    answers: Map<String, Value>,
    key: [u8; 32],
    /// What this call's `requestState` is sealed for ([`mrtr::sealed_for`]).
    sealed_for: String,
    /// One slot covers every guest execution of the request (mode rule, prepare, the call
    /// itself): taken at the first and held until the reply is complete.
    slot: Option<Slot>,
    /// What the tool's mode rule decided, when it ran.
    choice: Option<ModeChoice>,
}

impl McpServer {
    /// A slot for running a guest on the request path, or the refusal as a JSON-RPC error.
    pub(super) fn sync_slot(&self, principal: &Principal) -> Result<Slot, RpcError> {
        self.sync_slots
            .try_acquire(principal.tenant.as_str())
            .map_err(|r| self.refuse(&r))
    }

    pub(super) async fn tools_call(&self, mut call: ToolsCall, ctx: &Ctx<'_>) -> Handled<Reply> {
        // One snapshot for the whole call: a deployment swapped meanwhile serves the next.
        let catalog = self.config.catalog.current();
        if catalog.handles()
            && let Some(reply) = self.follow_up(&mut call, &catalog, ctx).await?
        {
            return Ok(reply);
        }
        let tool = catalog
            .tool(&call.name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown tool: {}", call.name)))?;
        // Headers mirrored from marked arguments must match them, like Mcp-Name the name.
        if let Some(sent) = ctx.param_headers
            && !tool.info.header_params.is_empty()
        {
            check_headers(&tool.info.header_params, &call.arguments, |name| {
                sent.iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            })
            .map_err(RpcError::header_mismatch)?;
        }
        // Checked before anything is decided: a bad call is -32602 on the call in every
        // mode, and no task or guest is spent on it.
        let mut slot = None;
        let (arguments, sealed_for) = self
            .check_arguments(tool, Value::Object(call.arguments), ctx, &mut slot)
            .await?;
        let key = self.server_key().await?;
        let answers = given_answers(call.answers, &key, &sealed_for, ctx.principal)?;
        // Capabilities the tool needs are checked before it runs.
        if let Some(required) = &tool.info.required_capabilities
            && !ClientCapabilities::of(&ctx.meta.client_capabilities).covers(required)
        {
            return Err(protocol::refusal::tool_needs(
                &tool.info.name,
                required,
                &ctx.meta,
            ));
        }
        let mut calling = Calling {
            tool,
            arguments,
            answers,
            key,
            sealed_for,
            slot,
            choice: None,
        };
        let mode = self.decide_mode(&mut calling, ctx).await?;
        if let Some(wait) = self.handle_wait(tool, mode, call.as_task, ctx) {
            if let Some(asked) = self.prepare(&mut calling, ctx).await? {
                return Ok(Reply::result(ctx.id, asked));
            }
            let task = self.new_task(calling, ctx).await?;
            let view = snodo_core::model::TaskView::of(&task);
            return self
                .follow_handle(view, tool.info.name.clone(), wait, ctx)
                .await;
        }
        let declared = tool.mode.unwrap_or(tool.info.mode);
        let as_task =
            ctx.dialect
                .runs_as_task(&tool.info.name, call.as_task, &ctx.meta, mode, declared)?;
        if !as_task {
            return self.run_sync(calling, ctx).await;
        }
        if let Some(asked) = self.prepare(&mut calling, ctx).await? {
            return Ok(Reply::result(ctx.id, asked));
        }
        self.create_task(calling, ctx).await
    }

    /// `arguments` if they match the tool's input schema, with what a `requestState` of
    /// this call is sealed for ([`mrtr::sealed_for`], a digest of them); else -32602
    /// naming the problem.
    ///
    /// A small body is checked where it is, on the [inline budget](CheckBudget::INLINE):
    /// nearly every call's check costs microseconds. A larger body, or a check that ran out
    /// of the inline budget (a schema whose branches multiply), is checked again on the
    /// blocking pool with the full budget, in one of the tenant's CPU turns and one of its
    /// request-path slots (`slot`, kept for the guest executions that follow), within the
    /// synchronous wall clock: a costly check spends its own tenant's share, never an async
    /// worker or another tenant's turn. The digest of large arguments is taken there too.
    async fn check_arguments(
        &self,
        tool: &CatalogTool,
        arguments: Value,
        ctx: &Ctx<'_>,
        slot: &mut Option<Slot>,
    ) -> Handled<(Value, String)> {
        let name = &tool.info.name;
        if ctx.body_bytes <= INLINE_CHECK_BYTES {
            match tool
                .component
                .check_arguments(name, &arguments, CheckBudget::INLINE)
            {
                Ok(()) => {
                    let sealed_for = mrtr::sealed_for(name, &arguments);
                    return Ok((arguments, sealed_for));
                }
                Err(ArgumentsRefused::Invalid(e)) => return Err(e),
                Err(ArgumentsRefused::Exhausted(_)) => {}
            }
        }
        *slot = Some(self.sync_slot(ctx.principal)?);
        let (component, owned_name) = (tool.component.clone(), name.clone());
        let tenant = tenant_of(ctx);
        let check = tool
            .component
            .engine()
            .cpu()
            .run_blocking(&tenant, move || {
                component
                    .check_arguments(&owned_name, &arguments, CheckBudget::FULL)
                    .map_err(|r| r.into_rpc_error(&owned_name))?;
                let sealed_for = mrtr::sealed_for(&owned_name, &arguments);
                Ok::<_, RpcError>((arguments, sealed_for))
            });
        let ms = self.config.limits.sync_timeout_ms;
        match tokio::time::timeout(Duration::from_millis(ms), check).await {
            Ok(Ok(checked)) => checked,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "an argument check failed to run");
                Err(RpcError::internal("the arguments could not be checked"))
            }
            Err(_) => Err(AttemptError::Limit(Limit::WallClock { ms }).to_rpc_error()),
        }
    }

    /// The mode this call runs in: the configured one, else the tool's rule over the
    /// arguments, else the tool's declared mode.
    async fn decide_mode(
        &self,
        calling: &mut Calling<'_>,
        ctx: &Ctx<'_>,
    ) -> Result<TaskMode, RpcError> {
        let tool = calling.tool;
        let mode = match tool.mode {
            Some(m) => m,
            None if tool.info.has_mode_rule && tool.info.mode == TaskMode::Optional => {
                calling.slot = Some(self.sync_slot(ctx.principal)?);
                let rule = tool.component.choose_mode(
                    tenant_of(ctx),
                    guest_caller(tool, ctx),
                    &tool.info.name,
                    &calling.arguments,
                );
                let choice = self
                    .within_wall_clock(rule)
                    .await?
                    .map_err(|e| e.to_rpc_error())?;
                calling.choice = Some(choice);
                choice.mode
            }
            None => tool.info.mode,
        };
        Ok(mode)
    }

    /// The input phase before a task exists, for a tool that has one: MRTR round trips,
    /// answered synchronously. `Some` is the `input_required` result that asks for more;
    /// `None` means the prepared arguments replaced the call's.
    async fn prepare(
        &self,
        calling: &mut Calling<'_>,
        ctx: &Ctx<'_>,
    ) -> Result<Option<Value>, RpcError> {
        let tool = calling.tool;
        if !tool.info.has_prepare {
            return Ok(None);
        }
        if calling.slot.is_none() {
            calling.slot = Some(self.sync_slot(ctx.principal)?);
        }
        // Answered from the request's rounds only: a question without an answer ends the
        // phase, and the dialect says how it is answered.
        let io = SyncIo::new(
            calling.answers.clone(),
            ctx.meta.client_capabilities.clone(),
        );
        let exec = execution(tool, calling.arguments.clone(), io, ctx);
        match self.within_wall_clock(tool.component.prepare(exec)).await? {
            Ok(Ok(prepared)) => {
                calling.arguments = prepared;
                Ok(None)
            }
            Ok(Err(e)) => Err(e),
            Err(AttemptError::NeedInput(q)) => {
                let asked = mrtr::input_required(
                    q,
                    &calling.key,
                    &calling.sealed_for,
                    ctx.principal,
                    &calling.answers,
                );
                ctx.dialect
                    .input_before_task(&tool.info.name, asked)
                    .map(Some)
            }
            Err(e) => Err(e.to_rpc_error()),
        }
    }

    /// Runs a request-path guest call under the wall-clock limit of synchronous calls.
    pub(super) async fn within_wall_clock<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, AttemptError>>,
    ) -> Result<Result<T, AttemptError>, RpcError> {
        let ms = self.config.limits.sync_timeout_ms;
        match tokio::time::timeout(Duration::from_millis(ms), fut).await {
            Ok(r) => Ok(r),
            Err(_) => Err(AttemptError::Limit(Limit::WallClock { ms }).to_rpc_error()),
        }
    }
}

/// An execution of `tool` on the request path: in the caller's tenant, shown the caller,
/// with the tool's grants and limits, its questions and reports going to `io`.
fn execution(tool: &CatalogTool, arguments: Value, io: SyncIo, ctx: &Ctx<'_>) -> Execution {
    let io: Arc<dyn ExecutionIo> = Arc::new(io);
    let mut exec = Execution::new(&tool.info.name, arguments, io)
        .in_tenant(tenant_of(ctx))
        .for_caller(guest_caller(tool, ctx));
    exec.grants = tool.grants.clone();
    exec.limits = tool.limits;
    exec
}

/// What `tool` is shown of `caller`'s grant: its scopes, and the claims both forwarded by
/// the resource server and listed in the tool's `claims`.
fn grant_of(tool: &CatalogTool, caller: &Caller) -> Grant {
    Grant {
        scopes: match &caller.scopes {
            Scopes::All => None,
            Scopes::Only(s) => Some(s.clone()),
        },
        claims: tool
            .claims
            .iter()
            .filter_map(|name| caller.claims.get(name).map(|v| (name.clone(), v.clone())))
            .collect(),
    }
}

/// The caller a guest run on the request path is shown (a task's attempts are shown the one
/// stored with its work, which is the same).
fn guest_caller(tool: &CatalogTool, ctx: &Ctx<'_>) -> Arc<GuestCaller> {
    let grant = grant_of(tool, ctx.caller);
    Arc::new(GuestCaller {
        tenant: ctx.principal.tenant.clone(),
        subject: ctx.principal.subject.clone(),
        scopes: grant.scopes,
        claims: grant.claims,
        client_capabilities: ctx.meta.client_capabilities.clone(),
    })
}
