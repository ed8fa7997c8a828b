//! The `bindgen!` sites: host-side bindings for the `snodo:tasks` executor worlds.
//!
//! `v3` is the 0.3.0 world (the 0.2.0 one plus `execution`, an `execute` whose failure
//! carries a status message); a 0.3.0 component's tool calls go through it.
//! `v2` is the 0.2.0 world (the 0.1.0 interfaces plus the `catalog` export). `v1` is the
//! 0.1.0 world, bound to the same Rust types and the same `context` import, so one linker
//! and one host implementation serve components of both versions: the tools of either are
//! called through `v1`'s view (a 0.2.0 component exports them under their 0.1.0 names), and
//! the catalog of a 0.2.0 component through `v2`'s.
//!
//! `v4` is the 0.4.0 world (the 0.3.0 one plus the `caller` import and the `modes` export).
//! `v5` is the 0.5.0 world (the 0.4.0 one plus the `timers` import); nothing is exported
//! under a 0.5.0 name, so only its import is bound from it.
//!
//! Imports that wait (input, status writes, progress) are async; every import is trappable,
//! so a host failure ends the attempt as a trap while guest-visible failures stay WIT
//! `result`s.

pub(crate) mod v2 {
    wasmtime::component::bindgen!({
        world: "snodo:tasks/executor@0.2.0",
        path: "../../wit",
        imports: {
            "snodo:tasks/context@0.1.0.await-input": async | trappable,
            "snodo:tasks/context@0.1.0.await-inputs": async | trappable,
            "snodo:tasks/context@0.1.0.set-status": async | trappable,
            "snodo:tasks/context@0.1.0.progress": async | trappable,
            default: trappable,
        },
        exports: { default: async },
    });
}

pub(crate) mod v1 {
    wasmtime::component::bindgen!({
        world: "snodo:tasks/executor@0.1.0",
        path: "../../wit",
        exports: { default: async },
        with: {
            "snodo:tasks/types@0.1.0": super::v2::snodo::tasks0_1_0::types,
            "snodo:tasks/context@0.1.0": super::v2::snodo::tasks0_1_0::context,
        },
    });
}

/// The 0.3.0 world: the 0.2.0 one plus `execution`, whose `execute` returns the 0.3.0
/// outcome. Its imports and the types it shares are `v2`'s.
pub(crate) mod v3 {
    wasmtime::component::bindgen!({
        world: "snodo:tasks/executor@0.3.0",
        path: "../../wit",
        exports: { default: async },
        with: {
            "snodo:tasks/types@0.1.0": super::v2::snodo::tasks0_1_0::types,
            "snodo:tasks/context@0.1.0": super::v2::snodo::tasks0_1_0::context,
            "snodo:tasks/catalog-types@0.2.0": super::v2::snodo::tasks0_2_0::catalog_types,
        },
    });
}

/// The 0.4.0 world: the 0.3.0 one plus the `caller` import and the `modes` export.
pub(crate) mod v4 {
    wasmtime::component::bindgen!({
        world: "snodo:tasks/executor@0.4.0",
        path: "../../wit",
        imports: { default: trappable },
        exports: { default: async },
        with: {
            "snodo:tasks/types@0.1.0": super::v2::snodo::tasks0_1_0::types,
            "snodo:tasks/context@0.1.0": super::v2::snodo::tasks0_1_0::context,
            "snodo:tasks/catalog-types@0.2.0": super::v2::snodo::tasks0_2_0::catalog_types,
            "snodo:tasks/outcomes@0.3.0": super::v3::snodo::tasks0_3_0::outcomes,
        },
    });
}

/// The 0.5.0 world: the 0.4.0 one plus the `timers` import, whose sleeps wait.
pub(crate) mod v5 {
    wasmtime::component::bindgen!({
        world: "snodo:tasks/executor@0.5.0",
        path: "../../wit",
        imports: {
            "snodo:tasks/timers@0.5.0.sleep-until": async | trappable,
            "snodo:tasks/timers@0.5.0.sleep-for": async | trappable,
            default: trappable,
        },
        exports: { default: async },
        with: {
            "snodo:tasks/types@0.1.0": super::v2::snodo::tasks0_1_0::types,
            "snodo:tasks/context@0.1.0": super::v2::snodo::tasks0_1_0::context,
            "snodo:tasks/catalog-types@0.2.0": super::v2::snodo::tasks0_2_0::catalog_types,
            "snodo:tasks/outcomes@0.3.0": super::v3::snodo::tasks0_3_0::outcomes,
            "snodo:tasks/caller@0.4.0": super::v4::snodo::tasks0_4_0::caller,
        },
    });
}

pub(crate) use v1::{Executor, ExecutorIndices};
pub(crate) use v2::exports::snodo::tasks0_2_0::catalog::GuestIndices as CatalogIndices;
pub(crate) use v2::snodo::tasks0_1_0::{context, types};
pub(crate) use v2::snodo::tasks0_2_0::catalog_types;
pub(crate) use v3::exports::snodo::tasks0_3_0::execution::GuestIndices as ExecutionIndices;
pub(crate) use v3::snodo::tasks0_3_0::outcomes;
pub(crate) use v4::exports::snodo::tasks0_4_0::modes;
pub(crate) use v4::exports::snodo::tasks0_4_0::modes::GuestIndices as ModesIndices;
