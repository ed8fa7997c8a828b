//! The sender behind `wasi:http/outgoing-handler`: one execution's [`Hooks`].
//!
//! For every request, in order: the request body (bounded); the grant and the allow-list;
//! the attempt's and the tenant's limits; in a journaled task, the journal (a
//! recorded answer at this position ends the request here); the name resolved by the host
//! and every address checked; connect, TLS, send; the response bounded by its limits,
//! scrubbed of secrets and, in a journaled task, recorded before the guest sees it.
//!
//! A response the host scrubs (one to a request carrying an injected secret, or recorded in
//! the journal of a tool that has secrets) is only ever scrubbed as plain bytes: the host
//! asks for it unencoded (`accept-encoding: identity`, whatever the guest set) and refuses
//! one that arrives content- or transfer-encoded, which the scrubber could not read. A
//! request carrying an injected secret may not ask for a range, and a partial response to
//! one is refused: pieces of an echo could carry the secret in parts no scrubber
//! recognises.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Scheme;
use http::{HeaderName, HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, Full};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use wasmtime_wasi_http::{
    DEFAULT_FORBIDDEN_HEADERS, Error, ForbiddenHeaderFilter, RequestOptions, WasiBody,
    WasiHttpHooks,
};

use snodo_core::ids::hex;
use snodo_core::model::{JournalEntry, JournalRequest, JournalResponse};

use super::allow::{AllowedHost, Host, Refusal, check_address};
use super::{HttpGrant, Outbound, OutboundLimits, Secret, scrub_bytes, scrub_name, scrub_text};
use crate::ExecutionIo;
use crate::io::guest_text;

/// What one execution's requests share.
pub(crate) struct Shared {
    host: Arc<Outbound>,
    grant: Option<Arc<HttpGrant>>,
    tool: Arc<str>,
    tenant: Arc<str>,
    task: Option<Arc<str>>,
    io: Arc<dyn ExecutionIo>,
    /// The next position; positions are taken in the order the guest hands requests over,
    /// and a request that ends without an entry gives its position back (see [`OneRequest`]).
    next_seq: AtomicU32,
    /// The requests handed over so far, replayed ones and those that gave their position
    /// back included: what `max_requests` counts.
    handed: AtomicU32,
    /// The attempt's requests in flight.
    in_flight: Arc<tokio::sync::Semaphore>,
    /// The divergence a replay met, once one is seen.
    diverged: Mutex<Option<String>>,
    /// What responses are scrubbed of: the grant's secrets and the values it injects (so
    /// an injected value is scrubbed even when the grant does not list it).
    secrets: Vec<Secret>,
    /// The headers a guest may not set: the transport's, and those the host sets (injected
    /// secrets; the idempotency key in a journaled task), which a guest can neither set nor
    /// read back from its own request. Built once per execution; asked for every header the
    /// guest sets.
    forbidden: ForbiddenHeaderFilter,
}

/// One execution's `wasi:http` hooks.
pub(crate) struct Hooks(Arc<Shared>);

impl Hooks {
    pub(crate) fn new(
        host: Arc<Outbound>,
        grant: Option<Arc<HttpGrant>>,
        tool: &str,
        tenant: Arc<str>,
        task: Option<&str>,
        io: Arc<dyn ExecutionIo>,
    ) -> Self {
        let concurrent = grant.as_ref().map_or(1, |g| g.limits.max_concurrent.max(1));
        let mut own: Vec<HeaderName> = grant
            .iter()
            .flat_map(|g| g.inject.iter())
            .filter_map(|i| HeaderName::from_bytes(i.header.as_bytes()).ok())
            .collect();
        // Under the journal the host keys non-idempotent requests itself; elsewhere a tool
        // may send its own key (its `idempotency_key`, for example).
        if grant.as_ref().is_some_and(|g| g.journal) && io.journaled() && task.is_some() {
            own.push(HeaderName::from_static("idempotency-key"));
        }
        // Most executions add nothing to the transport's list: they share one filter.
        static TRANSPORT_ONLY: std::sync::LazyLock<ForbiddenHeaderFilter> =
            std::sync::LazyLock::new(|| Arc::new(|name| DEFAULT_FORBIDDEN_HEADERS.contains(name)));
        let forbidden: ForbiddenHeaderFilter = if own.is_empty() {
            TRANSPORT_ONLY.clone()
        } else {
            Arc::new(move |name| DEFAULT_FORBIDDEN_HEADERS.contains(name) || own.contains(name))
        };
        let mut secrets: Vec<Secret> = Vec::new();
        if let Some(g) = &grant {
            for s in g.scrub.iter().chain(g.inject.iter().map(|i| &i.value)) {
                if !secrets.contains(s) {
                    secrets.push(s.clone());
                }
            }
        }
        Self(Arc::new(Shared {
            host,
            grant,
            tool: Arc::from(tool),
            tenant,
            task: task.map(Arc::from),
            io,
            next_seq: AtomicU32::new(0),
            handed: AtomicU32::new(0),
            in_flight: Arc::new(tokio::sync::Semaphore::new(concurrent as usize)),
            diverged: Mutex::new(None),
            secrets,
            forbidden,
        }))
    }

    /// The divergence a journaled replay met, if any: the attempt must fail with it.
    pub(crate) fn diverged(&self) -> Option<String> {
        self.0.diverged.lock().clone()
    }

    /// Records a divergence met outside a request (a replayed sleep): the first one seen
    /// is the one the attempt fails with.
    pub(crate) fn diverge(&self, why: String) {
        self.0.diverged.lock().get_or_insert(why);
    }

    /// Takes the next journal position for a sleep, which keeps it: a sleep is recorded
    /// at its position when it parks, and one that waited in place leaves a hole that a
    /// replay fills afresh.
    pub(crate) fn take_position(&self) -> u32 {
        self.0.next_seq.fetch_add(1, Ordering::AcqRel)
    }
}

