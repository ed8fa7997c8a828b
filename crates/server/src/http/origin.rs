//! The Host/Origin check over every route, against DNS rebinding: a request's `Host` and
//! `Origin` must name an allowed host, and a loopback `Origin` this server's own port.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::{AppState, rpc_error};
use crate::protocol::codes;

/// Refuses (403) a request whose `Host` or `Origin` is not allowed.
pub(super) async fn check_host(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    match allowed_host(request.headers(), &state.config.allowed_hosts) {
        Ok(()) => next.run(request).await,
        Err(why) => host_refused(why),
    }
}

/// The refusal of a request whose `Host` or `Origin` is not allowed.
pub(super) fn host_refused(why: &str) -> Response {
    rpc_error(StatusCode::FORBIDDEN, codes::INVALID_REQUEST, why)
}

/// The host of an authority `host[:port]` (a `Host` header, or what follows an Origin's
/// scheme), or `None` when it is not one: a bracketed IPv6 literal or a name without a
/// colon, then nothing or `:` and a port of digits. `127.0.0.1:80.evil.com` and
/// `127.0.0.1:3401:evil.com` are not authorities, so a lax split cannot turn them into an
/// allowed host.
fn authority_host(value: &str) -> Option<&str> {
    let (host, rest) = if value.starts_with('[') {
        let end = value.find(']')? + 1;
        value.split_at(end)
    } else {
        value.split_at(value.find(':').unwrap_or(value.len()))
    };
    let port_ok = match rest.strip_prefix(':') {
        None => rest.is_empty(),
        Some(port) => !port.is_empty() && port.len() <= 5 && port.parse::<u16>().is_ok(),
    };
    (!host.is_empty() && port_ok).then_some(host)
}

/// The DNS-rebinding check: the `Host` a request names (required) and its `Origin` (when
/// sent) must be hosts this server serves.
pub(super) fn allowed_host(headers: &HeaderMap, allowed: &[String]) -> Result<(), &'static str> {
    if allowed.is_empty() {
        return Ok(());
    }
    let ok = |h: &str| allowed.iter().any(|a| a.eq_ignore_ascii_case(h));
    let host = headers
        .get(header::HOST)
        .ok_or("a Host header is required")?
        .to_str()
        .map_err(|_| "unreadable Host header")?;
    if !authority_host(host).is_some_and(ok) {
        return Err("the Host header names a host this server does not serve");
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| "unreadable Origin header")?;
        let (scheme, authority) = origin
            .split_once("://")
            .map(|(scheme, rest)| (scheme, rest.strip_suffix('/').unwrap_or(rest)))
            .ok_or("the Origin is not allowed")?;
        let Some(origin_host) = authority_host(authority).filter(|h| ok(h)) else {
            return Err("the Origin is not allowed");
        };
        // Every program on this machine serves loopback: a page another local server
        // serves (another port) is another origin, though its host is allowed.
        if is_loopback_name(origin_host) && port_of(authority, scheme) != port_of(host, scheme) {
            return Err("the Origin is another port of this machine");
        }
    }
    Ok(())
}

/// Whether `host` (as an authority names it) is this machine's loopback.
fn is_loopback_name(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The port of an authority, or `scheme`'s default when it names none.
fn port_of(authority: &str, scheme: &str) -> Option<u16> {
    let after_host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, rest)| rest),
        None => authority.split_once(':').map_or("", |(_, port)| port),
    };
    let port = after_host.trim_start_matches(':');
    if port.is_empty() {
        return match scheme.to_ascii_lowercase().as_str() {
            "https" => Some(443),
            "http" => Some(80),
            _ => None,
        };
    }
    port.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpConfig;

    fn check(host: &str, origin: Option<&str>) -> Result<(), &'static str> {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, host.parse().expect("host"));
        if let Some(o) = origin {
            headers.insert(header::ORIGIN, o.parse().expect("origin"));
        }
        let allowed = HttpConfig::default().allowed_hosts;
        allowed_host(&headers, &allowed)
    }

    #[test]
    fn a_loopback_origin_must_name_this_servers_port() {
        assert!(check("127.0.0.1:3001", Some("http://127.0.0.1:3001")).is_ok());
        assert!(check("localhost:3001", Some("http://localhost:3001/")).is_ok());
        assert!(check("[::1]:3001", Some("http://[::1]:3001")).is_ok());
        assert!(
            check("localhost", Some("http://localhost")).is_ok(),
            "both port 80"
        );
        assert!(check("localhost:80", Some("http://localhost")).is_ok());
        assert_eq!(
            check("127.0.0.1:3001", Some("http://127.0.0.1:8080")),
            Err("the Origin is another port of this machine")
        );
        assert!(check("localhost:3001", Some("http://localhost")).is_err());
        assert!(check("[::1]:3001", Some("http://[::1]:3002")).is_err());
        assert!(check("127.0.0.1:3001", Some("http://evil.example:3001")).is_err());
        assert!(check("127.0.0.1:3001", Some("null")).is_err());
        assert!(check("127.0.0.1:3001", None).is_ok());
    }
}
