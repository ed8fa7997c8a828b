//! Schedules: operators' recurring tool calls, fired once across nodes and restarts.
//!
//! Every node runs the same loop ([`run`]): it reads the schedules' rows, and for each one
//! due plans the pass ([`Schedule::plan`]: on time, or missed and then skipped, fired once,
//! or caught up to a bound) and fires each planned firing by creating its task with the
//! row's move in the same commit ([`snodo_core::store::ScheduleMove`]). The commit is a
//! compare-and-set on the row's revision, so of the nodes that plan a firing one creates
//! its task and the others find the row moved; the task's id is derived from the schedule
//! and the firing time, so no replay creates it twice. A firing creates its task through
//! the path a `tools/call` takes ([`tool_task`], [`TaskService::create`]): the tool's
//! policy, the tenant's caps, and a runner slot at once when one is free. A firing whose
//! task cannot be created (the tool is gone, its arguments no longer fit its schema, the
//! tenant is at a cap) is dropped and counted, with the reason on the row.
//!
//! Time is the store's: a firing's time is compared with the store's clock, and the loop
//! sleeps until the earliest next firing, at most [`POLL`] (so a schedule made on another
//! node is seen within it).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use snodo_core::model::{
    Firings, Grant, Principal, Schedule, ScheduleOrigin, ScheduleSpec, Task, TaskId, Timestamp,
    firing_id, rfc3339,
};
use snodo_core::store::{ScheduleMove, StoreError};
use snodo_runner::budget::TenantLimits;
use snodo_runner::{Catalog, CatalogTool, Catalogs};
use snodo_wasm::CheckBudget;
use tokio_util::sync::CancellationToken;

use crate::tasks::{TaskService, tool_task};

/// The longest the loop sleeps between two looks at the schedules.
pub(crate) const POLL: Duration = Duration::from_secs(1);
/// How many times an operator's change is tried against a row that keeps moving.
const TRIES: usize = 8;

/// Why a schedule operation failed, in terms an edge can say.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// No schedule has the name.
    #[error("no schedule is named {0:?}")]
    NotFound(String),
    /// The declaration is wrong; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The configuration declares it: change it there.
    #[error(
        "schedule {0:?} is declared in the configuration's [[schedules]]: change or remove it there"
    )]
    Configured(String),
    /// A firing's task could not be created.
    #[error("{0}")]
    Refused(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Firings that created a task.
    pub fired: u64,
    /// Firings dropped (missed, or refused).
    pub skipped: u64,
    /// Firings another node (or an operator) got to first.
    pub lost: u64,
    /// How long until the earliest next firing, if any.
    pub next_in: Option<Duration>,
}

/// The schedules of one server: its task service, catalogs and limits. A cheap handle:
/// the MCP server makes one for its loop, the admin routes hold another.
#[derive(Clone)]
pub(crate) struct Schedules {
    pub(crate) tasks: TaskService,
    pub(crate) catalog: Arc<Catalogs>,
    pub(crate) limits: TenantLimits,
    /// Woken when a schedule changes on this node, so the loop looks again at once.
    pub(crate) wake: Arc<tokio::sync::Notify>,
}

/// How a firing ended.
enum Fired {
    /// Its task, and the row after it.
    Made(Box<(Task, Schedule)>),
    /// The row was not where the plan found it: another node fired it, or an operator
    /// changed the schedule.
    Lost,
    /// Its task could not be created; why.
    Refused(String),
}

impl Schedules {
    /// Every schedule, by name.
    pub(crate) async fn list(&self) -> Result<Vec<Schedule>, ScheduleError> {
        Ok(self.tasks.store().schedules().await?)
    }

    /// The schedule `name`.
    pub(crate) async fn get(&self, name: &str) -> Result<Schedule, ScheduleError> {
        self.tasks
            .store()
            .schedule(name)
            .await?
            .ok_or_else(|| ScheduleError::NotFound(name.to_owned()))
    }

    /// Checks `spec` against the tools served now: the tool exists, takes the arguments,
    /// and asks nobody before its task exists (a schedule has nobody to ask).
    pub(crate) fn check(&self, spec: &ScheduleSpec) -> Result<(), ScheduleError> {
        checked_tool(&self.catalog.current(), spec).map(|_| ())
    }