impl WasiHttpHooks for Hooks {
    /// The host writes `Host` itself, from the checked target (see `transmit`): the
    /// transport would copy the guest's authority, userinfo included.
    fn set_host_header(&mut self) -> bool {
        false
    }

    fn is_forbidden_header(&mut self, name: &HeaderName) -> bool {
        (self.0.forbidden)(name)
    }

    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        self.0.forbidden.clone()
    }

    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        Response<WasiBody>,
                        Box<dyn Future<Output = Result<(), Error>> + Send>,
                    ),
                    Error,
                >,
            > + Send,
    > {
        // Positions are taken in the order the guest hands requests over, which a replay
        // repeats; whatever finishes first.
        let seq = self.0.next_seq.fetch_add(1, Ordering::AcqRel);
        let nth = self.0.handed.fetch_add(1, Ordering::AcqRel);
        let one = OneRequest {
            of: self.0.clone(),
            seq,
            nth,
            holds: AtomicBool::new(false),
            recorded: AtomicBool::new(false),
        };
        Box::new(async move {
            let (response, io) = one.send(request, options).await?;
            Ok((response, io))
        })
    }
}

type Io = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// One request: the execution's shared part and the request's position.
///
/// The journal is positional, so a position without an entry would shift every later
/// request of a replay that does not repeat it. A request therefore keeps its position only
/// when an entry is there (recorded, or replayed), or when it is not idempotent and may have
/// reached the upstream: then a later attempt sends it again at the same position, with the
/// same `Idempotency-Key`. Any other request gives its position back when it ends (a
/// transient answer to an idempotent request, a refusal, a failure before it was sent), so
/// the tool's next request, typically the same one tried again, takes it. A position is
/// given back only while it is the latest taken: a request handed over meanwhile keeps its
/// own, and the earlier one stays a hole.
struct OneRequest {
    of: Arc<Shared>,
    seq: u32,
    /// How many requests the execution handed over before this one.
    nth: u32,
    /// Whether it keeps its position (see above).
    holds: AtomicBool,
    /// Whether the journal has its entry (recorded now, or replayed).
    recorded: AtomicBool,
}

impl Drop for OneRequest {
    fn drop(&mut self) {
        if !self.recorded.load(Ordering::Acquire) {
            self.io.journal_release(self.seq);
        }
        if !self.holds.load(Ordering::Acquire) {
            let _ = self.next_seq.compare_exchange(
                self.seq + 1,
                self.seq,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
}

impl std::ops::Deref for OneRequest {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.of
    }
}

/// A request that passed the grant, the URL check and the limits.
struct Admitted {
    grant: Arc<HttpGrant>,
    target: Target,
    /// The entries that allow its URL (an address rule may need one that names it).
    allowing: Vec<AllowedHost>,
    parts: http::request::Parts,
    body: Vec<u8>,
    /// `METHOD URL` as the guest asked, for the errors it may see.
    line: String,
    /// What it asks, when the task journals it.
    asked: Option<JournalRequest>,
    /// Whether its method is idempotent: no key, and a transient answer is not recorded.
    idempotent: bool,
    /// The journal room held for its entry (0 when it is not journaled).
    reserved: u64,
    /// Whether the host adds a secret to it.
    injected: bool,
    /// Whether its response is scrubbed: it carries an injected secret, or it is
    /// journaled for a tool that has secrets.
    scrubbed: bool,
    /// Its places in flight: the attempt's and the tenant's.
    permits: (
        tokio::sync::OwnedSemaphorePermit,
        tokio::sync::OwnedSemaphorePermit,
    ),
}

/// The timeouts of one request: the guest's, where shorter than the tool's limits.
struct Timeouts {
    connect: Duration,
    first_byte: Duration,
    between: Duration,
}

impl Timeouts {
    fn of(options: Option<RequestOptions>, limits: &OutboundLimits) -> Self {
        let clamp = |asked: Option<Duration>, cap: Duration| asked.map_or(cap, |a| a.min(cap));
        Self {
            connect: clamp(
                options.and_then(|o| o.connect_timeout),
                limits.connect_timeout,
            ),
            first_byte: clamp(
                options.and_then(|o| o.first_byte_timeout),
                limits.first_byte_timeout,
            ),
            between: clamp(
                options.and_then(|o| o.between_bytes_timeout),
                limits.between_bytes_timeout,
            ),
        }
    }
}

/// A URL's parts the rules look at.
pub(super) struct Target {
    pub(super) https: bool,
    pub(super) host: Host,
    /// The host as written (for TLS and DNS).
    pub(super) name: String,
    pub(super) port: u16,
}

impl Target {
    fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }

    /// `scheme://host:port`, for the log.
    pub(super) fn origin(&self) -> String {
        format!("{}://{}:{}", self.scheme(), self.name, self.port)
    }

    /// The `Host` header: the host and, when not the scheme's own, the port. Never the
    /// userinfo a URL may carry.
    pub(super) fn host_header(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            self.name.clone()
        } else {
            format!("{}:{}", self.name, self.port)
        }
    }

    /// The allow-list entry that names exactly this URL's scheme, host and port.
    pub(super) fn entry(&self) -> String {
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            format!("{}://{}", self.scheme(), self.name)
        } else {
            self.origin()
        }
    }
}

impl OneRequest {
    /// The configuration key that lists where this execution's requests may go: resource
    /// reads and prompt renders run under the defaults' grants.
    fn allow_key(&self) -> String {
        if self.tool.starts_with("resource:") || self.tool.starts_with("prompt:") {
            "defaults.allowed_outbound_hosts".to_owned()
        } else {
            format!("tools.{}.allowed_outbound_hosts", self.tool)
        }
    }

    /// Counts and logs a refusal. The log names the scheme, host and port only (`to`), and
    /// `why` says what was refused without the URL: a path or query may carry data.
    fn count_refusal(&self, to: &str, reason: &'static str, why: &dyn std::fmt::Display) {
        self.host.count_refused(&self.tool, reason);
        tracing::warn!(
            target: "snodo::outbound",
            tool = %self.tool,
            task = self.task.as_deref().unwrap_or("-"),
            to = %to,
            reason,
            "outbound request refused: {why}"
        );
    }

