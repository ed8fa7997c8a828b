//! Serving the routes on a TCP listener with the transport's limits: a cap on open
//! connections, the header and idle timeouts, TCP_NODELAY, and graceful shutdown.
//!
//! Each connection is watched by its own task. Its phase decides which timer runs:
//!
//! - **fresh**: from accept until the first byte; bounded by the short `first_byte_timeout`,
//!   so a socket that opens and says nothing gives its slot back within seconds;
//! - **head**: from the first byte of a request until hyper has a complete request head;
//!   bounded by `header_timeout`, so a client that trickles a header cannot hold a
//!   connection slot;
//! - **busy**: from a complete head until the response body is dropped; no transport timer
//!   runs, because a long tool call or an open SSE stream is legitimately quiet (the body
//!   read has its own timeout in the handler);
//! - **idle**: a keep-alive connection between requests; bounded by `idle_timeout`.
//!
//! A connection whose timer expires is dropped, which closes the socket. The cap is a
//! semaphore: a connection accepted while every slot is held takes the slot of the oldest
//! connection that has not sent a byte yet (closing it), else of the oldest that has not
//! finished its first request head, and waits for a slot to free only when no such
//! connection is open. So neither silent sockets nor heads trickled a byte at a time can
//! hold the server: a client that speaks gets in however many of them sit open, and the
//! connections that are never closed for a newcomer are the ones that have sent a whole
//! request head (among them every authenticated keep-alive connection). Near the cap (at
//! least three quarters of the slots held) a request head that starts must be complete
//! within `first_byte_timeout` rather than `header_timeout`, so slow heads free their slots
//! quickly exactly when slots are scarce. One peer address may hold at most
//! `max_connections_per_peer` of the slots: a connection past that is closed at once.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

/// The transport's limits, and the `[http]` section of the configuration file (times in
/// milliseconds, under the names with `_ms`). Every field has a default, documented in
/// docs/configuration.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpLimits {
    /// How long a new connection may stay silent before its first byte
    /// (`http.first_byte_timeout_ms`, default 3 000).
    #[serde(rename = "first_byte_timeout_ms", with = "snodo_core::config::millis")]
    pub first_byte_timeout: Duration,
    /// How long a client has to send a complete request head, from the first byte of a
    /// request (`http.header_timeout_ms`, default 10 000).
    #[serde(rename = "header_timeout_ms", with = "snodo_core::config::millis")]
    pub header_timeout: Duration,
    /// How long a client has to send a whole request body once its head arrived
    /// (`http.body_timeout_ms`, default 30 000); a late body gets 408.
    #[serde(rename = "body_timeout_ms", with = "snodo_core::config::millis")]
    pub body_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request
    /// (`http.idle_timeout_ms`, default 60 000).
    #[serde(rename = "idle_timeout_ms", with = "snodo_core::config::millis")]
    pub idle_timeout: Duration,
    /// The most connections open at once (`http.max_connections`, default 1 024, at most
    /// [`MAX_CONNECTIONS_LIMIT`]); more wait to be accepted.
    pub max_connections: usize,
    /// The most connections one peer address may hold open (`http.max_connections_per_peer`,
    /// default 256; 0: no such cap, for a server that sees every client through one proxy).
    pub max_connections_per_peer: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            first_byte_timeout: Duration::from_secs(3),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            max_connections_per_peer: 256,
        }
    }
}

impl HttpLimits {
    /// The rules of `[http]`, each naming its key (relative to the section): every timeout
    /// positive, the connection cap within 1..=[`MAX_CONNECTIONS_LIMIT`].
    pub fn check(&self) -> Result<(), snodo_core::config::SettingError> {
        for (key, timeout) in [
            ("first_byte_timeout_ms", self.first_byte_timeout),
            ("header_timeout_ms", self.header_timeout),
            ("body_timeout_ms", self.body_timeout),
            ("idle_timeout_ms", self.idle_timeout),
        ] {
            if timeout.is_zero() {
                return Err(snodo_core::config::SettingError::new(
                    key,
                    "must be positive",
                ));
            }
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS_LIMIT {
            return Err(snodo_core::config::SettingError::new(
                "max_connections",
                format!("1..={MAX_CONNECTIONS_LIMIT}"),
            ));
        }
        Ok(())
    }
}

/// The upper bound of `max_connections` (a semaphore's permits are finite, and far more
/// connections than this would exhaust file descriptors long before).
pub const MAX_CONNECTIONS_LIMIT: usize = 1 << 20;

/// Where a connection is in its request cycle; decides which timer runs.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Accepted at this instant, and nothing read yet.
    Fresh(Instant),
    /// Reading a request head since this instant.
    Head(Instant),
    /// This many requests are being handled or answered.
    Busy(usize),
    /// Waiting for the next request since this instant.
    Idle(Instant),
    /// Closed for a newcomer before it finished its first request head; nothing leaves
    /// this phase.
    Evicted,
}

