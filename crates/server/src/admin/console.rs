//! The console at `/console`: server-rendered HTML (maud) with plain forms, for operators in
//! a browser. No JavaScript build: one small inline script listens to the change feed over
//! SSE (`/console/events`) and swaps in the fragment the server renders again.
//!
//! Sign-in is an admin token, or an access token holding the admin scopes, posted once to
//! `/console/login`; the console then keeps a sealed session cookie (`session`). Every form
//! carries the session's CSRF token and every POST must come from this origin. Pages:
//! the task list (filters, counts, live rows, paging), a task's page (summary, what it
//! waits on with an answer form built from the question's schema, its history as a
//! timeline, cancel and retry-now), and bulk cancel with a preview and a confirmation.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::{Map, Value, json};

use snodo_core::model::{HistoryEntry, HistoryKind, TaskStatus, Timestamp};
use snodo_core::store::{ALL_STATUSES, TaskCounts, TaskFilter, TaskPage, TaskSummary};

use super::answer::{self, Field, Kind};
use super::api::AdminState;
use super::session::{
    PENDING_COOKIE, Pending, Sessions, cookie, revocation_key, session_cookie_of,
    session_set_cookie,
};
use super::{AdminError, BulkOutcome, Operator, TaskDetail, filter_of, query_of};

/// The console's state: the admin routes' and the session keys, derived once.
#[derive(Clone)]
pub(crate) struct ConsoleState {
    pub(crate) admin: AdminState,
    pub(crate) sessions: Arc<tokio::sync::OnceCell<Sessions>>,
}

