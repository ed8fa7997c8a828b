//! Input for a task attempt: each question is recorded in the store under the attempt's
//! lease before it waits; answers are what the store accepted; status messages are
//! coalesced; parked attempts are woken through [`InputWaiters`].

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::Notify;

use snodo_core::model::{EventId, EventKind, JournalEntry, SleepAsk, TaskEvent, TaskId, Timestamp};
use snodo_core::store::{Authority, Effect, InputReply, JournalBounds, Lease, Store, StoreError};
use snodo_wasm::{
    CancelToken, ExecutionIo, InputAnswers, InputFailure, InputRequests, IoError, Progress,
    SleepFailure, check_capabilities,
};

/// Wakes attempts parked in `await-input` when their task's inputs change.
///
/// The store is the authority: a waiter woken here re-reads the task, so a spurious or
/// early wake is harmless, and a wake that comes before the waiter parks is kept
/// (`Notify` stores one permit).
#[derive(Default)]
pub struct InputWaiters {
    waiters: Mutex<HashMap<TaskId, Arc<Notify>>>,
}

impl InputWaiters {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn subscribe(&self, task: TaskId) -> Arc<Notify> {
        let mut w = self.waiters.lock();
        w.entry(task).or_default().clone()
    }

    fn unsubscribe(&self, task: &TaskId) {
        let mut w = self.waiters.lock();
        w.remove(task);
    }

    /// Tells the attempt running `task` (if any, on this node) that its inputs changed.
    pub fn notify(&self, task: &TaskId) {
        let w = self.waiters.lock();
        if let Some(n) = w.get(task) {
            n.notify_one();
        }
    }

