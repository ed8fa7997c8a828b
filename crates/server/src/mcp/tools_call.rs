//! `tools/call`: the sync path, MRTR, and task creation.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::protocol::{self, RequestMeta, RpcError};
use snodo_core::model::ClientCapabilities;
use snodo_core::model::{Principal, TaskId, TaskView};
use snodo_core::store::{NewTask, StoreError};
use snodo_runner::budget::{Over, Refusal, Slot};
use snodo_runner::tool_call_work;
use snodo_wasm::{AttemptError, Execution, ExecutionIo, GuestOutcome, Limit, TaskMode};

use super::catalog_calls::object_field;
use super::mrtr::{self, given_answers};
use super::sync_io::Outbox;
use super::{McpServer, Reply, Revision, SyncIo, legacy, wire};

fn attempt_error(e: &AttemptError) -> RpcError {
    e.to_rpc_error()
}

impl McpServer {
    fn tool(&self, name: &str) -> Option<&snodo_runner::CatalogTool> {
        self.config.catalog.tool(name)
    }

    /// A slot for running a guest on the request path, or the refusal as a JSON-RPC error.
    pub(super) fn sync_slot(&self, principal: &Principal) -> Result<Slot, RpcError> {
        self.sync_slots
            .try_acquire(principal.tenant.as_str())
            .map_err(|r| self.refuse(&r))
    }

