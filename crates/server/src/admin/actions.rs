//! What operators do to tasks ([`Operators`]): list, count, inspect, cancel, answer, retry
//! now, delete and bulk cancel, each within the operator's reach and each through the task
//! service the MCP methods use, so a cancel stops the attempt and an answer resumes the
//! task exactly as the requester's own would.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use snodo_core::model::{History, Task, TaskId, TaskStatus, Work};
use snodo_core::store::{
    Effect, StoreError, TaskCounts, TaskFilter, TaskPage, TaskQuery, TaskSummary, tool_of,
};

use super::{AdminError, DEFAULT_BULK_CAP, MAX_BULK_CAP, MAX_BULK_PAGES, Operator, answer};
use crate::tasks::TaskService;

/// The operators' actions, over the server's task service.
pub(crate) struct Operators {
    tasks: TaskService,
    /// The server's schedules, when it fires any.
    pub(super) schedules: Option<crate::schedules::Schedules>,
    /// The server's webhooks, when it delivers any.
    pub(super) webhooks: Option<crate::webhooks::Webhooks>,
    /// What deploys to the server's store, when it takes deployments.
    pub(super) deploying: Option<crate::deploy::operate::Deploying>,
    /// Where backups through the server may be written (`admin.backup_dir`).
    pub(super) backup_dir: Option<std::path::PathBuf>,
}

/// What an operator sees of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDetail {
    /// The listing's summary.
    #[serde(flatten)]
    pub summary: TaskSummary,
    /// The arguments the tool was called with.
    pub arguments: Value,
    /// The task's TTL, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Claims that ended without their worker letting go.
    pub recoveries: u32,
    /// The retry schedule's delays, in ms.
    pub retry_delays_ms: Vec<u64>,
    /// Every question asked, by key: the request and whether it is answered.
    pub questions: Vec<Question>,
    /// The result or error, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Value>,
    /// What happened, in commit order.
    pub history: History,
}

/// One question a task asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    /// Its key.
    pub key: String,
    /// The MCP input request (`{"method", "params"}`).
    pub request: Value,
    /// Whether an answer was accepted.
    pub answered: bool,
}

impl TaskDetail {
    /// What an operator sees of `task`, run with `work`.
    pub fn of(task: &Task, work: &Work) -> Self {
        Self {
            summary: TaskSummary::of(task, tool_of(work)),
            arguments: work.input.get("arguments").cloned().unwrap_or(Value::Null),
            ttl_ms: task.ttl_ms,
            recoveries: task.recoveries,
            retry_delays_ms: work.retry_policy.delays_ms().to_vec(),
            questions: task
                .inputs
                .iter()
                .map(|(key, e)| Question {
                    key: key.clone(),
                    request: e.request.clone(),
                    answered: e.response.is_some(),
                })
                .collect(),
            outcome: task.outcome.as_ref().map(|o| match o {
                snodo_core::model::Outcome::Result(r) => json!({"result": r}),
                snodo_core::model::Outcome::Error(e) => json!({"error": e.to_json()}),
            }),
            history: task.history.clone(),
        }
    }
}

/// What a bulk cancel did, or would do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkOutcome {
    /// Whether this was only a preview (nothing was cancelled).
    pub preview: bool,
    /// The cap the request ran under.
    pub cap: usize,
    /// Live tasks the filter matched, up to the cap.
    pub matched: usize,
    /// More live tasks match than the cap: another request takes the rest.
    pub capped: bool,
    /// The walk stopped at [`MAX_BULK_PAGES`] before the listing ran out: more may match.
    pub incomplete: bool,
    /// Cancelled now.
    pub cancelled: usize,
    /// Already finished when their turn came.
    pub already_finished: usize,
    /// Tasks that could not be cancelled, with why.
    pub failed: Vec<BulkFailure>,
}

/// One task a bulk cancel could not cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkFailure {
    /// The task.
    pub id: String,
    /// Why.
    pub error: String,
}

/// A store's refusal of an operator's retry or delete: the task is not in a state that
/// allows it (a conflict), not a malformed request.
fn state_conflict(e: StoreError) -> AdminError {
    match e {
        StoreError::Invalid(m) => AdminError::Conflict(m.to_string()),
        other => other.into(),
    }
}

impl Operators {
    /// The actions over `tasks` (the MCP server's own task service).
    pub(crate) fn new(tasks: TaskService) -> Self {
        Self {
            tasks,
            schedules: None,
            webhooks: None,
            deploying: None,
            backup_dir: None,
        }
    }

