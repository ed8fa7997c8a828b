//! The host's integration tests, one binary: each module drives real `snodo` processes or the
//! assembled router with real guests and real stores.

mod common;

mod backup;
mod edge;
mod hostile_tenant;
mod layers;
mod multi_node;
mod operators;
mod stress;
mod traces;
