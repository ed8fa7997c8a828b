//! The wasmtime Engine: one per host, configured once, with its epoch ticker.
//!
//! Sizing lives here with its reasons. The pooling allocator pre-reserves virtual memory for
//! every slot, so slots are sized to the memory cap rather than wasmtime's 4 GiB default:
//! `max_instances` slots of `max_memory_bytes` each, plus guards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::Limit;

/// How instances are allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    /// Pre-reserved slots: instantiation is cheap (about half the on-demand cost here) and
    /// memory returns to the pool when an execution ends. The slot count bounds how many
    /// guests can be live at once.
    Pooling,
    /// mmap per instance: no upper bound on live guests, slower instantiation.
    OnDemand,
}

/// Engine settings. Per-execution limits come from the work descriptor, capped by these.
///
/// Also the `[engine]` section of the configuration file, which names how recycled slots
/// are reset (`keep_resident_bytes`, `pagemap_scan`); `snodo serve` sets the memory,
/// result and execution bounds from `[limits]`, the fuel from the tools' limits and the
/// outbound settings from `[outbound]`, and keeps the rest at their defaults.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Allocation strategy.
    #[serde(skip)]
    pub allocation: Allocation,
    /// Most live guests at once (pooling slots).
    #[serde(skip)]
    pub max_instances: u32,
    /// The hard ceiling for one guest's linear memory.
    #[serde(skip)]
    pub max_memory_bytes: usize,
    /// The hard ceiling for one table's elements.
    #[serde(skip)]
    pub max_table_elements: usize,
    /// Epoch tick: the granularity of deadlines and of yielding to other tasks.
    #[serde(skip)]
    pub epoch_tick: Duration,
    /// Instrument code for fuel (costs throughput; needed for fuel limits). `snodo serve`
    /// turns it on when any tool's limits set fuel, so a configured fuel limit always
    /// takes effect.
    #[serde(skip)]
    pub fuel: bool,
    /// The linear memory all live guests may hold together; growth past it fails the guest
    /// with the `guest_memory_total` limit. Without it the pool would admit
    /// `max_instances × max_memory_bytes`.
    #[serde(skip)]
    pub max_total_memory_bytes: usize,
    /// The linear memory the live guests of one tenant may hold together; growth past it
    /// fails the guest with the `guest_memory_per_tenant` limit. When set, the top eighth
    /// of the total is also kept for tenants holding no more than that eighth, so one
    /// tenant's guests never take the memory another tenant's next call needs. `None` (one
    /// tenant): neither. `snodo serve` sets half the total when it serves several tenants.
    #[serde(skip)]
    pub max_tenant_memory_bytes: Option<usize>,
    /// The largest result or error (as JSON) a guest may return.
    #[serde(skip)]
    pub max_result_bytes: usize,
    /// Linear memory a recycled pool slot keeps resident (reset in place, not unmapped;
    /// default 1 MiB).
    pub keep_resident_bytes: usize,
    /// Reset recycled slots with the PAGEMAP_SCAN ioctl where the kernel has it (Linux
    /// 6.7+), falling back to the ordinary reset where it does not (default true).
    pub pagemap_scan: bool,
    /// Guests of one tenant executing at once (holding a core; the rest wait their turn,
    /// see [`crate::cpu`]). Default: the core count.
    #[serde(skip)]
    pub executing_per_tenant: usize,
    /// Guests executing at once, all tenants together. Default: the core count. The async
    /// runtime needs a worker more than this, so request handling never waits for a guest.
    #[serde(skip)]
    pub executing: usize,
    /// How outbound HTTP is sent (roots, name overrides, the server's own addresses, the
    /// per-tenant bound).
    #[serde(skip)]
    pub outbound: crate::outbound::OutboundConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            allocation: Allocation::Pooling,
            max_instances: 256,
            max_memory_bytes: 256 << 20,
            max_table_elements: 100_000,
            epoch_tick: Duration::from_millis(10),
            fuel: false,
            max_total_memory_bytes: 1 << 30,
            max_tenant_memory_bytes: None,
            max_result_bytes: 4 << 20,
            keep_resident_bytes: 1 << 20,
            pagemap_scan: true,
            executing_per_tenant: crate::cpu::default_shares(crate::cpu::cores()).0,
            executing: crate::cpu::default_shares(crate::cpu::cores()).1,
            outbound: crate::outbound::OutboundConfig::default(),
        }
    }
}

