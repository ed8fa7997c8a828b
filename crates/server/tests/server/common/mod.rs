//! What this crate's integration tests share: the test helpers of every layer, under one
//! name (cargo feature `testing` of each crate).

// Each test binary uses a different part of them.
#![allow(unused_imports)]

pub(crate) use snodo_core::testing::*;
pub(crate) use snodo_runner::testing::*;
pub(crate) use snodo_server::testing::*;
pub(crate) use snodo_wasm::testing::*;
