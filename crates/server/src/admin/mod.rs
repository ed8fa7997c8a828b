//! Operators: who may act on tasks outside MCP, and what they may do (the admin API under
//! `/admin/v1/…`, the console at `/console` and `snodo tasks` all go through here).
//!
//! An operator is a caller holding the admin scopes (`[auth.scopes] admin`) or presenting
//! an admin token (`[[admin.tokens]]`); a loopback-only server without authentication
//! treats its local caller as an operator of every tenant. An operator sees and acts on its
//! own tenant's tasks only, unless its tenant is listed in `admin.cross_tenant` (or its
//! token says `cross_tenant`): another tenant's task is reported exactly like an unknown
//! one. Every action goes through the same store operations as MCP requests, and the same
//! hand-offs to the runner, so a cancel stops the attempt and an answer resumes the task.

mod answer;
pub(crate) mod api;
mod config;
pub(crate) mod console;
mod session;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use snodo_core::model::{EventId, History, Principal, Task, TaskId, TaskStatus, Work};
use snodo_core::store::{
    Action, Effect, StoreError, TaskCounts, TaskFilter, TaskPage, TaskQuery, TaskSummary, tool_of,
};

use crate::identity::{Authenticator, Caller, Scopes, bearer_token};
use crate::identity::{TokenDigest, digest, digests_equal};
use crate::mcp::{Handoff, McpServer};

pub use api::{AnswerBody, BulkBody, CancelBody};
pub use config::{AdminConfig, AdminToken, DEFAULT_SESSION_MS, SignIn};
pub use session::{SECURE_SESSION_COOKIE, SESSION_COOKIE};

/// The most tasks one bulk cancel acts on, unless the request asks for fewer.
pub const DEFAULT_BULK_CAP: usize = 1_000;
/// The largest cap a bulk cancel may ask for.
pub const MAX_BULK_CAP: usize = 10_000;
/// The most listing pages one bulk cancel (or preview) walks, each at most
/// [`snodo_core::store::LIST_SCAN`] entries: a filter that matches little cannot make it
/// walk the whole store. Past it the outcome says `incomplete`.
pub const MAX_BULK_PAGES: usize = 40;

/// The operator-side state the HTTP layer keeps.
pub(crate) struct Admin {
    config: AdminConfig,
    tokens: Vec<(TokenDigest, Principal, bool)>,
    /// A digest of who is an operator here (the admin tokens, cross-tenant tenants, admin
    /// scopes, the loopback case): console sessions carry it, so a change of any of them
    /// ends the sessions it made, and a session from a node configured otherwise (a
    /// development node without authentication sharing the store) is refused.
    fingerprint: String,
}

/// Who is acting, and how far they reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// The operator's principal.
    pub principal: Principal,
    /// Whether it acts on every tenant.
    pub cross_tenant: bool,
}

impl Operator {
    /// The tenant a query covers: the operator's own unless it is cross-tenant; another
    /// tenant asked for by a single-tenant operator is refused.
    fn tenant(&self, asked: Option<String>) -> Result<Option<String>, AdminError> {
        if self.cross_tenant {
            return Ok(asked);
        }
        match asked {
            Some(t) if t != self.principal.tenant => Err(AdminError::Forbidden(format!(
                "an operator of tenant {:?} acts on its own tenant only",
                self.principal.tenant
            ))),
            _ => Ok(Some(self.principal.tenant.clone())),
        }
    }

    fn reaches(&self, task: &Task) -> bool {
        self.cross_tenant || task.scope.tenant() == self.principal.tenant
    }
}

/// Why an operator's request failed; each maps to one HTTP status and a JSON body
/// `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// 401: no credential, or not a valid one.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: authenticated, but not an operator (or not of that tenant).
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such task (or another tenant's).
    #[error("no such task")]
    NotFound,
    /// 400: the request is malformed or asks for what cannot be.
    #[error("{0}")]
    Invalid(String),
    /// 409: the task's state does not allow it (finished, not waiting).
    #[error("{0}")]
    Conflict(String),
    /// 503: the store cannot answer now.
    #[error("{0}")]
    Unavailable(String),
}