/// Cores instances and memories a wasm32-wasip2 component built by rustc instantiates
/// (its module, the WASI adapter and shims), with room to spare.
const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
const MEMORIES_PER_COMPONENT: u32 = 4;
const TABLES_PER_COMPONENT: u32 = 8;

/// Host memory held in a tenant's share ([`WasmEngine::hold_host_memory`]); given back
/// when dropped.
pub struct MemoryHold {
    _limiter: crate::host::Limiter,
}

impl std::fmt::Debug for MemoryHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryHold")
            .field("bytes", &self._limiter.held)
            .finish()
    }
}

/// The engine and its epoch ticker. Cloning shares both.
#[derive(Clone)]
pub struct WasmEngine {
    pub(crate) engine: Engine,
    pub(crate) config: Arc<EngineConfig>,
    /// Linear memory held by live guests now, against `max_total_memory_bytes`.
    pub(crate) memory_in_use: Arc<std::sync::atomic::AtomicUsize>,
    /// Turns for executing guests, shared by tenant.
    pub(crate) cpu: Arc<crate::cpu::CpuShare>,
    /// Guest lines each tenant may write to the operator's log.
    pub(crate) log_rate: Arc<crate::host::LogRate>,
    /// Linear memory held by each tenant's live guests. An entry per tenant that ever ran
    /// a guest here: tenants are the configured principals, so the map stays small.
    tenant_memory: Arc<
        parking_lot::Mutex<
            std::collections::HashMap<Arc<str>, Arc<std::sync::atomic::AtomicUsize>>,
        >,
    >,
    /// Outbound HTTP's host-wide side.
    pub(crate) outbound: Arc<crate::outbound::Outbound>,
    _ticker: Arc<Ticker>,
}

struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why the wasm host could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// wasmtime refused the engine's configuration.
    #[error("cannot configure wasmtime: {0}")]
    Configure(String),
    /// The epoch ticker's thread did not start.
    #[error("cannot start the epoch ticker: {0}")]
    Ticker(String),
    /// The outbound side could not be set up (its CA bundle); the message names the key.
    #[error("{0}")]
    Outbound(String),
    /// The host's imports could not be added to a loader's linker.
    #[error("{0}")]
    Link(String),
}

