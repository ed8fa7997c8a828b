//! Write Snodo tools: WebAssembly components that run as durable MCP tasks.
//!
//! A tool is a type implementing [`Tool`]; a component exports one or more of them with
//! [`export_tools!`] (or, with resources and prompts, [`export!`]). The input schema is
//! derived from the arguments' type, and the host checks every call against it. Build it
//! for `wasm32-wasip2` and point Snodo at the `.wasm` file (`snodo new NAME` scaffolds a
//! crate that does all of this):
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use snodo_guest::{Context, Outcome, Tool, ToolResult, ToolSpec};
//!
//! /// Who to greet.
//! #[derive(Deserialize, JsonSchema)]
//! struct GreetArgs {
//!     /// Their name.
//!     name: String,
//! }
//!
//! struct Greet;
//!
//! impl Tool for Greet {
//!     const NAME: &'static str = "greet";
//!     type Args = GreetArgs;
//!
//!     fn spec() -> ToolSpec {
//!         ToolSpec::new().description("Says hello")
//!     }
//!
//!     fn run(_cx: &Context, args: GreetArgs) -> Outcome {
//!         ToolResult::text(format!("Hello, {}!", args.name)).into()
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

/// The `title` and `description` builders every spec shares. `$new` is how the doc
/// examples make one.
macro_rules! text_builders {
    ($ty:ident, $new:literal) => {
        impl $ty {
            #[doc = concat!(
                "A human-readable title.\n\n```\nlet spec = snodo_guest::",
                stringify!($ty), "::", $new, ".title(\"Quick report\");\n# let _ = spec;\n```"
            )]
            pub fn title(mut self, title: impl Into<String>) -> Self {
                self.title = Some(title.into());
                self
            }

            #[doc = concat!(
                "What it is for, for models and people.\n\n```\nlet spec = snodo_guest::",
                stringify!($ty), "::", $new, ".description(\"Counts rows\");\n# let _ = spec;\n```"
            )]
            pub fn description(mut self, description: impl Into<String>) -> Self {
                self.description = Some(description.into());
                self
            }
        }
    };
}

mod caller;
mod catalog;
mod context;
mod glue;
pub mod http;
mod result;
mod schema;
mod tool;

pub use caller::{Caller, ModeCall, ModeChoice};
pub use catalog::{Contents, Prompt, PromptResult, PromptSpec, Resource, ResourceSpec, Role, Vars};
pub use context::{
    Cancelled, Context, ElicitAction, Elicited, Form, InputError, InputRequest, LogLevel,
};
pub use result::{Content, Outcome, RpcError, ToolResult};
pub use tool::{ChooseMode, Dispatch, Mode, Prepare, Tool, ToolSpec};

/// The generated WIT bindings. Not a stable interface: use the types above.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "snodo:tasks/executor@0.5.0",
        path: "../wit",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "__export_executor",
        default_bindings_module: "snodo_guest::bindings",
        runtime_path: "snodo_guest::__private::wit_bindgen::rt",
    });
}

