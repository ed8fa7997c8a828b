//! Admission budgets shared by tenants: counted slots with a per-tenant and a global cap,
//! and per-tenant token buckets for rates.
//!
//! A budget never makes a request wait: a caller over a cap is refused at once with a
//! [`Refusal`] that names the limit (its configuration key) and the cap, so the edge can
//! answer with a clear error. Nothing already accepted is ever taken back by a budget.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use tokio::time::Instant;

/// The budgets of the MCP edge, per tenant beside a global cap. Every value is a setting of
/// `[limits]` in the configuration file; the defaults are documented there and here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantLimits {
    /// Synchronous guest executions (calls, `prepare`, mode rules) one tenant may run at
    /// once. Default 16.
    pub sync_calls_per_tenant: usize,
    /// The same for all tenants together. Default 64.
    pub sync_calls: usize,
    /// Wall-clock limit of a synchronous call, time in imports included. Default 120 s.
    pub sync_timeout_ms: u64,
    /// Live (non-terminal) tasks one tenant may hold. Default 10,000.
    pub live_tasks_per_tenant: u64,
    /// Tasks one tenant may create per second, on average (per node). Default 10,000: a
    /// guard against a flood, above what one node completes (a few thousand a second
    /// here); lower it per deployment to share a node between tenants.
    pub task_creates_per_second: u32,
    /// Tasks one tenant may create at once before the rate applies. Default 20,000.
    pub task_create_burst: u32,
    /// Open `subscriptions/listen` streams per tenant. Default 16.
    pub streams_per_tenant: usize,
    /// Open streams, all tenants together. Default 1,024.
    pub streams: usize,
    /// Task ids one stream may watch (after removing duplicates). Default 256.
    pub stream_task_ids: usize,
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            sync_calls_per_tenant: 16,
            sync_calls: 64,
            sync_timeout_ms: 120_000,
            live_tasks_per_tenant: 10_000,
            task_creates_per_second: 10_000,
            task_create_burst: 20_000,
            streams_per_tenant: 16,
            streams: 1_024,
            stream_task_ids: 256,
        }
    }
}

/// Whose cap refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The tenant's own cap.
    Tenant,
    /// The cap shared by every tenant.
    Global,
}

impl Over {
    /// `"tenant"` or `"global"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Over::Tenant => "tenant",
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

/// Counted slots: at most `per_tenant` held by one tenant and `global` by all together.
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

    /// Takes a slot for `tenant`, or says which cap is reached.
    pub fn try_acquire(self: &Arc<Self>, tenant: &str) -> Result<Slot, Refusal> {
        let mut held = self.lock();
        let mine = held.by_tenant.get(tenant).copied().unwrap_or(0);
        if mine >= self.per_tenant {
            return Err(Refusal {
                limit: self.tenant_key,
                max: self.per_tenant as u64,
                over: Over::Tenant,
            });
        }
        if held.total >= self.global {
            return Err(Refusal {
                limit: self.global_key,
                max: self.global as u64,
                over: Over::Global,
            });
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
        held.total < self.global
            && held.by_tenant.get(tenant).copied().unwrap_or(0) < self.per_tenant
    }

    /// Whether any tenant could take a slot now (the global cap is not reached).
    pub fn has_global_room(&self) -> bool {
        self.lock().total < self.global
    }

    /// Tenants holding their whole per-tenant share.
    pub fn saturated_tenants(&self) -> Vec<String> {
        self.lock()
            .by_tenant
            .iter()
            .filter(|(_, n)| **n >= self.per_tenant)
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
    fn slots_cap_each_tenant_and_all_together() {
        let s = Slots::new("t", 2, "g", 3);
        let a1 = s.try_acquire("a").expect("a1");
        let _a2 = s.try_acquire("a").expect("a2");
        let e = s.try_acquire("a").expect_err("a over its share");
        assert_eq!((e.limit, e.max, e.over), ("t", 2, Over::Tenant));
        let _b1 = s.try_acquire("b").expect("b1");
        let e = s.try_acquire("b").expect_err("global cap");
        assert_eq!((e.limit, e.max, e.over), ("g", 3, Over::Global));
        assert_eq!(s.saturated_tenants(), vec!["a".to_owned()]);
        drop(a1);
        assert_eq!((s.held(), s.held_by("a")), (2, 1));
        assert!(s.try_acquire("b").is_ok(), "a freed slot is anyone's");
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