/// How full the connection slots are, as a request head that starts asks.
#[derive(Debug)]
struct Slots {
    free: Arc<Semaphore>,
    max: usize,
}

impl Slots {
    /// At least three quarters of the slots are held.
    fn scarce(&self) -> bool {
        let held = self.max.saturating_sub(self.free.available_permits());
        held.saturating_mul(4) >= self.max.saturating_mul(3)
    }
}

/// A connection's phase, shared by its socket wrapper, its service and its watcher.
#[derive(Debug)]
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
    /// Whether a whole request head has arrived on it: such a connection is never closed
    /// for a newcomer.
    served: std::sync::atomic::AtomicBool,
    /// Whether its current request head started while slots were scarce, and so has
    /// `first_byte_timeout` to complete.
    hurried: std::sync::atomic::AtomicBool,
    slots: Arc<Slots>,
}

impl Activity {
    fn new(slots: Arc<Slots>) -> Self {
        Self {
            phase: Mutex::new(Phase::Fresh(Instant::now())),
            changed: Notify::new(),
            served: std::sync::atomic::AtomicBool::new(false),
            hurried: std::sync::atomic::AtomicBool::new(false),
            slots,
        }
    }

    fn is_fresh(&self) -> bool {
        matches!(*self.phase.lock(), Phase::Fresh(_))
    }

    /// Whether it is still reading its first request head.
    fn is_first_head(&self) -> bool {
        matches!(*self.phase.lock(), Phase::Head(_))
            && !self.served.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether a newcomer may take its slot now: it is fresh or still in its first head.
    fn is_evictable(&self) -> bool {
        self.is_fresh() || self.is_first_head()
    }

    /// Closes the connection if it is still evictable; whether it was.
    fn evict(&self) -> bool {
        {
            let mut phase = self.phase.lock();
            let evictable = match *phase {
                Phase::Fresh(_) => true,
                Phase::Head(_) => !self.served.load(std::sync::atomic::Ordering::Acquire),
                _ => false,
            };
            if !evictable {
                return false;
            }
            *phase = Phase::Evicted;
        }
        self.changed.notify_one();
        true
    }

    /// Whether it was closed for a newcomer.
    fn is_evicted(&self) -> bool {
        matches!(*self.phase.lock(), Phase::Evicted)
    }

    fn update(&self, f: impl FnOnce(Phase) -> Phase) {
        self.set(f);
        // A stored permit if the watcher is not waiting: it re-reads the phase next time.
        self.changed.notify_one();
    }

    /// Changes the phase without waking the watcher: for a change that removes its
    /// deadline, which the watcher learns when its timer fires (it re-reads the phase then
    /// and closes nothing that is busy). Waking it would cost a poll per request.
    fn set(&self, f: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock();
        if !matches!(*phase, Phase::Evicted) {
            *phase = f(*phase);
        }
    }

    /// Bytes arrived: a new or idle connection starts a request head.
    fn read_bytes(&self) {
        let waiting = matches!(*self.phase.lock(), Phase::Idle(_) | Phase::Fresh(_));
        if waiting {
            self.hurried
                .store(self.slots.scarce(), std::sync::atomic::Ordering::Release);
            self.update(|p| match p {
                Phase::Idle(_) | Phase::Fresh(_) => Phase::Head(Instant::now()),
                other => other,
            });
        }
    }

    fn request_started(&self) {
        self.served
            .store(true, std::sync::atomic::Ordering::Release);
        self.set(|p| match p {
            Phase::Busy(n) => Phase::Busy(n + 1),
            _ => Phase::Busy(1),
        });
    }

    fn request_finished(&self) {
        self.update(|p| match p {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        });
    }

    /// When the connection must be closed if nothing changes, with the limit's name.
    fn deadline(&self, limits: &HttpLimits) -> Option<(Instant, &'static str)> {
        match *self.phase.lock() {
            Phase::Fresh(since) => Some((
                since + limits.first_byte_timeout,
                "http.first_byte_timeout_ms",
            )),
            Phase::Head(since) if self.hurried.load(std::sync::atomic::Ordering::Acquire) => {
                Some((
                    since + limits.first_byte_timeout.min(limits.header_timeout),
                    "http.first_byte_timeout_ms (a request head started near http.max_connections)",
                ))
            }
            Phase::Head(since) => Some((since + limits.header_timeout, "http.header_timeout_ms")),
            Phase::Idle(since) => Some((since + limits.idle_timeout, "http.idle_timeout_ms")),
            Phase::Busy(_) | Phase::Evicted => None,
        }
    }
}

/// The socket, reporting reads to the connection's [`Activity`].
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.read_bytes();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// Marks a request finished when dropped: with its handler's future if the client goes
/// away early, otherwise with the response body once hyper has sent it.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> Self {
        activity.request_started();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_finished();
    }
}

