//! What a request is answered with ([`Reply`]), and how its operation ended ([`Outcome`]),
//! as the transport sends it and the metrics and spans record it.

use serde_json::Value;
use tokio::sync::mpsc;

use crate::protocol::{self, RpcError};

/// What to send back.
pub enum Reply {
    /// One JSON body with an HTTP status.
    Json {
        /// The HTTP status.
        status: u16,
        /// The JSON-RPC message, serialized.
        body: Vec<u8>,
        /// How it ended, for `mcp_server_operation_duration_seconds`.
        outcome: Outcome,
    },
    /// A notification or response was received: 202, no body.
    Accepted,
    /// The answer to a 2025-11-25 `initialize`: the body, with the session id to send as
    /// `Mcp-Session-Id`.
    Initialized {
        /// `Mcp-Session-Id`.
        session: String,
        /// The JSON-RPC response, serialized.
        body: Vec<u8>,
    },
    /// 403: the caller lacks a scope the operation needs; the transport adds the
    /// `insufficient_scope` challenge naming every scope in `needed`.
    InsufficientScope {
        /// Every scope the operation needs.
        needed: Vec<String>,
        /// The JSON-RPC error, serialized.
        body: Vec<u8>,
    },
    /// An SSE stream: notifications, then the response (or, for subscriptions, until the
    /// client goes away). Bounded: a client that stops reading holds up its producer (which
    /// coalesces or drops what it cannot queue), never the server's memory.
    Stream(mpsc::Receiver<Value>),
}

/// How an operation ended, as the OpenTelemetry MCP conventions' `error.type` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// A result (a created task included).
    #[default]
    Ok,
    /// A JSON-RPC error with this code.
    Error(i64),
    /// A tool result with `isError: true`: an error in the tool's own domain.
    ToolError,
}

impl Outcome {
    /// How the JSON-RPC response `message` ended.
    pub(crate) fn of(message: &Value) -> Self {
        if let Some(code) = message["error"]["code"].as_i64() {
            Outcome::Error(code)
        } else if message["result"]["isError"] == Value::Bool(true) {
            Outcome::ToolError
        } else {
            Outcome::Ok
        }
    }

    /// Its `error.type` label: none for a result, the JSON-RPC error code, or `tool_error`.
    pub fn error_type(self) -> Option<String> {
        match self {
            Outcome::Ok => None,
            Outcome::Error(code) => Some(code.to_string()),
            Outcome::ToolError => Some("tool_error".to_owned()),
        }
    }
}

impl Reply {
    pub(super) fn result(id: &Value, result: impl serde::Serialize) -> Self {
        Reply::Json {
            status: 200,
            body: protocol::result_bytes(id, &result),
            outcome: Outcome::Ok,
        }
    }

    pub(super) fn error(id: &Value, e: &RpcError) -> Self {
        Self::error_with_status(protocol::http_status(e), id, e)
    }

    pub(super) fn error_with_status(status: u16, id: &Value, e: &RpcError) -> Self {
        Reply::Json {
            status,
            body: protocol::error_bytes(id, e),
            outcome: Outcome::Error(e.code),
        }
    }

    /// A message already built as a JSON tree.
    pub(super) fn message(status: u16, message: &Value) -> Self {
        Reply::Json {
            status,
            body: protocol::message_bytes(message),
            outcome: Outcome::of(message),
        }
    }

    /// How the operation this reply answers ended.
    pub(super) fn outcome(&self) -> Outcome {
        match self {
            Reply::Json { outcome, .. } => *outcome,
            Reply::InsufficientScope { .. } => Outcome::Error(protocol::codes::INVALID_REQUEST),
            Reply::Accepted | Reply::Initialized { .. } | Reply::Stream(_) => Outcome::Ok,
        }
    }
}