    /// A denial, counted and logged: wasi:http's `internal-error` whose text begins with
    /// the name of the code it stands for and a colon (`HttpRequestDenied: `,
    /// `DestinationIpProhibited: `). Those codes carry no text, and the guest needs to know
    /// what was refused and which key would allow it; the SDKs recognise the prefix and
    /// report a denial as such.
    fn deny(
        &self,
        to: &str,
        (reason, why): (&'static str, &dyn std::fmt::Display),
        code: &str,
        message: String,
    ) -> Error {
        self.count_refusal(to, reason, why);
        Error::InternalError(Some(format!("{code}: {message}")))
    }

    fn refuse(&self, line: &str, target: Option<&Target>, refusal: Refusal) -> Error {
        let to = target.map_or_else(String::new, Target::origin);
        let (tool, key) = (&self.tool, self.allow_key());
        let message = match &refusal {
            Refusal::BadUrl => {
                self.count_refusal(&to, refusal.reason(), &refusal);
                return Error::HttpRequestUriInvalid;
            }
            Refusal::NotGranted => format!(
                "{line}: tool `{tool}` may not send HTTP requests; list the hosts it may reach \
                 in {key} (docs/outbound.md)"
            ),
            Refusal::NotAllowed => format!(
                "{line}: no entry of {key} allows it (tool `{tool}`); to allow it, add \"{}\" \
                 to {key}",
                target.map_or_else(String::new, Target::entry)
            ),
            Refusal::Address(ip) => {
                let (scheme, port) = target.map_or(("http", 0), |t| (t.scheme(), t.port));
                let at = match target.map(|t| &t.host) {
                    Some(Host::Name(n)) => format!("{n} resolves to {ip}, which"),
                    _ => ip.to_string(),
                };
                let ip = match ip {
                    std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                    v4 => v4.to_string(),
                };
                format!(
                    "{line}: {at} is not a public address and no entry of {key} names it \
                     (tool `{tool}`); to reach it, add \"{scheme}://{ip}:{port}\" to {key}"
                )
            }
            Refusal::OwnAddress(a) => format!(
                "{line}: {a} is this server's own listen address (tool `{tool}`); only an \
                 entry naming it to the port reaches it: \"{}://{a}\" in {key}",
                target.map_or("http", Target::scheme)
            ),
        };
        let code = match refusal {
            Refusal::Address(_) | Refusal::OwnAddress(_) => "DestinationIpProhibited",
            _ => "HttpRequestDenied",
        };
        self.deny(&to, (refusal.reason(), &refusal), code, message)
    }

    fn limited(&self, limit: &'static str, error: Error) -> Error {
        self.host.count_limited(&self.tool, limit);
        tracing::info!(
            target: "snodo::outbound",
            tool = %self.tool,
            task = self.task.as_deref().unwrap_or("-"),
            limit,
            "outbound request stopped by a limit"
        );
        error
    }

    /// The request, phase by phase: admitted, answered from the journal when it can be,
    /// sent, and its response handed over (streamed, or whole, scrubbed and recorded).
    async fn send(
        self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<(Response<WasiBody>, Io), Error> {
        let mut admitted = self.admit(request).await?;
        if let Some(asked) = &admitted.asked {
            if let Some(answer) = self.replay(asked).await? {
                return Ok((recorded(answer), Box::new(async { Ok(()) })));
            }
            self.reserve(&mut admitted).await?;
        }
        let timeouts = Timeouts::of(options, &admitted.grant.limits);
        let (head, incoming, driver) = self.transmit(&mut admitted, &timeouts).await?;
        self.host.count_sent(&self.tool, false);
        self.receive(admitted, head, incoming, driver, timeouts.between)
            .await
    }

    /// Reads the body, then checks the grant, the URL and the limits, and takes the
    /// request's places in flight.
    async fn admit(&self, request: Request<WasiBody>) -> Result<Admitted, Error> {
        // The body first, whatever happens next: a guest writes it after handing the
        // request over, and a refusal that dropped it unread would reach the guest as a
        // failed write instead of as the refusal.
        let limit = self
            .grant
            .as_ref()
            .map_or(OutboundLimits::default().max_request_bytes, |g| {
                g.limits.max_request_bytes
            });
        let (parts, body) = request.into_parts();
        let line = format!("{} {}", parts.method, parts.uri);
        let body = match collect(body, limit, None).await {
            Ok(b) => Some(b),
            Err(Collect::TooLarge) => None,
            Err(Collect::Failed(e)) => return Err(e),
        };
        let Some(grant) = self.grant.clone() else {
            return Err(self.refuse(&line, None, Refusal::NotGranted));
        };
        let Some(body) = body else {
            return Err(self.limited("max_request_bytes", Error::HttpRequestBodySize(Some(limit))));
        };
        let Some(target) = target_of(&parts.uri) else {
            return Err(self.refuse(&line, None, Refusal::BadUrl));
        };
        let allowing = match grant
            .allowed
            .check_url(target.https, &target.host, target.port)
        {
            Ok(a) => a.into_iter().cloned().collect::<Vec<AllowedHost>>(),
            Err(r) => return Err(self.refuse(&line, Some(&target), r)),
        };
        let injected = grant
            .inject
            .iter()
            .any(|i| i.host.allows_url(target.https, &target.host, target.port));
        if injected && parts.headers.contains_key(http::header::RANGE) {
            let message = format!(
                "{line}: the host adds a secret to requests to this URL (tool `{}`), and such \
                 a request may not ask for a range: pieces of a response could carry the \
                 secret in parts the host cannot recognise; send it without a Range header",
                self.tool
            );
            let why = "a Range header on a request that carries an injected secret";
            return Err(self.deny(
                &target.origin(),
                ("range", &why),
                "HttpRequestDenied",
                message,
            ));
        }
        let max = grant.limits.max_requests;
        if self.nth >= max {
            let error = format!("outbound limit max_requests ({max}) per attempt reached");
            return Err(self.limited("max_requests", Error::InternalError(Some(error))));
        }
        let Ok(attempt) = self.in_flight.clone().try_acquire_owned() else {
            return Err(self.limited("max_concurrent", Error::ConnectionLimitReached));
        };
        let Ok(tenant) = self.host.tenant_slots(&self.tenant).try_acquire_owned() else {
            return Err(self.limited("max_concurrent_per_tenant", Error::ConnectionLimitReached));
        };
        let journaled = grant.journal && self.io.journaled() && self.task.is_some();
        // What the request asks, for the journal only.
        let asked = journaled.then(|| JournalRequest {
            method: parts.method.as_str().to_owned(),
            url: parts.uri.to_string(),
            body_sha256: hex(&Sha256::digest(&body)),
        });
        let scrubbed = injected || (asked.is_some() && !self.secrets.is_empty());
        let idempotent = idempotent(&parts.method);
        Ok(Admitted {
            grant,
            target,
            allowing,
            parts,
            body,
            line,
            asked,
            idempotent,
            reserved: 0,
            injected,
            scrubbed,
            permits: (attempt, tenant),
        })
    }

    /// The journal's answer at this request's position, if it recorded one for the same
    /// request. A different request there is a divergence: the attempt cannot be trusted.
    async fn replay(&self, asked: &JournalRequest) -> Result<Option<JournalResponse>, Error> {
        match self.io.journal_entry(self.seq).await {
            Ok(Some(entry)) if entry.request == *asked => {
                self.recorded.store(true, Ordering::Release);
                self.holds.store(true, Ordering::Release);
                self.host.count_sent(&self.tool, true);
                Ok(Some(entry.response))
            }
            Ok(Some(entry)) => {
                let digest = |d: &str| d.chars().take(12).collect::<String>();
                let why = format!(
                    "request {} of the replay asks {} {} (body {}), the journal recorded {} {} (body {})",
                    self.seq,
                    asked.method,
                    asked.url,
                    digest(&asked.body_sha256),
                    entry.request.method,
                    entry.request.url,
                    digest(&entry.request.body_sha256),
                );
                tracing::warn!(target: "snodo::outbound", tool = %self.tool, task = self.task.as_deref().unwrap_or("-"), "journal divergence: {why}");
                self.diverged.lock().get_or_insert(why);
                self.holds.store(true, Ordering::Release);
                Err(Error::InternalError(Some(format!(
                    "journal divergence at request {}",
                    self.seq
                ))))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Error::InternalError(Some(format!(
                "the task's journal cannot be read: {}",
                guest_text(&e.to_string())
            )))),
        }
    }

    /// Holds the journal room the request's entry could need before anything is sent: what
    /// it asks, its response at `max_response_bytes` and [`JOURNAL_HEAD_BYTES`] for the
    /// response's head. Without room it is refused here, never sent: an answer sent for
    /// and then not recorded would be sent again by every later attempt.
    async fn reserve(&self, admitted: &mut Admitted) -> Result<(), Error> {
        let Some(asked) = &admitted.asked else {
            return Ok(());
        };
        let bare = JournalEntry {
            seq: self.seq,
            request: asked.clone(),
            response: JournalResponse {
                status: 0,
                headers: Vec::new(),
                body: Vec::new(),
            },
        };
        let max = admitted.grant.limits.max_response_bytes;
        let need = (bare.encode().len() as u64)
            .saturating_add(max)
            .saturating_add(JOURNAL_HEAD_BYTES);
        if let Err(why) = self.io.journal_reserve(self.seq, need).await {
            let message = format!(
                "outbound limit journal_task_bytes: {}: not sent, its answer could not be \
                 recorded: {} (the request, tools.{}.outbound.max_response_bytes = {max} \
                 and {JOURNAL_HEAD_BYTES} for the response's head)",
                admitted.line,
                guest_text(&why.to_string()),
                self.tool
            );
            return Err(self.limited("journal_task_bytes", Error::InternalError(Some(message))));
        }
        admitted.reserved = need;
        Ok(())
    }

    /// Resolves the name, checks every address, connects to a checked one (with TLS for
    /// `https`), adds the host's headers and sends: the response's head and body, and the
    /// task driving the connection.
    async fn transmit(
        &self,
        admitted: &mut Admitted,
        timeouts: &Timeouts,
    ) -> Result<(http::response::Parts, hyper::body::Incoming, Driver), Error> {
        let target = &admitted.target;
        let addrs = self.resolve(target).await?;
        let allowing: Vec<&AllowedHost> = admitted.allowing.iter().collect();
        let checked = {
            let own = self.host.own.read();
            addrs
                .iter()
                .try_for_each(|addr| check_address(&allowing, *addr, &own))
        };
        if let Err(r) = checked {
            return Err(self.refuse(&admitted.line, Some(target), r));
        }
        // The head goes into the request; `admitted` keeps what the response needs.
        let mut parts = std::mem::replace(&mut admitted.parts, Request::new(()).into_parts().0);
        self.inject(&admitted.grant, target, &mut parts.headers)?;
        if admitted.scrubbed {
            // The host decides the coding of a response it scrubs: only plain bytes can be.
            parts.headers.insert(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
            parts.headers.remove(http::header::TE);
        }
        if admitted.asked.is_some() && !admitted.idempotent {
            let key = format!("{}-{}", self.task.as_deref().unwrap_or_default(), self.seq);
            if let Ok(v) = HeaderValue::from_str(&key) {
                parts
                    .headers
                    .insert(HeaderName::from_static("idempotency-key"), v);
            }
        }
        let host = HeaderValue::from_str(&target.host_header())
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        parts.headers.insert(http::header::HOST, host);
        // The request line carries the path, percent-encoded; the host went into `Host`.
        let path = encode_target(parts.uri.path_and_query().map_or("/", |p| p.as_str()));
        parts.uri = http::Uri::builder()
            .path_and_query(path)
            .build()
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let body = Full::new(Bytes::from(std::mem::take(&mut admitted.body)));
        let request = Request::from_parts(parts, body);

        let (mut sender, conn) = match open(&self.host, target, &addrs, timeouts.connect).await {
            Ok(opened) => opened,
            Err(Opening::TimedOut) => {
                return Err(self.limited("connect_timeout", Error::ConnectionTimeout));
            }
            Err(Opening::Failed(e)) => return Err(e),
        };
        let driver = Driver(tokio::spawn(conn));
        // From here the upstream may see it: a request that is not idempotent keeps its
        // position (and its key) whatever happens next.
        if !admitted.idempotent {
            self.holds.store(true, Ordering::Release);
        }
        match tokio::time::timeout(timeouts.first_byte, sender.send_request(request)).await {
            Ok(Ok(r)) => {
                let (head, incoming) = r.into_parts();
                Ok((head, incoming, driver))
            }
            Ok(Err(e)) => Err(Error::Hyper(e)),
            Err(_) => Err(self.limited("first_byte_timeout", Error::ConnectionReadTimeout)),
        }
    }

    /// Refuses a response whose secrets the host could not find: a partial one to a
    /// request that carried an injected secret (pieces could carry it in parts), and an
    /// encoded one the host must scrub (it asked for identity and reads only that).
    fn refuse_unscrubbable(
        &self,
        head: &http::response::Parts,
        target: &Target,
        line: &str,
        injected: bool,
        scrubbed: bool,
    ) -> Result<(), Error> {
        let partial = head.status == http::StatusCode::PARTIAL_CONTENT
            || head.headers.contains_key(http::header::CONTENT_RANGE);
        if injected && partial {
            let message = format!(
                "{line}: the response is partial ({}) and the request carried a secret the \
                 host injected: pieces of a response could carry the secret in parts the host \
                 cannot recognise, so none is handed over",
                head.status
            );
            let why = "a partial response to a request that carried an injected secret";
            self.count_refusal(&target.origin(), "partial_response", &why);
            return Err(Error::InternalError(Some(message)));
        }
        if scrubbed && let Some(coding) = coded(&head.headers) {
            let message = format!(
                "{coding}: the response to {line} is encoded although the host asked for \
                 identity; the host scrubs secrets from this response and cannot read an \
                 encoded body, so it is refused"
            );
            let why = format!("a {coding}-encoded response the host must scrub");
            self.count_refusal(&target.origin(), "encoded_response", &why);
            return Err(Error::HttpResponseContentCoding(Some(message)));
        }
        Ok(())
    }

    /// The response as the guest (and the journal) get it: secrets scrubbed from its header
    /// names, header values and body.
    fn scrubbed_answer(&self, head: &http::response::Parts, body: Vec<u8>) -> JournalResponse {
        let secrets = &self.secrets;
        let headers = head
            .headers
            .iter()
            .map(|(name, value)| {
                let name =
                    scrub_name(name.as_str(), secrets).unwrap_or_else(|| name.as_str().into());
                let value = String::from_utf8_lossy(value.as_bytes());
                let value = scrub_text(&value, secrets).unwrap_or_else(|| value.into_owned());
                (name, value)
            })
            .collect();
        JournalResponse {
            status: head.status.as_u16(),
            headers,
            body: scrub_bytes(body, secrets),
        }
    }

    /// Hands the response over: streamed as it arrives when nothing needs it whole, else
    /// read whole, scrubbed of secrets and, in a journaled task, recorded first.
    async fn receive(
        &self,
        admitted: Admitted,
        head: http::response::Parts,
        incoming: hyper::body::Incoming,
        driver: Driver,
        between: Duration,
    ) -> Result<(Response<WasiBody>, Io), Error> {
        let Admitted {
            grant,
            target,
            line,
            asked,
            idempotent,
            reserved,
            injected,
            scrubbed,
            permits,
            ..
        } = admitted;
        let max = grant.limits.max_response_bytes;
        if asked.is_none() && !injected {
            // The permits and the connection live as long as the body.
            let body = Bounded {
                inner: incoming,
                left: max,
                limit: max,
                between,
                timer: Box::pin(tokio::time::sleep(between)),
                counted: (self.host.clone(), self.tool.clone()),
                _held: (permits, driver),
            };
            return Ok((
                Response::from_parts(head, body.boxed_unsync()),
                Box::new(async { Ok(()) }),
            ));
        }
        self.refuse_unscrubbable(&head, &target, &line, injected, scrubbed)?;
        let body = match collect(incoming, max, Some(between)).await {
            Ok(b) => b,
            Err(Collect::TooLarge) => {
                let error = Error::HttpResponseBodySize(Some(max));
                return Err(self.limited("max_response_bytes", error));
            }
            Err(Collect::Failed(Error::ConnectionReadTimeout)) => {
                let error = Error::ConnectionReadTimeout;
                return Err(self.limited("between_bytes_timeout", error));
            }
            Err(Collect::Failed(e)) => return Err(e),
        };
        let answer = self.scrubbed_answer(&head, body);
        // A transient answer to an idempotent request is not recorded: a later attempt (a
        // retry) asks again instead of replaying the failure. It has no effect to protect.
        // A grant may say the same of every request (its far end deduplicates by the key).
        let transient = (idempotent && transient(answer.status))
            || (grant.retry_transient && (transient(answer.status) || answer.status == 401));
        if let Some(request) = asked.filter(|_| !transient) {
            let entry = JournalEntry {
                seq: self.seq,
                request,
                response: answer.clone(),
            };
            let size = entry.encode().len() as u64;
            if size > reserved {
                let message = format!(
                    "{line}: its answer takes {size} bytes in the task's journal, more than the \
                     {reserved} held for it (the request, \
                     tools.{}.outbound.max_response_bytes and {JOURNAL_HEAD_BYTES} for the \
                     response's head); it is not recorded",
                    self.tool
                );
                return Err(self.limited("journal_task_bytes", Error::InternalError(Some(message))));
            }
            if let Err(e) = self.io.journal_append(entry).await {
                return Err(Error::InternalError(Some(format!(
                    "the response could not be recorded in the task's journal: {}",
                    guest_text(&e.to_string())
                ))));
            }
            self.recorded.store(true, Ordering::Release);
            self.holds.store(true, Ordering::Release);
        }
        Ok((recorded(answer), Box::new(async { Ok(()) })))
    }

    /// Adds the grant's injected headers for this URL.
    fn inject(
        &self,
        grant: &HttpGrant,
        target: &Target,
        headers: &mut http::HeaderMap,
    ) -> Result<(), Error> {
        for inj in &grant.inject {
            if !inj.host.allows_url(target.https, &target.host, target.port) {
                continue;
            }
            let name = HeaderName::from_bytes(inj.header.as_bytes())
                .map_err(|_| Error::ConfigurationError)?;
            let mut value =
                HeaderValue::from_str(inj.value.expose()).map_err(|_| Error::ConfigurationError)?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(())
    }

    async fn resolve(&self, target: &Target) -> Result<Vec<SocketAddr>, Error> {
        resolve(&self.host, target).await
    }
}

/// The addresses to try: the configured overrides, a literal address, or a lookup by the
/// host (never by the guest).
pub(super) async fn resolve(host: &Outbound, target: &Target) -> Result<Vec<SocketAddr>, Error> {
    let name = match &target.host {
        Host::Ip(ip) => return Ok(vec![SocketAddr::new(*ip, target.port)]),
        Host::Name(n) => n,
    };
    if let Some(ips) = host.config.resolve.get(name.as_str()) {
        return Ok(ips
            .iter()
            .map(|ip| SocketAddr::new(*ip, target.port))
            .collect());
    }
    let lookup = tokio::net::lookup_host((name.as_str(), target.port));
    match tokio::time::timeout(Duration::from_secs(10), lookup).await {
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(Error::DestinationNotFound)
            } else {
                Ok(addrs)
            }
        }
        Ok(Err(_)) => Err(Error::DnsError {
            rcode: Some("no address for the name".into()),
            info_code: None,
        }),
        Err(_) => Err(Error::DnsTimeout),
    }
}

/// Why a connection was not opened.
pub(super) enum Opening {
    /// Connecting (or the TLS handshake) took longer than allowed.
    TimedOut,
    /// It failed.
    Failed(Error),
}

/// Connects to the first of `addrs` that answers (every one already checked against the
/// address rules), with TLS for `https`, within `connect_timeout` for each step.
pub(super) async fn open(
    host: &Outbound,
    target: &Target,
    addrs: &[SocketAddr],
    connect_timeout: Duration,
) -> Result<(hyper::client::conn::http1::SendRequest<Full<Bytes>>, Conn), Opening> {
    let stream = match tokio::time::timeout(connect_timeout, connect(addrs)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Opening::Failed(Error::Connect(e))),
        Err(_) => return Err(Opening::TimedOut),
    };
    let opened = if target.https {
        let bare = target.name.trim_start_matches('[').trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(bare.to_owned())
            .map_err(|_| Opening::Failed(Error::HttpRequestUriInvalid))?;
        let tls = tokio_rustls::TlsConnector::from(host.tls.clone());
        let stream = match tokio::time::timeout(connect_timeout, tls.connect(name, stream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(Opening::Failed(Error::Tls(e))),
            Err(_) => return Err(Opening::TimedOut),
        };
        handshake(Box::new(stream)).await
    } else {
        handshake(Box::new(stream)).await
    };
    opened.map_err(Opening::Failed)
}

pub(super) fn target_of(uri: &http::Uri) -> Option<Target> {
    let https = match uri.scheme() {
        Some(s) if *s == Scheme::HTTPS => true,
        Some(s) if *s == Scheme::HTTP => false,
        _ => return None,
    };
    let authority = uri.authority()?;
    let name = authority.host().to_owned();
    let host = Host::parse(&name)?;
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    Some(Target {
        https,
        host,
        name,
        port,
    })
}

/// A request target (path and query) with every byte RFC 3986 does not allow there
/// percent-encoded: unreserved characters, sub-delimiters, `:`, `@`, `/`, `?` and existing
/// `%` escapes stay; a quote, a brace, a space or a byte past ASCII does not reach the
/// wire as itself.
pub(super) fn encode_target(target: &str) -> String {
    let mut out = String::with_capacity(target.len());
    for &b in target.as_bytes() {
        let kept = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b);
        if kept {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The coding of a body that is not plain bytes: a `content-encoding` other than
/// `identity`, or a `transfer-encoding` other than `chunked` (which hyper removes).
fn coded(headers: &http::HeaderMap) -> Option<String> {
    let coding = |name, plain: &[&str]| {
        headers
            .get_all(name)
            .into_iter()
            .flat_map(|v| v.to_str().unwrap_or("unreadable").split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .find(|c| !c.is_empty() && !plain.contains(&c.as_str()))
    };
    coding(http::header::CONTENT_ENCODING, &["identity"])
        .or_else(|| coding(http::header::TRANSFER_ENCODING, &["chunked", "identity"]))
}

/// The room a journaled response's head may take in the journal, held with
/// `max_response_bytes` before the request is sent.
pub const JOURNAL_HEAD_BYTES: u64 = 64 << 10;

/// Answers that say "not now" rather than "no": a timeout (408), too many requests (429)
/// and server errors (5xx). To an idempotent request they are not recorded.
fn transient(status: u16) -> bool {
    status == 408 || status == 429 || (500..600).contains(&status)
}

/// Methods a repeat of which changes nothing more (RFC 9110 §9.2.2): no idempotency key.
fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// A recorded (or buffered) response as the guest receives it.
fn recorded(answer: JournalResponse) -> Response<WasiBody> {
    let length = answer.body.len();
    let mut response = Response::new(
        Full::new(Bytes::from(answer.body))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() =
        http::StatusCode::from_u16(answer.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    for (name, value) in answer.headers {
        // The body is whole (and may have been scrubbed): its framing is its own length.
        if name == "content-length" || name == "transfer-encoding" {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            response.headers_mut().append(n, v);
        }
    }
    response
        .headers_mut()
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(length));
    response
}

/// How far past its limit a body is read (and dropped) before the stream is cut.
const DRAIN_FACTOR: u64 = 16;

pub(super) enum Collect {
    TooLarge,
    Failed(Error),
}

/// Reads a whole body of at most `limit` bytes, each chunk within `between` when given.
/// Past the limit the rest is read and dropped, up to [`DRAIN_FACTOR`] times the limit, so
/// a writer sees the request end with the limit's error rather than a broken stream.
pub(super) async fn collect<B>(
    body: B,
    limit: u64,
    between: Option<Duration>,
) -> Result<Vec<u8>, Collect>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Error>,
{
    let mut body = body;
    let mut out = Vec::new();
    let mut over: Option<u64> = None;
    loop {
        let frame = match between {
            Some(d) => match tokio::time::timeout(d, body.frame()).await {
                Ok(f) => f,
                Err(_) => return Err(Collect::Failed(Error::ConnectionReadTimeout)),
            },
            None => body.frame().await,
        };
        match frame {
            None if over.is_some() => return Err(Collect::TooLarge),
            None => return Ok(out),
            Some(Err(_)) if over.is_some() => return Err(Collect::TooLarge),
            Some(Err(e)) => return Err(Collect::Failed(e.into())),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if let Some(seen) = over.as_mut() {
                    *seen += data.len() as u64;
                    if *seen > limit.saturating_mul(DRAIN_FACTOR) {
                        return Err(Collect::TooLarge);
                    }
                } else if out.len() as u64 + data.len() as u64 > limit {
                    over = Some(out.len() as u64 + data.len() as u64);
                    out = Vec::new();
                } else {
                    out.extend_from_slice(&data);
                }
            }
        }
    }
}

pub(super) trait Stream:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static
{
}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

pub(super) type Conn =
    hyper::client::conn::http1::Connection<hyper_util::rt::TokioIo<Box<dyn Stream>>, Full<Bytes>>;

async fn handshake(
    stream: Box<dyn Stream>,
) -> Result<(hyper::client::conn::http1::SendRequest<Full<Bytes>>, Conn), Error> {
    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(Error::Hyper)
}

/// Connects to the first address that answers.
async fn connect(addrs: &[SocketAddr]) -> std::io::Result<tokio::net::TcpStream> {
    let mut last = None;
    for addr in addrs {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address to connect to")))
}

/// The task driving a connection, stopped when the response is dropped.
struct Driver(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A streamed response body within its byte limit and between-bytes timeout.
struct Bounded<H> {
    inner: hyper::body::Incoming,
    left: u64,
    limit: u64,
    between: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// Where a limit hit is counted.
    counted: (Arc<Outbound>, Arc<str>),
    _held: H,
}

impl<H: Unpin> http_body::Body for Bounded<H> {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Error::Hyper(e)))),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    if n > this.left {
                        this.counted
                            .0
                            .count_limited(&this.counted.1, "max_response_bytes");
                        return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(
                            this.limit,
                        )))));
                    }
                    this.left -= n;
                }
                let next = tokio::time::Instant::now() + this.between;
                this.timer.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.counted
                        .0
                        .count_limited(&this.counted.1, "between_bytes_timeout");
                    Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::pin::Pin;

    use super::*;
    use crate::outbound::{AllowList, OutboundConfig};
    use snodo_core::store::StoreError;

    /// A server on a local port that hands each connection it accepts to `serve` (in a
    /// task of its own), with a sender for what it reports.
    pub(in crate::outbound) async fn serve_each<T, F, Fut>(
        serve: F,
    ) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<T>)
    where
        T: Send + 'static,
        F: Fn(tokio::net::TcpStream, tokio::sync::mpsc::UnboundedSender<T>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, tx.clone()));
            }
        });
        (addr, rx)
    }

    /// A server that accepts connections, reports each, and never answers.
    pub(in crate::outbound) async fn silent_server()
    -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
        serve_each(|stream, tx| async move {
            let _ = tx.send(());
            std::future::pending::<()>().await;
            drop(stream);
        })
        .await
    }

    /// Hooks of an attempt of tool `t` in tenant `acme` that may reach `addr` with
    /// `max_concurrent` requests in flight, for `task`, its imports talking to `io`.
    fn hooks_with(
        host: &Arc<Outbound>,
        addr: SocketAddr,
        max_concurrent: u32,
        task: Option<&str>,
        io: Arc<dyn ExecutionIo>,
    ) -> Hooks {
        let mut grant =
            HttpGrant::new(AllowList::parse(&[format!("http://{addr}")]).expect("list"));
        grant.limits.max_concurrent = max_concurrent;
        Hooks::new(
            host.clone(),
            Some(Arc::new(grant)),
            "t",
            Arc::from("acme"),
            task,
            io,
        )
    }

    fn hooks(host: &Arc<Outbound>, addr: SocketAddr, max_concurrent: u32) -> Hooks {
        hooks_with(
            host,
            addr,
            max_concurrent,
            None,
            Arc::new(crate::io::NoInput),
        )
    }

    /// A request without a body.
    fn empty_request(builder: http::request::Builder) -> Request<WasiBody> {
        let body = http_body_util::Empty::<Bytes>::new()
            .map_err(|never| match never {})
            .boxed_unsync();
        builder.body(body).expect("request")
    }

    type Sent = Pin<Box<dyn Future<Output = Result<(Response<WasiBody>, Io), Error>> + Send>>;

    /// The error `sent` ends with, which it must do at once (it is refused, not waiting).
    async fn refusal(sent: Sent) -> Error {
        match tokio::time::timeout(Duration::from_secs(10), sent).await {
            Ok(Err(e)) => e,
            Ok(Ok(_)) => panic!("the request was answered"),
            Err(_) => panic!("the request waits instead of being refused"),
        }
    }

    fn get(hooks: &mut Hooks, addr: SocketAddr) -> Sent {
        let request = empty_request(Request::get(format!("http://{addr}/")));
        Pin::from(hooks.send_request(request, None, Box::new(async { Ok(()) })))
    }

    /// A server that answers every request 204 and hands over each request's head as it
    /// arrived on the wire.
    async fn raw_server() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        serve_each(|mut stream, tx| async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
            let _ = stream
                .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                .await;
        })
        .await
    }

    #[tokio::test]
    async fn host_names_the_host_and_port_and_the_target_is_percent_encoded() {
        let (addr, mut heads) = raw_server().await;
        let host = Arc::new(Outbound::new(OutboundConfig::default()).expect("outbound"));
        let mut hooks = hooks(&host, addr, 1);
        // What the transport hands over for a guest that wrote userinfo into the URL.
        let request = empty_request(
            Request::get(format!("http://user:pw@{addr}/a\"b{{c}}|\u{e9}?q={{x}}^"))
                .header(http::header::HOST, format!("user:pw@{addr}")),
        );
        let sent = Pin::from(hooks.send_request(request, None, Box::new(async { Ok(()) })));
        let (response, _) = sent.await.expect("answered");
        assert_eq!(response.status(), 204);
        let head = heads.recv().await.expect("a request");
        let lines: Vec<&str> = head.lines().collect();
        assert_eq!(
            lines[0], "GET /a%22b%7Bc%7D%7C%C3%A9?q=%7Bx%7D%5E HTTP/1.1",
            "{head}"
        );
        let hosts: Vec<&str> = lines
            .iter()
            .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
            .copied()
            .collect();
        assert_eq!(hosts, vec![format!("host: {addr}")], "{head}");
        assert!(!head.contains("user") && !head.contains("pw@"), "{head}");
    }

    #[test]
    fn a_default_port_is_left_out_of_host() {
        let target = |uri: &str| target_of(&uri.parse().expect("uri")).expect("target");
        assert_eq!(
            target("https://u@Example.com/x").host_header(),
            "Example.com"
        );
        assert_eq!(
            target("http://example.com:80/").host_header(),
            "example.com"
        );
        assert_eq!(target("https://[::1]:8443/").host_header(), "[::1]:8443");
        assert_eq!(encode_target("/caf\u{e9} x?a=%20"), "/caf%C3%A9%20x?a=%20");
    }

    /// A journal whose store fails, reporting the failure as a host error's Debug form
    /// does with `RUST_BACKTRACE` set: the cause, then a captured backtrace.
    struct FailingJournal;

    #[async_trait::async_trait]
    impl ExecutionIo for FailingJournal {
        async fn await_inputs(
            &self,
            _: crate::InputRequests,
            _: &crate::CancelToken,
        ) -> crate::InputAnswers {
            Err(crate::InputFailure::Park)
        }
        async fn set_status(&self, _: String) -> Result<(), crate::IoError> {
            Ok(())
        }
        async fn progress(&self, _: crate::Progress) {}
        fn journaled(&self) -> bool {
            true
        }
        async fn journal_entry(&self, _: u32) -> Result<Option<JournalEntry>, crate::IoError> {
            let backtrace = std::backtrace::Backtrace::force_capture();
            Err(StoreError::unavailable(format!(
                "the task store is down\n\nStack backtrace:\n{backtrace}"
            ))
            .into())
        }
    }

    #[tokio::test]
    async fn a_host_failure_reaches_the_guest_as_one_line_without_a_backtrace() {
        let (addr, _accepted) = silent_server().await;
        let host = Arc::new(Outbound::new(OutboundConfig::default()).expect("outbound"));
        let mut hooks = hooks_with(
            &host,
            addr,
            OutboundLimits::default().max_concurrent,
            Some("task-1"),
            Arc::new(FailingJournal),
        );
        let Error::InternalError(Some(text)) = refusal(get(&mut hooks, addr)).await else {
            panic!("an internal error with a text");
        };
        assert_eq!(
            text,
            "the task's journal cannot be read: the store is unavailable: the task store is down"
        );
        // The backtrace the failure carried is not in it, whatever the platform prints.
        assert!(
            !text.contains('\n') && !text.contains("backtrace"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn requests_past_the_attempts_or_the_tenants_places_in_flight_are_refused() {
        let (addr, mut accepted) = silent_server().await;
        let host = Arc::new(
            Outbound::new(OutboundConfig {
                max_concurrent_per_tenant: 2,
                ..OutboundConfig::default()
            })
            .expect("outbound"),
        );
        // One attempt with one place: its first request waits for an answer that never
        // comes; its second is refused at once.
        let mut one = hooks(&host, addr, 1);
        let waiting = tokio::spawn(get(&mut one, addr));
        accepted.recv().await.expect("the first request connected");
        let refused = refusal(get(&mut one, addr)).await;
        assert!(
            matches!(refused, Error::ConnectionLimitReached),
            "{refused:?}"
        );
        let counted = |limit: &'static str| {
            host.counters()
                .limited
                .get(&("t".to_owned(), limit))
                .copied()
        };
        assert_eq!(counted("max_concurrent"), Some(1));

        // The tenant's second place goes to another attempt; a third attempt finds none.
        let mut two = hooks(&host, addr, 8);
        let also_waiting = tokio::spawn(get(&mut two, addr));
        accepted.recv().await.expect("the second request connected");
        let mut three = hooks(&host, addr, 8);
        let refused = refusal(get(&mut three, addr)).await;
        assert!(
            matches!(refused, Error::ConnectionLimitReached),
            "{refused:?}"
        );
        assert_eq!(counted("max_concurrent_per_tenant"), Some(1));

        // A place comes back when its request ends.
        waiting.abort();
        let _ = waiting.await;
        let _again = tokio::spawn(get(&mut three, addr));
        accepted.recv().await.expect("a freed place is taken");
        also_waiting.abort();
    }
}
