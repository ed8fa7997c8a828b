//! RFC 3339 timestamps for the wire, from store milliseconds: the model's own formatting.

pub use snodo_core::model::rfc3339;
