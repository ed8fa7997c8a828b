//! A `tools/call` run on the request path: under the synchronous wall clock, its questions
//! answered from the call's MRTR rounds, its progress and logs streamed ahead of the
//! response to a client that reads a stream.

use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::protocol;
use snodo_runner::CatalogTool;
use snodo_wasm::{AttemptError, Execution, GuestOutcome, Limit};

use super::super::sync_io::Outbox;
use super::super::{Ctx, Handled, McpServer, Reply, SyncIo, mrtr};
use super::{Calling, execution};

/// The execution of a synchronous call of `tool`: its questions are answered from
/// `answers` (or asked of the client), and its progress and logs go down `stream` when the
/// client reads one.
fn sync_execution(
    tool: &CatalogTool,
    arguments: Value,
    answers: Map<String, Value>,
    ctx: &Ctx<'_>,
    stream: Option<&mpsc::Sender<Value>>,
) -> Execution {
    let mut io = SyncIo::for_request(ctx, answers);
    if let Some(tx) = stream {
        io = io.streaming(Outbox {
            tx: tx.clone(),
            progress_token: ctx.meta.progress_token.clone(),
            log_level: ctx.meta.log_level,
        });
    }
    execution(tool, arguments, io, ctx)
}

impl McpServer {
    /// Runs the tool on the request path, under the wall-clock limit of synchronous calls.
    /// What the guest reports streams ahead of the response, to a client whose `Accept`
    /// takes an event stream, when the request asked for it (a progress token or a log
    /// level; a 2025-11-25 session always has a level).
    pub(super) async fn run_sync(&self, calling: Calling<'_>, ctx: &Ctx<'_>) -> Handled<Reply> {
        let started = std::time::Instant::now();
        let tool = calling.tool;
        let (arguments, answers) = (calling.arguments, calling.answers);
        let (key, sealed_for) = (calling.key, calling.sealed_for);
        let slot = match calling.slot {
            Some(s) => s,
            None => self.sync_slot(ctx.principal)?,
        };
        self.metrics().sync_call();
        let streams =
            ctx.accepts_sse && (ctx.meta.progress_token.is_some() || ctx.meta.log_level.is_some());
        let (stream_tx, stream_rx) = if streams {
            let (tx, rx) = mpsc::channel(super::super::STREAM_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let exec = sync_execution(tool, arguments, answers.clone(), ctx, stream_tx.as_ref());
        let component = tool.component.clone();
        let principal = ctx.principal.clone();
        let dialect = ctx.dialect;
        let to_message = move |id: &Value,
                               outcome: Result<GuestOutcome, AttemptError>|
              -> (u16, Value) {
            let error = match outcome {
                Ok(GuestOutcome::Completed(r)) => {
                    return (200, protocol::result_response(id, dialect.complete(r)));
                }
                Err(AttemptError::NeedInput(q)) => {
                    let asked = mrtr::input_required(q, &key, &sealed_for, &principal, &answers);
                    return (200, protocol::result_response(id, asked));
                }
                // A synchronous call has no status to end with: the error is the answer.
                Ok(GuestOutcome::Failed { error: e, .. })
                | Ok(GuestOutcome::Retry { error: e, .. }) => e,
                Err(e) => e.to_rpc_error(),
            };
            (
                dialect.error_status(&error),
                protocol::error_response(id, &error),
            )
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
                let id = ctx.id.clone();
                let metrics = self.tasks().metrics().clone();
                let tool_name = tool.info.name.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    // A client that went away ends the call: the guest is dropped with
                    // `run` when this task returns. What the guest reported is already on
                    // the stream, ahead of the response.
                    tokio::select! {
                        outcome = run => {
                            let (_, message) = to_message(&id, outcome);
                            metrics.operation(
                                "tools/call",
                                Some(tool_name),
                                super::super::Outcome::of(&message).error_type(),
                                started.elapsed(),
                            );
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
                let (status, message) = to_message(ctx.id, outcome);
                Ok(Reply::message(status, &message))
            }
        }
    }
}
