//! The service manager's notification socket (`sd_notify`, when `NOTIFY_SOCKET` is set):
//! `READY=1` once the node serves, `WATCHDOG=1` every half of `WATCHDOG_USEC` while its store
//! proves it can commit (what `/readyz` checks), `STOPPING=1` when it drains. Without the
//! variable nothing is sent; a failed send is logged once and never stops the node.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use snodo_core::store::Store;
use tokio_util::sync::CancellationToken;

/// Where notifications go.
pub(crate) struct Notifier {
    socket: UnixDatagram,
    to: std::os::unix::net::SocketAddr,
    warned: AtomicBool,
}

impl Notifier {
    /// The socket `NOTIFY_SOCKET` names (a path, or `@name` in the abstract namespace), if
    /// it is set and a socket can be made.
    pub(crate) fn from_env() -> Option<Arc<Self>> {
        let name = std::env::var("NOTIFY_SOCKET")
            .ok()
            .filter(|n| !n.is_empty())?;
        let to = match name.strip_prefix('@') {
            Some(abstract_name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            }
            None => std::os::unix::net::SocketAddr::from_pathname(&name),
        };
        let made = to.and_then(|to| Ok((UnixDatagram::unbound()?, to)));
        match made {
            Ok((socket, to)) => Some(Arc::new(Self {
                socket,
                to,
                warned: AtomicBool::new(false),
            })),
            Err(e) => {
                tracing::warn!(error = %e, socket = %name, "NOTIFY_SOCKET cannot be used");
                None
            }
        }
    }

    /// Sends `state` (newline-separated `KEY=value` lines).
    pub(crate) fn send(&self, state: &str) {
        if let Err(e) = self.socket.send_to_addr(state.as_bytes(), &self.to)
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(error = %e, "the service manager's socket refused a notification");
        }
    }

    /// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, when it is set for this
    /// process (`WATCHDOG_PID` absent or this process's id).
    pub(crate) fn watchdog_every() -> Option<Duration> {
        let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
        if let Ok(pid) = std::env::var("WATCHDOG_PID")
            && pid.parse::<u32>().ok() != Some(std::process::id())
        {
            return None;
        }
        (usec > 0).then(|| Duration::from_micros(usec / 2))
    }
}

/// Sends `WATCHDOG=1` every `every` while `store` commits within it, until `stop`: a node
/// whose store stops committing stops petting, and the manager restarts it.
pub(crate) async fn watchdog(
    notifier: Arc<Notifier>,
    store: Arc<dyn Store>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        match store.check_writable(every).await {
            Ok(()) => notifier.send("WATCHDOG=1"),
            Err(e) => tracing::warn!(error = %e, "watchdog withheld: the store cannot commit"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// What the service manager is told over a node's life: [`Manager::ready`] once it serves
/// (and the watchdog from then on), [`Manager::stopping`] when it drains.
pub(crate) struct Manager {
    notifier: Option<Arc<Notifier>>,
    stop: CancellationToken,
    watchdog: Option<tokio::task::JoinHandle<()>>,
}

impl Manager {
    /// Tells the manager (if there is one) that the node serves at `addr`, and pets its
    /// watchdog while `store` commits.
    pub(crate) fn ready(addr: std::net::SocketAddr, store: Arc<dyn Store>) -> Self {
        let notifier = Notifier::from_env();
        let stop = CancellationToken::new();
        let mut watchdog = None;
        if let Some(n) = &notifier {
            n.send(&format!(
                "READY=1\nSTATUS=serving MCP at http://{addr}/mcp\nMAINPID={}",
                std::process::id()
            ));
            if let Some(every) = Notifier::watchdog_every() {
                watchdog = Some(tokio::spawn(self::watchdog(
                    n.clone(),
                    store,
                    every,
                    stop.clone(),
                )));
            }
        }
        Self {
            notifier,
            stop,
            watchdog,
        }
    }

    /// Tells the manager the node drains, and stops the watchdog.
    pub(crate) async fn stopping(self) {
        if let Some(n) = &self.notifier {
            n.send("STOPPING=1\nSTATUS=draining");
        }
        self.stop.cancel();
        if let Some(w) = self.watchdog {
            let _ = w.await;
        }
    }
}
