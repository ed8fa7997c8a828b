//! What every console request passes: security headers, the same-origin check of a POST,
//! the signed-in session, and a posted form with its CSRF token checked.

use axum::Form;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::{Redirect, Response};
use maud::html;

use super::render::{encode, error_page, page};
use super::{ConsoleState, Session};
use crate::admin::AdminError;
use crate::admin::session::{revocation_key, session_cookie_of};

/// Security headers on every console response: no framing, no sniffing, a strict CSP
/// (inline script and style only from this page, nothing from elsewhere), no caching.
pub(super) async fn headers(request: Request, next: Next) -> Response {
    let mut r = next.run(request).await;
    let h = r.headers_mut();
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(h, "x-frame-options", "DENY");
    set(h, "x-content-type-options", "nosniff");
    set(h, "referrer-policy", "same-origin");
    set(h, "cache-control", "no-store");
    set(
        h,
        "content-security-policy",
        "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    r
}

/// A POST must come from this origin: its `Origin` (which browsers send on every POST)
/// names the host the request is addressed to.
pub(super) async fn same_origin(request: Request, next: Next) -> Response {
    if request.method() == axum::http::Method::POST {
        let h = request.headers();
        let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
        let origin = h.get(header::ORIGIN).and_then(|v| v.to_str().ok());
        let same = match (origin, host) {
            (Some(o), Some(host)) => o
                .split_once("://")
                .is_some_and(|(_, rest)| rest.trim_end_matches('/') == host),
            _ => false,
        };
        if !same {
            return (
                StatusCode::FORBIDDEN,
                page(
                    "Refused",
                    None,
                    html! { p { "This form was not posted from this console." } },
                ),
            )
                .into_response();
        }
    }
    next.run(request).await
}

pub(super) async fn signed_in(
    State(s): State<ConsoleState>,
    mut request: Request,
    next: Next,
) -> Response {
    let sessions = match s.sessions().await {
        Ok(x) => x,
        Err(e) => return error_page(&e),
    };
    let now = match s.admin.operators.tasks().store().now().await {
        Ok(t) => t,
        Err(e) => return error_page(&e.into()),
    };
    let value = session_cookie_of(request.headers()).map(str::to_owned);
    let fingerprint = s.admin.admin.fingerprint();
    let opened = value.and_then(|v| sessions.open(&v, now, fingerprint).map(|op| (op, v)));
    // A session its operator signed out of stays refused on every node, though its cookie
    // has not expired.
    let opened = match opened {
        Some((op, v)) => match s
            .admin
            .operators
            .tasks()
            .store()
            .revoked(&revocation_key(&v))
            .await
        {
            Ok(false) => Some((op, v)),
            Ok(true) => None,
            Err(e) => return error_page(&e.into()),
        },
        None => None,
    };
    match opened {
        Some((op, v)) => {
            let csrf = sessions.csrf(&v);
            let revocation = revocation_key(&v);
            // The operator on its own too: what the audit of the console's actions reads.
            request.extensions_mut().insert(op.clone());
            request.extensions_mut().insert(Session {
                op,
                csrf,
                revocation,
            });
            next.run(request).await
        }
        None => {
            // The path as the browser asked for it (this router is nested under /console).
            let back = format!("/console{}", request.uri().path());
            Redirect::to(&format!("/console/login?next={}", encode(&back))).into_response()
        }
    }
}

/// A form posted by the signed-in operator, its CSRF token checked: every console POST
/// behind sign-in takes its body through this.
pub(super) struct Posted {
    pub(super) session: Session,
    pub(super) form: Vec<(String, String)>,
}

impl<S: Send + Sync> axum::extract::FromRequest<S> for Posted {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Some(session) = request.extensions().get::<Session>().cloned() else {
            return Err(error_page(&AdminError::Unauthenticated(
                "sign in first".into(),
            )));
        };
        let Form(form) = Form::<Vec<(String, String)>>::from_request(request, state)
            .await
            .map_err(|e| error_page(&AdminError::Invalid(format!("the form: {e}"))))?;
        check_csrf(&session, &form).map_err(|e| error_page(&e))?;
        Ok(Self { session, form })
    }
}

/// Checks a posted form's CSRF token.
fn check_csrf(session: &Session, form: &[(String, String)]) -> Result<(), AdminError> {
    let posted = form
        .iter()
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.as_str());
    if posted.is_some_and(|p| {
        use subtle::ConstantTimeEq;
        bool::from(p.as_bytes().ct_eq(session.csrf.as_bytes()))
    }) {
        Ok(())
    } else {
        Err(AdminError::Forbidden(
            "the form's CSRF token is missing or wrong: reload the page and try again".into(),
        ))
    }
}

pub(super) fn field<'f>(form: &'f [(String, String)], name: &str) -> Option<&'f str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}
