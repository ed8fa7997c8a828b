//! Admission budgets shared by tenants: counted slots with a per-tenant and a global cap,
//! and per-tenant token buckets for rates.
//!
//! A budget never makes a request wait: a caller over a cap is refused at once with a
//! [`Refusal`] that names the limit (its configuration key) and the cap, so the edge can
//! answer with a clear error. Nothing already accepted is ever taken back by a budget.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use snodo_core::config::SettingError;
use snodo_wasm::EngineConfig;

use tokio::time::Instant;

/// The budgets of the MCP edge, per tenant beside a global cap. Every value is a setting of
/// `[limits]` in the configuration file; the defaults are documented there and here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantLimits {
    /// Synchronous guest executions (calls, `prepare`, mode rules) one tenant may have in
    /// flight. Default 64. A call in flight may be waiting for a CPU turn (the CPU is
    /// shared by tenant apart from this count), so this bounds instances and what they
    /// hold, not computing: a busy tenant's calls queue for the CPU inside their slots.
    pub sync_calls_per_tenant: usize,
    /// The same for all tenants together. Default 192: with `runner.max_concurrent` (64)
    /// the engine's 256 instance slots.
    pub sync_calls: usize,
    /// Wall-clock limit of a synchronous call, time in imports included. Default 120 s.
    pub sync_timeout_ms: u64,
    /// Live (non-terminal) tasks one tenant may hold. Default 10,000.
    pub live_tasks_per_tenant: u64,
    /// Tasks one tenant may keep stored, terminal ones included, until their TTL reaps
    /// them. Default 1,000,000 on a node serving one tenant, 100,000 on one serving several
    /// ([`Self::for_tenants`]): at the shared creation rate, about half an hour of bursts.
    pub stored_tasks_per_tenant: u64,
    /// Bytes one tenant's stored tasks may hold, terminal ones included, until they are
    /// removed: their records (arguments, answers, results, history) and their outbound
    /// journals. A creation or a journal entry past it is refused; what a task brings
    /// later (its result) is kept. Default 100 GiB on a node serving one tenant (a guard
    /// against a runaway), 1 GiB on one serving several ([`Self::for_tenants`]).
    pub stored_bytes_per_tenant: u64,
    /// Tasks one tenant may create per second, on average (per node). Default 10,000 on a
    /// node serving one tenant: a guard against a flood, above what one node completes (a
    /// few thousand a second here). On a node serving several, 50 ([`Self::for_tenants`]).
    pub task_creates_per_second: u32,
    /// Tasks one tenant may create at once before the rate applies. Default 20,000 (one
    /// tenant) or 1,000 (several).
    pub task_create_burst: u32,
    /// Open `subscriptions/listen` streams (and 2025-11-25 `tasks/result` calls waiting for
    /// their task) per tenant. Default 16.
    pub streams_per_tenant: usize,
    /// Open streams, all tenants together. Default 1,024.
    pub streams: usize,
    /// Task ids one stream may watch (after removing duplicates). Default 256.
    pub stream_task_ids: usize,
}

/// The creation rate a node serving several tenants defaults to: tens a second per tenant,
/// with a burst for a batch, so one tenant cannot fill the store for the others.
pub const SHARED_TASK_CREATES_PER_SECOND: u32 = 50;
/// The burst beside [`SHARED_TASK_CREATES_PER_SECOND`].
pub const SHARED_TASK_CREATE_BURST: u32 = 1_000;
/// The stored tasks one tenant may keep on a node serving several tenants.
pub const SHARED_STORED_TASKS: u64 = 100_000;
/// The stored bytes one tenant may keep on a node serving several tenants.
pub const SHARED_STORED_BYTES: u64 = 1 << 30;