    /// Declares `spec` from `origin`: a new schedule, or a new declaration of one (a changed
    /// cadence starts from now; the same one keeps where its firings stand). The
    /// configuration's declarations take over a name; the API's cannot change one the
    /// configuration declares. Declaring what is declared already writes nothing.
    pub(crate) async fn declare(
        &self,
        spec: ScheduleSpec,
        origin: ScheduleOrigin,
    ) -> Result<Schedule, ScheduleError> {
        self.check(&spec)?;
        let store = self.tasks.store();
        for _ in 0..TRIES {
            let now = store.now().await?;
            let current = store.schedule(&spec.name).await?;
            let (expected, after) = match &current {
                None => (None, Schedule::new(spec.clone(), origin, now)),
                Some(row)
                    if row.origin == ScheduleOrigin::Config && origin == ScheduleOrigin::Api =>
                {
                    return Err(ScheduleError::Configured(spec.name));
                }
                Some(row) if row.spec == spec && row.origin == origin => return Ok(row.clone()),
                Some(row) => {
                    let mut next = row.redeclared(spec.clone(), now);
                    next.origin = origin;
                    (Some(row.revision), next)
                }
            };
            match store
                .swap_schedule(&spec.name, expected, Some(&after))
                .await
            {
                Ok(()) => {
                    self.wake.notify_one();
                    return Ok(after);
                }
                Err(StoreError::ScheduleConflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(busy(&spec.name))
    }

    /// Removes the schedule `name` (its tasks stay). One the configuration declares is
    /// removed from the configuration.
    pub(crate) async fn remove(&self, name: &str) -> Result<(), ScheduleError> {
        self.change(name, |row, _| {
            if row.origin == ScheduleOrigin::Config {
                return Err(ScheduleError::Configured(name.to_owned()));
            }
            Ok(Change::Remove)
        })
        .await
        .map(|_| ())
    }

    /// Pauses or resumes the schedule `name`. A resumed schedule goes on from its next
    /// firing: the firings of the pause are not missed ones.
    pub(crate) async fn pause(&self, name: &str, paused: bool) -> Result<Schedule, ScheduleError> {
        let row = self
            .change(name, |row, now| {
                Ok(if row.paused == paused {
                    Change::Keep
                } else {
                    Change::To(Box::new(row.paused_at(paused, now)))
                })
            })
            .await?;
        Ok(row)
    }

    /// Fires the schedule `name` now, outside its cadence (paused or not): one task, with
    /// the schedule's tool and arguments, and the row says so.
    pub(crate) async fn run_now(&self, name: &str) -> Result<(Schedule, Task), ScheduleError> {
        for _ in 0..TRIES {
            let row = self.get(name).await?;
            let now = self.tasks.store().now().await?;
            let id = TaskId::generate();
            let after = Firings {
                next_at: row.next_at,
                skipped: 0,
                manual: true,
            };
            match self.fire(&row, now, id, after, now).await? {
                Fired::Made(made) => {
                    let (task, row) = *made;
                    self.wake.notify_one();
                    return Ok((row, task));
                }
                Fired::Lost => continue,
                Fired::Refused(why) => return Err(ScheduleError::Refused(why)),
            }
        }
        Err(busy(name))
    }

    /// Makes the store's schedules agree with the configuration's: each of `specs` is
    /// declared, and those the configuration declared before and no longer does are
    /// removed. Every node of a shared store must be given the same `[[schedules]]`.
    pub(crate) async fn declare_configured(
        &self,
        specs: &[ScheduleSpec],
    ) -> Result<(), ScheduleError> {
        for spec in specs {
            self.declare(spec.clone(), ScheduleOrigin::Config)
                .await
                .map_err(|e| match e {
                    ScheduleError::Invalid(m) => {
                        ScheduleError::Invalid(format!("schedules.{}: {m}", spec.name))
                    }
                    other => other,
                })?;
        }
        for row in self.list().await? {
            let declared = specs.iter().any(|s| s.name == row.spec.name);
            if row.origin == ScheduleOrigin::Config && !declared {
                let store = self.tasks.store();
                match store
                    .swap_schedule(&row.spec.name, Some(row.revision), None)
                    .await
                {
                    Ok(()) | Err(StoreError::ScheduleConflict { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                tracing::info!(schedule = %row.spec.name, "schedule removed from the configuration");
            }
        }
        Ok(())
    }

    /// One pass at the store's time: every due schedule's firings, as its plan says.
    pub(crate) async fn pass(&self) -> Result<Pass, ScheduleError> {
        let store = self.tasks.store();
        let now = store.now().await?;
        let mut pass = Pass::default();
        let mut next: Option<Timestamp> = None;
        for row in store.schedules().await? {
            let row = self.catch_up(row, now, &mut pass).await?;
            if let Some(at) = row.next_at.filter(|_| !row.paused) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        pass.next_in =
            next.map(|at| Duration::from_millis(at.as_millis().saturating_sub(now.as_millis())));
        self.tasks
            .metrics()
            .schedule_firings(pass.fired, pass.skipped, pass.lost);
        Ok(pass)
    }

    /// Fires what `row`'s plan at `now` says; answers the row as this node last saw it.
    async fn catch_up(
        &self,
        mut row: Schedule,
        now: Timestamp,
        pass: &mut Pass,
    ) -> Result<Schedule, ScheduleError> {
        let plan = row.plan(now);
        if plan.fire.is_empty() {
            if plan.skipped == 0 {
                return Ok(row);
            }
            let after = row.skipped(plan.skipped, plan.next_at, None, now);
            return match self.swap(&row, &after).await? {
                true => {
                    pass.skipped += plan.skipped;
                    tracing::info!(schedule = %row.spec.name, skipped = plan.skipped, "missed firings skipped");
                    Ok(after)
                }
                false => {
                    pass.lost += 1;
                    Ok(row)
                }
            };
        }
        for (i, at) in plan.fire.iter().copied().enumerate() {
            let next_at = plan.fire.get(i + 1).copied().or(plan.next_at);
            let skipped = if i == 0 { plan.skipped } else { 0 };
            let after = Firings {
                next_at,
                skipped,
                manual: false,
            };
            let id = firing_id(row.key, at);
            match self.fire(&row, at, id, after, now).await? {
                Fired::Made(made) => {
                    let (task, next) = *made;
                    pass.fired += 1;
                    pass.skipped += skipped;
                    tracing::info!(schedule = %row.spec.name, at = %rfc3339(at), task = %task.id, "schedule fired");
                    row = next;
                }
                Fired::Lost => {
                    pass.lost += 1;
                    return Ok(row);
                }
                Fired::Refused(why) => {
                    tracing::warn!(schedule = %row.spec.name, at = %rfc3339(at), reason = %why, "a firing could not create its task");
                    let after = row.skipped(skipped + 1, next_at, Some(why), now);
                    if !self.swap(&row, &after).await? {
                        pass.lost += 1;
                        return Ok(row);
                    }
                    pass.skipped += skipped + 1;
                    row = after;
                }
            }
        }
        Ok(row)
    }

    /// Creates the task of `row`'s firing at `at`, id `id`, and moves the row as `after`
    /// says, in one commit.
    async fn fire(
        &self,
        row: &Schedule,
        at: Timestamp,
        id: TaskId,
        after: Firings,
        now: Timestamp,
    ) -> Result<Fired, ScheduleError> {
        let spec = &row.spec;
        let catalog = self.catalog.current();
        let tool = match checked_tool(&catalog, spec) {
            Ok(tool) => tool,
            Err(e) => return Ok(Fired::Refused(e.to_string())),
        };
        let principal = Principal::new(spec.tenant.as_str(), spec.subject.as_str());
        let arguments = Value::Object(spec.arguments.clone());
        let mut new = tool_task(
            id,
            tool,
            &principal,
            arguments,
            Grant::default(),
            &self.limits,
        );
        let what = if after.manual { "run now" } else { "fired" };
        new.status_message = Some(format!(
            "{what} by schedule {} for {}",
            spec.name,
            rfc3339(at)
        ));
        if let Err(e) = self.tasks.hear(&mut new, &spec.tool, None) {
            return Ok(Fired::Refused(e));
        }
        let moved = row.fired(at, id, now, after);
        new.firing = Some(ScheduleMove {
            expected: row.revision,
            after: moved.clone(),
        });
        match self.tasks.create(new).await {
            Ok(task) => Ok(Fired::Made(Box::new((task, moved)))),
            Err(StoreError::ScheduleConflict { .. } | StoreError::AlreadyExists) => Ok(Fired::Lost),
            Err(StoreError::LiveLimit { max }) => Ok(Fired::Refused(at_cap(
                "limits.live_tasks_per_tenant",
                max,
                &spec.tenant,
            ))),
            Err(StoreError::StoredLimit { max }) => Ok(Fired::Refused(at_cap(
                "limits.stored_tasks_per_tenant",
                max,
                &spec.tenant,
            ))),
            Err(StoreError::StoredBytesLimit { max }) => Ok(Fired::Refused(at_cap(
                "limits.stored_bytes_per_tenant",
                max,
                &spec.tenant,
            ))),
            Err(StoreError::Invalid(e)) => Ok(Fired::Refused(e.0)),
            Err(e) => Err(e.into()),
        }
    }

    /// Swaps `row` for `after`; `false` when the row moved meanwhile.
    async fn swap(&self, row: &Schedule, after: &Schedule) -> Result<bool, ScheduleError> {
        match self
            .tasks
            .store()
            .swap_schedule(&row.spec.name, Some(row.revision), Some(after))
            .await
        {
            Ok(()) => Ok(true),
            Err(StoreError::ScheduleConflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Changes the row `name` as `f` says, retried while it moves; answers the row after.
    async fn change(
        &self,
        name: &str,
        f: impl Fn(&Schedule, Timestamp) -> Result<Change, ScheduleError>,
    ) -> Result<Schedule, ScheduleError> {
        let store = self.tasks.store();
        for _ in 0..TRIES {
            let row = self.get(name).await?;
            let now = store.now().await?;
            let after = match f(&row, now)? {
                Change::Keep => return Ok(row),
                Change::Remove => None,
                Change::To(next) => Some(*next),
            };
            match store
                .swap_schedule(name, Some(row.revision), after.as_ref())
                .await
            {
                Ok(()) => {
                    self.wake.notify_one();
                    return Ok(after.unwrap_or(row));
                }
                Err(StoreError::ScheduleConflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(busy(name))
    }
}

/// What an operator's change does to a row.
enum Change {
    /// Nothing: it is as asked already.
    Keep,
    /// Remove it.
    Remove,
    /// Replace it.
    To(Box<Schedule>),
}

/// The tool of `spec` in `catalog`, once `spec` passes its own checks and the tool takes
/// its arguments and asks nobody before its task exists (a schedule has nobody to answer).
fn checked_tool<'c>(
    catalog: &'c Catalog,
    spec: &ScheduleSpec,
) -> Result<&'c CatalogTool, ScheduleError> {
    spec.check().map_err(ScheduleError::Invalid)?;
    let tool = catalog.tool(&spec.tool).ok_or_else(|| {
        ScheduleError::Invalid(format!("tool: no tool named {:?} is served", spec.tool))
    })?;
    if tool.info.has_prepare {
        return Err(ScheduleError::Invalid(format!(
            "tool: {} asks its caller questions before its task exists, and a schedule has \
             nobody to answer them",
            spec.tool
        )));
    }
    tool.component
        .check_arguments(
            &spec.tool,
            &Value::Object(spec.arguments.clone()),
            CheckBudget::FULL,
        )
        .map_err(|r| {
            ScheduleError::Invalid(format!(
                "arguments: {}",
                r.into_rpc_error(&spec.tool).message
            ))
        })?;
    Ok(tool)
}

fn at_cap(limit: &str, max: u64, tenant: &str) -> String {
    format!("{limit} ({max}) reached for tenant {tenant:?}")
}

fn busy(name: &str) -> ScheduleError {
    ScheduleError::Store(StoreError::unavailable(format!(
        "schedule {name:?} kept changing; try again"
    )))
}

/// The loop every node runs until `stop`: a pass, then a sleep until the next firing (at
/// most [`POLL`]) or until a schedule changes on this node.
pub(crate) async fn run(schedules: Schedules, stop: CancellationToken) {
    let wake = schedules.wake.clone();
    loop {
        let wait = match schedules.pass().await {
            Ok(p) => p.next_in.map_or(POLL, |d| d.min(POLL)),
            Err(e) => {
                tracing::warn!(error = %e, "a pass over the schedules failed; trying again");
                POLL
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}
