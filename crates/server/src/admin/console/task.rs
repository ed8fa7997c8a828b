//! One task's page (summary, what it waits on with an answer form built from the question's
//! schema, its history as a timeline) and the actions on it: cancel, retry now, answer.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::{Html, Redirect, Response};
use maud::{Markup, html};
use serde_json::{Map, Value, json};
use snodo_core::model::{HistoryEntry, HistoryKind};

use super::live::live_script;
use super::render::{encode, error_page, page, status_badge, time};
use super::requests::{Posted, field};
use super::{ConsoleState, Session};
use crate::admin::answer::{Field, Kind};
use crate::admin::{AdminError, TaskDetail, answer};

/// What the task page says after an action: chosen by a code in its query, so a link
/// cannot make the console show words of its author's choosing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notice {
    Cancelled,
    Retried,
    Answered,
}

impl Notice {
    const ALL: [Notice; 3] = [Notice::Cancelled, Notice::Retried, Notice::Answered];

    fn code(self) -> &'static str {
        match self {
            Notice::Cancelled => "cancelled",
            Notice::Retried => "retried",
            Notice::Answered => "answered",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Notice::Cancelled => "Cancelled.",
            Notice::Retried => "Due now: a runner takes it next.",
            Notice::Answered => "Answer accepted.",
        }
    }

    fn of_code(code: &str) -> Option<Notice> {
        Notice::ALL.into_iter().find(|n| n.code() == code)
    }
}

/// Where an action on task `id` leads: back to its page with the notice, or an error page
/// saying what went wrong (from the server, never from the query).
fn acted<T>(id: &str, done: Notice, outcome: Result<T, AdminError>) -> Response {
    match outcome {
        Ok(_) => Redirect::to(&format!(
            "/console/tasks/{}?done={}",
            encode(id),
            done.code()
        ))
        .into_response(),
        Err(e) => error_page(&e),
    }
}

pub(super) async fn task_page(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    match s.admin.operators.task(&session.op, &id).await {
        Ok(detail) => {
            let live = format!("/console/tasks/{id}/live");
            let events = format!("/console/events?task={id}");
            page(
                &format!("Task {id}"),
                Some(&session),
                html! {
                    @if let Some(n) = q.get("done").and_then(|c| Notice::of_code(c)) {
                        p role="status" { (n.text()) }
                    }
                    div id="live" data-src=(live) { (task_markup(&session, &detail)) }
                    p { a href="/console/tasks" { "All tasks" } }
                    (live_script(&events))
                },
            )
            .into_response()
        }
        Err(e) => error_page(&e),
    }
}

pub(super) async fn task_fragment(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    match s.admin.operators.task(&session.op, &id).await {
        Ok(detail) => Html(task_markup(&session, &detail).into_string()).into_response(),
        Err(e) => (
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST),
            e.to_string(),
        )
            .into_response(),
    }
}