impl TenantLimits {
    /// The defaults for a node serving `tenants` tenants: [`Default`] for one (a flood
    /// guard only), and the shared creation rate for several.
    pub fn for_tenants(tenants: usize) -> Self {
        let one = Self::default();
        if tenants <= 1 {
            return one;
        }
        Self {
            task_creates_per_second: SHARED_TASK_CREATES_PER_SECOND,
            task_create_burst: SHARED_TASK_CREATE_BURST,
            stored_tasks_per_tenant: SHARED_STORED_TASKS,
            stored_bytes_per_tenant: SHARED_STORED_BYTES,
            ..one
        }
    }
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            sync_calls_per_tenant: 64,
            sync_calls: 192,
            sync_timeout_ms: 120_000,
            live_tasks_per_tenant: 10_000,
            stored_tasks_per_tenant: 1_000_000,
            stored_bytes_per_tenant: 100 << 30,
            task_creates_per_second: 10_000,
            task_create_burst: 20_000,
            streams_per_tenant: 16,
            streams: 1_024,
            stream_task_ids: 256,
        }
    }
}

/// `[limits]`: the budgets that keep one tenant from starving or flooding the others, as
/// the configuration file gives them. A key left out takes the default of a node serving
/// as many tenants as this one ([`TenantLimits::for_tenants`], [`shared_memory`]), which is
/// why each is optional here; the defaults are documented on [`TenantLimits`], on
/// [`EngineConfig`] and in docs/configuration.md.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// [`TenantLimits::sync_calls_per_tenant`].
    pub sync_calls_per_tenant: Option<usize>,
    /// [`TenantLimits::sync_calls`].
    pub sync_calls: Option<usize>,
    /// [`TenantLimits::sync_timeout_ms`].
    pub sync_timeout_ms: Option<u64>,
    /// [`TenantLimits::live_tasks_per_tenant`].
    pub live_tasks_per_tenant: Option<u64>,
    /// [`TenantLimits::stored_tasks_per_tenant`].
    pub stored_tasks_per_tenant: Option<u64>,
    /// [`TenantLimits::stored_bytes_per_tenant`].
    pub stored_bytes_per_tenant: Option<u64>,
    /// [`TenantLimits::task_creates_per_second`].
    pub task_creates_per_second: Option<u32>,
    /// [`TenantLimits::task_create_burst`].
    pub task_create_burst: Option<u32>,
    /// [`TenantLimits::streams_per_tenant`].
    pub streams_per_tenant: Option<usize>,
    /// [`TenantLimits::streams`].
    pub streams: Option<usize>,
    /// [`TenantLimits::stream_task_ids`].
    pub stream_task_ids: Option<usize>,
    /// The engine's `max_total_memory_bytes`: linear memory all live guests may hold
    /// together (default 1 GiB; at least one guest's).
    pub guest_memory_total_bytes: Option<usize>,
    /// The engine's `max_memory_bytes`: linear memory one guest may hold (default 256 MiB,
    /// at least 1 MiB).
    pub guest_memory_bytes: Option<usize>,
    /// The engine's `max_tenant_memory_bytes`: linear memory one tenant's live guests may
    /// hold together (default [`shared_memory`]).
    pub guest_memory_per_tenant_bytes: Option<usize>,
    /// The engine's `max_result_bytes`: the largest result a guest may return (default
    /// 4 MiB).
    pub result_bytes: Option<usize>,
    /// The engine's `executing_per_tenant`: guests of one tenant executing at once
    /// (default: the core count).
    pub executing_per_tenant: Option<usize>,
    /// The engine's `executing`: guests executing at once, all tenants together (default:
    /// the core count).
    pub executing: Option<usize>,
}

/// The guest-memory share of one tenant on a node serving `tenants`: none for one, half
/// the total for several.
pub fn shared_memory(engine: &EngineConfig, tenants: usize) -> Option<usize> {
    (tenants > 1).then_some(engine.max_total_memory_bytes / 2)
}

