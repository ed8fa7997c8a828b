//! The console at `/console`: server-rendered HTML (maud) with plain forms, for operators in
//! a browser. No JavaScript build: one small inline script listens to the change feed over
//! SSE (`/console/events`) and swaps in the fragment the server renders again.
//!
//! Sign-in is an admin token, or an access token holding the admin scopes, posted once to
//! `/console/login`; the console then keeps a sealed session cookie (`session`). Every form
//! carries the session's CSRF token and every POST must come from this origin. Pages:
//! the task list (filters, counts, live rows, paging), a task's page (summary, what it
//! waits on with an answer form built from the question's schema, its history as a
//! timeline, cancel and retry-now), bulk cancel with a preview and a confirmation, and the
//! schedules (next and last firings, pause, resume, run now), and webhook subscriptions (retries,
//! dead letters, pause, resume, redeliver).
//!
//! - `requests`: what every request passes: security headers, same origin, the session,
//!   posted forms and their CSRF token.
//! - `signin`: sign-in with a token or through the identity provider, and sign-out.
//! - `list`, `task`, `bulk`, `schedules`, `webhooks`: the pages and the actions on them.
//! - `live`: the change feed and the script that follows it.
//! - `render`: the page frame, the error page and the small pieces every page shows.

mod audit;
mod bulk;
mod list;
mod live;
mod render;
mod requests;
mod schedules;
mod signin;
mod task;
mod webhooks;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Redirect;
use axum::routing::{get, post};
use axum::{Router, middleware};
use maud::html;

use super::api::AdminState;
use super::session::Sessions;
use super::{AdminError, Operator};
use bulk::{bulk_preview, bulk_run};
use list::{list_fragment, list_page};
use live::events;
use render::page;
use requests::{headers, same_origin, signed_in};
use signin::{login, login_page, logout, oauth_callback, oauth_start};
use task::{answer_form, cancel, retry, task_fragment, task_page};

/// The console's state: the admin routes' and the session keys, derived once.
#[derive(Clone)]
pub(crate) struct ConsoleState {
    pub(crate) admin: AdminState,
    pub(crate) sessions: Arc<tokio::sync::OnceCell<Sessions>>,
}

impl ConsoleState {
    async fn sessions(&self) -> Result<&Sessions, AdminError> {
        let tasks = self.admin.operators.tasks();
        self.sessions
            .get_or_try_init(|| async move {
                tasks
                    .server_key()
                    .await
                    .map(|k| Sessions::new(&k))
                    .map_err(|_| {
                        AdminError::Unavailable("the task store is unavailable; try again".into())
                    })
            })
            .await
    }
}

/// The signed-in operator of a console request, with its cookie's value.
#[derive(Clone)]
struct Session {
    op: Operator,
    csrf: String,
    /// Where it is revoked when its operator signs out.
    revocation: String,
}

pub(crate) fn routes(state: ConsoleState) -> Router {
    let signed_in = Router::new()
        .route("/tasks", get(list_page))
        .route("/tasks/live", get(list_fragment))
        .route("/tasks/{id}", get(task_page))
        .route("/tasks/{id}/live", get(task_fragment))
        .route("/tasks/{id}/cancel", post(cancel))
        .route("/tasks/{id}/answer", post(answer_form))
        .route("/tasks/{id}/retry", post(retry))
        .route("/cancel", get(bulk_preview).post(bulk_run))
        .route("/events", get(events))
        .route("/schedules", get(schedules::schedules_page))
        .route("/schedules/{name}/{action}", post(schedules::act_on))
        .route("/webhooks", get(webhooks::webhooks_page))
        .route("/webhooks/{name}/{action}", post(webhooks::act_on))
        .route("/audit", get(audit::audit_page))
        .route("/logout", post(logout))
        // Inside the sign-in: the operator is known when the action is recorded.
        .route_layer(middleware::from_fn_with_state(
            crate::admin::audit::Door {
                operators: state.admin.operators.clone(),
                via: "console",
            },
            crate::admin::audit::audited,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), signed_in));
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/tasks") }))
        .route("/login", get(login_page).post(login))
        .route("/oauth/start", get(oauth_start))
        .route("/oauth/callback", get(oauth_callback))
        .merge(signed_in)
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                page("Not found", None, html! { p { "No such page." } }),
            )
        })
        .layer(middleware::from_fn(same_origin))
        .layer(middleware::from_fn(headers))
        .with_state(state)
}
