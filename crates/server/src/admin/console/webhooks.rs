//! The webhooks page: every subscription within reach with where its deliveries stand (the
//! cursor, retries waiting and their next tries, dead letters with their last error), and
//! pause, resume and redeliver forms (one dead letter, or every one).

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::render::{encode, error_page, page, time};
use super::requests::Posted;
use super::{ConsoleState, Session};
use crate::admin::WebhookView;

pub(super) async fn webhooks_page(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
) -> Response {
    match s.admin.operators.webhooks(&session.op).await {
        Ok(views) => page("Webhooks", Some(&session), markup(&session, &views)).into_response(),
        Err(e) => error_page(&e),
    }
}

fn markup(session: &Session, views: &[WebhookView]) -> Markup {
    html! {
        @if views.is_empty() {
            p { "No webhook subscriptions. Declare one in the configuration's " code { "[[webhooks.subscriptions]]" } " or with " code { "POST /admin/v1/webhooks" } "." }
        } @else {
            table aria-label="Webhooks" {
                thead { tr {
                    th scope="col" { "Subscription" } th scope="col" { "Tenant" } th scope="col" { "Endpoint" }
                    th scope="col" { "Hears" } th scope="col" { "Delivered / failed tries" }
                    th scope="col" { "Retrying" } th scope="col" { "Dead letters" } th scope="col" { "Act" }
                } }
                tbody { @for v in views { (row(session, v)) } }
            }
        }
    }
}

fn row(session: &Session, v: &WebhookView) -> Markup {
    let w = &v.webhook;
    let name = &w.spec.name;
    let events: Vec<&str> = w.spec.events.iter().map(|e| e.as_str()).collect();
    html! {
        tr data-webhook=(name) {
            td { strong { (name) } br; span.note { @if w.origin == snodo_core::model::ScheduleOrigin::Config { "configured" } @else { "admin API" } } }
            td { (w.spec.tenant) }
            td { code { (w.spec.url) } @if w.paused { br; span.status { "paused" } } }
            td {
                @if events.is_empty() { "every event" } @else { (events.join(", ")) }
                @if !w.spec.tools.is_empty() { br; span.note { "of " (w.spec.tools.join(", ")) } }
                @if w.spec.on_request { br; span.note { "for calls that ask" } }
            }
            td {
                (w.delivered) " / " (w.failures)
                @if let Some(at) = w.last_delivered_at { br; span.note { "last " (time(at)) } }
                @if let Some(e) = &w.last_error { div.error { (e) } }
            }
            td {
                @if w.retrying.is_empty() { span.note { "none" } }
                @else { ol { @for r in &w.retrying { li { "event " (r.seq) ", try " (r.attempts + 1) " at " (time(r.next_at)) } } } }
            }
            td {
                @if w.dead.is_empty() { span.note { "none" } }
                @else {
                    ol { @for d in &w.dead { li data-dead=(d.event.id) {
                        (d.event.event.wire_type()) " of "
                        a href={ "/console/tasks/" (d.event.task_id) } { code { (d.event.task_id) } }
                        div.error { (d.attempts) " tries; " (d.error) }
                        (act(session, name, &format!("redeliver?event={}", encode(&d.event.id)), "Redeliver", &d.event.id))
                    } } }
                }
            }
            td {
                (act(session, name, if w.paused { "resume" } else { "pause" }, if w.paused { "Resume" } else { "Pause" }, name))
                @if w.dead.len() > 1 { (act(session, name, "redeliver", "Redeliver all", name)) }
            }
        }
    }
}

fn act(session: &Session, name: &str, action: &str, label: &str, what: &str) -> Markup {
    html! {
        form method="post" action={ "/console/webhooks/" (encode(name)) "/" (action) } {
            input type="hidden" name="csrf" value=(session.csrf);
            button type="submit" aria-label={ (label) " " (what) } { (label) }
        }
    }
}

/// The query of a redeliver form: the one dead letter, when it names one.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Which {
    event: Option<String>,
}

/// An action on a subscription: pause, resume, or redeliver dead letters.
pub(super) async fn act_on(
    State(s): State<ConsoleState>,
    Path((name, action)): Path<(String, String)>,
    axum::extract::Query(which): axum::extract::Query<Which>,
    p: Posted,
) -> Response {
    let operators = &s.admin.operators;
    let op = &p.session.op;
    let outcome = match action.as_str() {
        "pause" | "resume" => operators
            .pause_webhook(op, &name, action == "pause")
            .await
            .map(|_| ()),
        "redeliver" => operators
            .redeliver_webhook(op, &name, which.event.as_deref())
            .await
            .map(|_| ()),
        _ => Err(crate::admin::AdminError::Invalid(format!(
            "no webhook action {action:?}"
        ))),
    };
    match outcome {
        Ok(()) => Redirect::to("/console/webhooks").into_response(),
        Err(e) => error_page(&e),
    }
}
