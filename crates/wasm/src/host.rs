//! The per-execution host state and the `context` imports a guest calls.
//!
//! Each execution gets a fresh `HostState` in a fresh wasmtime `Store`: a deny-by-default
//! WASI context (clocks and randomness; files, environment and network only by grant),
//! captured stdout/stderr, a resource limiter, and the execution's IO and cancellation.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use std::task::{Context as TaskCx, Poll};

use serde_json::Value;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Result as WtResult};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{context, types};
use super::io::{ExecutionIo, InputFailure, Progress, guest_text};
use super::{HostStop, Limit};

/// A cancellation token shared by the host and one execution (tokio-util's, so the runner
/// can hand out child tokens of its own).
///
/// Flipping it is cooperative: the guest sees `is-cancelled() == true` and waits for input
/// end with `cancelled`. The host stops a guest that ignores it after its grace period.
pub type CancelToken = tokio_util::sync::CancellationToken;

/// A log line a guest wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// `debug` … `error`, or `stdout` / `stderr` for captured output.
    pub level: &'static str,
    /// The text.
    pub message: String,
}

/// Who a guest's log lines come from, as the operator's log names them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origin {
    /// The tool (empty for `describe`).
    pub(crate) tool: String,
    /// The task, when the execution runs one.
    pub(crate) task: Option<String>,
    /// The task's attempt (0 outside a task).
    pub(crate) attempt: u32,
}

/// What a guest logged, bounded: past the limits lines are counted, not kept. Every kept
/// line also goes to the operator's log the moment it is kept (target `snodo::guest`,
/// field `guest = true`, at the level the guest gave), so a long task's lines are seen as
/// it runs and a synchronous call's are seen at all.
#[derive(Debug, Default)]
pub(crate) struct LogBuffer {
    pub(crate) lines: Vec<LogLine>,
    pub(crate) bytes: usize,
    pub(crate) dropped: usize,
    pub(crate) origin: Origin,
    /// Secret values replaced before a line is kept or logged.
    pub(crate) scrub: Vec<crate::outbound::Secret>,
    /// The operator log's rate per tenant, and this execution's tenant.
    pub(crate) rate: Option<(Arc<LogRate>, Arc<str>)>,
}

const MAX_LOG_LINES: usize = 1_000;
const MAX_LOG_BYTES: usize = 256 << 10;

impl LogBuffer {
    pub(crate) fn push(&mut self, level: &'static str, message: String) {
        let message = crate::outbound::scrub_text(&message, &self.scrub).unwrap_or(message);
        if self.lines.len() >= MAX_LOG_LINES || self.bytes + message.len() > MAX_LOG_BYTES {
            self.dropped += 1;
            return;
        }
        self.bytes += message.len();
        let admitted = match &self.rate {
            Some((rate, tenant)) => rate.admit(tenant, std::time::Instant::now()),
            None => Admitted::Yes,
        };
        match admitted {
            Admitted::Yes => emit(&self.origin, level, &message),
            Admitted::FirstRefused => tracing::warn!(
                target: "snodo::guest",
                tool = %self.origin.tool,
                limit = "GUEST_LOG_LINES_PER_SECOND",
                max = GUEST_LOG_LINES_PER_SECOND,
                "this tenant's guests are past their log rate: their lines are kept with \
                 their calls but not logged for the rest of this second"
            ),
            Admitted::No => {}
        }
        self.lines.push(LogLine { level, message });
    }
}

/// The guest lines one tenant's executions together may write to the operator's log in a
/// second; past it, lines are still kept with their call (within its own bounds) but not
/// logged, so one tenant's chatty guests cannot flood the log the operator reads for
/// every tenant.
pub const GUEST_LOG_LINES_PER_SECOND: u32 = 200;

/// Whether a line goes to the operator's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admitted {
    Yes,
    /// The first line refused in this second: the one that says so.
    FirstRefused,
    No,
}