/// A response body that keeps its request in flight until it is dropped.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, within `limits`, with
/// TCP_NODELAY on every connection (SSE replies otherwise stall on Nagle + delayed ACK).
///
/// At shutdown it stops accepting, asks every connection to finish (idle ones close at
/// once, requests in flight complete), and returns when all are closed. Open streams must
/// be ended by the caller (they are part of a request in flight); the caller bounds the
/// wait.
pub async fn serve(
    listener: TcpListener,
    app: super::App,
    limits: &HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = *limits;
    let mut http1 = hyper::server::conn::http1::Builder::new();
    // hyper's own header timer also runs while a keep-alive connection is idle; the
    // watcher times the two phases separately instead.
    http1.header_read_timeout(None).keep_alive(true);
    let max = limits.max_connections.clamp(1, MAX_CONNECTIONS_LIMIT);
    let slots = Arc::new(Semaphore::new(max));
    let shared = Arc::new(Slots {
        free: slots.clone(),
        max,
    });
    let peers = Peers::new(limits.max_connections_per_peer);
    let fresh = Fresh::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok((stream, peer)) => (stream, peer.ip()),
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::error!(error = %e, "accepting a connection failed");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let Some(held) = peers.admit(peer) else {
            // Closing at once; the client sees its connection refused rather than left
            // waiting.
            tracing::debug!(%peer, limit = "http.max_connections_per_peer", "connection refused");
            continue;
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if fresh.evict_oldest() {
                    tracing::debug!(
                        limit = "http.max_connections",
                        "closing a silent connection or an unfinished head for a newcomer"
                    );
                }
                tokio::select! {
                    s = slots.clone().acquire_owned() => match s {
                        Ok(s) => s,
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new(shared.clone()));
        fresh.push(&activity, limits.max_connections);
        tokio::spawn(connection(
            stream,
            app.clone(),
            http1.clone(),
            limits,
            stop_rx.clone(),
            (slot, held),
            activity,
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(stop_rx);
    // Every connection task holds a receiver; all are gone when the last one closed.
    stop_tx.closed().await;
    Ok(())
}

/// The connections that have not finished a request head yet, oldest first (entries of
/// connections that since sent one or closed are skipped, and pruned as the list grows).
#[derive(Default)]
struct Fresh(Mutex<std::collections::VecDeque<std::sync::Weak<Activity>>>);

impl Fresh {
    fn push(&self, activity: &Arc<Activity>, max_connections: usize) {
        let mut list = self.0.lock();
        if list.len() >= max_connections.saturating_mul(2).max(64) {
            list.retain(|w| w.upgrade().is_some_and(|a| a.is_evictable()));
        }
        list.push_back(Arc::downgrade(activity));
    }

    /// Closes the oldest connection that has sent nothing, else the oldest still in its
    /// first request head; whether there was one.
    fn evict_oldest(&self) -> bool {
        let mut list = self.0.lock();
        list.retain(|w| w.upgrade().is_some_and(|a| a.is_evictable()));
        let silent = list
            .iter()
            .position(|w| w.upgrade().is_some_and(|a| a.is_fresh()));
        let candidates = silent.into_iter().chain(0..list.len());
        for i in candidates {
            if list[i].upgrade().is_some_and(|a| a.evict()) {
                list.remove(i);
                return true;
            }
        }
        false
    }
}

/// How many connections each peer address holds open, against `max_connections_per_peer`.
struct Peers {
    max: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of a peer, given back when dropped with its connection.
struct PeerSlot {
    peer: IpAddr,
    open: Option<Arc<Mutex<HashMap<IpAddr, usize>>>>,
}

impl Peers {
    fn new(max: usize) -> Self {
        Self {
            max,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection of `peer`, unless it holds its share already.
    fn admit(&self, peer: IpAddr) -> Option<PeerSlot> {
        if self.max == 0 {
            return Some(PeerSlot { peer, open: None });
        }
        let mut open = self.open.lock();
        let n = open.entry(peer).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peer,
            open: Some(self.open.clone()),
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some(open) = &self.open else { return };
        let mut open = open.lock();
        if let Some(n) = open.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

async fn connection(
    stream: TcpStream,
    app: super::App,
    http1: hyper::server::conn::http1::Builder,
    limits: HttpLimits,
    mut stop: watch::Receiver<bool>,
    _slots: (OwnedSemaphorePermit, PeerSlot),
    activity: Arc<Activity>,
) {
    let io = TokioIo::new(Watched {
        io: stream,
        activity: activity.clone(),
    });
    let for_service = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_flight = InFlight::start(for_service.clone());
        let app = app.clone();
        async move {
            let response = app.handle(request.map(Body::new)).await;
            Ok::<_, Infallible>(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        }
    });
    let conn = http1.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let deadline = activity.deadline(&limits);
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = activity.changed.notified() => {
                if activity.is_evicted() {
                    tracing::debug!("closing a silent connection or an unfinished head for a newcomer");
                    return;
                }
            }
            () = until(deadline.map(|(at, _)| at)) => {
                if let Some((at, limit)) = activity.deadline(&limits)
                    && at <= Instant::now()
                {
                    // Dropping the connection closes the socket; no request is in flight.
                    tracing::debug!(limit, "closing a connection that exceeded {limit}");
                    return;
                }
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            free: Arc::new(Semaphore::new(max)),
            max,
        })
    }

    /// A connection accepted into `slots`, holding one of them.
    fn accepted(slots: &Arc<Slots>) -> (Arc<Activity>, OwnedSemaphorePermit) {
        let permit = slots.free.clone().try_acquire_owned().expect("a free slot");
        (Arc::new(Activity::new(slots.clone())), permit)
    }

    #[test]
    fn a_newcomer_closes_the_silent_first_then_the_oldest_unfinished_head() {
        let slots = slots(16);
        let fresh = Fresh::default();
        let (served, _p0) = accepted(&slots);
        let (head_old, _p1) = accepted(&slots);
        let (head_new, _p2) = accepted(&slots);
        let (silent, _p3) = accepted(&slots);
        for a in [&served, &head_old, &head_new, &silent] {
            fresh.push(a, 16);
        }
        served.read_bytes();
        served.request_started();
        served.request_finished();
        served.read_bytes(); // a second request's head: it has been served once
        head_old.read_bytes();
        head_new.read_bytes();

        assert!(fresh.evict_oldest());
        assert!(silent.is_evicted(), "the silent one goes first");
        assert!(fresh.evict_oldest());
        assert!(head_old.is_evicted(), "then the oldest unfinished head");
        assert!(fresh.evict_oldest());
        assert!(head_new.is_evicted());
        assert!(
            !fresh.evict_oldest(),
            "a served connection is never closed for a newcomer"
        );
        assert!(!served.is_evicted());

        // Eviction is final: a head completing afterwards does not revive it.
        head_old.request_started();
        head_old.request_finished();
        assert!(head_old.is_evicted());
        assert_eq!(head_old.deadline(&HttpLimits::default()), None);
    }

    #[test]
    fn a_head_started_near_the_cap_has_the_first_byte_timeout() {
        let limits = HttpLimits {
            first_byte_timeout: Duration::from_secs(3),
            header_timeout: Duration::from_secs(10),
            ..HttpLimits::default()
        };
        let slots = slots(4);
        let (calm, _p0) = accepted(&slots);
        calm.read_bytes();
        let (_, calm_limit) = calm.deadline(&limits).expect("a head has a deadline");
        assert_eq!(calm_limit, "http.header_timeout_ms");
        let (_b, _p1) = accepted(&slots);
        let (hurried, _p2) = accepted(&slots);
        hurried.read_bytes();
        let (at, limit) = hurried.deadline(&limits).expect("a head has a deadline");
        assert!(limit.starts_with("http.first_byte_timeout_ms"), "{limit}");
        assert!(at <= Instant::now() + limits.first_byte_timeout);
        // A head already under way keeps the deadline it started with.
        assert_eq!(calm.deadline(&limits).expect("deadline").1, calm_limit);
    }
}