impl WasmEngine {
    /// Builds the engine and starts its epoch ticker.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        let mut c = Config::new();
        c.wasm_component_model(true);
        c.epoch_interruption(true);
        c.consume_fuel(config.fuel);
        // Memories are bounded by our limiter and the pool's slot size; reserving only that
        // much virtual memory keeps many slots affordable.
        c.memory_reservation(config.max_memory_bytes as u64);
        c.memory_guard_size(64 << 10);
        c.memory_reservation_for_growth(0);
        if config.allocation == Allocation::Pooling {
            let n = config.max_instances.max(1);
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(n)
                .total_core_instances(n * CORE_INSTANCES_PER_COMPONENT)
                .total_memories(n * MEMORIES_PER_COMPONENT)
                .total_tables(n * TABLES_PER_COMPONENT)
                .total_stacks(n)
                .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
                .max_memories_per_component(MEMORIES_PER_COMPONENT)
                .max_tables_per_component(TABLES_PER_COMPONENT)
                .max_memory_size(config.max_memory_bytes)
                .table_elements(config.max_table_elements);
            // A fresh instance per call recycles a pool slot per call. Unmapping its pages
            // and faulting them back costs a TLB shootdown on every other core each time
            // (about 40% of server CPU on the sync path, measured). Keeping a little memory
            // resident and resetting only the pages the guest touched, found with
            // PAGEMAP_SCAN, removes most of it: sync calls went from 0.37x to 1.45x the
            // official Rust SDK's rate on this machine (notes/performance.md). Keeping pages
            // resident alone gained nothing; the scan is what finds them cheaply. Guests
            // still never see another guest's memory: a slot is reset before reuse.
            pool.linear_memory_keep_resident(config.keep_resident_bytes)
                .table_keep_resident(64 << 10)
                .pagemap_scan(if config.pagemap_scan {
                    wasmtime::Enabled::Auto
                } else {
                    wasmtime::Enabled::No
                });
            c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&c).map_err(|e| EngineError::Configure(format!("{e:#}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let ticker_engine = engine.weak();
        let tick = config.epoch_tick;
        let ticker_stop = stop.clone();
        std::thread::Builder::new()
            .name("snodo-epoch".into())
            .spawn(move || {
                while !ticker_stop.load(Ordering::Acquire) {
                    std::thread::sleep(tick);
                    match ticker_engine.upgrade() {
                        Some(e) => e.increment_epoch(),
                        None => return,
                    }
                }
            })
            .map_err(|e| EngineError::Ticker(e.to_string()))?;
        let cpu = crate::cpu::CpuShare::new(config.executing_per_tenant, config.executing);
        let outbound = Arc::new(
            crate::outbound::Outbound::new(config.outbound.clone())
                .map_err(EngineError::Outbound)?,
        );
        Ok(Self {
            outbound,
            engine,
            config: Arc::new(config),
            memory_in_use: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            cpu,
            log_rate: Arc::default(),
            tenant_memory: Arc::default(),
            _ticker: Arc::new(Ticker { stop }),
        })
    }

    /// The wasmtime engine underneath (for measurements such as `snodo bench wasm`).
    pub fn wasmtime(&self) -> &Engine {
        &self.engine
    }

    /// Whether recycled slots are reset with PAGEMAP_SCAN (configured and supported here).
    pub fn pagemap_scan_active(&self) -> bool {
        self.config.pagemap_scan
            && self.config.allocation == Allocation::Pooling
            && PoolingAllocationConfig::is_pagemap_scan_available()
    }

    /// Linear memory held by live guests now.
    pub fn guest_memory_in_use(&self) -> usize {
        self.memory_in_use.load(Ordering::Acquire)
    }

    /// The counter of the memory `tenant`'s live guests hold.
    pub(crate) fn tenant_memory(&self, tenant: &Arc<str>) -> Arc<std::sync::atomic::AtomicUsize> {
        self.tenant_memory
            .lock()
            .entry(tenant.clone())
            .or_default()
            .clone()
    }

    /// One tenant's share of the guest memory, and the reserve for small tenants (none
    /// without a share).
    pub(crate) fn tenant_memory_bytes(&self) -> (usize, usize) {
        match self.config.max_tenant_memory_bytes {
            Some(share) => (share, self.config.max_total_memory_bytes / 8),
            None => (usize::MAX, 0),
        }
    }

    /// Holds `bytes` of `tenant`'s memory share, and of the total, for host memory one of
    /// its requests needs (a large body and the values parsing it makes): counted as its
    /// guests' memory is, under the same caps and the same reserve for small tenants, and
    /// given back when the hold is dropped. `Err` is the limit that is full
    /// (`guest_memory_per_tenant` or `guest_memory_total`).
    pub fn hold_host_memory(&self, tenant: &Arc<str>, bytes: usize) -> Result<MemoryHold, Limit> {
        let (tenant_bytes, reserve_bytes) = self.tenant_memory_bytes();
        let mut limiter = crate::host::Limiter {
            memory_bytes: usize::MAX,
            table_elements: 0,
            in_use: self.memory_in_use.clone(),
            total_bytes: self.config.max_total_memory_bytes,
            held: 0,
            tenant_in_use: self.tenant_memory(tenant),
            tenant_bytes,
            reserve_bytes,
        };
        match wasmtime::ResourceLimiter::memory_growing(&mut limiter, 0, bytes, None) {
            Ok(_) => Ok(MemoryHold { _limiter: limiter }),
            Err(e) => match e.downcast_ref::<crate::HostStop>() {
                Some(crate::HostStop::Limit(limit)) => Err(limit.clone()),
                _ => Err(Limit::MemoryBudget {
                    bytes: self.config.max_total_memory_bytes as u64,
                }),
            },
        }
    }

    /// The turns executing guests take (for metrics and tests).
    pub fn cpu(&self) -> &Arc<crate::cpu::CpuShare> {
        &self.cpu
    }

    /// Outbound HTTP's counters and settings.
    pub fn outbound(&self) -> &Arc<crate::outbound::Outbound> {
        &self.outbound
    }

    /// The settings it was built with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Ticks in `d`, at least one.
    pub(crate) fn ticks(&self, d: Duration) -> u64 {
        let tick = self.config.epoch_tick.as_millis().max(1);
        (d.as_millis() / tick).max(1) as u64
    }

    /// A fingerprint of everything that makes precompiled code compatible with this engine.
    pub(crate) fn fingerprint(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        format!("{:016x}", h.finish())
    }
}