/// Lines logged per tenant in the current second.
#[derive(Debug, Default)]
pub(crate) struct LogRate {
    tenants: parking_lot::Mutex<std::collections::HashMap<Arc<str>, (std::time::Instant, u32)>>,
}

impl LogRate {
    /// Counts one line of `tenant` at `now`.
    pub(crate) fn admit(&self, tenant: &Arc<str>, now: std::time::Instant) -> Admitted {
        const SECOND: std::time::Duration = std::time::Duration::from_secs(1);
        let mut tenants = self.tenants.lock();
        // Tenants come from tokens' claims: forget the quiet ones rather than keep them all.
        if tenants.len() >= 4_096 {
            tenants.retain(|_, (since, _)| now.duration_since(*since) < SECOND);
        }
        let (since, lines) = tenants.entry(tenant.clone()).or_insert((now, 0));
        if now.duration_since(*since) >= SECOND {
            *since = now;
            *lines = 0;
        }
        *lines = lines.saturating_add(1);
        match (*lines).cmp(&GUEST_LOG_LINES_PER_SECOND) {
            std::cmp::Ordering::Less | std::cmp::Ordering::Equal => Admitted::Yes,
            std::cmp::Ordering::Greater if *lines == GUEST_LOG_LINES_PER_SECOND + 1 => {
                Admitted::FirstRefused
            }
            std::cmp::Ordering::Greater => Admitted::No,
        }
    }
}

/// One guest line into the operator's log. Guest text is untrusted: its own target and
/// field mark it, and Debug formatting escapes control characters so it cannot forge log
/// lines or drive a terminal. `notice` and stdout are info; stderr is a warning.
fn emit(origin: &Origin, level: &'static str, text: &str) {
    macro_rules! line {
        ($level:expr) => {
            tracing::event!(
                target: "snodo::guest",
                $level,
                guest = true,
                tool = %origin.tool,
                task = origin.task.as_deref().unwrap_or("-"),
                attempt = origin.attempt,
                stream = level,
                text = ?text,
                "guest output"
            )
        };
    }
    match level {
        "debug" => line!(tracing::Level::DEBUG),
        "warning" | "stderr" => line!(tracing::Level::WARN),
        "error" => line!(tracing::Level::ERROR),
        _ => line!(tracing::Level::INFO),
    }
}

/// Captured stdout or stderr: bytes up to a cap are kept and split into log lines when the
/// execution ends; past the cap they are dropped silently (the guest never fails to write).
#[derive(Clone)]
pub(crate) struct Captured {
    buf: Arc<Mutex<(Vec<u8>, usize)>>,
    cap: usize,
}

impl Captured {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            buf: Arc::new(Mutex::new((Vec::new(), 0))),
            cap,
        }
    }

    /// The kept bytes and how many were dropped.
    pub(crate) fn take(&self) -> (Vec<u8>, usize) {
        let mut b = self.buf.lock();
        (std::mem::take(&mut b.0), b.1)
    }
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut TaskCx<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut b = self.buf.lock();
        let room = self.cap.saturating_sub(b.0.len());
        let kept = room.min(data.len());
        b.0.extend_from_slice(&data[..kept]);
        b.1 += data.len() - kept;
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut TaskCx<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut TaskCx<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Caps memory and tables per execution, remembering which cap was hit.
pub(crate) struct Limiter {
    pub(crate) memory_bytes: usize,
    pub(crate) table_elements: usize,
    /// The host-wide budget: what every live guest holds, and its cap.
    pub(crate) in_use: Arc<AtomicUsize>,
    pub(crate) total_bytes: usize,
    /// What this guest holds of it (given back when the store drops).
    pub(crate) held: usize,
    /// What the live guests of this guest's tenant hold, and the tenant's cap.
    pub(crate) tenant_in_use: Arc<AtomicUsize>,
    pub(crate) tenant_bytes: usize,
    /// The top of `total_bytes` kept for tenants holding at most this much.
    pub(crate) reserve_bytes: usize,
}

