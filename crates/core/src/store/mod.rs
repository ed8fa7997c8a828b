//! The task store: the [`Store`] contract and its adapters.
//!
//! A store is the single source of truth for tasks. It owns the clock (leases, `retry_at`
//! and TTL are computed from store time), assigns revisions and claim generations, and
//! decides every transition atomically. Adapters:
//!
//! - [`MemoryStore`]: fast and volatile, for tests and demos.
//! - [`RedbStore`]: the embedded durable default; every acknowledged write is on disk.
//! - [`SqliteStore`]: embedded and durable on a single SQLite file (WAL,
//!   `synchronous=FULL`), for operators who want a file standard tools can read.
//! - [`PgStore`]: many nodes sharing one PostgreSQL database.
//!
//! [`Store`] is grouped by concern (`api.rs`): [`TaskStore`], [`ClaimStore`],
//! [`InputStore`], [`DeploymentStore`], [`RevocationStore`], [`JournalStore`] and
//! [`OperatorStore`] are its supertraits. The rules are the engine's (`engine/`, one module
//! per concern over one `View` / `Txn`).
//!
//! An adapter implements `Backend` (`backend.rs`: a write and a read that run the engine's
//! rules, plus a few hooks) and gets [`Store`] from it, so a new adapter is a folder and one
//! arm in [`StoreKind`] / [`StoreConfig`]. Every adapter passes the same contract suite
//! (`contract`, run by each adapter's tests).
//! `store/` never calls into wasm or the wire; it speaks only the domain model.

mod api;
mod backend;
pub mod backup;
mod config;
mod engine;
mod error;
#[macro_use]
mod embedded;
#[cfg(feature = "redb")]
mod fault;
#[cfg(any(feature = "redb", feature = "sqlite", feature = "postgres"))]
#[cfg_attr(not(any(feature = "redb", feature = "sqlite")), allow(dead_code))]
mod group_commit;
mod layer;
mod listing;
mod memory;
mod observed;
#[cfg(feature = "postgres")]
mod postgres;
mod record;
#[cfg(feature = "redb")]
mod redb;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod traced;
mod types;

#[cfg(any(test, feature = "contract-suite"))]
pub mod contract;

pub use api::{
    ClaimStore, DeploymentStore, InputStore, JournalStore, OperatorStore, OutboxStore,
    RevocationStore, ScheduleStore, Store, TaskStore,
};
pub(crate) use backend::Backend;
pub use backend::ChangeKind;
pub use backup::{Backup, FileKind, Restored};
pub use config::{OpenedStore, StoreConfig, StoreKind, StoreSection};
pub use error::StoreError;
#[cfg(feature = "redb")]
pub use fault::{Faults, FaultyDevice};
pub use layer::{Layer, Layered, Transition};
pub use listing::{
    ALL_STATUSES, Cursor, LIST_SCAN, MAX_LIST_LIMIT, TaskCounts, TaskFilter, TaskPage, TaskQuery,
    TaskSummary, tool_of,
};
pub use memory::MemoryStore;
pub use observed::{Announcer, Changed, ObservedStore};
#[cfg(feature = "postgres")]
pub use postgres::{
    POSTGRES_SCHEMA_VERSION, PgOptions, PgStore, RemoteChange, RemoteChanges,
    drop_schema as drop_postgres_schema, drop_schema_blocking as drop_postgres_schema_blocking,
    migrate as migrate_postgres,
};
#[cfg(feature = "redb")]
pub use redb::{REDB_SCHEMA_VERSION, RedbStore};
#[cfg(feature = "sqlite")]
pub use sqlite::{SQLITE_SCHEMA_VERSION, SqliteStore};
pub use traced::{TaskSpans, TracedStore, system_time, task_span};
pub(crate) use types::HeldAuthority;
pub use types::{
    Access, Action, Authority, CLAIM_SKIP_SCAN, ClaimRequest, Claimed, Committed, Effect,
    InputReply, JournalBounds, Lease, MAX_CLAIM_BATCH, MAX_LEASE_MS, MAX_REAP_IDS, MAX_TTL_MS,
    NewTask, NextClaim, Reaped, ScheduleMove,
};

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

pub use crate::model::REMEMBERED_STATUS_EVENTS;

/// The [`Store`] traits, for code that calls a store's methods on a concrete adapter
/// (`RedbStore`, `Layered<_>`) rather than through `dyn Store`: `use
/// snodo_core::store::prelude::*;` brings every group in scope. Through `dyn Store` (and a
/// `S: Store` bound) every method is callable with `Store` alone.
pub mod prelude {
    pub use super::{
        ClaimStore, DeploymentStore, InputStore, JournalStore, OperatorStore, OutboxStore,
        RevocationStore, ScheduleStore, Store, TaskStore,
    };
}