impl LimitsConfig {
    /// The rules of `[limits]` that need nothing else, each naming its key (relative to
    /// the section): every count and time given is at least 1, and a guest's memory at
    /// least 1 MiB.
    pub fn check(&self) -> Result<(), SettingError> {
        let wide = |v: Option<usize>| v.map(|v| v as u64);
        for (key, v) in [
            ("sync_calls_per_tenant", wide(self.sync_calls_per_tenant)),
            ("sync_calls", wide(self.sync_calls)),
            ("sync_timeout_ms", self.sync_timeout_ms),
            ("live_tasks_per_tenant", self.live_tasks_per_tenant),
            ("stored_tasks_per_tenant", self.stored_tasks_per_tenant),
            ("stored_bytes_per_tenant", self.stored_bytes_per_tenant),
            (
                "task_creates_per_second",
                self.task_creates_per_second.map(u64::from),
            ),
            ("task_create_burst", self.task_create_burst.map(u64::from)),
            ("streams_per_tenant", wide(self.streams_per_tenant)),
            ("streams", wide(self.streams)),
            ("stream_task_ids", wide(self.stream_task_ids)),
            ("result_bytes", wide(self.result_bytes)),
            (
                "guest_memory_per_tenant_bytes",
                wide(self.guest_memory_per_tenant_bytes),
            ),
            ("executing_per_tenant", wide(self.executing_per_tenant)),
            ("executing", wide(self.executing)),
        ] {
            if v == Some(0) {
                return Err(SettingError::new(key, "must be at least 1"));
            }
        }
        if self.guest_memory_bytes.is_some_and(|m| m < (1 << 20)) {
            return Err(SettingError::new("guest_memory_bytes", "at least 1 MiB"));
        }
        Ok(())
    }

    /// The edge's budgets on a node serving `tenants` tenants: what is given, over the
    /// defaults for that many.
    pub fn tenant_limits(&self, tenants: usize) -> TenantLimits {
        let b = TenantLimits::for_tenants(tenants);
        TenantLimits {
            sync_calls_per_tenant: self
                .sync_calls_per_tenant
                .unwrap_or(b.sync_calls_per_tenant),
            sync_calls: self.sync_calls.unwrap_or(b.sync_calls),
            sync_timeout_ms: self.sync_timeout_ms.unwrap_or(b.sync_timeout_ms),
            live_tasks_per_tenant: self
                .live_tasks_per_tenant
                .unwrap_or(b.live_tasks_per_tenant),
            stored_tasks_per_tenant: (self.stored_tasks_per_tenant)
                .unwrap_or(b.stored_tasks_per_tenant),
            stored_bytes_per_tenant: (self.stored_bytes_per_tenant)
                .unwrap_or(b.stored_bytes_per_tenant),
            task_creates_per_second: (self.task_creates_per_second)
                .unwrap_or(b.task_creates_per_second),
            task_create_burst: self.task_create_burst.unwrap_or(b.task_create_burst),
            streams_per_tenant: self.streams_per_tenant.unwrap_or(b.streams_per_tenant),
            streams: self.streams.unwrap_or(b.streams),
            stream_task_ids: self.stream_task_ids.unwrap_or(b.stream_task_ids),
        }
    }

    /// Sets the guests' memory, result and execution bounds of `engine` on a node serving
    /// `tenants` tenants; refuses a total smaller than one guest's memory (under
    /// `guest_memory_total_bytes`).
    pub fn apply_to(&self, engine: &mut EngineConfig, tenants: usize) -> Result<(), SettingError> {
        if let Some(m) = self.guest_memory_bytes {
            engine.max_memory_bytes = m;
        }
        if let Some(m) = self.guest_memory_total_bytes {
            engine.max_total_memory_bytes = m;
        }
        if engine.max_total_memory_bytes < engine.max_memory_bytes {
            return Err(SettingError::new(
                "guest_memory_total_bytes",
                format!(
                    "smaller than one guest's memory ({} bytes): no guest could use its cap",
                    engine.max_memory_bytes
                ),
            ));
        }
        if let Some(r) = self.result_bytes {
            engine.max_result_bytes = r;
        }
        engine.max_tenant_memory_bytes = self
            .guest_memory_per_tenant_bytes
            .or_else(|| shared_memory(engine, tenants));
        if let Some(n) = self.executing_per_tenant {
            engine.executing_per_tenant = n;
        }
        if let Some(n) = self.executing {
            engine.executing = n;
        }
        Ok(())
    }
}

/// Whose cap refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The tenant's own cap.
    Tenant,
    /// The tenant's fair share now: the global cap divided by the tenants holding slots
    /// (at most its own cap), so one tenant cannot keep what others need.
    Share,
    /// The cap shared by every tenant.
    Global,
}

impl Over {
    /// `"tenant"`, `"share"` or `"global"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Over::Tenant => "tenant",
            Over::Share => "share",
            Over::Global => "global",
        }
    }
}