impl Drop for Limiter {
    fn drop(&mut self) {
        self.in_use.fetch_sub(self.held, Ordering::AcqRel);
        self.tenant_in_use.fetch_sub(self.held, Ordering::AcqRel);
    }
}

/// Adds `more` to `counter` unless the sum would pass `cap`.
fn take(counter: &AtomicUsize, more: usize, cap: usize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(more).filter(|n| *n <= cap)
        })
        .is_ok()
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> WtResult<bool> {
        if desired > self.memory_bytes {
            return Err(wasmtime::Error::new(HostStop::Limit(Limit::Memory {
                bytes: self.memory_bytes as u64,
            })));
        }
        let more = desired.saturating_sub(current);
        // The tenant's share first, then the host's budget, whose top `reserve_bytes` only
        // a tenant holding little may use: a tenant that grew its guests past the reserve
        // cannot spend what the others need for their next call.
        if !take(&self.tenant_in_use, more, self.tenant_bytes) {
            return Err(wasmtime::Error::new(HostStop::Limit(Limit::TenantMemory {
                bytes: self.tenant_bytes as u64,
            })));
        }
        let small = self.reserve_bytes == 0
            || self.tenant_in_use.load(Ordering::Acquire) <= self.reserve_bytes;
        let open = if small {
            self.total_bytes
        } else {
            self.total_bytes.saturating_sub(self.reserve_bytes)
        };
        if !take(&self.in_use, more, open) {
            self.tenant_in_use.fetch_sub(more, Ordering::AcqRel);
            return Err(wasmtime::Error::new(HostStop::Limit(Limit::MemoryBudget {
                bytes: self.total_bytes as u64,
            })));
        }
        self.held += more;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> WtResult<bool> {
        if desired > self.table_elements {
            return Err(wasmtime::Error::new(HostStop::Limit(Limit::Table {
                elements: self.table_elements as u64,
            })));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }

    fn tables(&self) -> usize {
        64
    }
}

/// Everything one execution's store holds.
pub(crate) struct HostState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) io: Arc<dyn ExecutionIo>,
    pub(crate) cancel: CancelToken,
    pub(crate) logs: LogBuffer,
    /// Set when an import decided the guest must stop (MRTR suspension, lost lease), so
    /// the call's error can be told apart from a guest trap.
    pub(crate) stop: Option<HostStop>,
    /// `wasi:http`: its context and this execution's sender.
    pub(crate) http: wasmtime_wasi_http::WasiHttpCtx,
    pub(crate) hooks: crate::outbound::Hooks,
    /// Who the execution runs for (`snodo:tasks/caller`).
    pub(crate) caller: std::sync::Arc<crate::GuestCaller>,
}

