//! The audit page: the newest operators' actions within reach (who, what, to what, when,
//! through which door, how it ended), and a link to the older ones.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::html;

use super::render::{encode, error_page, page, time};
use super::{ConsoleState, Session};

/// How many records the page shows at once.
const PAGE: usize = 100;

pub(super) async fn audit_page(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let from = q.get("from").map(String::as_str);
    let page_of = match s.admin.operators.audit(&session.op, from, PAGE).await {
        Ok(p) => p,
        Err(e) => return error_page(&e),
    };
    let body = html! {
        @if page_of.records.is_empty() {
            p { "No operator action is recorded yet." }
        } @else {
            table aria-label="Audit" {
                thead { tr {
                    th scope="col" { "When" } th scope="col" { "Operator" } th scope="col" { "Through" }
                    th scope="col" { "Action" } th scope="col" { "On" } th scope="col" { "Outcome" }
                } }
                tbody { @for r in &page_of.records {
                    tr data-audit=(r.id) {
                        td { (time(r.at)) }
                        td { (r.subject) " (" (r.tenant) @if r.cross_tenant { ", every tenant" } ")" }
                        td { (r.via) }
                        td { code { (r.action) } }
                        td {
                            @match (&r.target, r.action.starts_with("task.")) {
                                (Some(t), true) => a href={ "/console/tasks/" (encode(t)) } { code { (t) } },
                                (Some(t), false) => code { (t) },
                                (None, _) => span.note { "-" },
                            }
                        }
                        td { @if r.outcome == "ok" { "ok" } @else { span.error { (r.outcome) } } }
                    }
                } }
            }
            @if let Some(next) = &page_of.next {
                p { a href={ "/console/audit?from=" (encode(next)) } { "Older" } }
            }
        }
    };
    page("Audit", Some(&session), body).into_response()
}