    /// How many attempts are registered.
    pub fn len(&self) -> usize {
        self.waiters.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Input for a task attempt: questions are recorded in the store under the attempt's lease
/// before it waits; answers are what the store accepted.
pub struct TaskIo {
    store: Arc<dyn Store>,
    lease: Lease,
    capabilities: Value,
    waiters: Arc<InputWaiters>,
    park_after: Option<std::time::Duration>,
    /// The shortest sleep that parks the task (`runner.sleep_park_after_ms`); `None`: every
    /// sleep waits in place.
    sleep_park_after: Option<std::time::Duration>,
    /// When the task expires (store clock): no sleep may end at or after it.
    expires_at: Option<Timestamp>,
    /// When this attempt's claim was taken (store clock): a recorded sleep that ended
    /// before it returns without a clock read, as every wake's replay does.
    claimed_at: Option<u64>,
    /// Cancelled when the runner stops: a guest waiting for input parks at once, so a
    /// shutdown never waits for an answer; a sleep in place that would outlast `drain`
    /// parks too.
    stopping: Option<tokio_util::sync::CancellationToken>,
    /// How long a shutdown lets attempts finish (`runner.drain_timeout_ms`).
    drain: std::time::Duration,
    status: Arc<Mutex<StatusGate>>,
    tracker: Option<tokio_util::task::TaskTracker>,
    /// The task's outbound journal, read from the store at the attempt's first request.
    journal: tokio::sync::OnceCell<HashMap<u32, JournalEntry>>,
    /// The journal's bound for the whole task.
    journal_bytes: u64,
    /// The bytes the task's scope may keep stored (`limits.stored_bytes_per_tenant`),
    /// which every journal entry joins; `None` never refuses.
    scope_bytes: Option<u64>,
    /// What the task's journal holds and what the attempt's requests in flight reserved.
    journal_room: Mutex<JournalRoom>,
    /// The attempt's spans, when its trace is sampled.
    spans: crate::spans::Spans,
    /// When each outbound request in flight began, by journal position (its span starts
    /// there; a guest may send several at once).
    outbound_started: Mutex<HashMap<u32, (std::time::SystemTime, std::time::Instant)>>,
}

/// The journal bytes of one task as this attempt counts them: the entries recorded (read
/// with the journal, plus those this attempt appended) and the room held by its requests in
/// flight, by position. Recorded plus reserved never passes the bound, so a request that
/// was sent always has room for its entry.
#[derive(Default)]
struct JournalRoom {
    recorded: u64,
    reserved: HashMap<u32, u64>,
}

/// The shortest gap between two status commits of one attempt. A guest that sets its
/// status faster has its messages coalesced: the newest is committed once the gap has
/// passed, so a status loop costs a few commits a second, not one per call.
pub(crate) const STATUS_COMMIT_INTERVAL: std::time::Duration =
    std::time::Duration::from_millis(250);

/// Coalescing of one attempt's status messages.
#[derive(Default)]
struct StatusGate {
    committed_at: Option<tokio::time::Instant>,
    last: Option<String>,
    pending: Option<String>,
    flushing: bool,
    /// The scheduled flush, stopped with the attempt's IO: nothing outlives the attempt
    /// holding the store.
    flush: Option<tokio::task::AbortHandle>,
}

impl Drop for TaskIo {
    fn drop(&mut self) {
        let gate = self.status.lock();
        if let Some(f) = &gate.flush {
            f.abort();
        }
    }
}

impl TaskIo {
    /// IO for the attempt holding `lease`. `capabilities` are those the creating request
    /// declared (stored with the task).
    pub fn new(
        store: Arc<dyn Store>,
        lease: Lease,
        capabilities: Value,
        waiters: Arc<InputWaiters>,
    ) -> Self {
        Self {
            store,
            lease,
            capabilities,
            waiters,
            park_after: None,
            sleep_park_after: None,
            expires_at: None,
            claimed_at: None,
            stopping: None,
            drain: std::time::Duration::ZERO,
            status: Arc::default(),
            tracker: None,
            journal: tokio::sync::OnceCell::new(),
            journal_bytes: 8 << 20,
            scope_bytes: None,
            journal_room: Mutex::default(),
            spans: None,
            outbound_started: Mutex::new(HashMap::new()),
        }
    }

    /// Records the attempt's outbound requests, store commits, questions and log lines in
    /// `spans`.
    pub(crate) fn traced(mut self, spans: crate::spans::Spans) -> Self {
        self.spans = spans;
        self
    }

    /// Records a finished outbound request (or its answer from the journal) as a step: its
    /// method, the server's address and the status, never its path, query or bodies.
    fn outbound_step(
        &self,
        entry: &JournalEntry,
        start: std::time::SystemTime,
        took: std::time::Duration,
        replayed: bool,
    ) {
        crate::spans::with(&self.spans, |s| {
            let url = entry.request.url.as_str();
            let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            let host_port = authority.rsplit('@').next().unwrap_or(authority);
            // `[v6]:port` or `host:port`; the port, when given, apart.
            let (host, port) = match host_port.rsplit_once(':') {
                Some((h, p)) if !p.contains(']') && p.parse::<u16>().is_ok() => {
                    (h, p.parse::<u16>().ok())
                }
                _ => (host_port, None),
            };
            let status = entry.response.status;
            s.step(
                &entry.request.method,
                snodo_core::spans::SpanKind::Client,
                start,
                took,
                vec![
                    ("http.request.method", entry.request.method.as_str().into()),
                    ("server.address", host.trim_matches(['[', ']']).into()),
                    (
                        "server.port",
                        i64::from(port.unwrap_or(if scheme == "https" { 443 } else { 80 })).into(),
                    ),
                    ("url.scheme", scheme.into()),
                    ("http.response.status_code", i64::from(status).into()),
                    ("snodo.outbound.position", entry.seq.into()),
                    ("snodo.outbound.replayed", replayed.into()),
                ],
                (status >= 500).then(|| status.to_string()),
            );
        });
    }

    /// The task's journal by position, read from the store at the attempt's first request
    /// (which also counts the bytes it holds).
    async fn journal(&self) -> Result<&HashMap<u32, JournalEntry>, StoreError> {
        self.journal
            .get_or_try_init(|| async {
                let entries = self.store.journal(&self.lease).await?;
                let bytes: u64 = entries.iter().map(|e| e.encode().len() as u64).sum();
                self.journal_room.lock().recorded = bytes;
                Ok::<_, StoreError>(entries.into_iter().map(|e| (e.seq, e)).collect())
            })
            .await
    }

    /// Bounds the task's outbound journal to `bytes` (`outbound.journal_task_bytes`).
    pub fn journal_bytes(mut self, bytes: u64) -> Self {
        self.journal_bytes = bytes;
        self
    }

    /// Records journal entries only while the task's scope keeps at most `bytes` stored
    /// (`limits.stored_bytes_per_tenant`); `None` never refuses.
    pub fn scope_bytes(mut self, bytes: Option<u64>) -> Self {
        self.scope_bytes = bytes;
        self
    }

    /// What one journal append may fill.
    fn bounds(&self) -> JournalBounds {
        JournalBounds {
            task_bytes: self.journal_bytes,
            scope_bytes: self.scope_bytes,
        }
    }

    /// Runs the deferred commit of a coalesced status message on `tracker`, so whoever
    /// waits for the tracker (the runner's shutdown) waits for that commit too.
    pub fn tracked(mut self, tracker: tokio_util::task::TaskTracker) -> Self {
        self.tracker = Some(tracker);
        self
    }

    /// Parks the guest (with [`InputFailure::Park`]) as soon as `stopping` is cancelled,
    /// if it waits for answers then or later: the answers may take days, a shutdown must
    /// not wait for them. A sleep in place then parks too unless it ends within `drain`
    /// (the shutdown's allowance), which sees it through.
    pub fn parked_when(
        mut self,
        stopping: tokio_util::sync::CancellationToken,
        drain: std::time::Duration,
    ) -> Self {
        self.stopping = Some(stopping);
        self.drain = drain;
        self
    }

    /// Parks the task, with no guest, for every sleep of at least `threshold` (and for a
    /// shorter one still waiting when the runner stops), so a sleeping task holds no slot.
    pub fn sleep_park_after(mut self, threshold: std::time::Duration) -> Self {
        self.sleep_park_after = Some(threshold);
        self
    }

    /// Says when this attempt's claim was taken (ms, store clock).
    pub fn claimed_at(mut self, at: u64) -> Self {
        self.claimed_at = Some(at);
        self
    }

    /// Refuses sleeps that would end at or after `at`, the task's expiry.
    pub fn expires_at(mut self, at: Option<Timestamp>) -> Self {
        self.expires_at = at;
        self
    }

    /// Whether a sleep with `left` ms to go waits in place (shorter than the threshold).
    fn waits_in_place(&self, left: u64) -> bool {
        self.sleep_park_after
            .is_none_or(|threshold| u128::from(left) < threshold.as_millis())
    }

    /// Waits `left` ms in place. `None` once it has; `Some(rest)` when a shutdown came and
    /// the `rest` would outlast its drain (the sleep parks instead: it neither holds the
    /// shutdown nor is lost with it); a sleep the drain sees the end of waits on.
    async fn wait_in_place(
        &self,
        left: u64,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, SleepFailure> {
        let end = tokio::time::Instant::now() + std::time::Duration::from_millis(left);
        let stopping = async {
            match &self.stopping {
                Some(s) => s.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(end) => return Ok(None),
            () = cancel.cancelled() => return Err(SleepFailure::Cancelled),
            () = stopping, if self.sleep_park_after.is_some() => {}
        }
        let rest = end.saturating_duration_since(tokio::time::Instant::now());
        if rest > self.drain {
            return Ok(Some(rest.as_millis() as u64));
        }
        tokio::select! {
            () = tokio::time::sleep_until(end) => Ok(None),
            () = cancel.cancelled() => Err(SleepFailure::Cancelled),
        }
    }

    /// The store's clock, in ms.
    async fn store_now(&self) -> Result<u64, SleepFailure> {
        self.store
            .now()
            .await
            .map(|t| t.as_millis())
            .map_err(|e| SleepFailure::Stop(e.to_string()))
    }

    /// Records a sleep that parks (unless the journal holds it already), then gives the
    /// claim up until it ends: the task is due again at `until`, on whichever node claims
    /// it, and its replay finds the sleep recorded at its position.
    async fn park_sleep(
        &self,
        seq: u32,
        ask: SleepAsk,
        until: u64,
        recorded: bool,
    ) -> Result<(), SleepFailure> {
        if !recorded {
            // The entry first: a crash before the claim is given up leaves a task whose
            // replay finds its wake time and parks again, never one that sleeps afresh.
            if let Err(e) = self
                .journal_append(JournalEntry::sleep(seq, ask, until))
                .await
            {
                return Err(match e {
                    IoError::Store(e) if lost(&e) => SleepFailure::Stop(e.to_string()),
                    other => SleepFailure::Unrecorded(other.to_string()),
                });
            }
        }
        let event = TaskEvent::random(EventKind::Sleeping {
            until: Timestamp(until),
        });
        let sleep = self
            .store
            .transition(Authority::Worker(&self.lease), event, None);
        let committed = crate::attempt::store_op(&self.spans, "sleeping", sleep)
            .await
            .map_err(|e| SleepFailure::Stop(e.to_string()))?;
        let wait = until.saturating_sub(committed.task.last_updated_at.as_millis());
        Err(SleepFailure::Parked { until, wait })
    }

    /// Releases the guest (with [`InputFailure::Park`]) once it has waited `idle` for
    /// answers, so parked tasks hold no live instance.
    pub fn park_after(mut self, idle: std::time::Duration) -> Self {
        self.park_after = Some(idle);
        self
    }
}

async fn commit_status(
    store: &dyn Store,
    lease: &Lease,
    message: String,
) -> Result<(), StoreError> {
    let event = TaskEvent::random(EventKind::StatusMessage { message });
    store
        .transition(Authority::Worker(lease), event, None)
        .await
        .map(|_| ())
}

/// Whether a store's refusal means the attempt lost its right to go on (rather than that
/// what it asked for cannot be done).
fn lost(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::LeaseLost
            | StoreError::Terminal { .. }
            | StoreError::NotFound
            | StoreError::Unavailable(_)
    )
}

fn stop(e: StoreError) -> InputFailure {
    match e {
        StoreError::InputConflict { key } => InputFailure::KeyConflict(key),
        StoreError::Invalid(m) => InputFailure::Invalid(m.to_string()),
        other => InputFailure::Stop(other.to_string()),
    }
}

#[async_trait]
impl ExecutionIo for TaskIo {
    fn journaled(&self) -> bool {
        true
    }

    async fn journal_entry(&self, seq: u32) -> Result<Option<JournalEntry>, IoError> {
        let entries = self.journal().await?;
        let found = entries.get(&seq).cloned();
        if self.spans.is_some() {
            let now = std::time::SystemTime::now();
            match &found {
                Some(entry) => self.outbound_step(entry, now, Default::default(), true),
                None => {
                    self.outbound_started
                        .lock()
                        .insert(seq, (now, std::time::Instant::now()));
                }
            }
        }
        Ok(found)
    }

    async fn journal_reserve(&self, seq: u32, bytes: u64) -> Result<(), IoError> {
        self.journal().await?;
        let mut room = self.journal_room.lock();
        let held: u64 = room.reserved.values().sum();
        let bound = self.journal_bytes;
        if room.recorded + held + bytes > bound {
            return Err(IoError::JournalFull {
                recorded: room.recorded,
                bound,
                held,
                needed: bytes,
            });
        }
        room.reserved.insert(seq, bytes);
        Ok(())
    }

    fn journal_release(&self, seq: u32) {
        self.journal_room.lock().reserved.remove(&seq);
    }

    async fn journal_append(&self, entry: JournalEntry) -> Result<(), IoError> {
        if self.spans.is_some() {
            let started = self.outbound_started.lock().remove(&entry.seq);
            if let Some((start, began)) = started {
                self.outbound_step(&entry, start, began.elapsed(), false);
            }
        }
        let append = self
            .store
            .journal_append_bounded(&self.lease, &entry, self.bounds());
        let (seq, size) = (entry.seq, entry.encode().len() as u64);
        crate::attempt::store_op(&self.spans, "journal_append", append).await?;
        // The entry now counts as recorded; the room its position held is free.
        let mut room = self.journal_room.lock();
        room.reserved.remove(&seq);
        room.recorded += size;
        Ok(())
    }

    fn log(&self, level: &'static str, message: &str) {
        crate::spans::with(&self.spans, |s| s.log(level, message));
    }

    /// A sleep of the task: the journal's wake time at `seq` when a replay reaches it (the
    /// same sleep, or a divergence), else the store's clock plus what it asks. One that
    /// ends within the threshold waits in place; a longer one parks the task.
    async fn sleep(
        &self,
        seq: u32,
        ask: SleepAsk,
        cancel: &CancelToken,
    ) -> Result<(), SleepFailure> {
        let entries = self
            .journal()
            .await
            .map_err(|e| SleepFailure::Stop(e.to_string()))?;
        let recorded = match entries.get(&seq) {
            None => None,
            Some(entry) => match entry.as_sleep() {
                Some((asked, until)) if asked == ask => Some(until),
                _ => {
                    return Err(SleepFailure::Diverged(format!(
                        "position {seq} of the replay asks for {ask}, the journal recorded {}",
                        entry.describe()
                    )));
                }
            },
        };
        // The wake's replay: the claim that started this attempt came at or after the end
        // of the recorded sleep (a sleeping task is not due before), so it has passed.
        if let (Some(until), Some(claimed)) = (recorded, self.claimed_at)
            && claimed >= until
        {
            return Ok(());
        }
        // A fresh short sleep for a duration waits in place without reading the store's
        // clock (a round trip on PostgreSQL): nothing is recorded, its length is all it
        // needs. Only a shutdown makes it park, for what is left of it.
        if let (None, SleepAsk::For(ms)) = (recorded, ask)
            && self.waits_in_place(ms)
        {
            let Some(rest) = self.wait_in_place(ms, cancel).await? else {
                return Ok(());
            };
            let until = self.store_now().await?.saturating_add(rest);
            return self.park_sleep(seq, ask, until, false).await;
        }
        let now = self.store_now().await?;
        let until = recorded.unwrap_or_else(|| ask.ends(now));
        if let Some(expires) = self.expires_at
            && until >= expires.as_millis()
        {
            return Err(SleepFailure::PastTtl {
                until,
                expires_at: expires.as_millis(),
            });
        }
        let left = until.saturating_sub(now);
        if left == 0 {
            return Ok(());
        }
        if self.waits_in_place(left) && self.wait_in_place(left, cancel).await?.is_none() {
            return Ok(());
        }
        self.park_sleep(seq, ask, until, recorded.is_some()).await
    }

    async fn await_inputs(&self, requests: InputRequests, cancel: &CancelToken) -> InputAnswers {
        check_capabilities(&self.capabilities, &requests)?;
        let task = *self.lease.task_id();
        // Subscribe before recording, so an answer that lands in between still wakes us.
        let notify = self.waiters.subscribe(task);
        let _unsubscribe = Unsubscribe {
            waiters: &self.waiters,
            task,
        };
        let mut answers: Vec<Option<Value>> = vec![None; requests.len()];
        for (i, (key, request)) in requests.iter().enumerate() {
            let ask =
                self.store
                    .request_input(&self.lease, EventId::random(), key, request.clone());
            let committed = crate::attempt::store_op(&self.spans, "request_input", ask)
                .await
                .map_err(stop)?;
            crate::spans::with(&self.spans, |s| {
                s.event(
                    "input_requested",
                    vec![("snodo.input.key", key.as_str().into())],
                );
            });
            if let Effect::Input(InputReply::Answered(v)) = committed.effect {
                answers[i] = Some(v);
            }
        }
        let park = async {
            let idle = async {
                match self.park_after {
                    // A real-time idle allowance: how long a live guest may sit waiting.
                    Some(idle) => tokio::time::sleep(idle).await,
                    None => std::future::pending().await,
                }
            };
            let stopping = async {
                match &self.stopping {
                    Some(s) => s.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = idle => {}
                () = stopping => {}
            }
        };
        tokio::pin!(park);
        loop {
            if answers.iter().all(Option::is_some) {
                crate::spans::with(&self.spans, |s| {
                    s.event(
                        "input_answered",
                        vec![("snodo.input.count", (answers.len() as u64).into())],
                    );
                });
                return Ok(answers.into_iter().flatten().collect());
            }
            tokio::select! {
                _ = notify.notified() => {}
                _ = cancel.cancelled() => return Err(InputFailure::Cancelled),
                () = &mut park => return Err(InputFailure::Park),
            }
            let (t, _) = self
                .store
                .worker_snapshot(&self.lease)
                .await
                .map_err(stop)?;
            for (i, (key, _)) in requests.iter().enumerate() {
                if answers[i].is_none() {
                    answers[i] = t.inputs.get(key).and_then(|e| e.response.clone());
                }
            }
        }
    }

    async fn set_status(&self, message: String) -> Result<(), IoError> {
        let now = tokio::time::Instant::now();
        // `Some(message)`: commit it now; `None`: coalesced (with a flush due at `flush_at`
        // when this call scheduled one).
        let (now_message, flush_at) = {
            let mut gate = self.status.lock();
            if gate.pending.is_none() && gate.last.as_deref() == Some(message.as_str()) {
                return Ok(());
            }
            match gate.committed_at {
                Some(at) if now < at + STATUS_COMMIT_INTERVAL => {
                    gate.pending = Some(message);
                    let schedule = !gate.flushing;
                    gate.flushing = true;
                    (None, schedule.then_some(at + STATUS_COMMIT_INTERVAL))
                }
                _ => {
                    gate.committed_at = Some(now);
                    gate.last = Some(message.clone());
                    (Some(message), None)
                }
            }
        };
        if let Some(m) = now_message {
            return Ok(commit_status(&*self.store, &self.lease, m).await?);
        }
        let Some(flush_at) = flush_at else {
            return Ok(());
        };
        // Commit the newest pending message when the gap has passed. Its lease may be gone
        // by then (the attempt ended): the store refuses it and nothing changes.
        let (store, lease, gate) = (self.store.clone(), self.lease.clone(), self.status.clone());
        let flush = async move {
            tokio::time::sleep_until(flush_at).await;
            let message = {
                let mut g = gate.lock();
                g.flushing = false;
                g.committed_at = Some(tokio::time::Instant::now());
                let m = g.pending.take();
                g.last.clone_from(&m);
                m
            };
            if let Some(m) = message {
                let _ = commit_status(&*store, &lease, m).await;
            }
        };
        let flush = match &self.tracker {
            Some(tracker) => tracker.spawn(flush),
            None => tokio::spawn(flush),
        };
        self.status.lock().flush = Some(flush.abort_handle());
        Ok(())
    }

    async fn progress(&self, progress: Progress) {
        // A task has no progress notifications (a client polls it): its status message is
        // the channel, so progress becomes the message, coalesced like any other. Best
        // effort, as progress is: a lost lease is the attempt's to notice, not this call's.
        let _ = self.set_status(progress_text(&progress)).await;
    }
}

/// A progress report as a status message: `"<message> (<progress> of <total>)"`, with the
/// parts the guest gave.
pub(crate) fn progress_text(p: &Progress) -> String {
    let amount = match p.total {
        Some(total) => format!("{} of {}", number(p.progress), number(total)),
        None => number(p.progress),
    };
    match &p.message {
        Some(m) if !m.is_empty() => format!("{m} ({amount})"),
        _ => amount,
    }
}

/// `50` rather than `50.0`; at most two decimals otherwise.
fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

struct Unsubscribe<'a> {
    waiters: &'a InputWaiters,
    task: TaskId,
}

impl Drop for Unsubscribe<'_> {
    fn drop(&mut self) {
        self.waiters.unsubscribe(&self.task);
    }
}

#[cfg(test)]
mod tests {
    use super::{Progress, progress_text};

    fn p(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
        progress_text(&Progress {
            progress,
            total,
            message: message.map(str::to_owned),
        })
    }

    #[test]
    fn progress_reads_as_a_status_message() {
        assert_eq!(p(50.0, Some(100.0), None), "50 of 100");
        assert_eq!(p(3.0, None, None), "3");
        assert_eq!(p(0.25, Some(1.0), Some("copying")), "copying (0.25 of 1)");
        assert_eq!(p(1.0 / 3.0, None, Some("")), "0.33");
    }
}
