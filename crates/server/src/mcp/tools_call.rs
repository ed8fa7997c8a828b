//! `tools/call`, in its phases: decide the mode, prepare (the MRTR rounds before a task
//! exists), then either create the task or run the tool synchronously.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::tenant_of;
use crate::protocol::{self, RpcError};
use snodo_core::model::ClientCapabilities;
use snodo_core::model::{Grant, Principal, TaskId, TaskView};
use snodo_core::store::{MAX_TTL_MS, NewTask, StoreError};
use snodo_runner::budget::{Over, Refusal, Slot};
use snodo_runner::{CatalogTool, tool_call_work};
use snodo_wasm::headers::check_headers;
use snodo_wasm::{ArgumentsRefused, CheckBudget, GuestCaller, ModeChoice};

use crate::identity::{Caller, Scopes};
use snodo_wasm::{AttemptError, Execution, ExecutionIo, GuestOutcome, Limit, TaskMode};

use super::mrtr::{self, given_answers};
use super::request::ToolsCall;
use super::sync_io::Outbox;
use super::{Ctx, Handled, McpServer, Reply, SyncIo, wire};

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

/// The execution of a synchronous call of `tool`: its questions are answered from
/// `answers` (or asked of the client), and its progress and logs go down `stream` when the
/// client reads one.
fn sync_execution(
    tool: &CatalogTool,
    arguments: Value,
    answers: Map<String, Value>,
    ctx: &Ctx<'_>,
    stream: Option<&mpsc::Sender<Value>>,
) -> Execution {
    let mut io = SyncIo::for_request(ctx, answers);
    if let Some(tx) = stream {
        io = io.streaming(Outbox {
            tx: tx.clone(),
            progress_token: ctx.meta.progress_token.clone(),
            log_level: ctx.meta.log_level,
        });
    }
    let io: Arc<dyn ExecutionIo> = Arc::new(io);
    let mut exec = Execution::new(&tool.info.name, arguments, io)
        .in_tenant(tenant_of(ctx))
        .for_caller(guest_caller(tool, ctx));
    exec.grants = tool.grants.clone();
    exec.limits = tool.limits;
    exec
}

impl McpServer {
    /// A slot for running a guest on the request path, or the refusal as a JSON-RPC error.
    pub(super) fn sync_slot(&self, principal: &Principal) -> Result<Slot, RpcError> {
        self.sync_slots
            .try_acquire(principal.tenant.as_str())
            .map_err(|r| self.refuse(&r))
    }

