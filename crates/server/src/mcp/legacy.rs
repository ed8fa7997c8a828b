//! MCP 2025-11-25 (and the handshake revisions before it) beside 2026-07-28, on the same
//! endpoint: the `initialize` handshake, `ping`, `logging/setLevel`, and the same tools.
//!
//! A request belongs to this revision when its `MCP-Protocol-Version` header names one of
//! [`HANDSHAKE_VERSIONS`], or when it is an `initialize` that carries no 2026-07-28 marks
//! (no version header, no `Mcp-Method`, no `_meta` version): that is how a client of these
//! revisions opens. Everything else is 2026-07-28, where `initialize` is a removed method.
//!
//! The tasks extension is 2026-07-28 only: here an optional tool runs synchronously and a
//! tool that runs only as a task answers with an error that names what the client lacks.
//! A tool's questions go to the client as server requests on the call's event stream
//! (elicitation, sampling, roots), the way this revision asks them.

use serde_json::{Map, Value, json};

use crate::protocol::{self, LogLevel, RequestMeta, RpcError};
use snodo_core::model::Principal;

use super::catalog_calls::object_field;
use super::session::{HANDSHAKE_VERSIONS, Session};
use super::{Asking, McpServer, Reply, Revision, RoutingHeaders};

/// A request of a handshake revision, with its session.
pub(super) struct Call<'a> {
    /// The session the request names (or the empty one, for a client that keeps none).
    pub(super) session: Session,
    /// Its `Mcp-Session-Id`, when it sent one.
    pub(super) session_id: Option<&'a str>,
}

impl Call<'_> {
    /// What the session declared, as the per-request metadata the shared handlers read.
    fn meta(&self, progress_token: Option<Value>) -> RequestMeta {
        RequestMeta {
            protocol_version: self.session.version.clone(),
            client_capabilities: self.session.capabilities.clone(),
            progress_token,
            log_level: None,
        }
    }
}

