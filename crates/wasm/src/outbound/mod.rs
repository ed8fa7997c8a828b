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
//!   replayed attempt is answered from it;
//! - `post`: the host's own requests (a webhook's delivery) under the same allow-list,
//!   address rules, TLS and bounds, through the same resolver and connector.
//!
//! [`Outbound`] is the host-wide part (roots, the resolver, counters, per-tenant
//! concurrency); an [`HttpGrant`] is one tool's.

pub mod allow;
mod post;
mod send;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use snodo_core::config::{SettingError, millis};

pub use allow::{AllowList, AllowedHost, BadEntry, Refusal};
pub use post::{Answer, Listening, PostError, PostLimits};
pub(crate) use send::Hooks;
pub use send::JOURNAL_HEAD_BYTES;

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
    /// Transient answers (401, 408, 429, 5xx) to any method go unrecorded, not only to
    /// idempotent ones: a retry of the attempt sends the request again, at its position and
    /// with its key. For a caller whose far end deduplicates by the key (the gateway's
    /// upstream calls); off by default, where a replay must not repeat a POST.
    pub retry_transient: bool,
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
            retry_transient: false,
        }
    }

    /// The first injection that no allowed entry reaches (it would never be sent, and the
    /// service would answer 401 with nothing saying why): its index and what to change,
    /// `allowed_key` naming the allow-list's configuration key.
    pub fn unreachable_injection(&self, allowed_key: &str) -> Option<(usize, String)> {
        let entries = self.allowed.entries();
        let (i, inj) = self
            .inject
            .iter()
            .enumerate()
            .find(|(_, inj)| !entries.iter().any(|e| inj.host.overlaps(e)))?;
        let listed: Vec<String> = entries
            .iter()
            .map(|e| format!("{:?}", e.to_string()))
            .collect();
        let listed = if listed.is_empty() {
            "none".to_owned()
        } else {
            listed.join(", ")
        };
        let host = inj.host.to_string();
        Some((
            i,
            format!(
                "{host:?} is covered by no entry of allowed_outbound_hosts ({listed}), so the \
                 header would never be sent; add {host:?} to {allowed_key}"
            ),
        ))
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
/// (it is never compared with guest input), and never serialized. It carries the forms the
/// host scrubs besides the value itself, worked out once.
#[derive(Clone)]
pub struct Secret(Arc<Forms>);

struct Forms {
    value: Arc<str>,
    /// The value, then its encodings: what [`scrub_text`] and [`scrub_bytes`] replace.
    forms: Vec<Box<str>>,
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        self.0.value == other.0.value
    }
}

impl Eq for Secret {}

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        let value = value.into();
        let forms = forms_of(&value);
        Self(Arc::new(Forms { value, forms }))
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0.value
    }

    /// What the host replaces wherever it scrubs: the value, and the encodings of it a
    /// service or a tool applies without meaning anything by it (base64 and base64url at
    /// any alignment, hex, percent-encoding, JSON string escapes). Best effort: a
    /// transformation outside this list (hashing, reversing, splitting) is not recognised.
    pub(crate) fn forms(&self) -> impl Iterator<Item = &str> {
        self.0.forms.iter().map(|f| &**f)
    }
}

/// Encodings shorter than this are not scrubbed: a short run of base64 or hex digits
/// occurs in ordinary text, and replacing it would mangle what the guest receives without
/// hiding anything that matters.
const MIN_ENCODED_FORM: usize = 8;

/// `value` and its encodings, longest first among the encodings, without repeats.
fn forms_of(value: &str) -> Vec<Box<str>> {
    if value.is_empty() {
        return Vec::new();
    }
    let bytes = value.as_bytes();
    let mut encoded: Vec<String> = Vec::new();
    for engine in [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        encoded.extend((0..3).map(|k| base64_core(bytes, k, engine)));
    }
    let hex = snodo_core::ids::hex(bytes);
    encoded.push(hex.to_ascii_uppercase());
    encoded.push(hex);
    let percent: String = bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    encoded.push(percent.replace("%20", "+"));
    encoded.push(percent);
    if let Ok(json) = serde_json::to_string(value) {
        encoded.push(json[1..json.len() - 1].to_owned());
    }
    encoded.sort_by_key(|f| std::cmp::Reverse(f.len()));
    let mut forms: Vec<Box<str>> = vec![value.into()];
    for f in encoded {
        if f.len() >= MIN_ENCODED_FORM && !forms.iter().any(|k| **k == *f) {
            forms.push(f.into());
        }
    }
    forms
}

