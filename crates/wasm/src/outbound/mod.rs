//! Outbound HTTP: `wasi:http/outgoing-handler` served by the host, denied by default.
//!
//! A guest builds a request with any wasi:http client (wstd, the `wasi` crate, the SDK's
//! client); the host decides whether it goes out and sends it itself:
//! - [`allow`]: the tool's allow-list and the address rules, checked on every address the
//!   request would connect to (the host resolves the name, checks each address and connects
//!   to a checked one, so a rebinding name cannot slip between check and connect);
//! - [`send`]: the sender (TLS by rustls with the usual roots or a private bundle), the
//!   limits of one attempt and one tenant, header injection of secrets, and the journal:
//!   in a task, every response is recorded in the store before the guest sees it and a
//!   replayed attempt is answered from it.
//!
//! [`Outbound`] is the host-wide part (roots, the resolver, counters, per-tenant
//! concurrency); an [`HttpGrant`] is one tool's.

pub mod allow;
mod send;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

pub use allow::{AllowList, AllowedHost, Refusal};
pub(crate) use send::Hooks;

/// One tool's outbound grant: where it may go, within which limits, with which secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    /// `allowed_outbound_hosts`.
    pub allowed: AllowList,
    /// Limits of one attempt.
    pub limits: OutboundLimits,
    /// Headers the host adds to requests to named hosts; the guest never sees them.
    pub inject: Vec<Injection>,
    /// Record responses in the task's journal and answer replays from it (default on).
    pub journal: bool,
    /// Secret values this tool's requests or environment carry, scrubbed from what the
    /// guest logs and from responses before they are recorded or seen.
    pub scrub: Vec<Secret>,
}

impl HttpGrant {
    /// A grant for `allowed` with the default limits, no injection, journaled.
    pub fn new(allowed: AllowList) -> Self {
        Self {
            allowed,
            limits: OutboundLimits::default(),
            inject: Vec::new(),
            journal: true,
            scrub: Vec::new(),
        }
    }
}

/// A header the host adds to every request whose URL an entry allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// The URLs it goes to (allow-list syntax).
    pub host: AllowedHost,
    /// The header name, lower case.
    pub header: String,
    /// The value, secrets substituted.
    pub value: Secret,
}

/// A secret value: shown as `[secret]` by `Debug`, compared in constant time is not needed
/// (it is never compared with guest input), and never serialized.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Self(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

/// What replaces a secret value wherever the host scrubs it.
pub const REDACTED: &str = "[redacted]";

/// Replaces every secret in `text`.
pub fn scrub_text(text: &str, secrets: &[Secret]) -> Option<String> {
    let hit = secrets
        .iter()
        .any(|s| !s.expose().is_empty() && text.contains(s.expose()));
    if !hit {
        return None;
    }
    let mut out = text.to_owned();
    for s in secrets.iter().filter(|s| !s.expose().is_empty()) {
        out = out.replace(s.expose(), REDACTED);
    }
    Some(out)
}

/// Replaces every secret in the strings of `value`.
pub fn scrub_value(value: &mut serde_json::Value, secrets: &[Secret]) {
    use serde_json::Value;
    if secrets.is_empty() {
        return;
    }
    match value {
        Value::String(s) => {
            if let Some(clean) = scrub_text(s, secrets) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_value(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| scrub_value(v, secrets)),
        _ => {}
    }
}

/// Replaces every secret in `bytes` (a response body), in place of a copy only when one
/// occurs.
pub(crate) fn scrub_bytes(bytes: Vec<u8>, secrets: &[Secret]) -> Vec<u8> {
    let mut out = bytes;
    for s in secrets.iter().map(|s| s.expose().as_bytes()) {
        if s.is_empty() || out.len() < s.len() {
            continue;
        }
        if !out.windows(s.len()).any(|w| w == s) {
            continue;
        }
        let mut next = Vec::with_capacity(out.len());
        let mut i = 0;
        while i < out.len() {
            if out[i..].starts_with(s) {
                next.extend_from_slice(REDACTED.as_bytes());
                i += s.len();
            } else {
                next.push(out[i]);
                i += 1;
            }
        }
        out = next;
    }
    out
}

/// The limits of one attempt's outbound requests. Each, when hit, fails that request with
/// a wasi:http error code and is counted (`snodo_outbound_limited_total{tool,limit}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundLimits {
    /// Time to connect (TCP and TLS). Default 10 s.
    pub connect_timeout: Duration,
    /// Time from sending to the response's first byte. Default 30 s.
    pub first_byte_timeout: Duration,
    /// Time between two chunks of the response body. Default 30 s.
    pub between_bytes_timeout: Duration,
    /// Request body bytes. Default 1 MiB.
    pub max_request_bytes: u64,
    /// Response body bytes (and, when journaled, what one journal entry may hold).
    /// Default 1 MiB.
    pub max_response_bytes: u64,
    /// Requests one attempt may send (replayed ones included). Default 64.
    pub max_requests: u32,
    /// Requests of one attempt in flight at once. Default 8.
    pub max_concurrent: u32,
}