fn task_markup(session: &Session, d: &TaskDetail) -> Markup {
    let t = &d.summary;
    let id = t.id.to_string();
    let open: Vec<_> = d.questions.iter().filter(|q| !q.answered).collect();
    html! {
        dl {
            dt { "Status" } dd data-status=(t.status.as_str()) { (status_badge(t.status)) }
            @if let Some(m) = &t.status_message { dt { "Message" } dd { (m) } }
            dt { "Tool" } dd { (t.tool) }
            dt { "Tenant" } dd { (t.tenant) @if let Some(s) = &t.subject { " / " (s) } }
            dt { "Attempts" } dd {
                (t.attempt)
                @if d.retry_delays_ms.is_empty() { " (no retries configured)" }
                @else { " (retries used: " (t.retry_count) " of " (d.retry_delays_ms.len()) ")" }
            }
            @if let Some(at) = t.retry_at { dt { "Retry due" } dd { (time(at)) } }
            @if let Some(at) = t.wake_at { dt { "Wakes" } dd { (time(at)) } }
            @if let Some(owner) = &t.claimed_by { dt { "Running on" } dd { (owner) } }
            dt { "Created" } dd { (time(t.created_at)) }
            dt { "Updated" } dd { (time(t.last_updated_at)) }
            @if let Some(at) = t.expires_at { dt { "Expires" } dd { (time(at)) } }
        }
        @if !t.status.is_terminal() {
            section aria-labelledby="waiting" {
                h2 id="waiting" { "Waiting on" }
                @if open.is_empty() {
                    p { @if t.retry_at.is_some() && t.claimed_by.is_none() { "Its retry delay." } @else if let Some(at) = t.wake_at.filter(|_| t.claimed_by.is_none()) { "Its sleep, until " (time(at)) "." } @else if t.claimed_by.is_some() { "Its running attempt." } @else { "A runner to claim it." } }
                }
                @for q in &open { (question_form(session, &id, &q.key, &q.request)) }
            }
            section aria-labelledby="actions" {
                h2 id="actions" { "Actions" }
                @if t.retry_at.is_some() && t.claimed_by.is_none() {
                    form method="post" action={ "/console/tasks/" (id) "/retry" } {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button type="submit" { "Retry now" }
                    }
                }
                form method="post" action={ "/console/tasks/" (id) "/cancel" } {
                    input type="hidden" name="csrf" value=(session.csrf);
                    label for="cancel-message" { "Reason " }
                    input id="cancel-message" name="message" size="40";
                    " " button type="submit" { "Cancel this task" }
                }
            }
        }
        @if let Some(o) = &d.outcome {
            section aria-labelledby="outcome" { h2 id="outcome" { "Outcome" } pre { (serde_json::to_string_pretty(o).unwrap_or_default()) } }
        }
        section aria-labelledby="history" {
            h2 id="history" { "History" }
            ol.timeline {
                @for (i, e) in d.history.entries.iter().enumerate() {
                    @if i == snodo_core::model::HISTORY_HEAD && d.history.dropped > 0 {
                        li.note { (d.history.dropped) " earlier entries not kept" }
                    }
                    li { (history_line(e)) }
                }
            }
        }
        details { summary { "Arguments" } pre { (serde_json::to_string_pretty(&d.arguments).unwrap_or_default()) } }
    }
}

fn history_line(e: &HistoryEntry) -> Markup {
    let what = match &e.kind {
        HistoryKind::Created => "created".to_owned(),
        HistoryKind::Claimed {
            generation,
            owner,
            waited_ms,
            recovered,
        } => format!(
            "claimed by {owner} (claim {generation}) after {waited_ms} ms in the queue{}",
            if *recovered {
                ", recovering an expired lease"
            } else {
                ""
            }
        ),
        HistoryKind::Started { attempt } => format!("attempt {attempt} started"),
        HistoryKind::Status { message } => format!("status: {message}"),
        HistoryKind::InputRequested { key } => format!("asked {key:?}"),
        HistoryKind::InputAnswered { keys, resumed } => format!(
            "answered {}{}",
            keys.join(", "),
            if *resumed { "; due again" } else { "" }
        ),
        HistoryKind::RetryScheduled {
            due_at,
            retry,
            code,
            message,
        } => format!(
            "retry {retry} scheduled for {} after error {code}: {message}",
            time(*due_at)
        ),
        HistoryKind::Sleeping { until } => format!("sleeping until {}", time(*until)),
        HistoryKind::RetryNow { was_due_at } => {
            format!("retried now (was due {})", time(*was_due_at))
        }
        HistoryKind::Parked => "parked, waiting for an answer".to_owned(),
        HistoryKind::Released => "released without an outcome".to_owned(),
        HistoryKind::Fenced { generation } => format!("claim {generation} fenced at a restart"),
        HistoryKind::Completed => "completed".to_owned(),
        HistoryKind::Failed { code, message } => format!("failed with {code}: {message}"),
        HistoryKind::Cancelled { message } => match message {
            Some(m) => format!("cancelled: {m}"),
            None => "cancelled".to_owned(),
        },
    };
    html! { time datetime=(time(e.at)) { (time(e.at)) } " — " span data-event=(e.kind.name()) { (what) } }
}

/// The answer form of one open question, generated from its schema.
fn question_form(session: &Session, id: &str, key: &str, request: &Value) -> Markup {
    let form = answer::form_of(request);
    html! {
        form method="post" action={ "/console/tasks/" (id) "/answer" } aria-label={ "Answer " (key) } {
            input type="hidden" name="csrf" value=(session.csrf);
            input type="hidden" name="key" value=(key);
            fieldset {
                @match &form {
                    Ok(f) => {
                        legend { (f.message) }
                        @for fld in &f.fields { (field_markup(key, fld)) }
                        button type="submit" name="action" value="accept" { "Submit" }
                        " " button type="submit" name="action" value="decline" formnovalidate { "Decline" }
                    }
                    Err(why) => {
                        legend { "Question " (key) }
                        p.note { (why) ". Answer with its JSON response:" }
                        label for={ "raw-" (key) } { "Response (JSON)" }
                        textarea id={ "raw-" (key) } name="raw" rows="4" cols="60" required {}
                        button type="submit" name="action" value="raw" { "Submit" }
                    }
                }
            }
        }
    }
}

