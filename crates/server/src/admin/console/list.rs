//! The task list: filters, counts by status, rows and paging, and the fragment the live
//! script swaps in.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::{Html, Response};
use maud::{Markup, html};
use snodo_core::store::{ALL_STATUSES, TaskCounts, TaskFilter, TaskPage, TaskSummary};

use super::live::live_script;
use super::render::{encode, error_page, label_of, page, status_badge, time};
use super::{ConsoleState, Session};
use crate::admin::AdminError;
use crate::admin::query::{query_of, time_bounds};

/// The query string of a filter (and a cursor), for links and the live fragment: what
/// [`query_of`] reads back.
pub(super) fn query_string(filter: &TaskFilter, cursor: Option<&str>) -> String {
    let mut parts = Vec::new();
    let mut push = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            parts.push(format!("{k}={}", encode(&v)));
        }
    };
    push("tenant", filter.tenant.clone());
    push("status", filter.status.map(|s| s.as_str().to_owned()));
    push("tool", filter.tool.clone());
    let mut bounds = filter.clone();
    for (key, bound) in time_bounds(&mut bounds) {
        push(key, bound.map(|t| t.as_millis().to_string()));
    }
    push("cursor", cursor.map(str::to_owned));
    parts.join("&")
}

pub(super) async fn list_page(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    match list_parts(&s, &session, &params).await {
        Ok((filter, page_, counts)) => {
            let live = format!(
                "/console/tasks/live?{}",
                query_string(&filter, params.get("cursor").map(String::as_str))
            );
            let events = format!("/console/events?{}", query_string(&filter, None));
            page(
                "Tasks",
                Some(&session),
                html! {
                    (filter_form(&session, &filter))
                    div id="live" data-src=(live) { (list_markup(&filter, &page_, &counts)) }
                    p { a href={ "/console/cancel?" (query_string(&filter, None)) } { "Cancel every live task this filter selects…" } }
                    (live_script(&events))
                },
            )
            .into_response()
        }
        Err(e) => error_page(&e),
    }
}

pub(super) async fn list_fragment(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    match list_parts(&s, &session, &params).await {
        Ok((filter, page_, counts)) => {
            Html(list_markup(&filter, &page_, &counts).into_string()).into_response()
        }
        Err(e) => (
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST),
            e.to_string(),
        )
            .into_response(),
    }
}

async fn list_parts(
    s: &ConsoleState,
    session: &Session,
    params: &BTreeMap<String, String>,
) -> Result<(TaskFilter, TaskPage, TaskCounts), AdminError> {
    let mut params = params.clone();
    params.entry("limit".into()).or_insert_with(|| "50".into());
    let query = query_of(&params)?;
    let filter = query.filter.clone();
    let operators = &s.admin.operators;
    let page_ = operators.list(&session.op, query).await?;
    let counts = operators.counts(&session.op, filter.tenant.clone()).await?;
    Ok((filter, page_, counts))
}

fn filter_form(session: &Session, f: &TaskFilter) -> Markup {
    html! {
        form method="get" action="/console/tasks" role="search" aria-label="Filter tasks" {
            fieldset {
                legend { "Filter" }
                @if session.op.cross_tenant {
                    label for="f-tenant" { "Tenant " }
                    input id="f-tenant" name="tenant" value=(f.tenant.clone().unwrap_or_default()) placeholder="every tenant";
                }
                label for="f-status" { "Status " }
                select id="f-status" name="status" {
                    option value="" selected[f.status.is_none()] { "any" }
                    @for st in ALL_STATUSES {
                        option value=(st.as_str()) selected[f.status == Some(st)] { (label_of(st)) }
                    }
                }
                label for="f-tool" { "Tool " }
                input id="f-tool" name="tool" value=(f.tool.clone().unwrap_or_default());
                label for="f-after" { "Created after (ms) " }
                input id="f-after" name="created_after" inputmode="numeric" size="14" value=(f.created_after.map(|t| t.as_millis().to_string()).unwrap_or_default());
                label for="f-before" { "Created before (ms) " }
                input id="f-before" name="created_before" inputmode="numeric" size="14" value=(f.created_before.map(|t| t.as_millis().to_string()).unwrap_or_default());
                button type="submit" { "Apply" }
                " " a href="/console/tasks" { "Clear" }
            }
        }
    }
}

fn list_markup(filter: &TaskFilter, p: &TaskPage, counts: &TaskCounts) -> Markup {
    html! {
        section.counts aria-label="Counts" {
            @for st in ALL_STATUSES {
                span data-count=(st.as_str()) { (label_of(st)) ": " strong { (counts.by_status.get(&st).copied().unwrap_or(0)) } }
            }
            @if !counts.by_tool.is_empty() {
                details {
                    summary { "By tool" }
                    table {
                        thead { tr { th scope="col" { "Tool" } @for st in ALL_STATUSES { th scope="col" { (label_of(st)) } } } }
                        tbody {
                            @for (tool, by) in &counts.by_tool {
                                tr { th scope="row" { (tool) } @for st in ALL_STATUSES { td { (by.get(&st).copied().unwrap_or(0)) } } }
                            }
                        }
                    }
                }
            }
        }
        table aria-label="Tasks" {
            thead { tr {
                th scope="col" { "Task" } th scope="col" { "Tool" } th scope="col" { "Tenant" }
                th scope="col" { "Status" } th scope="col" { "Message" } th scope="col" { "Attempt" }
                th scope="col" { "Created" } th scope="col" { "Updated" }
            } }
            tbody {
                @if p.tasks.is_empty() { tr { td colspan="8" { "No tasks match." } } }
                @for t in &p.tasks { (row(t)) }
            }
        }
        @if let Some(next) = &p.next {
            p { a rel="next" href={ "/console/tasks?" (query_string(filter, Some(&next.encode()))) } { "Next page" } }
        }
    }
}

fn row(t: &TaskSummary) -> Markup {
    html! {
        tr data-task=(t.id.to_string()) {
            td { a href={ "/console/tasks/" (t.id.to_string()) } { code { (t.id.to_string()) } } }
            td { (t.tool) }
            td { (t.tenant) @if let Some(s) = &t.subject { " / " (s) } }
            td { (status_badge(t.status)) @if !t.waiting_on.is_empty() { br; span.note { "on " (t.waiting_on.join(", ")) } } }
            td { (t.status_message.clone().unwrap_or_default()) }
            td { (t.attempt) @if let Some(at) = t.retry_at { br; span.note { "retry " (time(at)) } } }
            td { (time(t.created_at)) }
            td { (time(t.last_updated_at)) }
        }
    }
}
