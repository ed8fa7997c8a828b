//! The routes beside `/mcp` that operate the node: `/readyz` (the runner's loops and a
//! probe write) and `/metrics` (Prometheus text, behind its own token). `/healthz` answers
//! from the router alone.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{AppState, READY_PROBE_TIMEOUT, unauthorized};
use crate::identity::{Unauthenticated, bearer_token};

/// The metrics, behind `metrics.token` when one is set. While bearer tokens guard `/mcp`
/// and no metrics token is set, `/metrics` is closed: its counters span every tenant, so
/// serving them to anyone would let one tenant watch the others.
pub(super) async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match &state.metrics_token {
        Some(expected)
            if bearer_token(&headers)
                .and_then(|t| expected.matching(t))
                .is_none() =>
        {
            return unauthorized(&Unauthenticated::bearer(
                "a valid bearer token is required (metrics.token)",
            ));
        }
        Some(_) => {}
        None if !state.config.tokens.is_empty() || state.config.oauth => {
            return unauthorized(&Unauthenticated::bearer(
                "/metrics is closed while bearer tokens or OAuth guard /mcp and metrics.token is \
                 not: set metrics.token (or metrics.token_env)",
            ));
        }
        None => {}
    }
    let mut text = state.server.metrics_text();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&state.server.task_gauges().await);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Ready when the store commits a probe write within [`READY_PROBE_TIMEOUT`]: a read alone
/// stays green while the writer is stuck or the disk refuses writes.
pub(super) async fn ready(State(state): State<AppState>) -> Response {
    let down = state.server.runner_loops_down();
    if !down.is_empty() {
        // A loop that panicked runs again after its backoff; until then this node does
        // not claim (or reap) what it should.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the runner's {} loop is not running",
                down.join(" and ")
            ),
        )
            .into_response();
    }
    match state.server.store_ready(READY_PROBE_TIMEOUT).await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => {
            // The detail (which may name files) is for the operator's log only.
            tracing::warn!(error = %e, "readiness probe failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the task store cannot commit",
            )
                .into_response()
        }
    }
}
