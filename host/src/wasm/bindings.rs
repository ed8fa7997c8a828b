//! The one `bindgen!` site: host-side bindings for the `snodo:tasks` executor world.
//!
//! Imports that wait (input, status writes, progress) are async; every import is trappable,
//! so a host failure ends the attempt as a trap while guest-visible failures stay WIT
//! `result`s.

wasmtime::component::bindgen!({
    world: "executor",
    path: "../wit",
    imports: {
        "snodo:tasks/context.await-input": async | trappable,
        "snodo:tasks/context.await-inputs": async | trappable,
        "snodo:tasks/context.set-status": async | trappable,
        "snodo:tasks/context.progress": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

pub(crate) use self::snodo::tasks::types;
