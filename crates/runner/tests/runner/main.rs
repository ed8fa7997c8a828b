//! The runner's integration tests, one binary: real guests on real stores.

mod common;

mod outbound;
mod runs;
mod sleeps;
mod wasm_task_input;