/// The base64 characters that `bytes` alone decide when they start `k` bytes (0, 1 or 2)
/// into a group of three: what any base64 text carrying `bytes` at that alignment holds,
/// whatever comes before and after. A character stands for 6 bits of the stream; it is
/// decided when all 6 lie inside `bytes`, so at most two characters at each end are left
/// out (they mix in the neighbours' bits).
fn base64_core(bytes: &[u8], k: usize, engine: &base64::engine::GeneralPurpose) -> String {
    use base64::Engine as _;
    let mut aligned = vec![0u8; k];
    aligned.extend_from_slice(bytes);
    let text = engine.encode(&aligned);
    let (first, end) = ((8 * k).div_ceil(6), 8 * (k + bytes.len()) / 6);
    text.get(first..end).unwrap_or_default().to_owned()
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

/// What replaces a secret value wherever the host scrubs it.
pub const REDACTED: &str = "[redacted]";

/// The forms of every secret, in the order they are replaced.
fn all_forms(secrets: &[Secret]) -> impl Iterator<Item = &str> {
    secrets.iter().flat_map(Secret::forms)
}

/// Replaces every secret (the value and its encodings) in `text`; `None` when none
/// occurs.
pub fn scrub_text(text: &str, secrets: &[Secret]) -> Option<String> {
    if !all_forms(secrets).any(|f| text.contains(f)) {
        return None;
    }
    let mut out = text.to_owned();
    for f in all_forms(secrets) {
        if out.contains(f) {
            out = out.replace(f, REDACTED);
        }
    }
    Some(out)
}

/// Replaces every secret in a header name, which the transport may have lower-cased (an
/// HTTP/2 hop, or hyper itself): compared without case, and replaced by `redacted`, which
/// is a valid name where `[redacted]` is not.
pub(crate) fn scrub_name(name: &str, secrets: &[Secret]) -> Option<String> {
    let mut out = name.to_ascii_lowercase();
    let mut hit = false;
    for f in all_forms(secrets) {
        let f = f.to_ascii_lowercase();
        if out.contains(&f) {
            out = out.replace(&f, "redacted");
            hit = true;
        }
    }
    hit.then_some(out)
}

/// Replaces every secret in the strings of `value` and in its objects' keys (two keys
/// that differ only by a secret become one).
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
        Value::Object(map) => {
            if map.keys().any(|k| scrub_text(k, secrets).is_some()) {
                for (k, mut v) in std::mem::take(map) {
                    scrub_value(&mut v, secrets);
                    map.insert(scrub_text(&k, secrets).unwrap_or(k), v);
                }
            } else {
                map.values_mut().for_each(|v| scrub_value(v, secrets));
            }
        }
        _ => {}
    }
}

