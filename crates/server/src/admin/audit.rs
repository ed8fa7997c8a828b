//! The audit of operators' actions: every action through the admin API, the console or the
//! operators' MCP endpoint leaves a record in the store (who, what, to what, when, through
//! which door, how it ended), never its arguments, answers or secrets. Reads list them
//! newest first; an operator of one tenant sees its own tenant's.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use snodo_core::model::{AuditPage, AuditRecord};

use super::{AdminError, Operator, Operators};

/// The code a refused action's record keeps, from its HTTP status.
pub(crate) fn outcome_of(status: u16) -> &'static str {
    match status {
        200..=399 => "ok",
        400 => "invalid",
        401 => "unauthenticated",
        403 => "forbidden",
        404 => "not_found",
        409 => "conflict",
        503 => "unavailable",
        _ => "error",
    }
}

/// The mutating routes (under `/admin/v1` or `/console`) and the action each records; a
/// `{action}` segment (the console's) names the action's verb.
const ROUTES: &[(&str, &str, &str)] = &[
    ("POST", "/tasks/{id}/cancel", "task.cancel"),
    ("POST", "/tasks/{id}/answer", "task.answer"),
    ("POST", "/tasks/{id}/retry", "task.retry"),
    ("DELETE", "/tasks/{id}", "task.delete"),
    ("POST", "/cancel", "tasks.bulk_cancel"),
    ("POST", "/schedules", "schedule.declare"),
    ("DELETE", "/schedules/{name}", "schedule.remove"),
    ("POST", "/schedules/{name}/{action}", "schedule"),
    ("POST", "/webhooks", "webhook.declare"),
    ("DELETE", "/webhooks/{name}", "webhook.remove"),
    ("POST", "/webhooks/{name}/{action}", "webhook"),
    ("POST", "/components", "component.upload"),
    ("POST", "/deployments", "deployment.deploy"),
    ("POST", "/rollback", "deployment.rollback"),
    ("POST", "/backup", "store.backup"),
];

/// The action a request of `method` on `path` makes, and what it acts on; `None` for a
/// read or a sign-out.
fn action_of(method: &str, path: &str) -> Option<(String, Option<String>)> {
    let path = path
        .strip_prefix("/admin/v1")
        .or_else(|| path.strip_prefix("/console"))
        .unwrap_or(path);
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    ROUTES.iter().find_map(|(m, route, action)| {
        let pattern: Vec<&str> = route.split('/').collect();
        if *m != method || pattern.len() != segments.len() {
            return None;
        }
        let (mut target, mut verb) = (None, None);
        for (p, s) in pattern.iter().zip(&segments) {
            match *p {
                "{id}" | "{name}" => target = Some((*s).to_owned()),
                "{action}" => verb = Some(*s),
                literal if literal != *s => return None,
                _ => {}
            }
        }
        let action = match verb {
            Some(v) => format!("{action}.{v}"),
            None => (*action).to_owned(),
        };
        Some((action, target))
    })
}

/// Where a layer's records say the actions came through.
#[derive(Clone)]
pub(crate) struct Door {
    pub(crate) operators: Arc<Operators>,
    /// `api` or `console`.
    pub(crate) via: &'static str,
}

/// Records the action a mutating request made, once its answer is known. A read, or a
/// request without an operator (refused before one was known), records nothing.
pub(crate) async fn audited(State(door): State<Door>, request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let op = request.extensions().get::<Operator>().cloned();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if let (Some((action, target)), Some(op)) = (action_of(&method, &path), op) {
        let outcome = outcome_of(response.status().as_u16());
        door.operators
            .record(&op, door.via, &action, target, outcome)
            .await;
    }
    response
}

impl Operators {
    /// Keeps the record of `action` on `target` by `op` through `via`. A record the store
    /// cannot keep is logged, never turned into the action's failure: the action is done.
    pub(crate) async fn record(
        &self,
        op: &Operator,
        via: &str,
        action: &str,
        target: Option<String>,
        outcome: &str,
    ) {
        let record = AuditRecord::new(
            &op.principal.tenant,
            &op.principal.subject,
            op.cross_tenant,
            via,
            action,
            target,
            outcome,
        );
        if let Err(e) = self.tasks().store().record_audit(record.clone()).await {
            tracing::error!(
                error = %e,
                action = %record.action,
                operator = %record.subject,
                tenant = %record.tenant,
                "an operator's action could not be recorded in the audit"
            );
        }
    }

    /// A page of the audit within the operator's reach, newest first: an operator of one
    /// tenant sees that tenant's records only (so its pages may be short).
    pub(crate) async fn audit(
        &self,
        op: &Operator,
        from: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, AdminError> {
        let mut page = self.tasks().store().audit(from, limit).await?;
        page.records.retain(|r| op.reaches(&r.tenant));
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_name_their_actions_and_targets() {
        let cases = [
            (
                "POST",
                "/tasks/abc/cancel",
                Some(("task.cancel", Some("abc"))),
            ),
            (
                "DELETE",
                "/webhooks/w1",
                Some(("webhook.remove", Some("w1"))),
            ),
            (
                "POST",
                "/admin/v1/webhooks/w1/rotate",
                Some(("webhook.rotate", Some("w1"))),
            ),
            (
                "POST",
                "/schedules/nightly/pause",
                Some(("schedule.pause", Some("nightly"))),
            ),
            ("POST", "/rollback", Some(("deployment.rollback", None))),
            ("GET", "/tasks/abc", None),
            ("POST", "/tasks/abc/look", None),
            ("POST", "/logout", None),
        ];
        for (method, path, want) in cases {
            let got = action_of(method, path);
            let got = got.as_ref().map(|(a, t)| (a.as_str(), t.as_deref()));
            assert_eq!(got, want, "{method} {path}");
        }
        assert_eq!(outcome_of(303), "ok");
        assert_eq!(outcome_of(409), "conflict");
    }
}
