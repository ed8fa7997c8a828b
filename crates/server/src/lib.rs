//! Snodo's edge: the MCP server over Streamable HTTP, and `snodo serve`'s wiring.
//!
//! - `protocol`: MCP 2026-07-28 JSON-RPC envelopes, `_meta`, headers, errors (no I/O; the
//!   crate's own vocabulary, of which only [`PROTOCOL_VERSION`] and [`rfc3339`] are public).
//! - [`mcp`]: the MCP server: method dispatch, tools, resources, prompts, the tasks
//!   extension, and the 2025-11-25 handshake revisions beside it.
//! - [`identity`]: who is calling: callers and scopes, static tokens, the OAuth resource
//!   server (below `mcp`, `admin` and `http`, which all read it).
//! - [`http`]: Streamable HTTP: headers, limits, authentication, SSE, the connection loop.
//! - [`admin`]: operators: the admin API (`/admin/v1`) and the console (`/console`), over
//!   the same task operations as the MCP server, never through it.
//! - [`archive`]: tasks past their TTL kept in a directory or an S3-compatible bucket by
//!   the reaper before it removes them, and read back by id.
//! - [`telemetry`]: metrics (Prometheus text at `GET /metrics`).
//! - `tasks`: the task operations the MCP server and the operators share: the store, the
//!   runner hand-off after each commit, the change feed and the stream budget.
//! - `schedules`: operators' recurring tool calls, fired once across nodes by a loop every
//!   node runs, each firing's task created with its schedule's move in one commit.
//! - `webhooks`: tenants' subscriptions to task events, delivered from the store's outbox
//!   by a loop every node runs, signed per Standard Webhooks, retried, dead-lettered.
//! - [`serve`]: the store, the wasm host, the runner and HTTP wired together.
//! - [`deploy`]: the store's deployments on a serving node: loaded, swapped, followed.
//! - [`trust`]: the optional signature policy components are checked against.
//! - [`suggest`]: the nearest valid name to a mistyped one, for errors.

pub mod admin;
pub mod archive;
pub mod deploy;
pub mod gateway;
pub mod http;
pub mod identity;
pub mod mcp;
mod protocol;
mod schedules;
pub mod serve;
pub mod suggest;
mod tasks;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trust;
mod webhooks;

pub use protocol::{PROTOCOL_VERSION, rfc3339};
pub use schedules::{Pass, ScheduleError};
pub use webhooks::{Round, WebhookDeclaration, WebhookError, WebhookSettings};