/// Replaces every secret in `bytes` (a response body), in place of a copy only when one
/// occurs.
pub(crate) fn scrub_bytes(bytes: Vec<u8>, secrets: &[Secret]) -> Vec<u8> {
    let mut out = bytes;
    for s in all_forms(secrets).map(str::as_bytes) {
        if out.len() < s.len() || !out.windows(s.len()).any(|w| w == s) {
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

/// `outbound = { ... }` of a tool's settings: limits of its requests over the ones it
/// inherits ([`OutboundLimits`]'s defaults, or those of `[defaults]`), times in
/// milliseconds under the names with `_ms`. A key left out keeps what is inherited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolOutbound {
    /// [`OutboundLimits::connect_timeout`] (`connect_timeout_ms`, default 10 000).
    #[serde(rename = "connect_timeout_ms", with = "millis::option")]
    pub connect_timeout: Option<Duration>,
    /// [`OutboundLimits::first_byte_timeout`] (`first_byte_timeout_ms`, default 30 000).
    #[serde(rename = "first_byte_timeout_ms", with = "millis::option")]
    pub first_byte_timeout: Option<Duration>,
    /// [`OutboundLimits::between_bytes_timeout`] (`between_bytes_timeout_ms`, default
    /// 30 000).
    #[serde(rename = "between_bytes_timeout_ms", with = "millis::option")]
    pub between_bytes_timeout: Option<Duration>,
    /// [`OutboundLimits::max_request_bytes`] (default 1 MiB).
    pub max_request_bytes: Option<u64>,
    /// [`OutboundLimits::max_response_bytes`] (default 1 MiB).
    pub max_response_bytes: Option<u64>,
    /// [`OutboundLimits::max_requests`] (default 64).
    pub max_requests: Option<u32>,
    /// [`OutboundLimits::max_concurrent`] (default 8).
    pub max_concurrent: Option<u32>,
}

impl ToolOutbound {
    /// Every value given is positive; the error names its key (relative to `outbound`).
    pub fn check(&self) -> Result<(), SettingError> {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        for (key, v) in [
            ("connect_timeout_ms", ms(self.connect_timeout)),
            ("first_byte_timeout_ms", ms(self.first_byte_timeout)),
            ("between_bytes_timeout_ms", ms(self.between_bytes_timeout)),
            ("max_request_bytes", self.max_request_bytes),
            ("max_response_bytes", self.max_response_bytes),
            ("max_requests", self.max_requests.map(u64::from)),
            ("max_concurrent", self.max_concurrent.map(u64::from)),
        ] {
            if v == Some(0) {
                return Err(SettingError::new(key, "must be positive"));
            }
        }
        Ok(())
    }

    /// These values over `base`'s: each key given here wins, the others are `base`'s.
    #[must_use]
    pub fn over(self, base: Option<ToolOutbound>) -> ToolOutbound {
        let b = base.unwrap_or_default();
        ToolOutbound {
            connect_timeout: self.connect_timeout.or(b.connect_timeout),
            first_byte_timeout: self.first_byte_timeout.or(b.first_byte_timeout),
            between_bytes_timeout: self.between_bytes_timeout.or(b.between_bytes_timeout),
            max_request_bytes: self.max_request_bytes.or(b.max_request_bytes),
            max_response_bytes: self.max_response_bytes.or(b.max_response_bytes),
            max_requests: self.max_requests.or(b.max_requests),
            max_concurrent: self.max_concurrent.or(b.max_concurrent),
        }
    }

    /// `limits` with every value given here in place of the inherited one.
    pub fn apply_to(&self, limits: &mut OutboundLimits) {
        let l = limits;
        l.connect_timeout = self.connect_timeout.unwrap_or(l.connect_timeout);
        l.first_byte_timeout = self.first_byte_timeout.unwrap_or(l.first_byte_timeout);
        l.between_bytes_timeout = (self.between_bytes_timeout).unwrap_or(l.between_bytes_timeout);
        l.max_request_bytes = self.max_request_bytes.unwrap_or(l.max_request_bytes);
        l.max_response_bytes = self.max_response_bytes.unwrap_or(l.max_response_bytes);
        l.max_requests = self.max_requests.unwrap_or(l.max_requests);
        l.max_concurrent = self.max_concurrent.unwrap_or(l.max_concurrent);
    }
}

/// How the host sends: roots, overrides and shared limits. It is the `[outbound]` section
/// as written ([`check`](Self::check) it once read); `own` is learnt by the node, never
/// written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutboundConfig {
    /// PEM file of extra root certificates (a private CA), trusted besides the usual roots
    /// (`ca_bundle`; a relative path is the configuration file's to resolve).
    pub ca_bundle: Option<PathBuf>,
    /// Names answered without DNS (`resolve`, like curl's `--resolve`), matched without
    /// case or a final dot; the address rules still apply to what they name.
    pub resolve: BTreeMap<String, Vec<IpAddr>>,
    /// The server's own listen addresses, known before it binds: refused unless an entry
    /// names them to the port. `snodo serve` adds the bound address itself.
    #[serde(skip)]
    pub own: Vec<SocketAddr>,
    /// Outbound requests of one tenant in flight at once, all its attempts together
    /// (`max_concurrent_per_tenant`, default 64).
    pub max_concurrent_per_tenant: u32,
    /// The most bytes one task's journal holds (`journal_task_bytes`, default 8 MiB). The
    /// runner gives each attempt's sender this budget; `snodo serve` hands it over.
    pub journal_task_bytes: u64,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        Self {
            ca_bundle: None,
            resolve: BTreeMap::new(),
            own: Vec::new(),
            max_concurrent_per_tenant: 64,
            journal_task_bytes: 8 << 20,
        }
    }
}

