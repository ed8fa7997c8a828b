//! Change announcements between nodes: `LISTEN`/`NOTIFY` on one channel per schema.
//!
//! A node announces the tasks it created or moved *after* their commits, coalesced: one
//! `NOTIFY` carries every id changed in a short window, sent on a connection of its own,
//! so no hot transaction pays for it (a `NOTIFY` inside a transaction serializes commits).
//! Every node listens on the same channel and hands other nodes' ids to its subscription
//! streams and runner. An announcement is a hint: receivers read the task from the store.
//!
//! Delivery is best effort. When the listening connection drops, receivers get
//! [`RemoteChange::Resync`] (re-read what you watch) and the node reconnects; what must
//! happen without announcements still happens, later: a heartbeat finds a task cancelled
//! elsewhere, a heartbeat wakes a guest waiting for an answer, and the recovery loop
//! claims a parked task whose answer arrived on another node.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::model::TaskId;
use crate::store::ChangeKind;

/// How long announcements are gathered before one `NOTIFY` sends them.
const COALESCE: Duration = Duration::from_millis(5);
/// Ids per `NOTIFY` (a payload is at most 8,000 bytes; an id is 34 with its tag and
/// separator).
const IDS_PER_NOTIFY: usize = 200;
/// Wait between reconnection attempts of the listening connection.
const RECONNECT: Duration = Duration::from_millis(500);

impl ChangeKind {
    fn tag(self) -> char {
        match self {
            ChangeKind::Created => 'c',
            ChangeKind::InputAccepted => 'i',
            ChangeKind::Cancelled => 'x',
            ChangeKind::Other => 'u',
        }
    }

    fn of_tag(c: char) -> Option<Self> {
        Some(match c {
            'c' => ChangeKind::Created,
            'i' => ChangeKind::InputAccepted,
            'x' => ChangeKind::Cancelled,
            'u' => ChangeKind::Other,
            _ => return None,
        })
    }
}

/// What another node announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteChange {
    /// This task changed on another node.
    Task {
        /// The task.
        id: TaskId,
        /// How.
        kind: ChangeKind,
    },
    /// Announcements may have been missed (the listening connection dropped): re-read
    /// whatever you watch.
    Resync,
    /// A new deployment was committed (by any process, this one's included).
    Deployed,
}

/// The word a deployment is announced with.
const DEPLOYED: &str = "d";

/// A receiver of other nodes' changes.
pub type RemoteChanges = broadcast::Receiver<RemoteChange>;

/// The announcing and listening side of one store.
pub(super) struct Notifier {
    channel: String,
    me: String,
    outbox: mpsc::UnboundedSender<(TaskId, ChangeKind)>,
    changes: broadcast::Sender<RemoteChange>,
    listening: watch::Receiver<Option<Arc<Client>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Notifier {
    pub(super) fn start(cfg: tokio_postgres::Config, schema: &str) -> Self {
        let channel = format!("snodo_{schema}");
        // Nodes restart under the same name: a random instance tag tells this process's
        // own announcements apart.
        let me = format!("{:016x}", crate::ids::random_u64());
        let (outbox, inbox) = mpsc::unbounded_channel();
        let (changes, _) = broadcast::channel(4096);
        let (client_tx, client_rx) = watch::channel(None);
        let listen = tokio::spawn(listen(
            cfg,
            channel.clone(),
            me.clone(),
            changes.clone(),
            client_tx,
        ));
        let listening = client_rx.clone();
        let send = tokio::spawn(send(inbox, client_rx, channel.clone(), me.clone()));
        Self {
            channel,
            me,
            outbox,
            changes,
            listening,
            tasks: vec![listen, send],
        }
    }

    /// Announces a committed deployment at once, on `client` (deployments are rare; the
    /// deployer's own connection serves). A lost announcement is covered by the nodes'
    /// polling.
    pub(super) async fn announce_deployment(&self, client: &Client) {
        let payload = format!("{} {DEPLOYED}", self.me);
        let _ = client
            .execute("SELECT pg_notify($1, $2)", &[&self.channel, &payload])
            .await;
    }

    /// Queues `task` for the next announcement.
    pub(super) fn announce(&self, task: TaskId, kind: ChangeKind) {
        let _ = self.outbox.send((task, kind));
    }

    /// Resolves once the listening connection listens (again).
    pub(super) async fn listening(&self) {
        let mut rx = self.listening.clone();
        let _ = rx.wait_for(Option::is_some).await;
    }

    pub(super) fn subscribe(&self) -> RemoteChanges {
        self.changes.subscribe()
    }
}

/// Keeps one listening connection open, publishing what arrives; shares its client with
/// the sender.
async fn listen(
    cfg: tokio_postgres::Config,
    channel: String,
    me: String,
    changes: broadcast::Sender<RemoteChange>,
    client_tx: watch::Sender<Option<Arc<Client>>>,
) {
    let mut first = true;
    loop {
        if !first {
            tokio::time::sleep(RECONNECT).await;
        }
        first = false;
        let Ok((client, mut connection)) = cfg.connect(NoTls).await else {
            continue;
        };
        let client = Arc::new(client);
        let mut messages =
            futures_util::stream::poll_fn(move |cx| connection.poll_message(cx)).boxed();
        let statement = format!("LISTEN {channel}");
        let listening = client.batch_execute(&statement);
        // The connection is driven by polling its messages; the LISTEN needs that too.
        let ok = tokio::select! {
            r = listening => r.is_ok(),
            _ = messages.next() => false,
        };
        if !ok {
            continue;
        }
        let _ = client_tx.send(Some(client.clone()));
        // Whatever happened while nobody listened is unknown.
        let _ = changes.send(RemoteChange::Resync);
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let mut words = n.payload().split(' ');
                    let own = words.next() == Some(me.as_str());
                    for word in words {
                        if word == DEPLOYED {
                            // Every process hears of a deployment, its own included.
                            let _ = changes.send(RemoteChange::Deployed);
                            continue;
                        }
                        if own {
                            continue;
                        }
                        let mut chars = word.chars();
                        let kind = chars.next().and_then(ChangeKind::of_tag);
                        if let (Some(kind), Some(id)) = (kind, TaskId::parse(chars.as_str())) {
                            let _ = changes.send(RemoteChange::Task { id, kind });
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let _ = client_tx.send(None);
        let _ = changes.send(RemoteChange::Resync);
    }
}

/// Sends queued announcements, a batch per `NOTIFY`.
async fn send(
    mut inbox: mpsc::UnboundedReceiver<(TaskId, ChangeKind)>,
    mut client: watch::Receiver<Option<Arc<Client>>>,
    channel: String,
    me: String,
) {
    while let Some(first) = inbox.recv().await {
        tokio::time::sleep(COALESCE).await;
        let mut ids = vec![first];
        while ids.len() < 16 * IDS_PER_NOTIFY {
            match inbox.try_recv() {
                Ok(id) => ids.push(id),
                Err(_) => break,
            }
        }
        ids.sort_unstable_by_key(|(i, k)| (*i.as_bytes(), k.tag()));
        ids.dedup();
        let Some(c) = client.borrow_and_update().clone() else {
            // Not connected: the fallbacks described above cover these.
            continue;
        };
        for chunk in ids.chunks(IDS_PER_NOTIFY) {
            let mut payload = me.clone();
            for (id, kind) in chunk {
                payload.push(' ');
                payload.push(kind.tag());
                payload.push_str(&id.to_string());
            }
            if c.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
                .await
                .is_err()
            {
                break;
            }
        }
    }
}