/// Whether a request speaks a handshake revision rather than 2026-07-28.
pub(super) fn speaks_handshake(headers: &RoutingHeaders, req: &protocol::Request) -> bool {
    let stateless = req
        .params
        .get("_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .is_some();
    // Without a version header, a request that has none of 2026-07-28's marks either (no
    // `Mcp-Method`, no `_meta` version) comes from a client of the handshake revisions:
    // its `initialize`, or a later request of a client that predates the header.
    !stateless
        && match &headers.protocol_version {
            Some(Ok(v)) => HANDSHAKE_VERSIONS.contains(&v.as_str()),
            Some(Err(())) => false,
            None => headers.method.is_none(),
        }
}

/// The result shape of these revisions: 2026-07-28's `resultType` and caching hints are
/// not part of it.
pub(super) fn plain(mut result: Value) -> Value {
    if let Some(m) = result.as_object_mut() {
        m.remove("resultType");
        m.remove("ttlMs");
        m.remove("cacheScope");
    }
    result
}

impl McpServer {
    /// Serves one request of a handshake revision.
    pub(super) async fn dispatch_handshake(
        &self,
        headers: &RoutingHeaders,
        principal: &Principal,
        req: protocol::Request,
    ) -> Result<Reply, RpcError> {
        let id = req.id.clone();
        if req.method == "initialize" {
            return self.initialize(principal, &req).await;
        }
        let key = self.server_key().await?;
        let session_id = match &headers.session {
            None => None,
            Some(Ok(s)) => Some(s.as_str()),
            Some(Err(())) => {
                return Err(RpcError::invalid_params(
                    "the Mcp-Session-Id header is not readable",
                ));
            }
        };
        let session = match session_id {
            // A client that keeps no session declared nothing it can rely on.
            None => Session {
                version: HANDSHAKE_VERSIONS[0].to_owned(),
                capabilities: json!({}),
            },
            Some(s) => {
                match Session::open(&key, principal, s).filter(|_| !self.sessions.ended(s)) {
                    Some(session) => session,
                    // Not issued here, issued to someone else, or ended: the client starts a
                    // new session.
                    None => {
                        return Ok(Reply::error_with_status(
                            404,
                            &id,
                            &RpcError::new(
                                protocol::codes::INVALID_REQUEST,
                                "unknown session: send initialize to start a new one",
                            ),
                        ));
                    }
                }
            }
        };
        let call = Call {
            session,
            session_id,
        };
        let result = match req.method.as_str() {
            "ping" => json!({}),
            "logging/setLevel" => self.set_level(&call, &req.params)?,
            "tools/list" => plain(self.tools_list()),
            "tools/call" => {
                return self
                    .handshake_tools_call(&req, &call, principal, headers)
                    .await;
            }
            "resources/list" => self.resources_list(Revision::Handshake),
            "resources/templates/list" => self.resource_templates_list(Revision::Handshake),
            "resources/read" => {
                let meta = call.meta(None);
                self.resources_read(Asking(&req.params, &meta, principal, Revision::Handshake))
                    .await?
            }
            // Served resources are read on demand and carry no change signal, so the
            // capability says `subscribe: false`; a client that subscribes anyway is
            // answered (for a resource that exists) and never sent an update.
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = req
                    .params
                    .get("uri")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if self.config.catalog.resource_source(uri).is_none() {
                    return Err(RpcError::invalid_params("Resource not found")
                        .with_data(json!({"uri": uri})));
                }
                json!({})
            }
            "prompts/list" => self.prompts_list(Revision::Handshake),
            "prompts/get" => {
                let meta = call.meta(None);
                self.prompts_get(Asking(&req.params, &meta, principal, Revision::Handshake))
                    .await?
            }
            "completion/complete" => self.complete(&req.params, Revision::Handshake).await?,
            other => return Err(RpcError::method_not_found(other)),
        };
        Ok(Reply::result(&id, result))
    }

    async fn initialize(
        &self,
        principal: &Principal,
        req: &protocol::Request,
    ) -> Result<Reply, RpcError> {
        let requested = req
            .params
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("params.protocolVersion must be a string"))?;
        let capabilities = Value::Object(object_field(&req.params, "capabilities")?);
        // The client's version when served, else the newest: the client decides whether
        // it can speak that.
        let version = HANDSHAKE_VERSIONS
            .iter()
            .find(|v| **v == requested)
            .unwrap_or(&HANDSHAKE_VERSIONS[0]);
        let session = Session {
            version: (*version).to_owned(),
            capabilities,
        };
        let key = self.server_key().await?;
        let session_id = session.issue(&key, principal);
        let result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"subscribe": false, "listChanged": false},
                "prompts": {"listChanged": false},
                "completions": {},
                "logging": {},
            },
            "serverInfo": {"name": self.config.name, "version": self.config.version},
            "instructions": "Tools that run as durable tasks need MCP 2026-07-28 with the \
                io.modelcontextprotocol/tasks extension; on this revision they run synchronously \
                where they allow it.",
        });
        Ok(Reply::Initialized {
            session: session_id,
            body: protocol::result_bytes(&req.id, &result),
        })
    }

    fn set_level(&self, call: &Call<'_>, params: &Map<String, Value>) -> Result<Value, RpcError> {
        let level = params
            .get("level")
            .and_then(Value::as_str)
            .and_then(LogLevel::parse)
            .ok_or_else(|| {
                RpcError::invalid_params(
                    "params.level must be one of debug, info, notice, warning, error, \
                     critical, alert, emergency",
                )
            })?;
        if let Some(id) = call.session_id {
            self.sessions.set_level(id, level);
        }
        Ok(json!({}))
    }

    async fn handshake_tools_call(
        &self,
        req: &protocol::Request,
        call: &Call<'_>,
        principal: &Principal,
        headers: &RoutingHeaders,
    ) -> Result<Reply, RpcError> {
        let progress_token = match req.params.get("_meta").and_then(|m| m.get("progressToken")) {
            None | Some(Value::Null) => None,
            Some(t @ (Value::String(_) | Value::Number(_))) => Some(t.clone()),
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "progressToken must be a string or a number",
                ));
            }
        };
        let meta = RequestMeta {
            protocol_version: call.session.version.clone(),
            client_capabilities: call.session.capabilities.clone(),
            progress_token,
            // Until the session sets a level, the client gets notices and worse.
            log_level: Some(
                call.session_id
                    .and_then(|id| self.sessions.level(id))
                    .unwrap_or(LogLevel::Notice),
            ),
        };
        self.tools_call(
            req,
            &meta,
            principal,
            headers.accepts_sse,
            super::Revision::Handshake,
        )
        .await
    }
}