/// A request over a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The configuration key of the limit (e.g. `limits.sync_calls_per_tenant`).
    pub limit: &'static str,
    /// The cap that was reached.
    pub max: u64,
    /// Whose cap it is.
    pub over: Over,
}

impl Refusal {
    /// The JSON-RPC error a refused request gets: -32000, whose `data` names the limit (its
    /// configuration key), the cap and whose cap it is, so a client can tell a full host
    /// from its own excess.
    pub fn to_rpc_error(&self) -> snodo_core::model::JsonRpcError {
        snodo_core::model::JsonRpcError::new(
            snodo_core::model::codes::LIMIT_REACHED,
            format!("Limit reached: {self}"),
        )
        .with_data(serde_json::json!({
            "kind": "limit",
            "limit": self.limit,
            "max": self.max,
            "scope": self.over.as_str(),
        }))
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} limit reached: {} = {}",
            self.over.as_str(),
            self.limit,
            self.max
        )
    }
}

/// Counted slots: at most `per_tenant` held by one tenant and `global` by all together, with
/// shares that adapt to the tenants present.
///
/// - A tenant's share is the global cap divided by the tenants holding slots (the asking
///   one included), at most `per_tenant`. A tenant over its share keeps what it holds (a
///   slot is never taken back) and gets no more until it is under.
/// - The last [`Slots::reserved`] slots of the global cap are kept for tenants that hold
///   none: however the others filled the rest before the shares shrank, a newcomer gets a
///   slot. So three tenants at their share cannot starve a fourth.
#[derive(Debug)]
pub struct Slots {
    tenant_key: &'static str,
    global_key: &'static str,
    per_tenant: usize,
    global: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    /// Tenants holding at least one slot.
    active: usize,
    /// Slots held per tenant. An entry stays at zero once its tenant let go, so taking a
    /// slot allocates nothing in the steady state: the tenants are the configured
    /// principals, so the map is bounded by the configuration.
    by_tenant: HashMap<Arc<str>, usize>,
}

impl Slots {
    /// Slots capped at `per_tenant` (reported as `tenant_key`) and `global` (`global_key`).
    pub fn new(
        tenant_key: &'static str,
        per_tenant: usize,
        global_key: &'static str,
        global: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            tenant_key,
            global_key,
            per_tenant,
            global,
            held: Mutex::new(Held::default()),
        })
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Held> {
        self.held.lock()
    }

    /// Slots at the top of the global cap kept for tenants that hold none: an eighth of
    /// the cap, at least one (none when the cap is one).
    pub fn reserved(&self) -> usize {
        if self.global <= 1 {
            0
        } else {
            (self.global / 8).max(1)
        }
    }

    /// Whether `tenant` may take one more slot now, by the rules in the type's doc.
    fn admits(&self, held: &Held, tenant: &str) -> Result<(), Refusal> {
        let mine = held.by_tenant.get(tenant).copied().unwrap_or(0);
        if mine >= self.per_tenant {
            return Err(Refusal {
                limit: self.tenant_key,
                max: self.per_tenant as u64,
                over: Over::Tenant,
            });
        }
        let global = |max: usize| Refusal {
            limit: self.global_key,
            max: max as u64,
            over: Over::Global,
        };
        if held.total >= self.global {
            return Err(global(self.global));
        }
        if mine == 0 {
            // A newcomer may use the reserve: nothing below can refuse it.
            return Ok(());
        }
        let open = self.global - self.reserved();
        if held.total >= open {
            return Err(global(open));
        }
        let share = (self.global / held.active.max(1)).clamp(1, self.per_tenant);
        if mine >= share {
            return Err(Refusal {
                limit: self.tenant_key,
                max: share as u64,
                over: Over::Share,
            });
        }
        Ok(())
    }

    /// Takes a slot for `tenant`, or says which cap is reached.
    pub fn try_acquire(self: &Arc<Self>, tenant: &str) -> Result<Slot, Refusal> {
        let mut held = self.lock();
        self.admits(&held, tenant)?;
        if held.by_tenant.get(tenant).copied().unwrap_or(0) == 0 {
            held.active += 1;
        }
        held.total += 1;
        let tenant = match held.by_tenant.get_key_value(tenant) {
            Some((known, _)) => known.clone(),
            None => Arc::from(tenant),
        };
        *held.by_tenant.entry(tenant.clone()).or_insert(0) += 1;
        Ok(Slot {
            slots: self.clone(),
            tenant,
        })
    }

    /// Whether `tenant` could take a slot now.
    pub fn has_room(&self, tenant: &str) -> bool {
        let held = self.lock();
        self.admits(&held, tenant).is_ok()
    }

    /// Whether any tenant could take a slot now (the global cap is not reached).
    pub fn has_global_room(&self) -> bool {
        self.lock().total < self.global
    }

    /// How many slots a batch of claims may count on now: those free below the reserve
    /// (which tenants already running cannot take), or one when only the reserve is left,
    /// for a tenant that holds none. A tenant's share may still refuse some of a batch.
    pub fn claimable(&self) -> usize {
        let held = self.lock();
        let open = self.global - self.reserved();
        if held.total >= self.global {
            0
        } else {
            open.saturating_sub(held.total).max(1)
        }
    }

    /// Tenants holding slots that could not take one more now.
    pub fn saturated_tenants(&self) -> Vec<String> {
        let held = self.lock();
        held.by_tenant
            .iter()
            .filter(|(t, n)| **n > 0 && self.admits(&held, t).is_err())
            .map(|(t, _)| t.to_string())
            .collect()
    }

    /// Slots held now, by every tenant.
    pub fn held(&self) -> usize {
        self.lock().total
    }

    /// Slots held now by `tenant`.
    pub fn held_by(&self, tenant: &str) -> usize {
        self.lock().by_tenant.get(tenant).copied().unwrap_or(0)
    }
}

