//! Snodo: a durable task host for MCP whose tool bodies are WebAssembly components.
//!
//! This crate is the `snodo` binary's library: its configuration file and its stress
//! harness, over the layers it assembles, re-exported under the names the binary and the
//! end-to-end tests use. Each layer is a crate of its own:
//!
//! - [`model`], [`store`], [`ids`] (`snodo-core`): the domain model and its state machine,
//!   the [`store::Store`] contract, its engine and its adapters (cargo features `redb`,
//!   `sqlite`, `postgres`); randomness, hex and trace ids.
//! - [`wasm`] (`snodo-wasm`): the WebAssembly host: engine, components, sandboxed
//!   executions.
//! - [`runner`], [`budget`] (`snodo-runner`): claims, leases, heartbeats, retries, recovery,
//!   parking and reaping; per-tenant admission budgets.
//! - [`identity`], [`mcp`], [`http`], [`admin`], [`deploy`], [`telemetry`], [`trust`],
//!   [`suggest`], [`serve`] (`snodo-server`): who is calling, the MCP server, Streamable
//!   HTTP, the admin API and console, deployments, metrics, the signature policy, "did you
//!   mean" names, and `snodo serve`'s wiring.
//! - [`config`]: the TOML configuration file of `snodo serve` and its validation.
//! - [`client`]: the small HTTP/1 MCP client the stress harness, the benchmarks and the
//!   end-to-end tests reach a server with.
//! - [`receiver`]: a webhook receiver the stress runs and the benchmarks deliver to.
//! - [`stress`]: `snodo stress`, the invariant-counting workloads.
//!
//! See ARCHITECTURE.md for the codemap and the invariants.

pub use snodo_core::{ids, model, store};
pub use snodo_runner as runner;
pub use snodo_runner::budget;
pub use snodo_server::{
    admin, archive, deploy, gateway, http, identity, mcp, serve, suggest, telemetry, trust,
};
pub use snodo_wasm as wasm;

pub mod client;
pub mod config;
pub mod receiver;
pub mod stress;