fn field_markup(key: &str, f: &Field) -> Markup {
    let id = format!("q-{key}-{}", f.name);
    let name = format!("field.{}", f.name);
    let default = f.default.clone();
    let text_default = default.as_ref().and_then(|d| match d {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    html! {
        div.field {
            @match &f.kind {
                Kind::Boolean => {
                    label for=(id) {
                        input id=(id) type="checkbox" name=(name) value="true" checked[default == Some(Value::Bool(true))];
                        " " (f.title) @if f.required { " (required)" }
                    }
                }
                Kind::Choice(options) => {
                    label for=(id) { (f.title) @if f.required { " (required)" } }
                    select id=(id) name=(name) required[f.required] {
                        @if !f.required { option value="" { "—" } }
                        @for (v, l) in options { option value=(v) selected[text_default.as_deref() == Some(v.as_str())] { (l) } }
                    }
                }
                Kind::Multi { options, .. } => {
                    fieldset {
                        legend { (f.title) }
                        @for (i, (v, l)) in options.iter().enumerate() {
                            label for={ (id) "-" (i) } { input id={ (id) "-" (i) } type="checkbox" name=(name) value=(v); " " (l) }
                        }
                    }
                }
                Kind::Number { integer, min, max } => {
                    label for=(id) { (f.title) @if f.required { " (required)" } }
                    input id=(id) name=(name) type="number" step=(if *integer { "1" } else { "any" })
                        min=[min.map(|m| m.to_string())] max=[max.map(|m| m.to_string())]
                        value=[text_default.clone()] required[f.required];
                }
                Kind::Text { min_len, max_len, format } => {
                    label for=(id) { (f.title) @if f.required { " (required)" } }
                    input id=(id) name=(name)
                        type=(match format.as_deref() { Some("email") => "email", Some("uri") => "url", Some("date") => "date", Some("date-time") => "datetime-local", _ => "text" })
                        minlength=[min_len.map(|m| m.to_string())] maxlength=[max_len.map(|m| m.to_string())]
                        value=[text_default.clone()] required[f.required];
                }
            }
            @if let Some(d) = &f.description { span.note { (d) } }
        }
    }
}

pub(super) async fn cancel(
    State(s): State<ConsoleState>,
    Path(id): Path<String>,
    p: Posted,
) -> Response {
    let message = field(&p.form, "message").map(str::to_owned);
    let outcome = s.admin.operators.cancel(&p.session.op, &id, message).await;
    acted(&id, Notice::Cancelled, outcome)
}

pub(super) async fn retry(
    State(s): State<ConsoleState>,
    Path(id): Path<String>,
    p: Posted,
) -> Response {
    let outcome = s.admin.operators.retry(&p.session.op, &id).await;
    acted(&id, Notice::Retried, outcome)
}

pub(super) async fn answer_form(
    State(s): State<ConsoleState>,
    Path(id): Path<String>,
    Posted { session, form }: Posted,
) -> Response {
    let operators = &s.admin.operators;
    let response = async {
        let key =
            field(&form, "key").ok_or_else(|| AdminError::Invalid("which question?".into()))?;
        let detail = operators.task(&session.op, &id).await?;
        let question = detail
            .questions
            .iter()
            .find(|q| q.key == key)
            .ok_or_else(|| AdminError::Invalid(format!("the task asked no question {key:?}")))?;
        let response = match field(&form, "action") {
            Some("raw") => {
                serde_json::from_str::<Value>(field(&form, "raw").unwrap_or_default())
                    .map_err(|e| AdminError::Invalid(format!("the response is not JSON: {e}")))?
            }
            Some("decline") => json!({"action": "decline"}),
            _ => {
                let f = answer::form_of(&question.request).map_err(AdminError::Invalid)?;
                let content =
                    answer::content_of_form(&f.fields, &form).map_err(AdminError::Invalid)?;
                json!({"action": "accept", "content": content})
            }
        };
        let mut responses = Map::new();
        responses.insert(key.to_owned(), response);
        operators.answer(&session.op, &id, responses).await
    }
    .await;
    acted(&id, Notice::Answered, response)
}