impl OutboundConfig {
    /// The key and the reason of a setting that cannot hold: a zero limit would refuse every
    /// request (or every journaled one).
    pub fn check(&self) -> Result<(), SettingError> {
        if self.max_concurrent_per_tenant == 0 {
            return Err(SettingError::new(
                "max_concurrent_per_tenant",
                "must be positive",
            ));
        }
        if self.journal_task_bytes == 0 {
            return Err(SettingError::new("journal_task_bytes", "must be positive"));
        }
        Ok(())
    }
}

/// A name of `resolve` as a request's host is matched against it: lower case, no final dot.
fn resolve_key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
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

/// A TLS client configuration trusting the WebPKI roots and, when given, the certificates of
/// the PEM file `ca_file` (a private CA). An error names the file.
pub fn tls_client(ca_file: Option<&std::path::Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    if let Some(path) = ca_file {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let named = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| named(&e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| named(&e))?;
        if certs.is_empty() {
            return Err(named(&"no certificate in the file"));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| named(&e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(tls))
}

impl Outbound {
    /// The outbound side for `config`: loads the roots (and the private bundle, whose
    /// errors name the file).
    pub fn new(mut config: OutboundConfig) -> Result<Self, String> {
        let tls = tls_client(config.ca_bundle.as_deref())
            .map_err(|e| format!("outbound.ca_bundle {e}"))?;
        config.resolve = std::mem::take(&mut config.resolve)
            .into_iter()
            .map(|(name, ips)| (resolve_key(&name), ips))
            .collect();
        Ok(Self {
            own: parking_lot::RwLock::new(config.own.clone()),
            config,
            tls,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_outbound_limits_replace_only_what_they_name() {
        let o: ToolOutbound = serde_json::from_value(serde_json::json!({
            "max_requests": 5, "first_byte_timeout_ms": 2000,
        }))
        .expect("parses");
        let mut l = OutboundLimits::default();
        o.apply_to(&mut l);
        assert_eq!(l.max_requests, 5);
        assert_eq!(l.first_byte_timeout, Duration::from_secs(2));
        assert_eq!(
            l.max_response_bytes,
            OutboundLimits::default().max_response_bytes,
            "the inherited value stays"
        );
        assert_eq!(o.check(), Ok(()));
        for key in ["connect_timeout_ms", "max_request_bytes", "max_concurrent"] {
            let o: ToolOutbound =
                serde_json::from_value(serde_json::json!({ key: 0 })).expect("parses");
            assert_eq!(o.check().expect_err(key).key, key);
        }
    }

    /// `bytes` in base64 by `engine`, as services write it (padded or not).
    fn base64(bytes: &[u8], engine: &base64::engine::GeneralPurpose) -> String {
        use base64::Engine as _;
        engine.encode(bytes)
    }

    #[test]
    fn a_secret_is_scrubbed_in_base64_at_every_alignment_and_in_both_alphabets() {
        let secret = "sk_live_Mixed+Case/0123456789?~";
        let s = [Secret::new(secret)];
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        for (engine, unpadded) in [
            (&STANDARD, &STANDARD_NO_PAD),
            (&URL_SAFE_NO_PAD, &URL_SAFE_NO_PAD),
        ] {
            for before in ["", "a", "ab", "headers: x-api-key: "] {
                for after in ["", "z", "zy", "\nnext: 1"] {
                    let text = base64(format!("{before}{secret}{after}").as_bytes(), engine);
                    let clean = scrub_text(&text, &s).unwrap_or_else(|| panic!("{text}"));
                    // What is left of the secret is at most the two characters at each end
                    // that mix its bits with its neighbours'.
                    let (head, tail) = clean.split_once(REDACTED).expect("one replacement");
                    let around = |n: usize| base64(&vec![0; n], unpadded).len();
                    assert!(head.len() <= around(before.len()) + 1, "{clean}");
                    assert!(tail.len() <= around(after.len()) + 4, "{clean}");
                    assert!(!tail.contains(REDACTED), "{clean}");
                }
            }
        }
    }

    #[test]
    fn hex_percent_and_json_forms_are_scrubbed_and_short_secrets_only_as_they_are() {
        let secret = "Bearer sk \"quoted\"";
        let s = [Secret::new(secret)];
        let hex = snodo_core::ids::hex(secret.as_bytes());
        for text in [
            hex.clone(),
            hex.to_ascii_uppercase(),
            "Bearer%20sk%20%22quoted%22".to_owned(),
            "Bearer+sk+%22quoted%22".to_owned(),
            "Bearer sk \\\"quoted\\\"".to_owned(),
        ] {
            assert_eq!(
                scrub_text(&format!("<{text}>"), &s).as_deref(),
                Some("<[redacted]>"),
                "{text}"
            );
        }
        let short = Secret::new("abc");
        assert_eq!(short.forms().collect::<Vec<_>>(), vec!["abc"]);
        assert_eq!(scrub_text("YWJj 616263", &[short]), None);
    }

    #[test]
    fn header_names_are_scrubbed_without_case() {
        let s = [Secret::new("Sk_Mixed_0123456789")];
        assert_eq!(
            scrub_name("x-echo-sk_mixed_0123456789", &s).as_deref(),
            Some("x-echo-redacted")
        );
        assert_eq!(scrub_name("content-type", &s), None);
    }

    #[test]
    fn object_keys_are_scrubbed_as_well_as_values() {
        let s = [Secret::new("pw_readable_0123")];
        let mut v = serde_json::json!({
            "pw_readable_0123": {"inner pw_readable_0123": ["pw_readable_0123"]},
            "plain": 1,
        });
        scrub_value(&mut v, &s);
        assert_eq!(
            v,
            serde_json::json!({
                "[redacted]": {"inner [redacted]": ["[redacted]"]},
                "plain": 1,
            })
        );
    }

    #[test]
    fn the_outbound_section_is_checked_and_its_names_match_without_case_or_final_dot() {
        let zero: OutboundConfig =
            toml_like(r#"{"max_concurrent_per_tenant": 0}"#).expect("a section");
        assert_eq!(zero.check().unwrap_err().key, "max_concurrent_per_tenant");
        let zero: OutboundConfig = toml_like(r#"{"journal_task_bytes": 0}"#).expect("a section");
        assert_eq!(zero.check().unwrap_err().key, "journal_task_bytes");
        assert!(
            toml_like::<OutboundConfig>(r#"{"own": []}"#).is_err(),
            "not written"
        );
        let named: OutboundConfig =
            toml_like(r#"{"resolve": {"API.Internal.": ["10.0.0.7"]}}"#).expect("a section");
        named.check().expect("defaults hold");
        assert_eq!(named.journal_task_bytes, 8 << 20);
        let outbound = Outbound::new(named).expect("the usual roots");
        assert!(outbound.config.resolve.contains_key("api.internal"));
    }

    /// A section read as a configuration file gives it (JSON stands in for TOML here).
    fn toml_like<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
        serde_json::from_str(text)
    }
}
