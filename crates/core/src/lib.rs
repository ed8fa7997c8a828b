//! The core of Snodo: the domain model and its state machine ([`model`]), and the task
//! store ([`store`]): the [`store::Store`] contract, the engine that states its rules once,
//! and the adapters (memory always; `redb`, `sqlite` and `postgres` as cargo features).
//! Randomness, lowercase hex and trace and span ids have one home, [`ids`].
//!
//! Nothing here runs guests or speaks the wire: the store never calls into wasm or MCP.

pub mod config;
pub mod ids;
pub mod model;
pub mod spans;
pub mod store;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
