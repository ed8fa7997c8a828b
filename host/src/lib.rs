//! Snodo: a durable task host for MCP whose tool bodies are WebAssembly components.
//!
//! The crate is layered so that each part can be read on its own:
//!
//! - [`model`]: the domain model (Task, Work, RetryPolicy, events); pure data and rules.
//! - [`store`]: the [`store::Store`] contract and its adapters (memory, redb).
//! - [`wasm`]: the WebAssembly host: engine, components, sandboxed executions.
//! - [`runner`]: claims, leases, heartbeats, retries, recovery, parking and reaping.
//! - [`bench`]: measurements the `snodo bench` command prints.
//!
//! See ARCHITECTURE.md for the codemap and the invariants.

pub mod bench;
pub mod model;
pub mod runner;
pub mod store;
pub mod wasm;
