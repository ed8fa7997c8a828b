//! Snodo: a durable task host for MCP whose tool bodies are WebAssembly components.
//!
//! The crate is layered so that each part can be read on its own:
//!
//! - [`model`]: the domain model (Task, Work, RetryPolicy, events); pure data and rules.
//! - [`budget`]: per-tenant and global admission budgets (slots and rates).
//! - [`store`]: the [`store::Store`] contract and its adapters (memory, redb).
//! - [`wasm`]: the WebAssembly host: engine, components, sandboxed executions.
//! - [`runner`]: claims, leases, heartbeats, retries, recovery, parking and reaping.
//! - [`protocol`]: MCP 2026-07-28 JSON-RPC envelopes, `_meta`, headers, errors (no I/O).
//! - [`mcp`]: the MCP server: method dispatch, tools, the tasks extension.
//! - [`http`]: Streamable HTTP with axum: headers, limits, auth, SSE.
//! - [`config`]: the TOML configuration file of `snodo serve` and its validation.
//! - [`serve`]: `snodo serve`: the store, the wasm host, the runner and HTTP wired together.
//! - [`telemetry`]: metrics (Prometheus text at `GET /metrics`).
//!
//! See ARCHITECTURE.md for the codemap and the invariants.

pub mod budget;
pub mod config;
pub mod http;
pub mod mcp;
pub mod model;
pub mod protocol;
pub mod runner;
pub mod serve;
pub mod store;
pub mod stress;
pub mod telemetry;
pub mod wasm;