impl Default for OutboundLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(30),
            between_bytes_timeout: Duration::from_secs(30),
            max_request_bytes: 1 << 20,
            max_response_bytes: 1 << 20,
            max_requests: 64,
            max_concurrent: 8,
        }
    }
}

/// How the host sends: roots, overrides and shared limits.
#[derive(Debug, Clone)]
pub struct OutboundConfig {
    /// PEM file of extra root certificates (a private CA), trusted besides the usual roots.
    pub ca_bundle: Option<PathBuf>,
    /// Names answered without DNS (`outbound.resolve`, like curl's `--resolve`); the address
    /// rules still apply to what they name.
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
    /// The server's own listen addresses, known before it binds: refused unless an entry
    /// names them to the port. `snodo serve` adds the bound address itself.
    pub own: Vec<SocketAddr>,
    /// Outbound requests of one tenant in flight at once, all its attempts together.
    /// Default 64.
    pub max_concurrent_per_tenant: u32,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            ca_bundle: None,
            resolve: BTreeMap::new(),
            own: Vec::new(),
            max_concurrent_per_tenant: 64,
        }
    }
}

/// The host-wide side of outbound HTTP.
pub struct Outbound {
    pub(crate) config: OutboundConfig,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    tenants: Mutex<HashMap<Arc<str>, Arc<tokio::sync::Semaphore>>>,
    counters: Mutex<Counters>,
    /// The server's own listen addresses: known once it is bound (its port may be chosen
    /// by the system), so set then ([`Outbound::listening_on`]).
    pub(crate) own: parking_lot::RwLock<Vec<SocketAddr>>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Outbound counts, by tool.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    /// Refused requests by (tool, reason).
    pub refused: BTreeMap<(String, &'static str), u64>,
    /// Requests stopped by a limit, by (tool, limit).
    pub limited: BTreeMap<(String, &'static str), u64>,
    /// Requests sent, by tool.
    pub sent: BTreeMap<String, u64>,
    /// Requests answered from a task's journal, by tool.
    pub replayed: BTreeMap<String, u64>,
}

impl Outbound {
    /// The outbound side for `config`: loads the roots (and the private bundle, whose
    /// errors name the file).
    pub fn new(config: OutboundConfig) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        if let Some(path) = &config.ca_bundle {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("outbound.ca_bundle {}: {e}", path.display()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("outbound.ca_bundle {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "outbound.ca_bundle {}: no certificate in the file",
                    path.display()
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("outbound.ca_bundle {}: {e}", path.display()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            own: parking_lot::RwLock::new(config.own.clone()),
            config,
            tls: Arc::new(tls),
            tenants: Mutex::new(HashMap::new()),
            counters: Mutex::new(Counters::default()),
        })
    }

    /// Tells the rules the address the server is listening on: refused to tools unless an
    /// entry names it to the port.
    pub fn listening_on(&self, addr: SocketAddr) {
        let mut own = self.own.write();
        if !own.contains(&addr) {
            own.push(addr);
        }
    }

    /// The counts so far.
    pub fn counters(&self) -> Counters {
        self.counters.lock().clone()
    }

    /// The semaphore bounding `tenant`'s requests in flight.
    pub(crate) fn tenant_slots(&self, tenant: &Arc<str>) -> Arc<tokio::sync::Semaphore> {
        let mut t = self.tenants.lock();
        if t.len() > 4096 {
            // Idle tenants' semaphores are dropped; one in use is kept by its holders.
            t.retain(|_, s| Arc::strong_count(s) > 1);
        }
        t.entry(tenant.clone())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    self.config.max_concurrent_per_tenant as usize,
                ))
            })
            .clone()
    }

    pub(crate) fn count_refused(&self, tool: &str, reason: &'static str) {
        *self
            .counters
            .lock()
            .refused
            .entry((tool.to_owned(), reason))
            .or_default() += 1;
    }

    pub(crate) fn count_limited(&self, tool: &str, limit: &'static str) {
        *self
            .counters
            .lock()
            .limited
            .entry((tool.to_owned(), limit))
            .or_default() += 1;
    }

    pub(crate) fn count_sent(&self, tool: &str, replayed: bool) {
        let mut c = self.counters.lock();
        let map = if replayed {
            &mut c.replayed
        } else {
            &mut c.sent
        };
        // The tool's name is allocated once, at its first request.
        match map.get_mut(tool) {
            Some(n) => *n += 1,
            None => {
                map.insert(tool.to_owned(), 1);
            }
        }
    }
}
