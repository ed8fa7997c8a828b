//! The schedules page: every schedule within reach with its cadence, next firings and last
//! firing's task, and pause, resume and run-now forms.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::render::{encode, error_page, page, status_badge, time};
use super::requests::Posted;
use super::{ConsoleState, Session};
use crate::admin::ScheduleView;

pub(super) async fn schedules_page(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    match s.admin.operators.schedules(&session.op).await {
        Ok(views) => page(
            "Schedules",
            Some(&session),
            schedules_markup(&session, &views),
        )
        .into_response(),
        Err(e) => error_page(&e),
    }
}

fn schedules_markup(session: &Session, views: &[ScheduleView]) -> Markup {
    html! {
        @if views.is_empty() {
            p { "No schedules. Declare one in the configuration's " code { "[[schedules]]" } " or with " code { "POST /admin/v1/schedules" } "." }
        } @else {
            table aria-label="Schedules" {
                thead { tr {
                    th scope="col" { "Schedule" } th scope="col" { "Tool" } th scope="col" { "Tenant" }
                    th scope="col" { "When" } th scope="col" { "Next firings" } th scope="col" { "Last firing" }
                    th scope="col" { "Fired / skipped" } th scope="col" { "Act" }
                } }
                tbody { @for v in views { (row(session, v)) } }
            }
        }
    }
}

fn row(session: &Session, v: &ScheduleView) -> Markup {
    let s = &v.schedule;
    let name = &s.spec.name;
    html! {
        tr data-schedule=(name) {
            td { strong { (name) } br; span.note { @if s.origin == snodo_core::model::ScheduleOrigin::Config { "configured" } @else { "admin API" } } }
            td { (s.spec.tool) }
            td { (s.spec.tenant) " / " (s.spec.subject) }
            td { (v.cadence_text) br; span.note { "missed: " (format!("{:?}", s.spec.missed).to_lowercase()) } }
            td {
                @if s.paused { span.status { "paused" } }
                @else {
                    ol { @for at in &v.upcoming { li { (at) } } }
                }
            }
            td {
                @if let Some(last) = &s.last {
                    (time(last.at)) @if last.manual { " (run now)" } br;
                    a href={ "/console/tasks/" (last.task_id.to_string()) } { code { (last.task_id.to_string()) } }
                    @if let Some(t) = &v.last_task { " " (status_badge(t.status)) } @else { span.note { " (no longer stored)" } }
                } @else { span.note { "not yet" } }
                @if let Some(e) = &s.last_error { br; span.error { (e) } }
            }
            td { (s.fired) " / " (s.skipped) }
            td {
                (act(session, name, if s.paused { "resume" } else { "pause" }, if s.paused { "Resume" } else { "Pause" }))
                (act(session, name, "run", "Run now"))
            }
        }
    }
}

fn act(session: &Session, name: &str, action: &str, label: &str) -> Markup {
    html! {
        form method="post" action={ "/console/schedules/" (encode(name)) "/" (action) } {
            input type="hidden" name="csrf" value=(session.csrf);
            button type="submit" aria-label={ (label) " " (name) } { (label) }
        }
    }
}

/// An action on a schedule's row: pause, resume, or run now (which shows the task it made).
pub(super) async fn act_on(
    State(s): State<ConsoleState>,
    Path((name, action)): Path<(String, String)>,
    p: Posted,
) -> Response {
    let operators = &s.admin.operators;
    let op = &p.session.op;
    match action.as_str() {
        "pause" | "resume" => done(
            operators
                .pause_schedule(op, &name, action == "pause")
                .await
                .map(|_| ()),
        ),
        "run" => match operators.run_schedule(op, &name).await {
            Ok(run) => {
                Redirect::to(&format!("/console/tasks/{}", run.task.summary.id)).into_response()
            }
            Err(e) => error_page(&e),
        },
        _ => error_page(&crate::admin::AdminError::Invalid(format!(
            "no schedule action {action:?}"
        ))),
    }
}

fn done(outcome: Result<(), crate::admin::AdminError>) -> Response {
    match outcome {
        Ok(()) => Redirect::to("/console/schedules").into_response(),
        Err(e) => error_page(&e),
    }
}