    pub(super) async fn tools_call(&self, call: ToolsCall, ctx: &Ctx<'_>) -> Handled<Reply> {
        // One snapshot for the whole call: a deployment swapped meanwhile serves the next.
        let catalog = self.config.catalog.current();
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
        if !ctx.meta.declares_tasks() || mode == TaskMode::Sync {
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
    /// arguments, else the tool's declared mode. A task-only tool called without the tasks
    /// extension is refused here.
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
        if mode == TaskMode::Required && !ctx.meta.declares_tasks() {
            return Err(ctx.dialect.task_only(&tool.info.name, &ctx.meta));
        }
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
        let io: Arc<dyn ExecutionIo> = Arc::new(SyncIo::for_request(ctx, calling.answers.clone()));
        let mut exec = Execution::new(&tool.info.name, calling.arguments.clone(), io)
            .in_tenant(tenant_of(ctx))
            .for_caller(guest_caller(tool, ctx));
        exec.grants = tool.grants.clone();
        exec.limits = tool.limits;
        match self.within_wall_clock(tool.component.prepare(exec)).await? {
            Ok(Ok(prepared)) => {
                calling.arguments = prepared;
                Ok(None)
            }
            Ok(Err(e)) => Err(e),
            Err(AttemptError::NeedInput(q)) => Ok(Some(mrtr::input_required(
                q,
                &calling.key,
                &calling.sealed_for,
                ctx.principal,
                &calling.answers,
            ))),
            Err(e) => Err(e.to_rpc_error()),
        }
    }

    /// Creates the task (and, with a free execution slot, claims and starts it in the same
    /// commit), and answers with its handle.
    async fn create_task(&self, calling: Calling<'_>, ctx: &Ctx<'_>) -> Handled<Reply> {
        let Calling {
            tool,
            arguments,
            slot,
            choice,
            ..
        } = calling;
        // The task's own run takes a runner slot; the request's is done.
        drop(slot);
        let principal = ctx.principal;
        self.creates
            .try_take(principal.tenant.as_str())
            .map_err(|r| self.refuse(&r))?;
        let task_id = TaskId::generate();
        // Pinned to the code the task was created against (runner.component_policy
        // decides what recovery does if that version is gone).
        let work = tool_call_work(&task_id, &tool.info.name, arguments)
            .with_component_digest(tool.component.info().digest.clone())
            .with_retry_policy(tool.retry_policy.clone())
            .with_limits(tool.limits)
            .with_principal(principal.clone());
        // The caller's trace, with a span for the task every attempt continues.
        let work = match (&ctx.meta.trace, ctx.notes) {
            _ if !self.config.trace_context => work,
            (Some(trace), _) => work.with_trace(trace.for_task()),
            // Traced here: the task continues the request's span.
            (None, Some(notes)) => work.with_trace(notes.task_context()),
            (None, None) => work,
        };
        let grant = grant_of(tool, ctx.caller);
        // Every scope and no claims, the common case, is what a work without a grant means.
        let work = if grant == Grant::default() {
            work
        } else {
            work.with_grant(grant)
        };
        let mut new = NewTask::new(task_id, principal.scope(), work);
        let park_after_ms = self.runner.options().park_after.as_millis() as u64;
        let (ttl_ms, poll_interval_ms) = bounded_choice(tool, choice, park_after_ms);
        new.ttl_ms = ttl_ms;
        new.poll_interval_ms = Some(poll_interval_ms);
        // The capability set only: never the request's _meta.
        new.client_capabilities = ctx.meta.client_capabilities.clone();
        new.max_live_in_scope = Some(self.config.limits.live_tasks_per_tenant);
        new.max_stored_in_scope = Some(self.config.limits.stored_tasks_per_tenant);
        new.max_stored_bytes_in_scope = Some(self.config.limits.stored_bytes_per_tenant);
        let task = match self.runner.create(new).await {
            Ok(t) => t,
            Err(StoreError::LiveLimit { max }) => {
                return Err(self.refuse_at_task_cap("limits.live_tasks_per_tenant", max, false));
            }
            Err(StoreError::StoredLimit { max }) => {
                return Err(self.refuse_at_task_cap("limits.stored_tasks_per_tenant", max, true));
            }
            Err(StoreError::StoredBytesLimit { max }) => {
                return Err(self.refuse_at_task_cap("limits.stored_bytes_per_tenant", max, true));
            }
            Err(e) => {
                tracing::warn!(error = %e, "task creation failed");
                return Err(RpcError::internal(
                    "the task could not be created: the task store is unavailable",
                ));
            }
        };
        self.metrics.task_created();
        ctx.note_task(&task.id, task.span.as_ref());
        Ok(Reply::result(
            ctx.id,
            wire::create_task_result(&TaskView::of(&task)),
        ))
    }

    /// Runs the tool on the request path, under the wall-clock limit of synchronous calls.
    /// What the guest reports streams ahead of the response, to a client whose `Accept`
    /// takes an event stream, when the request asked for it (a progress token or a log
    /// level; a 2025-11-25 session always has a level).
    async fn run_sync(&self, calling: Calling<'_>, ctx: &Ctx<'_>) -> Handled<Reply> {
        let started = std::time::Instant::now();
        let tool = calling.tool;
        let (arguments, answers) = (calling.arguments, calling.answers);
        let (key, sealed_for) = (calling.key, calling.sealed_for);
        let slot = match calling.slot {
            Some(s) => s,
            None => self.sync_slot(ctx.principal)?,
        };
        self.metrics.sync_call();
        let streams =
            ctx.accepts_sse && (ctx.meta.progress_token.is_some() || ctx.meta.log_level.is_some());
        let (stream_tx, stream_rx) = if streams {
            let (tx, rx) = mpsc::channel(super::STREAM_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let exec = sync_execution(tool, arguments, answers.clone(), ctx, stream_tx.as_ref());
        let component = tool.component.clone();
        let principal = ctx.principal.clone();
        let dialect = ctx.dialect;
        let to_message = move |id: &Value,
                               outcome: Result<GuestOutcome, AttemptError>|
              -> (u16, Value) {
            let error = match outcome {
                Ok(GuestOutcome::Completed(r)) => {
                    return (200, protocol::result_response(id, dialect.complete(r)));
                }
                Err(AttemptError::NeedInput(q)) => {
                    let asked = mrtr::input_required(q, &key, &sealed_for, &principal, &answers);
                    return (200, protocol::result_response(id, asked));
                }
                // A synchronous call has no status to end with: the error is the answer.
                Ok(GuestOutcome::Failed { error: e, .. })
                | Ok(GuestOutcome::Retry { error: e, .. }) => e,
                Err(e) => e.to_rpc_error(),
            };
            (
                dialect.error_status(&error),
                protocol::error_response(id, &error),
            )
        };
        let wall = Duration::from_millis(self.config.limits.sync_timeout_ms);
        let run = async move {
            match tokio::time::timeout(wall, component.execute(exec)).await {
                Ok(report) => report.outcome,
                // Dropping the execution's future drops its guest.
                Err(_) => Err(AttemptError::Limit(Limit::WallClock {
                    ms: wall.as_millis() as u64,
                })),
            }
        };
        match (stream_tx, stream_rx) {
            (Some(tx), Some(rx)) => {
                let id = ctx.id.clone();
                let metrics = self.metrics.clone();
                let tool_name = tool.info.name.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    // A client that went away ends the call: the guest is dropped with
                    // `run` when this task returns. What the guest reported is already on
                    // the stream, ahead of the response.
                    tokio::select! {
                        outcome = run => {
                            let (_, message) = to_message(&id, outcome);
                            metrics.operation(
                                "tools/call",
                                Some(tool_name),
                                super::Outcome::of(&message).error_type(),
                                started.elapsed(),
                            );
                            let _ = tx.send(message).await;
                        }
                        () = tx.closed() => {}
                    }
                });
                Ok(Reply::Stream(rx))
            }
            _ => {
                // The transport drops this future when the client disconnects, which
                // drops the guest with it.
                let outcome = run.await;
                drop(slot);
                let (status, message) = to_message(ctx.id, outcome);
                Ok(Reply::message(status, &message))
            }
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

    /// The refusal at a task cap. A task past its TTL keeps its place until the reaper
    /// removes it, and (under a cap that counts them, `finished_count`) a finished one
    /// until its TTL or an operator's delete: the refusal says what frees a place.
    fn refuse_at_task_cap(&self, limit: &'static str, max: u64, finished_count: bool) -> RpcError {
        let mut e = self.refuse(&Refusal {
            limit,
            max,
            over: Over::Tenant,
        });
        let reap_ms = self
            .runner
            .options()
            .reap_interval
            .map_or(0, |d| d.as_millis() as u64);
        e.message = format!(
            "{}; tasks past their TTL keep their place until the reaper removes them (every runner.reap_interval_ms = {reap_ms})",
            e.message
        );
        if finished_count {
            e.message
                .push_str("; an operator can delete a finished task (DELETE /admin/v1/tasks/{id})");
        }
        e
    }
}

/// The least TTL a mode rule may give a task: a minute, and never less than the tool's
/// whole retry schedule plus `runner.park_after_ms` (a rule cannot make a task expire
/// while its retries are due or while a guest waits for input before it parks).
const RULE_MIN_TTL_MS: u64 = 60_000;
/// The poll intervals a mode rule may suggest: from 100 ms to a minute.
const RULE_POLL_INTERVAL_MS: std::ops::RangeInclusive<u64> = 100..=60_000;

/// The task's TTL and poll interval: the tool's configured ones, or the mode rule's within
/// bounds. See [`within_bounds`].
fn bounded_choice(
    tool: &CatalogTool,
    choice: Option<ModeChoice>,
    park_after_ms: u64,
) -> (Option<u64>, u64) {
    let retries: u64 = tool.retry_policy.delays_ms().iter().sum();
    within_bounds(
        tool.ttl_ms,
        tool.poll_interval_ms,
        retries,
        park_after_ms,
        choice,
    )
}

/// A rule's TTL is kept between a floor, [`RULE_MIN_TTL_MS`] or the retry schedule plus
/// `runner.park_after_ms` if longer, and a ceiling, the tool's configured TTL or, for a
/// tool whose TTL is unlimited, the store's [`MAX_TTL_MS`]: a rule never makes the store
/// refuse the task. The floor wins over a configured TTL shorter than it.
fn within_bounds(
    ttl_ms: Option<u64>,
    poll_interval_ms: u64,
    retries_ms: u64,
    park_after_ms: u64,
    choice: Option<ModeChoice>,
) -> (Option<u64>, u64) {
    let Some(choice) = choice else {
        return (ttl_ms, poll_interval_ms);
    };
    let floor = RULE_MIN_TTL_MS
        .max(retries_ms.saturating_add(park_after_ms))
        .min(MAX_TTL_MS);
    let ttl = match (choice.ttl_ms, ttl_ms) {
        (None, configured) => configured,
        (Some(t), configured) => {
            let ceiling = configured.unwrap_or(MAX_TTL_MS).clamp(floor, MAX_TTL_MS);
            Some(t.clamp(floor, ceiling))
        }
    };
    let poll = choice.poll_interval_ms.map_or(poll_interval_ms, |p| {
        p.clamp(*RULE_POLL_INTERVAL_MS.start(), *RULE_POLL_INTERVAL_MS.end())
    });
    (ttl, poll)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rules_ttl_and_poll_interval_stay_within_bounds() {
        let rule = |ttl_ms, poll_interval_ms| {
            Some(ModeChoice {
                mode: TaskMode::Optional,
                ttl_ms,
                poll_interval_ms,
            })
        };
        let day = Some(86_400_000);
        assert_eq!(
            within_bounds(day, 1_000, 0, 0, None),
            (day, 1_000),
            "no rule: the tool's"
        );
        assert_eq!(
            within_bounds(day, 1_000, 0, 0, rule(None, None)),
            (day, 1_000)
        );
        assert_eq!(
            within_bounds(day, 1_000, 0, 0, rule(Some(3_600_000), Some(5_000))),
            (Some(3_600_000), 5_000)
        );
        assert_eq!(
            within_bounds(day, 1_000, 0, 0, rule(Some(1), Some(1))),
            (Some(RULE_MIN_TTL_MS), 100),
            "floors"
        );
        assert_eq!(
            within_bounds(day, 1_000, 0, 0, rule(Some(u64::MAX), Some(u64::MAX))),
            (day, 60_000),
            "ceilings"
        );
        assert_eq!(
            within_bounds(None, 1_000, 0, 0, rule(Some(u64::MAX), None)),
            (Some(MAX_TTL_MS), 1_000),
            "unlimited: the store's maximum, which it accepts"
        );
        assert_eq!(
            within_bounds(None, 1_000, 0, 0, rule(Some(MAX_TTL_MS + 1), None)),
            (Some(MAX_TTL_MS), 1_000)
        );
        assert_eq!(
            within_bounds(day, 1_000, 120_000, 0, rule(Some(70_000), None)),
            (Some(120_000), 1_000),
            "never shorter than the retries"
        );
        assert_eq!(
            within_bounds(Some(90_000), 1_000, 120_000, 0, rule(Some(1), None)),
            (Some(120_000), 1_000),
            "the floor wins over a shorter configured TTL"
        );
        assert_eq!(
            within_bounds(None, 1_000, u64::MAX, 0, rule(Some(1), None)),
            (Some(MAX_TTL_MS), 1_000),
            "the floor itself is one the store accepts"
        );
    }

    /// The floor counts `runner.park_after_ms` beside the retry schedule: a rule's TTL
    /// outlives a guest that waits for input until it parks.
    #[test]
    fn a_rules_ttl_floor_outlives_the_retries_and_the_park_time() {
        let choice = Some(ModeChoice {
            mode: TaskMode::Optional,
            ttl_ms: Some(1),
            poll_interval_ms: None,
        });
        assert_eq!(
            within_bounds(None, 1_000, 30_000, 3_600_000, choice),
            (Some(3_630_000), 1_000)
        );
    }
}
