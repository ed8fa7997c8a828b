//! What operators do to schedules (list, show, declare, remove, pause, resume, run now),
//! each within the operator's reach (a schedule belongs to the tenant its tasks do), and
//! what they see of one ([`ScheduleView`]): the row, the next firings, and the last
//! firing's task as it stands.

use serde::{Deserialize, Serialize};

use snodo_core::model::{Schedule, ScheduleDeclaration, ScheduleOrigin, TaskStatus, rfc3339};

use super::{AdminError, Operator, Operators, TaskDetail};
use crate::schedules::Schedules;

/// How many coming firings a view lists.
const UPCOMING: usize = 5;

/// What an operator sees of one schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleView {
    /// The row as the store keeps it.
    #[serde(flatten)]
    pub schedule: Schedule,
    /// Its cadence for people ("0 9 * * * in Europe/Paris").
    pub cadence_text: String,
    /// The next firings (RFC 3339), none while paused.
    pub upcoming: Vec<String>,
    /// The last firing's task, while it is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_task: Option<LastTask>,
}

/// The last firing's task as it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastTask {
    /// Its id.
    pub id: String,
    /// Its status now.
    pub status: TaskStatus,
}

/// What a run-now answers: the schedule after it, and the task it made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRun {
    /// The schedule.
    pub schedule: ScheduleView,
    /// The task.
    pub task: TaskDetail,
}

impl Operators {
    fn schedules_here(&self) -> Result<&Schedules, AdminError> {
        self.schedules
            .as_ref()
            .ok_or_else(|| AdminError::Invalid("this server fires no schedules".into()))
    }

    /// The row `name` within the operator's reach (another tenant's is unknown).
    async fn reachable(&self, op: &Operator, name: &str) -> Result<Schedule, AdminError> {
        let row = self.schedules_here()?.get(name).await?;
        if op.reaches(&row.spec.tenant) {
            Ok(row)
        } else {
            Err(AdminError::NoSchedule(name.to_owned()))
        }
    }

    async fn view(&self, op: &Operator, schedule: Schedule) -> ScheduleView {
        let last_task = match &schedule.last {
            Some(last) => self
                .load(op, &last.task_id.to_string())
                .await
                .ok()
                .map(|(task, _)| LastTask {
                    id: task.id.to_string(),
                    status: task.status,
                }),
            None => None,
        };
        ScheduleView {
            cadence_text: schedule.spec.cadence.describe(),
            upcoming: schedule
                .upcoming(UPCOMING)
                .into_iter()
                .map(rfc3339)
                .collect(),
            last_task,
            schedule,
        }
    }

    /// Every schedule within the operator's reach, by name.
    pub(crate) async fn schedules(&self, op: &Operator) -> Result<Vec<ScheduleView>, AdminError> {
        let rows = self.schedules_here()?.list().await?;
        let mut out = Vec::new();
        for row in rows.into_iter().filter(|r| op.reaches(&r.spec.tenant)) {
            out.push(self.view(op, row).await);
        }
        Ok(out)
    }

    /// One schedule.
    pub(crate) async fn schedule(
        &self,
        op: &Operator,
        name: &str,
    ) -> Result<ScheduleView, AdminError> {
        let row = self.reachable(op, name).await?;
        Ok(self.view(op, row).await)
    }

    /// Declares a schedule (new, or a new declaration of one the API made) for a tenant
    /// within the operator's reach.
    pub(crate) async fn declare_schedule(
        &self,
        op: &Operator,
        declared: ScheduleDeclaration,
    ) -> Result<ScheduleView, AdminError> {
        let spec = declared.spec().map_err(AdminError::Invalid)?;
        op.tenant(Some(spec.tenant.clone()))?;
        if let Ok(row) = self.schedules_here()?.get(&spec.name).await
            && !op.reaches(&row.spec.tenant)
        {
            return Err(AdminError::Conflict(format!(
                "the name {:?} is taken",
                spec.name
            )));
        }
        let row = self
            .schedules_here()?
            .declare(spec, ScheduleOrigin::Api)
            .await?;
        Ok(self.view(op, row).await)
    }

    /// Removes a schedule the API declared (its tasks stay).
    pub(crate) async fn remove_schedule(
        &self,
        op: &Operator,
        name: &str,
    ) -> Result<(), AdminError> {
        self.reachable(op, name).await?;
        Ok(self.schedules_here()?.remove(name).await?)
    }

    /// Pauses or resumes a schedule.
    pub(crate) async fn pause_schedule(
        &self,
        op: &Operator,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleView, AdminError> {
        self.reachable(op, name).await?;
        let row = self.schedules_here()?.pause(name, paused).await?;
        Ok(self.view(op, row).await)
    }

    /// Fires a schedule now, outside its cadence.
    pub(crate) async fn run_schedule(
        &self,
        op: &Operator,
        name: &str,
    ) -> Result<ScheduleRun, AdminError> {
        self.reachable(op, name).await?;
        let (row, task) = self.schedules_here()?.run_now(name).await?;
        let detail = self.task(op, &task.id.to_string()).await?;
        Ok(ScheduleRun {
            schedule: self.view(op, row).await,
            task: detail,
        })
    }
}
