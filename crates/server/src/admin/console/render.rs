//! What every console page is drawn with: the frame and its style, the error page, times,
//! status badges and query encoding.

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::{Html, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use snodo_core::model::{TaskStatus, Timestamp};

use super::Session;
use crate::admin::AdminError;

/// Percent-encodes a query value.
pub(super) fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1d21;background:#f7f7f8}
header{background:#20232a;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center}
header a{color:#fff} header form{margin-left:auto}
main{padding:1em 1.2em;max-width:1200px}
a{color:#0b57d0} a:focus,button:focus,input:focus,select:focus{outline:3px solid #f4b400;outline-offset:1px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{text-align:left;padding:.35em .6em;border-bottom:1px solid #ddd;vertical-align:top}
fieldset{border:1px solid #ccc;background:#fff;margin:0 0 1em;padding:.6em 1em}
label{display:inline-block;margin:.2em .8em .2em 0} .field{margin:.5em 0} .field label{display:block;font-weight:600}
.counts span{display:inline-block;margin-right:1em}
.status{font-weight:600} .status-input_required{color:#b06000} .status-failed{color:#b3261e}
.status-completed{color:#146c2e} .status-cancelled{color:#5f6368}
ol.timeline{list-style:none;padding:0} ol.timeline li{border-left:3px solid #0b57d0;padding:.2em .8em;margin:.2em 0;background:#fff}
.note{color:#5f6368} .error{background:#fce8e6;border:1px solid #b3261e;padding:.6em;margin-bottom:1em}
.skip{position:absolute;left:-999px} .skip:focus{left:1em;top:1em;background:#fff;padding:.4em}
button{padding:.3em .9em}
";

/// A whole page: the header (with sign-out when signed in) and `body`.
pub(super) fn page(title: &str, session: Option<&Session>, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · Snodo console" }
                    style { (PreEscaped(STYLE)) }
                }
                body {
                    a.skip href="#main" { "Skip to content" }
                    header {
                        strong { "Snodo" }
                        @if let Some(s) = session {
                            nav aria-label="Console" { a href="/console/tasks" { "Tasks" } " " a href="/console/schedules" { "Schedules" } " " a href="/console/webhooks" { "Webhooks" } " " a href="/console/audit" { "Audit" } }
                            span.note {
                                (s.op.principal.subject) " · "
                                @if s.op.cross_tenant { "every tenant" } @else { "tenant " (s.op.principal.tenant) }
                            }
                            form method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                    main id="main" tabindex="-1" { h1 { (title) } (body) }
                }
            }
        }
        .into_string(),
    )
}

pub(super) fn error_page(e: &AdminError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        page("Something went wrong", None, html! { p.error role="alert" { (e.to_string()) } p { a href="/console/tasks" { "Back to the tasks" } } }),
    )
        .into_response()
}

pub(super) fn time(t: Timestamp) -> String {
    crate::rfc3339(t)
}

pub(super) fn label_of(s: TaskStatus) -> &'static str {
    match s {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "waiting for input",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
    }
}

pub(super) fn status_badge(s: TaskStatus) -> Markup {
    html! { span class={ "status status-" (s.as_str()) } { (label_of(s)) } }
}
