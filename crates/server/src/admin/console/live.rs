//! Live updates: the change feed as server-sent events (`/console/events`), and the small
//! script that fetches a page's fragment again on each change.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::response::sse::{KeepAlive, Sse};
use maud::{Markup, PreEscaped, html};
use snodo_core::store::TaskFilter;

use super::{ConsoleState, Session};
use crate::admin::AdminError;
use crate::admin::query::filter_of;

/// The live updates: on each change the feed reports, and each time the stream opens,
/// fetch the fragment again and swap it in (at most one fetch in flight, one more queued).
pub(super) fn live_script(events: &str) -> Markup {
    let events = serde_json::to_string(events).unwrap_or_else(|_| "\"\"".into());
    html! {
        script {
            (PreEscaped(format!(r#"
(function() {{
  var box = document.getElementById('live');
  if (!box || !window.EventSource) return;
  var busy = false, again = false;
  function refresh() {{
    if (busy) {{ again = true; return; }}
    busy = true;
    fetch(box.getAttribute('data-src'), {{credentials: 'same-origin'}})
      .then(function(r) {{ return r.ok ? r.text() : null; }})
      .then(function(t) {{ if (t !== null) box.innerHTML = t; }})
      .finally(function() {{ busy = false; if (again) {{ again = false; refresh(); }} }});
  }}
  var es = new EventSource({events});
  // Once subscribed (and after every reconnect): what changed since the page was
  // rendered, or while the stream was down, is not on the stream.
  es.addEventListener('open', refresh);
  es.addEventListener('task', refresh);
  es.addEventListener('lagged', refresh);
  document.documentElement.setAttribute('data-live', 'on');
}})();
"#)))
        }
    }
}

pub(super) async fn events(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    let run = || -> Result<Response, AdminError> {
        // A task page listens to its own task only.
        let only = match params.get("task") {
            Some(id) => Some(snodo_core::model::TaskId::parse(id).ok_or(AdminError::NotFound)?),
            None => None,
        };
        let filter = if only.is_some() {
            TaskFilter::default()
        } else {
            filter_of(&params)?
        };
        let tenant = session.op.tenant(filter.tenant.clone())?;
        let filter = TaskFilter { tenant, ..filter };
        let tasks = s.admin.operators.tasks().clone();
        let stream = crate::admin::api::changes(tasks, session.op.clone(), filter, only)?;
        Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response())
    };
    run().unwrap_or_else(|e| {
        (
            StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST),
            e.to_string(),
        )
            .into_response()
    })
}