    pub(super) async fn tools_call(
        &self,
        req: &protocol::Request,
        meta: &RequestMeta,
        principal: &Principal,
        accepts_sse: bool,
        revision: Revision,
    ) -> Result<Reply, RpcError> {
        let id = &req.id;
        // One slot covers every guest execution of this request (mode rule, prepare, the
        // call itself); taken at the first and held until the reply is complete.
        let mut slot: Option<Slot> = None;
        let name = req
            .params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let tool = self
            .tool(name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown tool: {name}")))?;
        let arguments = Value::Object(object_field(&req.params, "arguments")?);
        // Checked before anything is decided: a bad call is -32602 on the call in every
        // mode, and no task, slot or guest is spent on it.
        tool.component
            .check_arguments(&tool.info.name, &arguments)?;
        let key = self.server_key().await?;
        let responses = given_answers(&req.params, &key, &tool.info.name, principal)?;
        // Capabilities the tool needs are checked before it runs.
        if let Some(required) = &tool.info.required_capabilities
            && !ClientCapabilities::of(&meta.client_capabilities).covers(required)
        {
            return Err(RpcError::missing_capability(required.clone()));
        }
        let declares = meta.declares_tasks();
        let mode = match tool.mode {
            Some(m) => m,
            None if tool.info.has_mode_rule && tool.info.mode == TaskMode::Optional => {
                slot = Some(self.sync_slot(principal)?);
                self.within_wall_clock(tool.component.choose_mode(&tool.info.name, &arguments))
                    .await?
                    .map_err(|e| attempt_error(&e))?
            }
            None => tool.info.mode,
        };
        if mode == TaskMode::Required && !declares {
            return Err(match revision {
                Revision::Current => RpcError::tasks_required(),
                Revision::Handshake => RpcError {
                    message: format!(
                        "tool {name:?} runs only as a task: tasks need MCP 2026-07-28 and the \
                         io.modelcontextprotocol/tasks extension, and this session speaks {}",
                        meta.protocol_version
                    ),
                    ..RpcError::tasks_required()
                },
            });
        }
        let as_task = declares && mode != TaskMode::Sync;
        let caps = meta.client_capabilities.clone();

        // The input phase before a task exists: MRTR round trips, answered synchronously.
        let mut arguments = arguments;
        if as_task && tool.info.has_prepare {
            if slot.is_none() {
                slot = Some(self.sync_slot(principal)?);
            }
            let io: Arc<dyn ExecutionIo> = Arc::new(SyncIo::new(responses.clone(), caps.clone()));
            let mut exec = Execution::new(&tool.info.name, arguments.clone(), io);
            exec.grants = tool.grants.clone();
            exec.limits = tool.limits;
            match self.within_wall_clock(tool.component.prepare(exec)).await? {
                Ok(Ok(prepared)) => arguments = prepared,
                Ok(Err(e)) => return Err(e),
                Err(AttemptError::NeedInput(q)) => {
                    let asked =
                        mrtr::input_required(q, &key, &tool.info.name, principal, &responses);
                    return Ok(Reply::result(id, asked));
                }
                Err(e) => return Err(attempt_error(&e)),
            }
        }
        if as_task {
            // The task's own run takes a runner slot; the request's is done.
            drop(slot.take());
            self.creates
                .try_take(principal.tenant.as_str())
                .map_err(|r| self.refuse(&r))?;
            let task_id = TaskId::generate();
            // Pinned to the code the task was created against (runner.component_policy
            // decides what recovery does if that version is gone).
            let work = tool_call_work(&task_id, &tool.info.name, arguments)
                .with_component_digest(tool.component.info().digest.clone())
                .with_retry_policy(tool.retry_policy.clone())
                .with_limits(tool.limits)
                .with_principal(principal.clone());
            let mut new = NewTask::new(task_id, principal.scope(), work);
            new.ttl_ms = tool.ttl_ms;
            new.poll_interval_ms = Some(tool.poll_interval_ms);
            // The capability set only: never the request's _meta.
            new.client_capabilities = caps;
            new.max_live_in_scope = Some(self.config.limits.live_tasks_per_tenant);
            // Created and, with a free execution slot, claimed and started in one commit.
            let task = match self.runner.create(new).await {
                Ok(t) => t,
                Err(StoreError::LiveLimit { max }) => {
                    return Err(self.refuse(&Refusal {
                        limit: "limits.live_tasks_per_tenant",
                        max,
                        over: Over::Tenant,
                    }));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "task creation failed");
                    return Err(RpcError::internal(
                        "the task could not be created: the task store is unavailable",
                    ));
                }
            };
            self.metrics.task_created();
            return Ok(Reply::result(
                id,
                wire::create_task_result(&TaskView::of(&task)),
            ));
        }

        // Synchronous: progress goes out on an SSE stream when the request asked for it.
        let slot = match slot {
            Some(s) => s,
            None => self.sync_slot(principal)?,
        };
        self.metrics.sync_call();
        // What the guest reports streams ahead of the response, to a client whose `Accept`
        // takes an event stream, when the request asked for it (2026-07-28: a progress token
        // or a log level) or may be asked something on it (2025-11-25).
        let streams = accepts_sse
            && match revision {
                Revision::Current => meta.progress_token.is_some() || meta.log_level.is_some(),
                Revision::Handshake => true,
            };
        let (stream_tx, stream_rx) = if streams {
            let (tx, rx) = mpsc::channel(super::STREAM_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let answered = responses.clone();
        let mut io = SyncIo::new(responses, caps);
        if revision == Revision::Handshake {
            io = io.asking(self.outstanding.clone(), principal.clone());
        }
        if let Some(tx) = &stream_tx {
            io = io.streaming(Outbox {
                tx: tx.clone(),
                progress_token: meta.progress_token.clone(),
                log_level: meta.log_level,
            });
        }
        let io: Arc<dyn ExecutionIo> = Arc::new(io);
        let mut exec = Execution::new(&tool.info.name, arguments, io);
        exec.grants = tool.grants.clone();
        exec.limits = tool.limits;
        let component = tool.component.clone();
        let tool_name = tool.info.name.clone();
        let principal = principal.clone();
        // 2025-11-25 clients read a JSON-RPC error from a 200 response.
        let status_of = move |e: &RpcError| match revision {
            Revision::Current => protocol::http_status(e),
            Revision::Handshake => 200,
        };
        let to_message = move |id: &Value,
                               outcome: Result<GuestOutcome, AttemptError>|
              -> (u16, Value) {
            match outcome {
                Ok(GuestOutcome::Completed(r)) => {
                    let r = match revision {
                        Revision::Current => protocol::complete(r),
                        Revision::Handshake => legacy::plain(Value::Object(r)),
                    };
                    (200, protocol::result_response(id, r))
                }
                Ok(GuestOutcome::Failed(e)) | Ok(GuestOutcome::Retry { error: e, .. }) => {
                    (status_of(&e), protocol::error_response(id, &e))
                }
                Err(AttemptError::NeedInput(q)) => {
                    let asked = mrtr::input_required(q, &key, &tool_name, &principal, &answered);
                    (200, protocol::result_response(id, asked))
                }
                Err(e) => {
                    let e = attempt_error(&e);
                    (status_of(&e), protocol::error_response(id, &e))
                }
            }
        };
        let wall = Duration::from_millis(self.config.limits.sync_timeout_ms);
        let run = async move {
            match tokio::time::timeout(wall, component.execute(exec)).await {
                Ok(report) => report.outcome,
                // Dropping the execution's future drops its guest.
                Err(_) => Err(AttemptError::Limit(Limit::WallClock {
                    ms: wall.as_millis() as u64,
                })),
            }
        };
        match (stream_tx, stream_rx) {
            (Some(tx), Some(rx)) => {
                let id = id.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    // A client that went away ends the call: the guest is dropped with
                    // `run` when this task returns. What the guest reported is already on
                    // the stream, ahead of the response.
                    tokio::select! {
                        outcome = run => {
                            let (_, message) = to_message(&id, outcome);
                            let _ = tx.send(message).await;
                        }
                        () = tx.closed() => {}
                    }
                });
                Ok(Reply::Stream(rx))
            }
            _ => {
                // The transport drops this future when the client disconnects, which
                // drops the guest with it.
                let outcome = run.await;
                drop(slot);
                let (status, message) = to_message(id, outcome);
                Ok(Reply::message(status, &message))
            }
        }
    }

    /// Runs a request-path guest call under the wall-clock limit of synchronous calls.
    pub(super) async fn within_wall_clock<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, AttemptError>>,
    ) -> Result<Result<T, AttemptError>, RpcError> {
        let ms = self.config.limits.sync_timeout_ms;
        match tokio::time::timeout(Duration::from_millis(ms), fut).await {
            Ok(r) => Ok(r),
            Err(_) => Err(attempt_error(&AttemptError::Limit(Limit::WallClock { ms }))),
        }
    }
}