impl AdminError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Self::Unauthenticated(_) => 401,
            Self::Forbidden(_) => 403,
            Self::NotFound => 404,
            Self::Invalid(_) => 400,
            Self::Conflict(_) => 409,
            Self::Unavailable(_) => 503,
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "unauthenticated",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound => "not_found",
            Self::Invalid(_) => "invalid",
            Self::Conflict(_) => "conflict",
            Self::Unavailable(_) => "unavailable",
        }
    }

    pub(crate) fn body(&self) -> Value {
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::NotFound,
            StoreError::Invalid(m) => Self::Invalid(m.to_string()),
            StoreError::Terminal { status } => {
                Self::Conflict(format!("the task has already finished ({status})"))
            }
            StoreError::Unavailable(m) => Self::Unavailable(m.to_string()),
            other => Self::Unavailable(other.to_string()),
        }
    }
}

impl Admin {
    pub(crate) fn new(config: AdminConfig) -> Self {
        let tokens = config
            .tokens
            .iter()
            .map(|(t, p, cross)| (digest(t), p.clone(), *cross))
            .collect::<Vec<_>>();
        let mut who: Vec<String> = tokens
            .iter()
            .map(|(d, p, cross): &(TokenDigest, Principal, bool)| {
                format!(
                    "{}|{}|{}|{cross}",
                    snodo_core::ids::hex(d),
                    p.tenant,
                    p.subject
                )
            })
            .collect();
        who.sort();
        let described = serde_json::json!({
            "tokens": who,
            "cross": config.cross_tenant,
            "scopes": config.scopes,
            "open": config.open_locally,
        });
        let fingerprint = snodo_core::ids::hex(&digest(&described.to_string()))[..16].to_owned();
        Self {
            config,
            tokens,
            fingerprint,
        }
    }

    /// The digest console sessions are bound to.
    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    pub(crate) fn config(&self) -> &AdminConfig {
        &self.config
    }

    /// The operator an admin token names, comparing every configured token.
    pub(crate) fn token_operator(&self, token: &str) -> Option<Operator> {
        let presented = digest(token);
        let mut found = None;
        for (configured, principal, cross) in &self.tokens {
            if digests_equal(configured, &presented) {
                found = Some(Operator {
                    principal: principal.clone(),
                    cross_tenant: *cross,
                });
            }
        }
        found
    }

    /// The operator a caller of the MCP authenticator is, if any.
    pub(crate) fn caller_operator(&self, caller: &Caller) -> Result<Operator, AdminError> {
        let admin = match &caller.scopes {
            // A static MCP token grants every MCP scope but is not an operator's: admin
            // tokens are configured apart. Only the local caller of an unauthenticated
            // loopback server is.
            Scopes::All => self.config.open_locally,
            Scopes::Only(_) => {
                !self.config.scopes.is_empty() && caller.missing(&self.config.scopes).is_empty()
            }
        };
        if !admin {
            return Err(AdminError::Forbidden(format!(
                "operators need the scope {:?} or an admin token",
                self.config.scopes.join(" ")
            )));
        }
        let cross_tenant =
            self.config.open_locally || self.config.cross_tenant.contains(&caller.principal.tenant);
        Ok(Operator {
            principal: caller.principal.clone(),
            cross_tenant,
        })
    }