impl HostState {
    /// `text` with the execution's secrets replaced: what the guest says reaches the
    /// client, the store and the log only this way.
    fn scrubbed(&self, text: String) -> String {
        crate::outbound::scrub_text(&text, &self.logs.scrub).unwrap_or(text)
    }
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

/// The MCP input request for a WIT one; `Err` names what is malformed.
pub(crate) fn input_request_json(r: &types::InputRequest) -> Result<Value, String> {
    use serde_json::json;
    Ok(match r {
        types::InputRequest::ElicitForm(f) => {
            let schema: Value = serde_json::from_str(&f.requested_schema)
                .map_err(|e| format!("the requested schema is not JSON: {e}"))?;
            if !schema.is_object() {
                return Err("the requested schema must be a JSON object".into());
            }
            json!({"method": "elicitation/create", "params": {
                "mode": "form", "message": f.message, "requestedSchema": schema}})
        }
        types::InputRequest::ElicitUrl(u) => json!({"method": "elicitation/create", "params": {
            "mode": "url", "message": u.message, "url": u.url, "elicitationId": u.elicitation_id}}),
        types::InputRequest::Sampling(params) => {
            let params: Value = serde_json::from_str(params)
                .map_err(|e| format!("the sampling params are not JSON: {e}"))?;
            if !params.is_object() {
                return Err("the sampling params must be a JSON object".into());
            }
            json!({"method": "sampling/createMessage", "params": params})
        }
        types::InputRequest::Roots => json!({"method": "roots/list"}),
    })
}

impl HostState {
    async fn inputs(
        &mut self,
        requests: Vec<(String, types::InputRequest)>,
    ) -> WtResult<Result<Vec<String>, types::InputError>> {
        let mut json_requests = Vec::with_capacity(requests.len());
        for (key, r) in &requests {
            if key.is_empty() || key.len() > snodo_core::model::MAX_INPUT_KEY_LEN {
                return Ok(Err(types::InputError::Invalid(format!(
                    "an input key is 1..={} bytes",
                    snodo_core::model::MAX_INPUT_KEY_LEN
                ))));
            }
            // A key is the question's name on the wire and in the store, and the answer
            // comes back under it: it cannot be scrubbed like a value, so it is refused.
            if crate::outbound::scrub_text(key, &self.logs.scrub).is_some() {
                return Ok(Err(types::InputError::Invalid(
                    "an input key may not contain a secret the tool holds".into(),
                )));
            }
            match input_request_json(r) {
                Ok(mut v) => {
                    crate::outbound::scrub_value(&mut v, &self.logs.scrub);
                    json_requests.push((key.clone(), v));
                }
                Err(m) => return Ok(Err(types::InputError::Invalid(m))),
            }
        }
        let keys: std::collections::HashSet<&String> = requests.iter().map(|(k, _)| k).collect();
        if keys.len() != requests.len() {
            return Ok(Err(types::InputError::Invalid(
                "the same key is asked twice".into(),
            )));
        }
        if self.cancel.is_cancelled() {
            return Ok(Err(types::InputError::Cancelled));
        }
        let io = self.io.clone();
        let cancel = self.cancel.clone();
        match io.await_inputs(json_requests, &cancel).await {
            Ok(answers) => Ok(Ok(answers.iter().map(Value::to_string).collect())),
            Err(InputFailure::Cancelled) => Ok(Err(types::InputError::Cancelled)),
            // The texts come from the host's side (a store's message): one line of cause.
            Err(InputFailure::Unsupported(m)) => {
                Ok(Err(types::InputError::Unsupported(guest_text(&m))))
            }
            Err(InputFailure::KeyConflict(k)) => Ok(Err(types::InputError::KeyConflict(k))),
            Err(InputFailure::Invalid(m)) => Ok(Err(types::InputError::Invalid(guest_text(&m)))),
            Err(InputFailure::Suspend(questions)) => {
                self.stop = Some(HostStop::NeedInput(questions.clone()));
                Err(wasmtime::Error::new(HostStop::NeedInput(questions)))
            }
            Err(InputFailure::Park) => {
                self.stop = Some(HostStop::Parked);
                Err(wasmtime::Error::new(HostStop::Parked))
            }
            Err(InputFailure::Stop(reason)) => {
                self.stop = Some(HostStop::Lost(reason.clone()));
                Err(wasmtime::Error::new(HostStop::Lost(reason)))
            }
        }
    }
}

impl context::Host for HostState {
    fn is_cancelled(&mut self) -> WtResult<bool> {
        Ok(self.cancel.is_cancelled())
    }

    async fn await_input(
        &mut self,
        key: String,
        request: types::InputRequest,
    ) -> WtResult<Result<String, types::InputError>> {
        let answers = self.inputs(vec![(key, request)]).await?;
        Ok(answers.map(|mut a| a.pop().unwrap_or_default()))
    }

    async fn await_inputs(
        &mut self,
        requests: Vec<(String, types::InputRequest)>,
    ) -> WtResult<Result<Vec<String>, types::InputError>> {
        self.inputs(requests).await
    }

    async fn set_status(&mut self, message: String) -> WtResult<()> {
        let message = self.scrubbed(snodo_core::model::truncate_status_message(message));
        let io = self.io.clone();
        if let Err(e) = io.set_status(message).await {
            let reason = e.to_string();
            self.stop = Some(HostStop::Lost(reason.clone()));
            return Err(wasmtime::Error::new(HostStop::Lost(reason)));
        }
        Ok(())
    }

