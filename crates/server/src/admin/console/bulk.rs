//! Bulk cancel: a preview of what a filter matches, then the cancellation once confirmed.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::IntoResponse;
use axum::response::Response;
use maud::{Markup, html};
use snodo_core::store::TaskFilter;

use super::list::query_string;
use super::render::{error_page, label_of, page};
use super::requests::{Posted, field};
use super::{ConsoleState, Session};
use crate::admin::query::filter_of;
use crate::admin::{AdminError, BulkOutcome};

pub(super) async fn bulk_preview(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    let run = async {
        let filter = filter_of(&params)?;
        let preview = s
            .admin
            .operators
            .bulk_cancel(&session.op, filter.clone(), None, true, None)
            .await?;
        Ok::<_, AdminError>((filter, preview))
    };
    match run.await {
        Ok((filter, preview)) => page(
            "Cancel tasks",
            Some(&session),
            html! {
                p role="status" {
                    "This filter selects " strong data-matched=(preview.matched) { (preview.matched) } " live task(s)"
                    @if preview.capped { " (at least: the cap of " (preview.cap) " was reached; run again for the rest)" }
                    @if preview.incomplete { " (at least: the filter matches too little of the store to count it all at once)" }
                    "."
                }
                (filter_summary(&filter))
                @if preview.matched > 0 {
                    form method="post" action="/console/cancel" {
                        input type="hidden" name="csrf" value=(session.csrf);
                        @for (k, v) in params.iter().filter(|(k, _)| k.as_str() != "cursor") { input type="hidden" name=(k) value=(v); }
                        div.field { label for="bulk-message" { "Reason" } input id="bulk-message" name="message" size="40"; }
                        div.field { label for="bulk-confirm" { input id="bulk-confirm" type="checkbox" name="confirm" value="yes" required; " I want to cancel these " (preview.matched) " task(s)" } }
                        button type="submit" { "Cancel them" }
                    }
                }
                p { a href={ "/console/tasks?" (query_string(&filter, None)) } { "Back to the list" } }
            },
        )
        .into_response(),
        Err(e) => error_page(&e),
    }
}

fn filter_summary(f: &TaskFilter) -> Markup {
    html! {
        ul aria-label="Filter" {
            li { "Tenant: " (f.tenant.clone().unwrap_or_else(|| "every tenant in reach".into())) }
            li { "Status: " (f.status.map_or("working or waiting for input", label_of)) }
            li { "Tool: " (f.tool.clone().unwrap_or_else(|| "any".into())) }
        }
    }
}

pub(super) async fn bulk_run(
    State(s): State<ConsoleState>,
    Posted { session, form }: Posted,
) -> Response {
    if field(&form, "confirm") != Some("yes") {
        return error_page(&AdminError::Invalid(
            "confirm the cancellation first".into(),
        ));
    }
    let params: BTreeMap<String, String> = form.iter().cloned().collect();
    let run = async {
        let filter = filter_of(&params)?;
        let message = field(&form, "message").map(str::to_owned);
        s.admin
            .operators
            .bulk_cancel(&session.op, filter.clone(), None, false, message)
            .await
            .map(|o| (filter, o))
    };
    match run.await {
        Ok((filter, o)) => {
            page("Cancelled", Some(&session), bulk_summary(&filter, &o)).into_response()
        }
        Err(e) => error_page(&e),
    }
}

fn bulk_summary(filter: &TaskFilter, o: &BulkOutcome) -> Markup {
    html! {
        p role="status" data-cancelled=(o.cancelled) {
            "Cancelled " strong { (o.cancelled) } " of " (o.matched) " task(s); "
            (o.already_finished) " had already finished; " (o.failed.len()) " could not be cancelled."
            @if o.capped { " More tasks matched than the cap of " (o.cap) ": run it again for the rest." }
            @if o.incomplete { " More may match further on: run it again." }
        }
        @if !o.failed.is_empty() {
            ul { @for f in &o.failed { li { code { (f.id) } ": " (f.error) } } }
        }
        p { a href={ "/console/tasks?" (query_string(filter, None)) } { "Back to the list" } }
    }
}
