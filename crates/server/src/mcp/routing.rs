//! The routing headers a request arrives with ([`RoutingHeaders`], read by the transport)
//! and their checks against the body: `Mcp-Method`, `Mcp-Name` and `MCP-Protocol-Version`
//! must agree with what the body says.

use crate::protocol::{self, NameSource, RequestMeta, RpcError};

/// The headers the dispatcher checks, already read from the transport.
#[derive(Debug, Clone, Default)]
pub struct RoutingHeaders {
    /// `Mcp-Method`, decoded; `Err` if present but unreadable.
    pub method: Option<Result<String, ()>>,
    /// `Mcp-Name`, decoded; `Err` if present but unreadable.
    pub name: Option<Result<String, ()>>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<Result<String, ()>>,
    /// `Mcp-Session-Id` (2025-11-25 clients send back the one `initialize` gave them).
    pub session: Option<Result<String, ()>>,
    /// Whether the request's `Accept` allows `text/event-stream` (true when it has no
    /// `Accept`). A reply that could stream progress is a plain JSON body otherwise.
    pub accepts_sse: bool,
    /// The `Mcp-Param-{Name}` headers (SEP-2243): `Name` as sent, and the value decoded;
    /// `Err` if present but unreadable.
    pub params: Vec<(String, Result<String, ()>)>,
    /// The W3C trace context of the `traceparent`, `tracestate` and `baggage` headers;
    /// `None` without a valid `traceparent`. The request's `_meta` keys take precedence.
    pub trace: Option<snodo_core::model::IncomingTrace>,
}

/// A routing header's value if it was sent; a header sent but not readable is refused
/// whether or not the method needs it.
fn readable<'h>(
    header: &'h Option<Result<String, ()>>,
    name: &str,
) -> Result<Option<&'h str>, RpcError> {
    match header {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(())) => Err(RpcError::header_mismatch(format!(
            "the {name} header is not readable"
        ))),
    }
}

/// `Mcp-Method` must match the body's method, and `Mcp-Name` its name where the method has
/// one (required where the transport requires it).
pub(super) fn check_routing_headers(
    headers: &RoutingHeaders,
    req: &protocol::Request,
) -> Result<(), RpcError> {
    match readable(&headers.method, "Mcp-Method")? {
        None => {
            return Err(RpcError::header_mismatch(
                "the Mcp-Method header is required",
            ));
        }
        Some(m) if m != req.method => {
            return Err(RpcError::header_mismatch(format!(
                "Mcp-Method {m:?} does not match the body's method {:?}",
                req.method
            )));
        }
        Some(_) => {}
    }
    match protocol::name_source(&req.method, &req.params) {
        NameSource::Body {
            value: body_name,
            required,
        } => match readable(&headers.name, "Mcp-Name")? {
            None if required => Err(RpcError::header_mismatch(
                "the Mcp-Name header is required for this method",
            )),
            Some(n) if n != body_name => Err(RpcError::header_mismatch(
                "Mcp-Name does not match the body",
            )),
            _ => Ok(()),
        },
        NameSource::None => Ok(()),
        NameSource::Missing(field) => Err(RpcError::invalid_params(format!(
            "params.{field} must be a string"
        ))),
    }
}

/// `MCP-Protocol-Version` must be sent, and match the version `_meta` declares.
pub(super) fn check_version_header(
    headers: &RoutingHeaders,
    meta: &RequestMeta,
) -> Result<(), RpcError> {
    match &headers.protocol_version {
        Some(Ok(v)) if *v != meta.protocol_version => Err(RpcError::header_mismatch(format!(
            "MCP-Protocol-Version {v:?} does not match _meta protocolVersion {:?}",
            meta.protocol_version
        ))),
        Some(Err(())) => Err(RpcError::header_mismatch(
            "the MCP-Protocol-Version header is not readable",
        )),
        // Streamable HTTP lists a missing standard header among the validation failures;
        // every real client sends it (interop tests), so strictness costs none.
        None => Err(RpcError::header_mismatch(
            "the MCP-Protocol-Version header is required",
        )),
        Some(Ok(_)) => Ok(()),
    }
}
