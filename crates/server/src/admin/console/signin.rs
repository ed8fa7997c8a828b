//! Signing in and out: an admin token or an access token posted to `/console/login`, or
//! the authorization code flow with the identity provider (`/console/oauth/…`); either
//! ends with a sealed session cookie, which signing out revokes.

use std::collections::BTreeMap;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::response::{Html, Redirect, Response};
use maud::html;

use super::ConsoleState;
use super::render::{encode, error_page, page};
use super::requests::{Posted, field};
use crate::admin::session::{PENDING_COOKIE, Pending, cookie, session_set_cookie};
use crate::admin::{AdminError, Operator};

pub(super) async fn login_page(
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

pub(super) async fn login(
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
    let now = s.admin.operators.tasks().store().now().await?;
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
    snodo_core::ids::fill_random(&mut raw);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

/// How long a sign-in through the identity provider may take, from start to callback.
const SIGN_IN_MS: u64 = 10 * 60 * 1000;

/// Starts a sign-in through the identity provider: the authorization code flow with PKCE.
/// The state, the verifier and where to go after are kept in a sealed cookie scoped to the
/// callback (`SameSite=Lax`: the provider's redirect back is a cross-site navigation).
pub(super) async fn oauth_start(
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
        let now = s.admin.operators.tasks().store().now().await?;
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
        let enc = crate::identity::oauth::form_encode;
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
pub(super) async fn oauth_callback(
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
        let now = s.admin.operators.tasks().store().now().await?;
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
pub(super) async fn logout(State(s): State<ConsoleState>, p: Posted) -> Response {
    let revoked = async {
        let now = s.admin.operators.tasks().store().now().await?;
        let until = now.plus_ms(s.admin.admin.config().session_ms);
        s.admin
            .operators
            .tasks()
            .store()
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
