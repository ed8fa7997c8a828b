//! A `tools/call` that becomes a task: the creation rate and the store's caps, the work
//! pinned to the tool's component, and the TTL and poll interval a mode rule may choose
//! within bounds.

use snodo_core::model::{Task, TaskId, TaskView};
use snodo_core::store::{MAX_TTL_MS, StoreError};
use snodo_runner::CatalogTool;
use snodo_runner::budget::{Over, Refusal};
use snodo_wasm::ModeChoice;

use super::super::dialect::TaskReply;
use super::super::{Ctx, Handled, McpServer, Reply};
use super::{Calling, grant_of};
use crate::protocol::RpcError;
use crate::tasks::tool_task;

impl McpServer {
    /// Creates the task (and, with a free execution slot, claims and starts it in the same
    /// commit), and answers with it.
    pub(super) async fn create_task(&self, calling: Calling<'_>, ctx: &Ctx<'_>) -> Handled<Reply> {
        let task = self.new_task(calling, ctx).await?;
        Ok(ctx
            .dialect
            .task(ctx.id, &TaskView::of(&task), TaskReply::Created))
    }

    /// Creates the task of a call (and, with a free execution slot, claims and starts it
    /// in the same commit): the creation rate and the tenant's caps are checked first.
    pub(super) async fn new_task(&self, calling: Calling<'_>, ctx: &Ctx<'_>) -> Handled<Task> {
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
        let grant = grant_of(tool, ctx.caller);
        let mut new = tool_task(
            TaskId::generate(),
            tool,
            principal,
            arguments,
            grant,
            &self.config.limits,
        );
        // The caller's trace, with a span for the task every attempt continues.
        let trace = match (&ctx.meta.trace, ctx.notes) {
            _ if !self.config.trace_context => None,
            (Some(trace), _) => Some(trace.for_task()),
            // Traced here: the task continues the request's span.
            (None, Some(notes)) => Some(notes.task_context()),
            (None, None) => None,
        };
        if let Some(trace) = trace {
            new.work = new.work.with_trace(trace);
        }
        let park_after_ms = self.tasks().runner().options().park_after.as_millis() as u64;
        let (ttl_ms, poll_interval_ms) = bounded_choice(tool, choice, park_after_ms);
        new.ttl_ms = ttl_ms;
        new.poll_interval_ms = Some(poll_interval_ms);
        // The capability set only: never the request's _meta.
        new.client_capabilities = ctx.meta.client_capabilities.clone();
        self.tasks()
            .hear(&mut new, &tool.info.name, ctx.meta.webhook.as_deref())
            .map_err(RpcError::invalid_params)?;
        let task = match self.tasks().create(new).await {
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
        ctx.note_task(&task.id, task.span.as_ref());
        Ok(task)
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
            .tasks()
            .runner()
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

#[cfg(test)]
mod tests {
    use super::*;
    use snodo_wasm::TaskMode;

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