    /// Acting on the server's schedules too.
    pub(crate) fn with_schedules(mut self, schedules: crate::schedules::Schedules) -> Self {
        self.schedules = Some(schedules);
        self
    }

    /// Acting on the server's webhooks too (`None`: it delivers none).
    pub(crate) fn with_webhooks(mut self, webhooks: Option<crate::webhooks::Webhooks>) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// Writing backups through the server in `dir` (`None`: none).
    pub(crate) fn with_backup_dir(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.backup_dir = dir;
        self
    }

    /// Acting on the server's deployments too (`None`: it takes none through its API).
    pub(crate) fn with_deploying(
        mut self,
        deploying: Option<crate::deploy::operate::Deploying>,
    ) -> Self {
        self.deploying = deploying;
        self
    }

    /// The task service the actions go through (the console's sessions use its store and
    /// key; the change streams its feed).
    pub(crate) fn tasks(&self) -> &TaskService {
        &self.tasks
    }

    /// A page of the tasks `query` selects, within the operator's reach.
    pub(crate) async fn list(
        &self,
        op: &Operator,
        mut query: TaskQuery,
    ) -> Result<TaskPage, AdminError> {
        query.filter.tenant = op.tenant(query.filter.tenant.take())?;
        Ok(self.tasks.list(&query).await?)
    }

    /// Counts by status and tool within the operator's reach.
    pub(crate) async fn counts(
        &self,
        op: &Operator,
        tenant: Option<String>,
    ) -> Result<TaskCounts, AdminError> {
        let tenant = op.tenant(tenant)?;
        Ok(self.tasks.count(tenant.as_deref()).await?)
    }

    /// The task `id` as an operator may see it (another tenant's, an expired one and an
    /// unknown one alike are [`AdminError::NotFound`]).
    pub(super) async fn load(&self, op: &Operator, id: &str) -> Result<(Task, Work), AdminError> {
        let id = TaskId::parse(id).ok_or(AdminError::NotFound)?;
        match self.tasks.load(&id).await? {
            Some((task, work)) if op.reaches(task.scope.tenant()) => Ok((task, work)),
            _ => Err(AdminError::NotFound),
        }
    }

    /// One task with its history and questions.
    pub(crate) async fn task(&self, op: &Operator, id: &str) -> Result<TaskDetail, AdminError> {
        let (task, work) = self.load(op, id).await?;
        Ok(TaskDetail::of(&task, &work))
    }

    /// Cancels a task (and stops its attempt on this node; other nodes at their next
    /// renewal), as its requester's `tasks/cancel` would.
    pub(crate) async fn cancel(
        &self,
        op: &Operator,
        id: &str,
        message: Option<String>,
    ) -> Result<TaskDetail, AdminError> {
        let (task, _) = self.load(op, id).await?;
        self.cancel_for_owner(op, &task, message).await?;
        self.task(op, id).await
    }

    /// Cancels `task` for its owner, saying which operator did unless `message` says why.
    async fn cancel_for_owner(
        &self,
        op: &Operator,
        task: &Task,
        message: Option<String>,
    ) -> Result<(), StoreError> {
        let message =
            message.unwrap_or_else(|| format!("cancelled by operator {}", op.principal.subject));
        self.tasks
            .cancel(&task.scope.owner(), &task.id.to_string(), message)
            .await
            .map(|_| ())
    }

    /// Answers a task's open questions, each checked against what it asked
    /// ([`answer::check`]), and resumes the task when none is left open.
    pub(crate) async fn answer(
        &self,
        op: &Operator,
        id: &str,
        responses: Map<String, Value>,
    ) -> Result<TaskDetail, AdminError> {
        let (task, _) = self.load(op, id).await?;
        check_answers(&task, &responses)?;
        let committed = self
            .tasks
            .accept_input(&task.scope.owner(), id, responses)
            .await?;
        if let Effect::Accepted { keys, .. } = &committed.effect
            && keys.is_empty()
        {
            return Err(AdminError::Conflict(
                "the questions were answered meanwhile".into(),
            ));
        }
        self.task(op, id).await
    }

    /// Makes a task waiting out its retry delay due now.
    pub(crate) async fn retry(&self, op: &Operator, id: &str) -> Result<TaskDetail, AdminError> {
        let (task, _) = self.load(op, id).await?;
        self.tasks
            .retry_now(&task.scope.owner(), id)
            .await
            .map_err(state_conflict)?;
        self.task(op, id).await
    }

