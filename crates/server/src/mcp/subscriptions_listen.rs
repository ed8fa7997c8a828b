//! `subscriptions/listen`: task notifications on a bounded SSE stream.

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::protocol;
use snodo_core::model::Principal;
use snodo_runner::budget::{Over, Refusal};

use super::request::Listen;
use super::{Ctx, Handled, McpServer, Reply, STREAM_QUEUE, wire};

impl McpServer {
    /// `subscriptions/listen`: acknowledges the notification types this server can send for
    /// the caller (the task ids it can see, without duplicates, at most
    /// `limits.stream_task_ids`), then pushes `notifications/tasks` for every committed
    /// change of a watched task until the client goes away or the server shuts down.
    ///
    /// The stream's queue is bounded: while the client does not read, changes are only
    /// marked (one mark per watched task), and the newest state of each marked task is sent
    /// when there is room, so a stalled reader costs at most its watched set.
    pub(super) async fn subscriptions_listen(
        &self,
        listen: Listen,
        ctx: &Ctx<'_>,
    ) -> Handled<Reply> {
        let principal = ctx.principal;
        let mut ack = serde_json::Map::new();
        let mut watched: Vec<String> = Vec::new();
        let mut feed = None;
        if let Some(ids) = &listen.task_ids {
            if !ctx.meta.declares_tasks() {
                return Err(protocol::refusal::task_notifications());
            }
            let max = self.config.limits.stream_task_ids;
            let mut seen = std::collections::HashSet::new();
            let mut wanted: Vec<&str> = Vec::new();
            for id in ids {
                if seen.insert(id.as_str()) {
                    wanted.push(id);
                }
                if wanted.len() > max {
                    return Err(self.refuse(&Refusal {
                        limit: "limits.stream_task_ids",
                        max: max as u64,
                        over: Over::Tenant,
                    }));
                }
            }
            // Joined before the tasks are authorized: a change committed from here on is
            // in the feed, so none falls between the check and the stream.
            if !wanted.is_empty() {
                feed = self.tasks().change_feed();
            }
            for id in wanted {
                if self
                    .tasks()
                    .store()
                    .authorize(principal, snodo_core::store::Action::Read, id)
                    .await
                    .is_ok()
                {
                    watched.push(id.to_owned());
                }
            }
            ack.insert("taskIds".into(), json!(watched));
        }
        // The lists change when a deployment is swapped in.
        let mut lists = Vec::new();
        for (wanted, key, method) in [
            (
                listen.tools_list_changed,
                "toolsListChanged",
                "notifications/tools/list_changed",
            ),
            (
                listen.resources_list_changed,
                "resourcesListChanged",
                "notifications/resources/list_changed",
            ),
            (
                listen.prompts_list_changed,
                "promptsListChanged",
                "notifications/prompts/list_changed",
            ),
        ] {
            if wanted {
                ack.insert(key.into(), json!(true));
                lists.push(method);
            }
        }
        let slot = self
            .tasks()
            .stream_slot(principal.tenant.as_str())
            .map_err(|r| r.to_rpc_error())?;
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let sub = json!({"io.modelcontextprotocol/subscriptionId": ctx.id});
        let _ = tx.try_send(protocol::notification(
            "notifications/subscriptions/acknowledged",
            json!({"notifications": ack, "_meta": sub}),
        ));
        let feed = feed.filter(|_| !watched.is_empty());
        let catalog = (!lists.is_empty()).then(|| self.catalog_changes.subscribe());
        let stream = Stream {
            store: self.tasks().store().clone(),
            principal: principal.clone(),
            watched,
            lists,
            sub,
            tx,
        };
        tokio::spawn(stream.forward(feed, catalog, slot, self.tasks().closing()));
        Ok(Reply::Stream(rx))
    }
}

/// One subscription stream: the tasks it watches and where their notifications go.
struct Stream {
    store: std::sync::Arc<dyn snodo_core::store::Store>,
    principal: Principal,
    watched: Vec<String>,
    /// The list-changed notifications it asked for.
    lists: Vec<&'static str>,
    sub: Value,
    tx: mpsc::Sender<Value>,
}

impl Stream {
    /// Sends the newest state of every watched task the feed says changed, and the
    /// list-changed notifications asked for at every catalog swap, until the client goes
    /// away or the server closes its streams.
    async fn forward(
        self,
        mut feed: Option<tokio::sync::broadcast::Receiver<snodo_core::store::Changed>>,
        mut catalog: Option<tokio::sync::broadcast::Receiver<()>>,
        slot: snodo_runner::budget::Slot,
        closing: tokio_util::sync::CancellationToken,
    ) {
        let Stream {
            store,
            principal,
            watched,
            lists,
            sub,
            tx,
        } = self;
        // The stream counts against the budgets until it ends.
        let _slot = slot;
        let closed = async {
            tokio::select! {
                () = tx.closed() => {}
                () = closing.cancelled() => {}
            }
        };
        tokio::pin!(closed);
        // Watched tasks changed since they were last sent, oldest mark first.
        let mut marked: std::collections::VecDeque<usize> = Default::default();
        let mark = |marked: &mut std::collections::VecDeque<usize>, i: usize| {
            if !marked.contains(&i) {
                marked.push_back(i);
            }
        };
        // List-changed notifications not sent yet (one of each, however many swaps).
        let mut lists_due: Vec<&'static str> = Vec::new();
        loop {
            let next_change = async {
                match feed.as_mut() {
                    Some(f) => f.recv().await,
                    None => std::future::pending().await,
                }
            };
            let next_swap = async {
                match catalog.as_mut() {
                    Some(c) => c.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut closed => return,
                swapped = next_swap => match swapped {
                    Ok(()) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for l in &lists {
                            if !lists_due.contains(l) {
                                lists_due.push(l);
                            }
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => catalog = None,
                },
                permit = tx.reserve(), if !lists_due.is_empty() => {
                    let Ok(permit) = permit else { return };
                    let method = lists_due.remove(0);
                    permit.send(protocol::notification(method, json!({"_meta": sub})));
                }
                changed = next_change => match changed {
                    Ok(snodo_core::store::Changed::Task(id)) => {
                        let id = id.to_string();
                        if let Some(i) = watched.iter().position(|w| *w == id) {
                            mark(&mut marked, i);
                        }
                    }
                    // Fell behind the feed, or the feed missed changes: every watched
                    // task may have changed.
                    Ok(snodo_core::store::Changed::Unknown)
                    | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for i in 0..watched.len() {
                            mark(&mut marked, i);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                permit = tx.reserve(), if !marked.is_empty() => {
                    let Ok(permit) = permit else { return };
                    let Some(i) = marked.pop_front() else { continue };
                    // Authorized on every send: a task that expired or was reaped is
                    // dropped. The task is read now, so the newest state goes out.
                    let Ok((_, task)) = store.authorize_read(&principal, &watched[i]).await else {
                        continue;
                    };
                    let Ok(params) = serde_json::to_value(wire::detailed_task(&task, &sub)) else {
                        continue;
                    };
                    permit.send(protocol::notification("notifications/tasks", params));
                }
            }
        }
    }
}