#[doc(hidden)]
pub mod __private {
    pub use crate::glue::*;
    pub use schemars;
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
/// #     fn spec() -> ToolSpec { ToolSpec::with_input_schema(json!({"type": "object"})) }
/// #     fn run(_: &Context, _: Value) -> Outcome { ToolResult::text("pong").into() }
/// # }
/// snodo_guest::export_tools!(Ping);
/// ```
#[macro_export]
macro_rules! export_tools {
    ($($tool:ty),+ $(,)?) => {
        $crate::export!(tools: [$($tool),+]);
    };
}

/// Exports the component's tools, resources and prompts (each list optional but `tools`,
/// in this order). Use it once per component; names and URIs must be unique.
///
/// ```
/// # use serde_json::{Value, json};
/// # use snodo_guest::*;
/// # struct Ping;
/// # impl Tool for Ping {
/// #     const NAME: &'static str = "ping";
/// #     type Args = Value;
/// #     fn spec() -> ToolSpec { ToolSpec::with_input_schema(json!({"type": "object"})) }
/// #     fn run(_: &Context, _: Value) -> Outcome { ToolResult::text("pong").into() }
/// # }
/// struct Readme;
/// impl Resource for Readme {
///     const URI: &'static str = "docs://readme";
///     fn spec() -> ResourceSpec { ResourceSpec::new("README").mime_type("text/markdown") }
///     fn read(_: &Context, uri: &str, _: &Vars) -> Result<Vec<Contents>, RpcError> {
///         Ok(vec![Contents::text(uri, "# Hello")])
///     }
/// }
/// struct Hello;
/// impl Prompt for Hello {
///     const NAME: &'static str = "hello";
///     type Args = Value;
///     fn spec() -> PromptSpec { PromptSpec::new().description("Says hello") }
///     fn get(_: &Context, _: Value) -> Result<PromptResult, RpcError> { Ok(PromptResult::user("Hello!")) }
/// }
/// snodo_guest::export!(tools: [Ping], resources: [Readme], prompts: [Hello]);
/// ```
#[macro_export]
macro_rules! export {
    (
        tools: [$($tool:ty),* $(,)?]
        $(, resources: [$($res:ty),* $(,)?])?
        $(, prompts: [$($prompt:ty),* $(,)?])?
        $(,)?
    ) => {
        #[doc(hidden)]
        pub struct __SnodoExecutor;

        impl $crate::bindings::exports::snodo::tasks0_1_0::tools::Guest for __SnodoExecutor {
            fn describe() -> ::std::vec::Vec<$crate::bindings::snodo::tasks0_1_0::types::Tool> {
                #[allow(unused_imports)]
                use $crate::__private::{HasChooseMode as _, HasPrepare as _, LacksChooseMode as _, LacksPrepare as _};
                ::std::vec![$($crate::__private::describe::<$tool>(
                    (&$crate::__private::Hooks::<$tool>::new()).has_mode_rule(),
                    (&$crate::__private::Hooks::<$tool>::new()).has_prepare(),
                )),*]
            }

            fn choose_mode(
                tool: ::std::string::String,
                arguments: ::std::string::String,
            ) -> $crate::bindings::snodo::tasks0_1_0::types::TaskMode {
                #[allow(unused_imports)]
                use $crate::__private::{HasChooseMode as _, LacksChooseMode as _};
                let _ = (&tool, &arguments);
                $(
                    if tool == <$tool as $crate::Tool>::NAME {
                        return (&$crate::__private::Hooks::<$tool>::new()).choose_mode(&arguments);
                    }
                )*
                $crate::bindings::snodo::tasks0_1_0::types::TaskMode::Sync
            }

            fn prepare(
                tool: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::string::String,
                $crate::bindings::snodo::tasks0_1_0::types::RpcError,
            > {
                #[allow(unused_imports)]
                use $crate::__private::{HasPrepare as _, LacksPrepare as _};
                let _ = &arguments;
                $(
                    if tool == <$tool as $crate::Tool>::NAME {
                        return (&$crate::__private::Hooks::<$tool>::new()).prepare(&arguments);
                    }
                )*
                ::std::result::Result::Err($crate::__private::unknown_tool(&tool))
            }

            fn execute(
                work: $crate::bindings::snodo::tasks0_1_0::types::Work,
            ) -> $crate::bindings::snodo::tasks0_1_0::types::Outcome {
                $(
                    if work.tool == <$tool as $crate::Tool>::NAME {
                        return $crate::__private::execute::<$tool>(work);
                    }
                )*
                $crate::bindings::snodo::tasks0_1_0::types::Outcome::Failed(
                    $crate::__private::unknown_tool(&work.tool),
                )
            }
        }

        impl $crate::bindings::exports::snodo::tasks0_4_0::modes::Guest for __SnodoExecutor {
            fn choose(
                call: $crate::bindings::exports::snodo::tasks0_4_0::modes::Call,
            ) -> $crate::bindings::exports::snodo::tasks0_4_0::modes::Choice {
                #[allow(unused_imports)]
                use $crate::__private::{HasChooseMode as _, LacksChooseMode as _};
                $(
                    if call.tool == <$tool as $crate::Tool>::NAME {
                        return (&$crate::__private::Hooks::<$tool>::new()).choose(call);
                    }
                )*
                $crate::__private::unknown_choice()
            }
        }

        impl $crate::bindings::exports::snodo::tasks0_3_0::execution::Guest for __SnodoExecutor {
            fn execute(
                work: $crate::bindings::snodo::tasks0_1_0::types::Work,
            ) -> $crate::bindings::snodo::tasks0_3_0::outcomes::Outcome {
                $(
                    if work.tool == <$tool as $crate::Tool>::NAME {
                        return $crate::__private::execute_v3::<$tool>(work);
                    }
                )*
                $crate::bindings::snodo::tasks0_3_0::outcomes::Outcome::Failed(
                    $crate::bindings::snodo::tasks0_3_0::outcomes::Failure {
                        error: $crate::__private::unknown_tool(&work.tool),
                        status_message: ::std::option::Option::None,
                    },
                )
            }
        }

        $crate::__export_catalog!(
            resources: [$($($res),*)?],
            prompts: [$($($prompt),*)?]
        );

        $crate::bindings::__export_executor!(__SnodoExecutor with_types_in $crate::bindings);
    };
}

/// Exports a [`Dispatch`] type as this component's executor: it describes the type's own
/// tool, and runs every call, of whatever tool the host names, through
/// [`Dispatch::dispatch`]. It serves no resources or prompts. Use it once per component,
/// instead of [`export!`].
#[macro_export]
macro_rules! export_dispatch {
    ($ty:ty) => {
        #[doc(hidden)]
        pub struct __SnodoExecutor;

        impl $crate::bindings::exports::snodo::tasks0_1_0::tools::Guest for __SnodoExecutor {
            fn describe() -> ::std::vec::Vec<$crate::bindings::snodo::tasks0_1_0::types::Tool> {
                ::std::vec![$crate::__private::describe::<$ty>(false, false)]
            }

            fn choose_mode(
                _tool: ::std::string::String,
                _arguments: ::std::string::String,
            ) -> $crate::bindings::snodo::tasks0_1_0::types::TaskMode {
                $crate::bindings::snodo::tasks0_1_0::types::TaskMode::Sync
            }

            fn prepare(
                _tool: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::string::String,
                $crate::bindings::snodo::tasks0_1_0::types::RpcError,
            > {
                ::std::result::Result::Ok(arguments)
            }

            fn execute(
                work: $crate::bindings::snodo::tasks0_1_0::types::Work,
            ) -> $crate::bindings::snodo::tasks0_1_0::types::Outcome {
                $crate::__private::dispatch_v1::<$ty>(work)
            }
        }

        impl $crate::bindings::exports::snodo::tasks0_4_0::modes::Guest for __SnodoExecutor {
            fn choose(
                _call: $crate::bindings::exports::snodo::tasks0_4_0::modes::Call,
            ) -> $crate::bindings::exports::snodo::tasks0_4_0::modes::Choice {
                $crate::__private::unknown_choice()
            }
        }

        impl $crate::bindings::exports::snodo::tasks0_3_0::execution::Guest for __SnodoExecutor {
            fn execute(
                work: $crate::bindings::snodo::tasks0_1_0::types::Work,
            ) -> $crate::bindings::snodo::tasks0_3_0::outcomes::Outcome {
                $crate::__private::dispatch_v3::<$ty>(work)
            }
        }

        $crate::__export_catalog!(resources: [], prompts: []);

        $crate::bindings::__export_executor!(__SnodoExecutor with_types_in $crate::bindings);
    };
}

/// The catalog interface of a component exported by [`export!`] or [`export_dispatch!`]:
/// the listed resources and prompts (none for a dispatching component). Not a stable
/// interface.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_catalog {
    (resources: [$($res:ty),* $(,)?], prompts: [$($prompt:ty),* $(,)?]) => {
        impl $crate::bindings::exports::snodo::tasks0_2_0::catalog::Guest for __SnodoExecutor {
            fn describe_catalog() -> $crate::bindings::snodo::tasks0_2_0::catalog_types::Catalog {
                #[allow(unused_mut)]
                let mut c = $crate::__private::empty_catalog();
                $($crate::__private::add_resource::<$res>(&mut c);)*
                $($crate::__private::add_prompt::<$prompt>(&mut c);)*
                c
            }

            fn read_resource(
                request: $crate::bindings::snodo::tasks0_2_0::catalog_types::ResourceRequest,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::bindings::snodo::tasks0_2_0::catalog_types::ResourceContents>,
                $crate::bindings::snodo::tasks0_1_0::types::RpcError,
            > {
                $(
                    if $crate::__private::resource_matches::<$res>(&request) {
                        return $crate::__private::read_resource::<$res>(request);
                    }
                )*
                ::std::result::Result::Err($crate::__private::unknown_resource(&request.uri))
            }

            fn get_prompt(
                name: ::std::string::String,
                arguments: ::std::string::String,
            ) -> ::std::result::Result<
                $crate::bindings::snodo::tasks0_2_0::catalog_types::PromptResult,
                $crate::bindings::snodo::tasks0_1_0::types::RpcError,
            > {
                let _ = &arguments;
                $(
                    if name == <$prompt as $crate::Prompt>::NAME {
                        return $crate::__private::get_prompt::<$prompt>(&arguments);
                    }
                )*
                ::std::result::Result::Err($crate::__private::unknown_prompt(&name))
            }

            fn complete(
                target: $crate::bindings::snodo::tasks0_2_0::catalog_types::CompletionRef,
                argument: ::std::string::String,
                value: ::std::string::String,
                context: ::std::string::String,
            ) -> ::std::result::Result<
                $crate::bindings::snodo::tasks0_2_0::catalog_types::Completion,
                $crate::bindings::snodo::tasks0_1_0::types::RpcError,
            > {
                use $crate::bindings::snodo::tasks0_2_0::catalog_types::CompletionRef;
                let _ = (&argument, &value, &context);
                match &target {
                    CompletionRef::Prompt(name) => {
                        let _ = name;
                        $(
                            if name == <$prompt as $crate::Prompt>::NAME {
                                return ::std::result::Result::Ok(
                                    $crate::__private::complete_prompt::<$prompt>(&argument, &value, &context),
                                );
                            }
                        )*
                    }
                    CompletionRef::ResourceTemplate(template) => {
                        let _ = template;
                        $(
                            if template == <$res as $crate::Resource>::URI {
                                return ::std::result::Result::Ok(
                                    $crate::__private::complete_resource::<$res>(&argument, &value),
                                );
                            }
                        )*
                    }
                }
                ::std::result::Result::Ok($crate::__private::no_completion())
            }
        }
    };
}
