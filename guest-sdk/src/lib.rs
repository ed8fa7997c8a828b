//! Write Snodo tools: WebAssembly components that run as durable MCP tasks.
//!
//! A tool is a type implementing [`Tool`]; a component exports one or more of them with
//! [`export_tools!`]. Build it for `wasm32-wasip2` and point Snodo at the `.wasm` file:
//!
//! ```
//! use serde_json::{Value, json};
//! use snodo_guest::{Context, Outcome, Tool, ToolResult, ToolSpec};
//!
//! struct Greet;
//!
//! impl Tool for Greet {
//!     const NAME: &'static str = "greet";
//!     type Args = Value;
//!
//!     fn spec() -> ToolSpec {
//!         ToolSpec::new(json!({
//!             "type": "object",
//!             "properties": {"name": {"type": "string"}},
//!             "required": ["name"]
//!         }))
//!         .description("Says hello")
//!     }
//!
//!     fn run(_cx: &Context, args: Value) -> Outcome {
//!         let name = args["name"].as_str().unwrap_or("world");
//!         ToolResult::text(format!("Hello, {name}!")).into()
//!     }
//! }
//!
//! snodo_guest::export_tools!(Greet);
//! ```
//!
//! ```sh
//! cargo build --release --target wasm32-wasip2
//! ```
//!
//! # What a tool can rely on
//!
//! - **A fresh instance per execution.** Nothing survives between calls. A task that is
//!   retried or recovered after a crash runs again from the same arguments, so write tools
//!   that can be replayed, and use [`Context::idempotency_key`] to deduplicate external
//!   effects (the key is the same for every attempt of a task).
//! - **Input that survives replays.** [`Context::await_input`] (and [`Context::elicit`])
//!   returns the stored answer at once when the same key and request were answered before,
//!   so a replayed tool does not ask the user twice. Keys are unique for a task's lifetime.
//! - **Cooperative cancellation, then a hard stop.** Poll [`Context::is_cancelled`] (or use
//!   [`Context::sleep`], which does); a tool that ignores it is stopped after a grace period.
//! - **No ambient authority.** Clocks and randomness only; files, network and environment
//!   only where the operator granted them.
//!
//! # Outcomes
//!
//! - A result, possibly with `is_error` set for failures in the tool's own domain
//!   ([`ToolResult::error`]): the call or task *completes*.
//! - An [`RpcError`]: a protocol failure; the task *fails*.
//! - [`Outcome::retry`]: try again after the next delay of the task's retry policy; when the
//!   policy is used up the task fails with the given error.

// The generated bindings name this crate by path, from inside it and from tool crates alike.
extern crate self as snodo_guest;

mod context;
mod glue;
mod result;
mod tool;

pub use context::{
    Cancelled, Context, ElicitAction, Elicited, Form, InputError, InputRequest, LogLevel,
};
pub use result::{Content, Outcome, RpcError, ToolResult};
pub use tool::{Mode, Tool, ToolSpec};

/// The generated WIT bindings. Not a stable interface: use the types above.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "executor",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_executor",
        default_bindings_module: "snodo_guest::bindings",
        runtime_path: "snodo_guest::__private::wit_bindgen::rt",
    });
}

#[doc(hidden)]
pub mod __private {
    pub use crate::glue::*;
    pub use wit_bindgen;
}

/// Exports the listed [`Tool`]s as this component's tools.
///
/// Use it once per component, with every tool the component provides. Names must be
/// unique; the host refuses a component that describes a name twice.
///
/// ```
/// # use serde_json::{Value, json};
/// # use snodo_guest::{Context, Outcome, Tool, ToolResult, ToolSpec};
/// # struct Ping;
/// # impl Tool for Ping {
/// #     const NAME: &'static str = "ping";
/// #     type Args = Value;
/// #     fn spec() -> ToolSpec { ToolSpec::new(json!({"type": "object"})) }
/// #     fn run(_: &Context, _: Value) -> Outcome { ToolResult::text("pong").into() }
/// # }
/// snodo_guest::export_tools!(Ping);
/// ```
#[macro_export]
macro_rules! export_tools {
    ($($tool:ty),+ $(,)?) => {
        #[doc(hidden)]
        pub struct __SnodoExecutor;

        impl $crate::bindings::exports::snodo::tasks::tools::Guest for __SnodoExecutor {
            fn describe() -> ::std::vec::Vec<$crate::bindings::snodo::tasks::types::Tool> {
                ::std::vec![$($crate::__private::describe::<$tool>()),+]
            }

            fn choose_mode(
                tool: ::std::string::String,
                arguments: ::std::string::String,
            ) -> $crate::bindings::snodo::tasks::types::TaskMode {
                $(
                    if tool == <$tool as $crate::Tool>::NAME {
                        return $crate::__private::choose_mode::<$tool>(&arguments);
                    }
                )+
                $crate::bindings::snodo::tasks::types::TaskMode::Sync
            }

            fn prepare(
                tool: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::string::String,
                $crate::bindings::snodo::tasks::types::RpcError,
            > {
                $(
                    if tool == <$tool as $crate::Tool>::NAME {
                        return $crate::__private::prepare::<$tool>(&arguments);
                    }
                )+
                ::std::result::Result::Err($crate::__private::unknown_tool(&tool))
            }

            fn execute(
                work: $crate::bindings::snodo::tasks::types::Work,
            ) -> $crate::bindings::snodo::tasks::types::Outcome {
                $(
                    if work.tool == <$tool as $crate::Tool>::NAME {
                        return $crate::__private::execute::<$tool>(work);
                    }
                )+
                $crate::bindings::snodo::tasks::types::Outcome::Failed(
                    $crate::__private::unknown_tool(&work.tool),
                )
            }
        }

        $crate::bindings::__export_executor!(__SnodoExecutor with_types_in $crate::bindings);
    };
}
