//! Shared by the binary's integration tests: the test helpers of every layer (cargo feature
//! `testing` of each crate), and driving the `snodo` binary as a process (`process`).

// Each test binary uses a different part of this module.
#![allow(dead_code, unused_imports)]

pub(crate) mod process;

pub(crate) use snodo_core::testing::*;
pub(crate) use snodo_runner::testing::*;
pub(crate) use snodo_server::testing::*;
pub(crate) use snodo_wasm::testing::*;