    /// The operator of a request's bearer credential: an admin token, else a caller of
    /// the MCP authenticator holding the admin scopes.
    pub(crate) async fn bearer_operator(
        &self,
        headers: &HeaderMap,
        authenticator: &Arc<dyn Authenticator>,
    ) -> Result<Operator, AdminError> {
        if let Some(op) = bearer_token(headers).and_then(|t| self.token_operator(t)) {
            return Ok(op);
        }
        if bearer_token(headers).is_none() && !self.config.open_locally {
            return Err(AdminError::Unauthenticated(
                "an admin token or an access token with the admin scope is required".into(),
            ));
        }
        match authenticator.authenticate(headers).await {
            Ok(caller) => self.caller_operator(&caller),
            Err(refused) => Err(AdminError::Unauthenticated(refused.message)),
        }
    }
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
    fn of(task: &Task, work: &Work) -> Self {
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

impl McpServer {
    /// A page of the tasks `query` selects, within the operator's reach.
    pub(crate) async fn admin_list(
        &self,
        op: &Operator,
        mut query: TaskQuery,
    ) -> Result<TaskPage, AdminError> {
        query.filter.tenant = op.tenant(query.filter.tenant.take())?;
        Ok(self.store.list_tasks(&query).await?)
    }

    /// Counts by status and tool within the operator's reach.
    pub(crate) async fn admin_counts(
        &self,
        op: &Operator,
        tenant: Option<String>,
    ) -> Result<TaskCounts, AdminError> {
        let tenant = op.tenant(tenant)?;
        Ok(self.store.count_tasks(tenant.as_deref()).await?)
    }

    /// The task `id` as an operator may see it (another tenant's, an expired one and an
    /// unknown one alike are [`AdminError::NotFound`]).
    async fn admin_load(&self, op: &Operator, id: &str) -> Result<(Task, Work), AdminError> {
        let id = TaskId::parse(id).ok_or(AdminError::NotFound)?;
        let now = self.store.now().await?;
        match self.store.inspect(&id).await? {
            Some((task, work)) if op.reaches(&task) && !task.is_expired(now) => Ok((task, work)),
            _ => Err(AdminError::NotFound),
        }
    }

    /// One task with its history and questions.
    pub(crate) async fn admin_task(
        &self,
        op: &Operator,
        id: &str,
    ) -> Result<TaskDetail, AdminError> {
        let (task, work) = self.admin_load(op, id).await?;
        Ok(TaskDetail::of(&task, &work))
    }

    /// Cancels a task (and stops its attempt on this node; other nodes at their next
    /// renewal), as its requester's `tasks/cancel` would.
    pub(crate) async fn admin_cancel(
        &self,
        op: &Operator,
        id: &str,
        message: Option<String>,
    ) -> Result<TaskDetail, AdminError> {
        let (task, _) = self.admin_load(op, id).await?;
        self.cancel_as_operator(op, &task, message).await?;
        self.admin_task(op, id).await
    }

    async fn cancel_as_operator(
        &self,
        op: &Operator,
        task: &Task,
        message: Option<String>,
    ) -> Result<(), StoreError> {
        let access = self
            .store
            .authorize(&task.scope.owner(), Action::Cancel, &task.id.to_string())
            .await?;
        let message = Some(snodo_core::model::truncate_status_message(
            message.unwrap_or_else(|| format!("cancelled by operator {}", op.principal.subject)),
        ));
        let store = self.store.clone();
        let id = task.id;
        self.commit_then_tell(
            async move { store.cancel(&access, message).await },
            move |_| Some(Handoff::Cancelled(id)),
        )
        .await
        .map(|_| ())
    }

    /// Answers a task's open questions, each checked against what it asked
    /// ([`answer::check`]), and resumes the task when none is left open.
    pub(crate) async fn admin_answer(
        &self,
        op: &Operator,
        id: &str,
        responses: Map<String, Value>,
    ) -> Result<TaskDetail, AdminError> {
        let (task, _) = self.admin_load(op, id).await?;
        if task.status.is_terminal() {
            return Err(AdminError::Conflict(format!(
                "the task has already finished ({})",
                task.status
            )));
        }
        if responses.is_empty() {
            return Err(AdminError::Invalid("no answer given".into()));
        }
        for (key, response) in &responses {
            let entry = task.inputs.get(key).ok_or_else(|| {
                AdminError::Invalid(format!("the task asked no question {key:?}"))
            })?;
            if entry.response.is_some() {
                return Err(AdminError::Conflict(format!(
                    "the question {key:?} is already answered"
                )));
            }
            answer::check(&entry.request, response)
                .map_err(|why| AdminError::Invalid(format!("the answer to {key:?} {why}")))?;
        }
        let access = self
            .store
            .authorize(&task.scope.owner(), Action::Update, id)
            .await?;
        let store = self.store.clone();
        let task_id = task.id;
        let committed = self
            .commit_then_tell(
                async move {
                    store
                        .accept_input(&access, EventId::random(), responses)
                        .await
                },
                move |c| match &c.effect {
                    Effect::Accepted { keys, complete } if !keys.is_empty() => {
                        Some(Handoff::InputAccepted {
                            task: task_id,
                            complete: *complete,
                        })
                    }
                    _ => None,
                },
            )
            .await?;
        if let Effect::Accepted { keys, .. } = &committed.effect
            && keys.is_empty()
        {
            return Err(AdminError::Conflict(
                "the questions were answered meanwhile".into(),
            ));
        }
        self.admin_task(op, id).await
    }

    /// Makes a task waiting out its retry delay due now.
    pub(crate) async fn admin_retry(
        &self,
        op: &Operator,
        id: &str,
    ) -> Result<TaskDetail, AdminError> {
        let (task, _) = self.admin_load(op, id).await?;
        let access = self
            .store
            .authorize(&task.scope.owner(), Action::Update, id)
            .await?;
        let store = self.store.clone();
        let task_id = task.id;
        self.commit_then_tell(async move { store.retry_now(&access).await }, move |_| {
            Some(Handoff::InputAccepted {
                task: task_id,
                complete: true,
            })
        })
        .await
        .map_err(|e| match e {
            StoreError::Invalid(m) => AdminError::Conflict(m.to_string()),
            other => other.into(),
        })?;
        self.admin_task(op, id).await
    }

    /// Deletes a finished task now rather than at its TTL, freeing its place under
    /// `limits.stored_tasks_per_tenant`. An unfinished task is a conflict: cancel it first.
    pub(crate) async fn admin_delete(&self, op: &Operator, id: &str) -> Result<(), AdminError> {
        let (task, _) = self.admin_load(op, id).await?;
        let access = self
            .store
            .authorize(&task.scope.owner(), Action::Cancel, id)
            .await?;
        self.store
            .delete_finished(&access)
            .await
            .map_err(|e| match e {
                StoreError::Invalid(m) => AdminError::Conflict(m.to_string()),
                other => other.into(),
            })
    }

    /// Cancels (or, with `preview`, counts) the live tasks `filter` selects, at most `cap`.
    pub(crate) async fn admin_bulk_cancel(
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
        let statuses = match filter.status {
            Some(s) if s.is_terminal() => Vec::new(),
            Some(s) => vec![s],
            None => vec![TaskStatus::Working, TaskStatus::InputRequired],
        };
        let mut out = BulkOutcome {
            preview,
            cap,
            ..Default::default()
        };
        let mut matched = Vec::new();
        let mut pages = 0;
        'statuses: for status in statuses {
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
                    break 'statuses;
                }
                pages += 1;
                let page = self.store.list_tasks(&q).await?;
                for t in page.tasks {
                    if matched.len() == cap {
                        out.capped = true;
                        break 'statuses;
                    }
                    matched.push(t.id);
                }
                match page.next {
                    Some(next) => q.after = Some(next),
                    None => break,
                }
            }
        }
        out.matched = matched.len();
        if preview {
            return Ok(out);
        }
        for id in matched {
            let loaded = self.store.inspect(&id).await?;
            let Some((task, _)) = loaded else {
                out.already_finished += 1;
                continue;
            };
            match self.cancel_as_operator(op, &task, message.clone()).await {
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
}

/// Parses a listing's query string (`tenant`, `status`, `tool`, `created_after`,
/// `created_before`, `updated_after`, `updated_before` in ms since the epoch, `limit`,
/// `cursor`).
pub(crate) fn query_of(params: &BTreeMap<String, String>) -> Result<TaskQuery, AdminError> {
    let filter = filter_of(params)?;
    let limit = match params.get("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| AdminError::Invalid(format!("limit must be a number, got {l:?}")))?,
        None => 50,
    };
    let after = match params.get("cursor").filter(|c| !c.is_empty()) {
        Some(c) => Some(snodo_core::store::Cursor::parse(c)?),
        None => None,
    };
    Ok(TaskQuery {
        filter,
        limit,
        after,
    })
}

/// The filter part of a query string; empty values are left out.
pub(crate) fn filter_of(params: &BTreeMap<String, String>) -> Result<TaskFilter, AdminError> {
    let get = |k: &str| params.get(k).filter(|v| !v.is_empty()).cloned();
    let time = |k: &str| -> Result<Option<snodo_core::model::Timestamp>, AdminError> {
        get(k)
            .map(|v| {
                v.parse::<u64>()
                    .map(snodo_core::model::Timestamp)
                    .map_err(|_| AdminError::Invalid(format!("{k} is ms since the epoch")))
            })
            .transpose()
    };
    let status = get("status")
        .map(|s| {
            TaskStatus::parse(&s).ok_or_else(|| {
                AdminError::Invalid(format!(
                    "status is one of working, input_required, completed, failed, cancelled; got {s:?}"
                ))
            })
        })
        .transpose()?;
    Ok(TaskFilter {
        tenant: get("tenant"),
        status,
        tool: get("tool"),
        created_after: time("created_after")?,
        created_before: time("created_before")?,
        updated_after: time("updated_after")?,
        updated_before: time("updated_before")?,
    })
}