    /// Deletes a finished task now rather than at its TTL, freeing its place under
    /// `limits.stored_tasks_per_tenant`. An unfinished task is a conflict: cancel it first.
    pub(crate) async fn delete(&self, op: &Operator, id: &str) -> Result<(), AdminError> {
        let (task, _) = self.load(op, id).await?;
        self.tasks
            .delete_finished(&task.scope.owner(), id)
            .await
            .map_err(state_conflict)
    }

    /// Cancels (or, with `preview`, counts) the live tasks `filter` selects, at most `cap`.
    pub(crate) async fn bulk_cancel(
        &self,
        op: &Operator,
        mut filter: TaskFilter,
        cap: Option<usize>,
        preview: bool,
        message: Option<String>,
    ) -> Result<BulkOutcome, AdminError> {
        let cap = cap.unwrap_or(DEFAULT_BULK_CAP);
        if !(1..=MAX_BULK_CAP).contains(&cap) {
            return Err(AdminError::Invalid(format!(
                "a bulk cancel's cap is 1 to {MAX_BULK_CAP} (admin bulk limit), got {cap}"
            )));
        }
        filter.tenant = op.tenant(filter.tenant.take())?;
        let mut out = BulkOutcome {
            preview,
            cap,
            ..Default::default()
        };
        let matched = self.live_matching(&filter, &mut out).await?;
        out.matched = matched.len();
        if preview {
            return Ok(out);
        }
        for id in matched {
            let Some((task, _)) = self.tasks.inspect(&id).await? else {
                out.already_finished += 1;
                continue;
            };
            match self.cancel_for_owner(op, &task, message.clone()).await {
                Ok(()) => out.cancelled += 1,
                Err(StoreError::Terminal { .. } | StoreError::NotFound) => {
                    out.already_finished += 1;
                }
                Err(e) => out.failed.push(BulkFailure {
                    id: id.to_string(),
                    error: e.to_string(),
                }),
            }
        }
        Ok(out)
    }

    /// The live tasks `filter` selects, at most `out.cap` of them, walking at most
    /// [`MAX_BULK_PAGES`] listing pages; `out` says whether the cap or the walk cut it short.
    async fn live_matching(
        &self,
        filter: &TaskFilter,
        out: &mut BulkOutcome,
    ) -> Result<Vec<TaskId>, AdminError> {
        let statuses = match filter.status {
            Some(s) if s.is_terminal() => Vec::new(),
            Some(s) => vec![s],
            None => vec![TaskStatus::Working, TaskStatus::InputRequired],
        };
        let mut matched = Vec::new();
        let mut pages = 0;
        for status in statuses {
            let mut q = TaskQuery::new(
                TaskFilter {
                    status: Some(status),
                    ..filter.clone()
                },
                snodo_core::store::MAX_LIST_LIMIT,
            );
            loop {
                if pages == MAX_BULK_PAGES {
                    out.incomplete = true;
                    return Ok(matched);
                }
                pages += 1;
                let page = self.tasks.list(&q).await?;
                for t in page.tasks {
                    if matched.len() == out.cap {
                        out.capped = true;
                        return Ok(matched);
                    }
                    matched.push(t.id);
                }
                match page.next {
                    Some(next) => q.after = Some(next),
                    None => break,
                }
            }
        }
        Ok(matched)
    }
}

/// Every answer in `responses` must answer an open question of `task` in the form it
/// asked for, and the task must not have finished.
fn check_answers(task: &Task, responses: &Map<String, Value>) -> Result<(), AdminError> {
    if task.status.is_terminal() {
        return Err(AdminError::Conflict(format!(
            "the task has already finished ({})",
            task.status
        )));
    }
    if responses.is_empty() {
        return Err(AdminError::Invalid("no answer given".into()));
    }
    for (key, response) in responses {
        let entry = task
            .inputs
            .get(key)
            .ok_or_else(|| AdminError::Invalid(format!("the task asked no question {key:?}")))?;
        if entry.response.is_some() {
            return Err(AdminError::Conflict(format!(
                "the question {key:?} is already answered"
            )));
        }
        answer::check(&entry.request, response)
            .map_err(|why| AdminError::Invalid(format!("the answer to {key:?} {why}")))?;
    }
    Ok(())
}
