//! TracedStore: a layer that writes a task's own span when a commit ends the task.
//!
//! The span runs from the task's creation to the terminal commit, under the id chosen when
//! it was created ([`TaskSpan`]), so it is the parent of every attempt's span, whichever
//! node ran them. Its events are the task's history (claims, starts, questions asked and
//! answered, parks and resumes, retries with their due time, releases and fencing), with
//! the commit times the store gave them: what happened on other nodes and before crashes
//! is in the record, not in this process's memory. Whoever commits the end (a runner's
//! outcome, a client's cancel, an operator) writes the span; a replay of that commit
//! writes it again under the same id (the first reply may have been lost, and with it the
//! first write).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use crate::model::{HistoryKind, Task, TaskSpan, Timestamp};
use crate::spans::{SpanEvent, SpanKind, SpanRecord, Tracer, Value};

use super::{Committed, Layer, Layered, Store, StoreResult, Transition};

/// A store whose terminal commits write their task's span.
pub type TracedStore = Layered<TaskSpans>;

/// The layer behind [`TracedStore`].
pub struct TaskSpans {
    tracer: Tracer,
}

impl TaskSpans {
    /// Writes task spans to `tracer`.
    pub fn new(tracer: Tracer) -> Self {
        Self { tracer }
    }
}

#[async_trait]
impl Layer for TaskSpans {
    async fn transition(&self, inner: &dyn Store, t: Transition<'_>) -> StoreResult<Committed> {
        let c = t.apply(inner).await?;
        // A replay that ends the task writes it too: the commit it repeats may have been
        // the one whose reply was lost (the runner tries an unanswered outcome again), and
        // then nobody wrote it. The span's id is fixed, so a second copy is the same span.
        if c.task.status.is_terminal()
            && let Some(span) = c.task.span.as_ref().filter(|s| self.tracer.samples_task(s))
        {
            self.tracer.export(task_span(&c.task, span));
        }
        Ok(c)
    }
}

/// A store time as a `SystemTime`.
pub fn system_time(at: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(at.as_millis())
}

/// The span of `task`, ended: from its creation to its last update.
pub fn task_span(task: &Task, span: &TaskSpan) -> SpanRecord {
    let mut r = SpanRecord::new(
        span.trace_id,
        span.parent,
        format!("task {}", span.tool),
        SpanKind::Internal,
        system_time(task.created_at),
    )
    .end_at(system_time(task.last_updated_at))
    .attr("mcp.task.id", task.id.to_string())
    .attr("gen_ai.tool.name", span.tool.as_str())
    .attr("mcp.task.status", task.status.as_str())
    .attr("snodo.tenant", task.scope.as_str())
    .attr("snodo.task.attempts", task.attempt)
    .attr("snodo.task.retries", task.retry_count)
    .attr("snodo.task.recoveries", task.recoveries);
    r.span_id = span.span_id;
    r.parent_remote = span.parent.is_some();
    if task.history.dropped > 0 {
        r.set("snodo.task.history_dropped", task.history.dropped);
    }
    for entry in &task.history.entries {
        let at = system_time(entry.at);
        let mut event = |name: &'static str, attributes: Vec<(&'static str, Value)>| {
            r.events.push(SpanEvent {
                name,
                at,
                attributes,
            });
        };
        match &entry.kind {
            HistoryKind::Created | HistoryKind::Status { .. } => {}
            HistoryKind::Claimed {
                generation,
                owner,
                waited_ms,
                recovered,
            } => event(
                "claimed",
                vec![
                    ("snodo.claim.generation", (*generation).into()),
                    ("snodo.node", owner.as_str().into()),
                    ("snodo.claim.waited_ms", (*waited_ms).into()),
                    ("snodo.claim.recovered", (*recovered).into()),
                ],
            ),
            HistoryKind::Started { attempt } => {
                event("started", vec![("snodo.attempt", (*attempt).into())]);
            }
            HistoryKind::InputRequested { key } => {
                event(
                    "input_requested",
                    vec![("snodo.input.key", key.as_str().into())],
                );
            }
            HistoryKind::InputAnswered { keys, resumed } => {
                event(
                    "input_answered",
                    vec![("snodo.input.count", (keys.len() as u64).into())],
                );
                if *resumed {
                    event("resumed", Vec::new());
                }
            }
            HistoryKind::RetryScheduled {
                due_at,
                retry,
                code,
                ..
            } => event(
                "retry_scheduled",
                vec![
                    ("snodo.retry.due_at_ms", due_at.as_millis().into()),
                    ("snodo.retry.count", (*retry).into()),
                    ("error.type", code.to_string().into()),
                ],
            ),
            HistoryKind::Sleeping { until } => event(
                "sleeping",
                vec![("snodo.sleep.until_ms", until.as_millis().into())],
            ),
            HistoryKind::RetryNow { .. } => event("retry_now", Vec::new()),
            HistoryKind::Parked => event("parked", Vec::new()),
            HistoryKind::Released => event("released", Vec::new()),
            HistoryKind::Fenced { generation } => event(
                "fenced",
                vec![("snodo.claim.generation", (*generation).into())],
            ),
            HistoryKind::Completed => event("completed", Vec::new()),
            HistoryKind::Failed { code, .. } => {
                event("failed", vec![("error.type", code.to_string().into())]);
            }
            HistoryKind::Cancelled { .. } => event("cancelled", Vec::new()),
        }
    }
    if let Some(crate::model::Outcome::Error(e)) = &task.outcome {
        r.error = Some(e.code.to_string());
    }
    r
}