    async fn progress(
        &mut self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> WtResult<()> {
        if progress.is_finite() && total.is_none_or(f64::is_finite) {
            let io = self.io.clone();
            io.progress(Progress {
                progress,
                total,
                // The same cap as status messages: a progress line is a line, not a payload.
                message: message
                    .map(snodo_core::model::truncate_status_message)
                    .map(|m| self.scrubbed(m)),
            })
            .await;
        }
        Ok(())
    }

    fn log(&mut self, level: types::LogLevel, message: String) -> WtResult<()> {
        let level = match level {
            types::LogLevel::Debug => "debug",
            types::LogLevel::Info => "info",
            types::LogLevel::Notice => "notice",
            types::LogLevel::Warning => "warning",
            types::LogLevel::Error => "error",
        };
        let message = self.scrubbed(message);
        self.io.log(level, &message);
        self.logs.push(level, message);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_logs_at_most_its_rate_each_second() {
        let rate = LogRate::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let t0 = std::time::Instant::now();
        for _ in 0..GUEST_LOG_LINES_PER_SECOND {
            assert_eq!(rate.admit(&a, t0), Admitted::Yes);
        }
        assert_eq!(rate.admit(&a, t0), Admitted::FirstRefused, "said once");
        assert_eq!(rate.admit(&a, t0), Admitted::No);
        assert_eq!(
            rate.admit(&b, t0),
            Admitted::Yes,
            "another tenant has its own"
        );
        let later = t0 + std::time::Duration::from_secs(1);
        assert_eq!(rate.admit(&a, later), Admitted::Yes, "a new second");
    }

    fn limiter(tenant: &Arc<AtomicUsize>, host: &Arc<AtomicUsize>) -> Limiter {
        Limiter {
            memory_bytes: 64 << 20,
            table_elements: 1_000,
            in_use: host.clone(),
            total_bytes: 80 << 20,
            held: 0,
            tenant_in_use: tenant.clone(),
            tenant_bytes: 72 << 20,
            reserve_bytes: 10 << 20,
        }
    }

    fn grow(l: &mut Limiter, by: usize) -> Result<(), String> {
        let current = l.held;
        l.memory_growing(current, current + by, None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_tenant_stops_at_its_share_and_the_reserve_stays_for_small_tenants() {
        let host = Arc::new(AtomicUsize::new(0));
        let (a, b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut a1 = limiter(&a, &host);
        let mut a2 = limiter(&a, &host);
        grow(&mut a1, 40 << 20).expect("a's first guest");
        // a's second guest: within a's share (72 MiB) but past what is open to a tenant
        // holding more than the reserve (80 - 10 MiB).
        let e = grow(&mut a2, 32 << 20).expect_err("the reserve is not a's");
        assert!(e.contains("memory budget"), "{e}");
        assert_eq!(
            a.load(Ordering::Acquire),
            40 << 20,
            "a refused growth is undone"
        );
        grow(&mut a2, 30 << 20).expect("a up to the reserve");
        let e = grow(&mut a2, 1 << 20).expect_err("the reserve is still not a's");
        assert!(e.contains("memory budget"), "{e}");
        let mut a3 = limiter(&a, &host);
        a3.tenant_bytes = 70 << 20;
        let e = grow(&mut a3, 1 << 20).expect_err("a at its share");
        assert!(e.contains("share"), "{e}");
        // b, holding little, gets the reserve.
        let mut b1 = limiter(&b, &host);
        grow(&mut b1, 10 << 20).expect("b from the reserve");
        assert_eq!(host.load(Ordering::Acquire), 80 << 20);
        drop(a3);
        drop((a1, a2, b1));
        assert_eq!(
            (host.load(Ordering::Acquire), a.load(Ordering::Acquire)),
            (0, 0)
        );
    }
}