/// One held slot; dropping it gives the slot back.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    tenant: Arc<str>,
}

impl Slot {
    /// The tenant holding it.
    pub fn tenant(&self) -> &Arc<str> {
        &self.tenant
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_tenant.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.active = held.active.saturating_sub(1);
            }
        }
    }
}

/// A token bucket per tenant: `per_second` tokens refill continuously up to `burst`.
///
/// Time is tokio's clock, so tests drive it with `tokio::time::pause` and `advance`.
/// Buckets are kept per node: with several nodes a tenant's rate is per node.
#[derive(Debug)]
pub struct Rate {
    key: &'static str,
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl Rate {
    /// At most `per_second` on average, `burst` at once, reported as `key`.
    pub fn new(key: &'static str, per_second: u32, burst: u32) -> Self {
        Self {
            key,
            per_second: f64::from(per_second),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `tenant`, or refuses.
    pub fn try_take(&self, tenant: &str) -> Result<(), Refusal> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        let (tokens, at) = buckets
            .entry(tenant.to_owned())
            .or_insert((self.burst, now));
        let refill = now.saturating_duration_since(*at).as_secs_f64() * self.per_second;
        *tokens = (*tokens + refill).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Refusal {
                limit: self.key,
                max: self.per_second as u64,
                over: Over::Tenant,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_take_the_defaults_of_the_tenant_count_and_check_their_keys() {
        let none = LimitsConfig::default();
        assert_eq!(none.tenant_limits(1), TenantLimits::default());
        assert_eq!(none.tenant_limits(2), TenantLimits::for_tenants(2));
        let set: LimitsConfig = serde_json::from_value(serde_json::json!({
            "task_creates_per_second": 500, "guest_memory_bytes": 1_048_576,
        }))
        .expect("parses");
        assert_eq!(set.tenant_limits(2).task_creates_per_second, 500);
        assert_eq!(
            set.tenant_limits(2).task_create_burst,
            SHARED_TASK_CREATE_BURST
        );
        let mut engine = EngineConfig::default();
        set.apply_to(&mut engine, 2).expect("applies");
        assert_eq!(engine.max_memory_bytes, 1 << 20);
        assert_eq!(
            engine.max_tenant_memory_bytes,
            Some(engine.max_total_memory_bytes / 2),
            "several tenants share half the total by default"
        );
        let mut one = EngineConfig::default();
        none.apply_to(&mut one, 1).expect("applies");
        assert_eq!(one.max_tenant_memory_bytes, None);
        for (v, key) in [
            (serde_json::json!({"sync_calls": 0}), "sync_calls"),
            (serde_json::json!({"executing": 0}), "executing"),
            (
                serde_json::json!({"guest_memory_bytes": 1024}),
                "guest_memory_bytes",
            ),
        ] {
            let l: LimitsConfig = serde_json::from_value(v).expect("parses");
            assert_eq!(l.check().expect_err(key).key, key);
        }
        let small: LimitsConfig =
            serde_json::from_value(serde_json::json!({"guest_memory_total_bytes": 1024}))
                .expect("parses");
        let e = small
            .apply_to(&mut EngineConfig::default(), 1)
            .expect_err("smaller than one guest");
        assert_eq!(e.key, "guest_memory_total_bytes");
    }

    #[test]
    fn shares_shrink_with_the_tenants_present_and_a_newcomer_always_gets_a_slot() {
        // 16 in all, 8 per tenant, 2 reserved.
        let s = Slots::new("t", 8, "g", 16);
        assert_eq!(s.reserved(), 2);
        let a: Vec<Slot> = (0..8).map(|_| s.try_acquire("a").expect("a")).collect();
        let e = s.try_acquire("a").expect_err("a at its own cap");
        assert_eq!((e.over, e.max), (Over::Tenant, 8));
        // Two tenants: a share is 8. c fills up to the reserve.
        let c: Vec<Slot> = (0..6).map(|_| s.try_acquire("c").expect("c")).collect();
        let e = s
            .try_acquire("c")
            .expect_err("the reserve is for newcomers");
        assert_eq!((e.over, e.max), (Over::Global, 14));
        // Newcomers d and b each get a reserved slot.
        let d = s.try_acquire("d").expect("d from the reserve");
        let b = s.try_acquire("b").expect("b from the reserve");
        assert_eq!(s.try_acquire("f").expect_err("full").over, Over::Global);
        // Four tenants present: a share is 4; a, over it, gets nothing back until under.
        drop(b);
        drop(d);
        drop(a);
        let _d = s.try_acquire("d").expect("d");
        let a: Vec<Slot> = (0..4).map(|_| s.try_acquire("a").expect("a")).collect();
        assert_eq!(a.len(), 4);
        let _b = s.try_acquire("b").expect("b");
        // Four present (a, b, c, d): 16 / 4.
        let e = s
            .try_acquire("c")
            .expect_err("c holds 6, over a share of 4");
        assert_eq!((e.over, e.max, e.limit), (Over::Share, 4, "t"));
        assert!(s.saturated_tenants().contains(&"c".to_owned()));
        drop(c);
    }

    #[test]
    fn slots_cap_each_tenant_and_all_together() {
        let s = Slots::new("t", 2, "g", 3);
        let a1 = s.try_acquire("a").expect("a1");
        let _a2 = s.try_acquire("a").expect("a2");
        let e = s.try_acquire("a").expect_err("a over its share");
        assert_eq!((e.limit, e.max, e.over), ("t", 2, Over::Tenant));
        let _b1 = s.try_acquire("b").expect("b1");
        let e = s.try_acquire("b").expect_err("global cap");
        assert_eq!((e.limit, e.max, e.over), ("g", 3, Over::Global));
        let mut saturated = s.saturated_tenants();
        saturated.sort();
        assert_eq!(saturated, ["a", "b"], "a at its cap, b at the global one");
        drop(a1);
        assert_eq!((s.held(), s.held_by("a")), (2, 1));
        assert!(
            s.try_acquire("b").is_err(),
            "the top slot is kept for a tenant holding none"
        );
        assert!(s.try_acquire("c").is_ok(), "which takes it");
    }

    #[tokio::test(start_paused = true)]
    async fn rate_refills_with_time() {
        let r = Rate::new("r", 10, 2);
        assert!(r.try_take("a").is_ok());
        assert!(r.try_take("a").is_ok());
        assert_eq!(r.try_take("a").expect_err("burst spent").limit, "r");
        assert!(r.try_take("b").is_ok(), "another tenant has its own bucket");
        tokio::time::advance(std::time::Duration::from_millis(100)).await;
        assert!(r.try_take("a").is_ok(), "one token refilled after 1/10 s");
        assert!(r.try_take("a").is_err());
    }
}