impl ConsoleState {
    async fn sessions(&self) -> Result<&Sessions, AdminError> {
        let server = self.admin.server.clone();
        self.sessions
            .get_or_try_init(|| async move {
                server
                    .server_key()
                    .await
                    .map(|k| Sessions::new(&k))
                    .map_err(|e| AdminError::Unavailable(e.message))
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
        .route("/logout", post(logout))
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

/// Security headers on every console response: no framing, no sniffing, a strict CSP
/// (inline script and style only from this page, nothing from elsewhere), no caching.
async fn headers(request: Request, next: Next) -> Response {
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
async fn same_origin(request: Request, next: Next) -> Response {
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

async fn signed_in(State(s): State<ConsoleState>, mut request: Request, next: Next) -> Response {
    let sessions = match s.sessions().await {
        Ok(x) => x,
        Err(e) => return error_page(&e),
    };
    let now = match s.admin.server.store.now().await {
        Ok(t) => t,
        Err(e) => return error_page(&e.into()),
    };
    let value = session_cookie_of(request.headers()).map(str::to_owned);
    let fingerprint = s.admin.admin.fingerprint();
    let opened = value.and_then(|v| sessions.open(&v, now, fingerprint).map(|op| (op, v)));
    // A session its operator signed out of stays refused on every node, though its cookie
    // has not expired.
    let opened = match opened {
        Some((op, v)) => match s.admin.server.store.revoked(&revocation_key(&v)).await {
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
struct Posted {
    session: Session,
    form: Vec<(String, String)>,
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

fn field<'f>(form: &'f [(String, String)], name: &str) -> Option<&'f str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
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
fn page(title: &str, session: Option<&Session>, body: Markup) -> Html<String> {
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
                            nav aria-label="Console" { a href="/console/tasks" { "Tasks" } }
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

fn error_page(e: &AdminError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        page("Something went wrong", None, html! { p.error role="alert" { (e.to_string()) } p { a href="/console/tasks" { "Back to the tasks" } } }),
    )
        .into_response()
}

fn time(t: Timestamp) -> String {
    crate::rfc3339(t)
}

// ---- sign-in ----

async fn login_page(
    State(s): State<ConsoleState>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Html<String> {
    login_markup(&s, q.get("next").map(String::as_str), None)
}

fn login_markup(s: &ConsoleState, next: Option<&str>, error: Option<&str>) -> Html<String> {
    let open = s.admin.admin.config().open_locally;
    let next = next
        .filter(|n| n.starts_with("/console/"))
        .unwrap_or("/console/tasks");
    page(
        "Sign in",
        None,
        html! {
            @if let Some(e) = error { p.error role="alert" { (e) } }
            @if s.admin.admin.config().sign_in.is_some() && s.admin.oauth.is_some() {
                p { a href={ "/console/oauth/start?next=" (encode(next)) } { "Sign in with your identity provider" } }
                p.note { "Or with a token:" }
            }
            form method="post" action="/console/login" {
                input type="hidden" name="next" value=(next);
                @if open {
                    p { "This server has no authentication configured and listens on loopback only: you act as its local operator, on every tenant." }
                } @else {
                    div.field {
                        label for="token" { "Admin token or access token" }
                        input id="token" name="token" type="password" autocomplete="off" required size="60";
                    }
                    p.note { "An admin token from [[admin.tokens]], or an access token from your identity provider that carries the admin scope." }
                }
                button type="submit" { "Sign in" }
            }
        },
    )
}

async fn login(
    State(s): State<ConsoleState>,
    request_headers: HeaderMap,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    let next = field(&form, "next")
        .filter(|n| n.starts_with("/console/") && !n.starts_with("/console//"))
        .unwrap_or("/console/tasks")
        .to_owned();
    let mut headers = HeaderMap::new();
    if let Some(token) = field(&form, "token") {
        match HeaderValue::from_str(&format!("Bearer {token}")) {
            Ok(v) => {
                headers.insert(header::AUTHORIZATION, v);
            }
            Err(_) => {
                return login_markup(
                    &s,
                    Some(&next),
                    Some("That token cannot be sent in a header."),
                )
                .into_response();
            }
        }
    }
    let op = match s
        .admin
        .admin
        .bearer_operator(&headers, &s.admin.authenticator)
        .await
    {
        Ok(op) => op,
        Err(e) => {
            return (
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::UNAUTHORIZED),
                login_markup(&s, Some(&next), Some(&e.to_string())),
            )
                .into_response();
        }
    };
    match session_cookie(&s, &op, over_https(&s, &request_headers)).await {
        Ok(cookie) => {
            let mut r = Redirect::to(&next).into_response();
            r.headers_mut().insert(header::SET_COOKIE, cookie);
            r
        }
        Err(e) => error_page(&e),
    }
}

/// The `Set-Cookie` of a new session for `op` (`Secure` and `__Host-` when `secure`).
async fn session_cookie(
    s: &ConsoleState,
    op: &Operator,
    secure: bool,
) -> Result<HeaderValue, AdminError> {
    let sessions = s.sessions().await?;
    let now = s.admin.server.store.now().await?;
    let ms = s.admin.admin.config().session_ms;
    let value = sessions.seal(op, now.plus_ms(ms), s.admin.admin.fingerprint());
    HeaderValue::from_str(&session_set_cookie(&value, ms / 1000, secure))
        .map_err(|_| AdminError::Unavailable("the session cookie cannot be sent".into()))
}

/// Whether the browser reached the console over HTTPS: a TLS-terminating proxy in front
/// says so (`X-Forwarded-Proto`), or the server's public URL is https (the console's
/// sign-in redirect, else the OAuth resource). A client that claims it falsely only makes
/// its own cookie `Secure`.
fn over_https(s: &ConsoleState, headers: &HeaderMap) -> bool {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    let public = match s
        .admin
        .admin
        .config()
        .sign_in
        .as_ref()
        .and_then(|i| i.redirect_uri.clone())
    {
        Some(u) => u,
        None => s
            .admin
            .oauth
            .as_ref()
            .map(|rs| rs.resource())
            .unwrap_or_default(),
    };
    forwarded || public.starts_with("https://")
}

fn random_b64(n: usize) -> String {
    use base64::Engine as _;
    let mut raw = vec![0u8; n];
    snodo_core::store::fill_random(&mut raw);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// How long a sign-in through the identity provider may take, from start to callback.
const SIGN_IN_MS: u64 = 10 * 60 * 1000;

/// Starts a sign-in through the identity provider: the authorization code flow with PKCE.
/// The state, the verifier and where to go after are kept in a sealed cookie scoped to the
/// callback (`SameSite=Lax`: the provider's redirect back is a cross-site navigation).
async fn oauth_start(
    State(s): State<ConsoleState>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let run = async {
        let (Some(sign_in), Some(rs)) = (&s.admin.admin.config().sign_in, &s.admin.oauth) else {
            return Err(AdminError::NotFound);
        };
        let (authorize, _) = rs
            .sign_in_endpoints(&sign_in.issuer)
            .await
            .map_err(AdminError::Unavailable)?;
        let redirect_uri = match &sign_in.redirect_uri {
            Some(u) => u.clone(),
            None => {
                let resource = rs.resource();
                let origin = resource
                    .find("://")
                    .and_then(|i| resource[i + 3..].find('/').map(|j| &resource[..i + 3 + j]))
                    .unwrap_or(&resource);
                format!("{origin}/console/oauth/callback")
            }
        };
        let next = q
            .get("next")
            .filter(|n| n.starts_with("/console/") && !n.starts_with("/console//"))
            .cloned()
            .unwrap_or_else(|| "/console/tasks".into());
        let now = s.admin.server.store.now().await?;
        let pending = Pending {
            state: random_b64(16),
            verifier: random_b64(32),
            next,
            redirect_uri: redirect_uri.clone(),
            exp: now.plus_ms(SIGN_IN_MS).as_millis(),
        };
        let challenge = {
            use base64::Engine as _;
            let d = ring::digest::digest(&ring::digest::SHA256, pending.verifier.as_bytes());
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d.as_ref())
        };
        let scopes = if sign_in.scopes.is_empty() {
            s.admin.admin.config().scopes.join(" ")
        } else {
            sign_in.scopes.join(" ")
        };
        let enc = crate::http::oauth::form_encode;
        let sep = if authorize.contains('?') { '&' } else { '?' };
        let url = format!(
            "{authorize}{sep}response_type=code&client_id={}&redirect_uri={}&scope={}&state={}\
             &code_challenge={challenge}&code_challenge_method=S256&resource={}",
            enc(&sign_in.client_id),
            enc(&redirect_uri),
            enc(&scopes),
            enc(&pending.state),
            enc(&rs.resource()),
        );
        let cookie = format!(
            "{PENDING_COOKIE}={}; Path=/console/oauth; HttpOnly; SameSite=Lax; Max-Age={}",
            s.sessions().await?.seal_pending(&pending),
            SIGN_IN_MS / 1000
        );
        Ok((url, cookie))
    };
    match run.await {
        Ok((url, cookie)) => {
            let mut r = Redirect::to(&url).into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => error_page(&e),
    }
}

/// The provider's redirect back: the state checked against the pending cookie, the code
/// redeemed with the verifier, the access token authenticated like any other (an operator
/// needs the admin scopes), and a session. The answer is a page that moves on by itself:
/// a `SameSite=Strict` session cookie set at the end of a cross-site redirect chain would
/// not be sent on a redirect, but is on the page's own navigation.
async fn oauth_callback(
    State(s): State<ConsoleState>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let run = async {
        let (Some(sign_in), Some(rs)) = (&s.admin.admin.config().sign_in, &s.admin.oauth) else {
            return Err(AdminError::NotFound);
        };
        if let Some(e) = q.get("error") {
            return Err(AdminError::Forbidden(format!(
                "the identity provider refused the sign-in: {}",
                error_code(e)
            )));
        }
        let now = s.admin.server.store.now().await?;
        let sessions = s.sessions().await?;
        let pending = cookie(&headers, PENDING_COOKIE)
            .and_then(|v| sessions.open_pending(v, now))
            .ok_or_else(|| {
                AdminError::Forbidden(
                    "no sign-in is under way here (or it took too long): start again".into(),
                )
            })?;
        let state_ok = q.get("state").is_some_and(|st| {
            use subtle::ConstantTimeEq;
            bool::from(st.as_bytes().ct_eq(pending.state.as_bytes()))
        });
        if !state_ok {
            return Err(AdminError::Forbidden(
                "the sign-in's state does not match: start again".into(),
            ));
        }
        let code = q
            .get("code")
            .ok_or_else(|| AdminError::Invalid("no code".into()))?;
        let (_, token_endpoint) = rs
            .sign_in_endpoints(&sign_in.issuer)
            .await
            .map_err(AdminError::Unavailable)?;
        let resource = rs.resource();
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", pending.redirect_uri.as_str()),
            ("code_verifier", pending.verifier.as_str()),
            ("resource", resource.as_str()),
        ];
        let client = match &sign_in.client_secret {
            Some(secret) => Some((sign_in.client_id.as_str(), secret.as_str())),
            None => {
                form.push(("client_id", sign_in.client_id.as_str()));
                None
            }
        };
        let access = rs
            .redeem_code(&sign_in.issuer, &token_endpoint, client, &form)
            .await
            .map_err(|e| AdminError::Forbidden(format!("the code could not be redeemed: {e}")))?;
        let mut bearer = HeaderMap::new();
        bearer.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {access}"))
                .map_err(|_| AdminError::Forbidden("the access token cannot be used".into()))?,
        );
        let op = s
            .admin
            .admin
            .bearer_operator(&bearer, &s.admin.authenticator)
            .await?;
        Ok((
            session_cookie(&s, &op, over_https(&s, &headers)).await?,
            pending.next,
        ))
    };
    match run.await {
        Ok((session, next)) => {
            let mut r = page(
                "Signed in",
                None,
                html! {
                    meta http-equiv="refresh" content={ "0;url=" (next) };
                    p { "Signed in. " a href=(next) { "Continue" } }
                },
            )
            .into_response();
            let h = r.headers_mut();
            h.append(header::SET_COOKIE, session);
            h.append(
                header::SET_COOKIE,
                HeaderValue::from_static(
                    "snodo_console_oauth=; Path=/console/oauth; HttpOnly; SameSite=Lax; Max-Age=0",
                ),
            );
            r
        }
        Err(e) => error_page(&e),
    }
}

/// An identity provider's `error` as the console shows it: an RFC 6749 error code, never
/// other text, since anyone can write a link to the callback.
fn error_code(given: &str) -> &str {
    let is_code = given.len() <= 40 && given.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    if is_code { given } else { "an error" }
}

/// Signs out: the session is revoked in the store until it would have expired (so a copy
/// of the cookie stops working on every node), and the browser's cookie is cleared.
async fn logout(State(s): State<ConsoleState>, p: Posted) -> Response {
    let revoked = async {
        let now = s.admin.server.store.now().await?;
        let until = now.plus_ms(s.admin.admin.config().session_ms);
        s.admin
            .server
            .store
            .revoke(&p.session.revocation, until)
            .await
    };
    if let Err(e) = revoked.await {
        return error_page(&e.into());
    }
    let mut r = Redirect::to("/console/login").into_response();
    for secure in [false, true] {
        if let Ok(v) = HeaderValue::from_str(&session_set_cookie("", 0, secure)) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

// ---- the task list ----

/// The query string of a filter (and a cursor), for links and the live fragment.
fn query_string(filter: &TaskFilter, cursor: Option<&str>) -> String {
    let mut parts = Vec::new();
    let mut push = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            parts.push(format!("{k}={}", encode(&v)));
        }
    };
    push("tenant", filter.tenant.clone());
    push("status", filter.status.map(|s| s.as_str().to_owned()));
    push("tool", filter.tool.clone());
    push(
        "created_after",
        filter.created_after.map(|t| t.as_millis().to_string()),
    );
    push(
        "created_before",
        filter.created_before.map(|t| t.as_millis().to_string()),
    );
    push(
        "updated_after",
        filter.updated_after.map(|t| t.as_millis().to_string()),
    );
    push(
        "updated_before",
        filter.updated_before.map(|t| t.as_millis().to_string()),
    );
    push("cursor", cursor.map(str::to_owned));
    parts.join("&")
}

async fn list_page(
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

async fn list_fragment(
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
    let server = &s.admin.server;
    let page_ = server.admin_list(&session.op, query).await?;
    let counts = server
        .admin_counts(&session.op, filter.tenant.clone())
        .await?;
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

fn label_of(s: TaskStatus) -> &'static str {
    match s {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "waiting for input",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
    }
}

fn status_badge(s: TaskStatus) -> Markup {
    html! { span class={ "status status-" (s.as_str()) } { (label_of(s)) } }
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

/// The live updates: on each change the feed reports, and each time the stream opens,
/// fetch the fragment again and swap it in (at most one fetch in flight, one more queued).
fn live_script(events: &str) -> Markup {
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

// ---- one task ----

async fn task_page(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    match s.admin.server.admin_task(&session.op, &id).await {
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

async fn task_fragment(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
) -> Response {
    match s.admin.server.admin_task(&session.op, &id).await {
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
            @if let Some(owner) = &t.claimed_by { dt { "Running on" } dd { (owner) } }
            dt { "Created" } dd { (time(t.created_at)) }
            dt { "Updated" } dd { (time(t.last_updated_at)) }
            @if let Some(at) = t.expires_at { dt { "Expires" } dd { (time(at)) } }
        }
        @if !t.status.is_terminal() {
            section aria-labelledby="waiting" {
                h2 id="waiting" { "Waiting on" }
                @if open.is_empty() {
                    p { @if t.retry_at.is_some() && t.claimed_by.is_none() { "Its retry delay." } @else if t.claimed_by.is_some() { "Its running attempt." } @else { "A runner to claim it." } }
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

async fn cancel(State(s): State<ConsoleState>, Path(id): Path<String>, p: Posted) -> Response {
    let message = field(&p.form, "message").map(str::to_owned);
    let outcome = s
        .admin
        .server
        .admin_cancel(&p.session.op, &id, message)
        .await;
    acted(&id, Notice::Cancelled, outcome)
}

async fn retry(State(s): State<ConsoleState>, Path(id): Path<String>, p: Posted) -> Response {
    let outcome = s.admin.server.admin_retry(&p.session.op, &id).await;
    acted(&id, Notice::Retried, outcome)
}

async fn answer_form(
    State(s): State<ConsoleState>,
    Path(id): Path<String>,
    Posted { session, form }: Posted,
) -> Response {
    let server = &s.admin.server;
    let response = async {
        let key =
            field(&form, "key").ok_or_else(|| AdminError::Invalid("which question?".into()))?;
        let detail = server.admin_task(&session.op, &id).await?;
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
        server.admin_answer(&session.op, &id, responses).await
    }
    .await;
    acted(&id, Notice::Answered, response)
}

// ---- bulk cancel ----

async fn bulk_preview(
    State(s): State<ConsoleState>,
    axum::Extension(session): axum::Extension<Session>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Response {
    let run = async {
        let filter = filter_of(&params)?;
        let preview = s
            .admin
            .server
            .admin_bulk_cancel(&session.op, filter.clone(), None, true, None)
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

async fn bulk_run(State(s): State<ConsoleState>, Posted { session, form }: Posted) -> Response {
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
            .server
            .admin_bulk_cancel(&session.op, filter.clone(), None, false, message)
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

// ---- live updates ----

async fn events(
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
        let stream = super::api::changes(s.admin.server.clone(), session.op.clone(), filter, only)?;
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
