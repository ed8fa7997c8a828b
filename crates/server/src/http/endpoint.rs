//! The `/mcp` endpoint: a POST's body read within its limits, its routing headers read
//! for the dispatcher, and the server's [`Reply`] written as JSON or SSE; DELETE ending a
//! 2025-11-25 session.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::Value;

use super::{AppState, Shared, caller, json_response, missing_caller, not_allowed, rpc_error};
use crate::identity::Caller;
use crate::mcp::{Reply, RoutingHeaders};
use crate::protocol::{self, codes, decode_header_value};
use snodo_core::model::IncomingTrace;

/// A 2025-11-25 client ending its session. Sessions live in their ids, so this only drops
/// what this node remembers of one (its log level) and answers 404 for it from then on.
///
/// 2026-07-28 has no sessions: a DELETE that speaks it is 405. An id this server did not
/// issue to the caller (forged, another principal's, or already ended) is 404, as the
/// transport says for a session the server does not know; without an id it is 400.
pub(super) async fn delete_session(
    State(state): State<AppState>,
    mut request: Request,
) -> Response {
    let Some(Caller { principal, .. }) = caller(&mut request) else {
        return missing_caller();
    };
    let headers = request.headers();
    let version = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    if version == Some(protocol::PROTOCOL_VERSION) {
        return not_allowed("2026-07-28 has no sessions to end: DELETE ends a 2025-11-25 session");
    }
    let id = match routing_header(headers, "mcp-session-id") {
        Some(Ok(id)) => id,
        _ => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                codes::INVALID_REQUEST,
                "DELETE ends a 2025-11-25 session: send its Mcp-Session-Id",
            );
        }
    };
    match state.server.end_session(&principal, &id).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => rpc_error(
            StatusCode::NOT_FOUND,
            codes::INVALID_REQUEST,
            "no such session: it was not issued to this caller, or it has ended",
        ),
        Err(e) => json_response(
            StatusCode::from_u16(protocol::http_status(&e))
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            protocol::error_bytes(&Value::Null, &e),
        ),
    }
}

/// `POST /mcp` through the router: the caller is in the request's extensions.
pub(super) async fn post_mcp(State(state): State<AppState>, mut request: Request) -> Response {
    let Some(caller) = caller(&mut request) else {
        return missing_caller();
    };
    answer_post(&state, caller, request).await
}

/// `POST /mcp` from `caller`.
pub(super) async fn answer_post(state: &Shared, caller: Caller, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    // A POST body is JSON and says so: a missing Content-Type is refused like a wrong one
    // (every real client sends it; see the interop tests).
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|ct| ct.to_str().ok())
        .and_then(|c| c.split(';').next())
        .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
    if !json_type {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            codes::INVALID_REQUEST,
            "the body must be application/json (Content-Type: application/json)",
        );
    }
    let limit = state.config.max_body_bytes;
    let read = tokio::time::timeout(state.config.body_timeout, axum::body::to_bytes(body, limit));
    let bytes = match read.await {
        Ok(Ok(b)) => b,
        Err(_) => {
            let mut r = rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                codes::INVALID_REQUEST,
                &format!(
                    "the body did not arrive within {} ms (http.body_timeout_ms)",
                    state.config.body_timeout.as_millis()
                ),
            );
            // The rest of the body may still come; the connection cannot be reused.
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return r;
        }
        Ok(Err(_)) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                codes::INVALID_REQUEST,
                &format!(
                    "the body is larger than {} bytes",
                    state.config.max_body_bytes
                ),
            );
        }
    };
    let reply = state
        .server
        .handle(&routing_headers(&headers), &caller, &bytes)
        .await;
    response_of(state, reply)
}

/// What the dispatcher reads of a POST's headers.
fn routing_headers(headers: &HeaderMap) -> RoutingHeaders {
    RoutingHeaders {
        method: routing_header(headers, "mcp-method"),
        name: routing_header(headers, "mcp-name"),
        protocol_version: routing_header(headers, "mcp-protocol-version"),
        session: routing_header(headers, "mcp-session-id"),
        accepts_sse: accepts_event_stream(headers),
        params: param_headers(headers),
        trace: trace_headers(headers),
    }
}

/// The HTTP response that carries `reply`.
fn response_of(state: &Shared, reply: Reply) -> Response {
    match reply {
        Reply::Json { status, body, .. } => {
            json_response(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
        }
        Reply::InsufficientScope { needed, body } => {
            let mut r = json_response(StatusCode::FORBIDDEN, body);
            let challenge = state.authenticator.insufficient_scope(&needed);
            if let Ok(v) = HeaderValue::from_str(&challenge) {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            r
        }
        Reply::Accepted => StatusCode::ACCEPTED.into_response(),
        Reply::Initialized { session, body } => {
            let mut r = json_response(StatusCode::OK, body);
            // Sealed base64url: always a valid header value.
            if let Ok(v) = HeaderValue::from_str(&session) {
                r.headers_mut().insert("mcp-session-id", v);
            }
            r
        }
        Reply::Stream(rx) => {
            let events = stream::unfold(rx, |mut rx| async move {
                let msg = rx.recv().await?;
                Some((
                    Ok::<_, std::convert::Infallible>(Event::default().data(msg.to_string())),
                    rx,
                ))
            });
            Sse::new(events).into_response()
        }
    }
}

/// The W3C trace context of the request's headers. `traceparent` must appear once (twice is
/// invalid, as W3C Trace Context says); `tracestate` and `baggage` may be split over
/// several lines, which join with commas.
fn trace_headers(headers: &HeaderMap) -> Option<IncomingTrace> {
    let mut parents = headers.get_all("traceparent").iter();
    let parent = parents.next()?.to_str().ok()?;
    if parents.next().is_some() {
        return None;
    }
    let joined = |name: &str| {
        let parts: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        (!parts.is_empty()).then(|| parts.join(","))
    };
    let (state, baggage) = (joined("tracestate"), joined("baggage"));
    IncomingTrace::from_values(Some(parent), state.as_deref(), baggage.as_deref())
}

fn routing_header(headers: &HeaderMap, name: &str) -> Option<Result<String, ()>> {
    headers
        .get(name)
        // Optional whitespace around a field value is not part of it (RFC 9110 §5.5).
        .map(|v| {
            v.to_str()
                .ok()
                .map(str::trim)
                .and_then(decode_header_value)
                .ok_or(())
        })
}

/// The `Mcp-Param-*` headers, decoded as the routing headers are.
fn param_headers(headers: &HeaderMap) -> Vec<(String, Result<String, ()>)> {
    const PREFIX: &str = "mcp-param-";
    headers
        .keys()
        .filter(|name| name.as_str().starts_with(PREFIX))
        .filter_map(|name| {
            // A header sent twice is refused: an intermediary may have acted on the other.
            let value = match headers.get_all(name).iter().count() {
                1 => routing_header(headers, name.as_str())?,
                _ => Err(()),
            };
            Some((name.as_str()[PREFIX.len()..].to_owned(), value))
        })
        .collect()
}

/// Whether `Accept` allows an event stream: absent, `text/event-stream`, `text/*` or `*/*`
/// (a `q=0` entry refuses it).
fn accepts_event_stream(headers: &axum::http::HeaderMap) -> bool {
    let mut values = headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .peekable();
    if values.peek().is_none() {
        return true;
    }
    values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let kind = parts.next().unwrap_or_default().to_ascii_lowercase();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            !refused && matches!(kind.as_str(), "text/event-stream" | "text/*" | "*/*")
        })
}
