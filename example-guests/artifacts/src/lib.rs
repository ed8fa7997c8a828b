//! Paths of the example guest components, built by this crate's build script.

include!(concat!(env!("OUT_DIR"), "/guests.rs"));
