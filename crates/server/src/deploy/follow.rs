//! A node's deployments over time: the catalogs it starts with, and following the store
//! (polling, announcements, reloads, the watched directory, collection) until it stops.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use snodo_core::model::Deployment;
use snodo_core::store::Store;
use snodo_runner::{Catalog, Catalogs};
use tokio_util::sync::CancellationToken;

use super::{DeployError, DeploySettings, Deployer, DeployerSettings, Seed, watched};

/// The catalogs a node starts with: the configured files deployed if new, the current
/// deployment's components, and those live tasks are still pinned to. Returns the
/// revision served (0: nothing deployed).
pub async fn start(
    deployer: &Deployer,
    store: &dyn Store,
) -> Result<(Arc<Catalogs>, u64), DeployError> {
    deployer.seed(store, Seed::AtStart).await?;
    let current = store.deployment(None).await.map_err(DeployError::Store)?;
    let (catalog, revision) = match &current {
        Some(d) => match deployer.catalog_for(store, d).await {
            Ok(catalog) => {
                tracing::info!(
                    revision = d.revision,
                    components = d.components.len(),
                    "serving deployment"
                );
                (catalog, d.revision)
            }
            // What another node or `snodo deploy` stored may be what this node refuses
            // (a component unsigned by its keys, one it cannot load): it serves the newest
            // deployment it can, as a running node that refuses a deployment keeps the one
            // before, rather than not starting at all. The refused revision counts as seen.
            Err(DeployError::Component(why)) => {
                let Some((catalog, served)) = newest_loadable(deployer, store, d.revision).await?
                else {
                    return Err(DeployError::Component(why));
                };
                tracing::error!(
                    revision = d.revision,
                    serving = served,
                    error = %why,
                    "the current deployment cannot be loaded here; serving the newest one that can"
                );
                (catalog, d.revision)
            }
            Err(e) => return Err(e),
        },
        None => (deployer.catalog_of(&[], false)?, 0),
    };
    let digests = catalog.digests();
    let catalogs = Arc::new(Catalogs::new(Arc::new(catalog)));
    for pinned in deployer.pinned_elsewhere(store, &digests).await? {
        catalogs.retain(Arc::new(pinned));
    }
    Ok((catalogs, revision))
}

/// How many deployments before a refused one a starting node tries.
const FALLBACK_DEPLOYMENTS: usize = 16;

/// The catalog of the newest deployment before `refused` that loads on this node, and its
/// revision; `None` when none of the [`FALLBACK_DEPLOYMENTS`] before it does.
async fn newest_loadable(
    deployer: &Deployer,
    store: &dyn Store,
    refused: u64,
) -> Result<Option<(Catalog, u64)>, DeployError> {
    let earlier = store
        .deployments(FALLBACK_DEPLOYMENTS + 1)
        .await
        .map_err(DeployError::Store)?;
    for d in earlier.iter().filter(|d| d.revision < refused) {
        match deployer.catalog_for(store, d).await {
            Ok(catalog) => return Ok(Some((catalog, d.revision))),
            Err(DeployError::Component(why)) => {
                tracing::warn!(revision = d.revision, error = %why, "an earlier deployment cannot be loaded here either");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// What a node hears besides its polling: other nodes' deployment announcements, and
/// the settings of configurations reloaded by its operator (SIGHUP).
pub struct Inbox {
    /// A deployment was announced (`None`, or a closed channel: nothing announces).
    pub deployed: Option<tokio::sync::mpsc::Receiver<()>>,
    /// A reloaded configuration, already validated as a file.
    pub reloads: Option<tokio::sync::mpsc::Receiver<DeployerSettings>>,
    /// Told when what the deployer adds to every catalog changed (the upstreams' tools):
    /// the catalog serving now is built again, and its clients told when `true`.
    pub rebuilds: Option<tokio::sync::mpsc::Receiver<bool>>,
}

/// Why a node following deployments woke up.
enum Wake {
    /// It is stopping.
    Stop,
    /// Time to look at the store (the poll, or an announcement).
    Look,
    /// A reloaded configuration arrived.
    Reload(Box<DeployerSettings>),
    /// The serving catalog is to be built again from the same components (its clients
    /// told when `true`).
    Rebuild(bool),
}

impl Inbox {
    /// Waits for the next reason to act: a stop, an announcement, a reload, or `poll`
    /// having passed. A channel whose senders are gone is not listened to again (a
    /// closed channel answers at once, and would make the loop spin).
    async fn next(&mut self, poll: Duration, stop: &CancellationToken) -> Wake {
        let sleep = tokio::time::sleep(poll);
        tokio::pin!(sleep);
        loop {
            let announced = async {
                match self.deployed.as_mut() {
                    Some(d) => d.recv().await,
                    None => std::future::pending().await,
                }
            };
            let reload = async {
                match self.reloads.as_mut() {
                    Some(r) => r.recv().await,
                    None => std::future::pending().await,
                }
            };
            let rebuild = async {
                match self.rebuilds.as_mut() {
                    Some(r) => r.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => return Wake::Stop,
                () = &mut sleep => return Wake::Look,
                heard = announced => match heard {
                    Some(()) => return Wake::Look,
                    // Nothing announces (a store that is not shared): polling alone.
                    None => self.deployed = None,
                },
                next = reload => match next {
                    Some(next) => return Wake::Reload(Box::new(next)),
                    None => self.reloads = None,
                },
                asked = rebuild => match asked {
                    Some(tell) => return Wake::Rebuild(tell),
                    None => self.rebuilds = None,
                },
            }
        }
    }
}

/// Applies a reloaded configuration: its tool settings to the catalog serving now, its
/// component files as a new deployment when they are a new set. Returns the deployment
/// then serving, or `None` when the configuration was refused (what served before still
/// does).
async fn reload_settings(
    deployer: &Deployer,
    store: &dyn Store,
    catalogs: &Catalogs,
    next: DeployerSettings,
) -> Option<Deployment> {
    let serving = catalogs.current().components();
    let before = deployer.opts();
    if let Err(e) = deployer.reconfigure(next, &serving) {
        tracing::error!(error = %e, "the reloaded configuration was refused; still serving the one before");
        return None;
    }
    // Its component files must load (and pass the trust policy) like its settings.
    if let Err(e) = deployer.seed(store, Seed::Changed).await {
        *deployer.opts.write() = before;
        tracing::error!(error = %e, "the reloaded configuration was refused; still serving the one before");
        return None;
    }
    let current = match store.deployment(None).await {
        Ok(Some(d)) => d,
        Ok(None) => return None,
        Err(e) => {
            tracing::error!(error = %e, "the current deployment could not be read");
            return None;
        }
    };
    match deployer.catalog_for(store, &current).await {
        Ok(next) => {
            catalogs.swap(Arc::new(next));
            tracing::info!(revision = current.revision, "configuration reloaded");
            Some(current)
        }
        Err(e) => {
            tracing::error!(revision = current.revision, error = %e, "the reloaded configuration cannot serve the current deployment; still serving the one before");
            None
        }
    }
}

/// What a node follows deployments with.
pub struct Following {
    /// Loads what a deployment names.
    pub deployer: Arc<Deployer>,
    /// The store the deployments are in.
    pub store: Arc<dyn Store>,
    /// What serves, swapped.
    pub catalogs: Arc<Catalogs>,
    /// The revision serving now.
    pub revision: u64,
    /// Polling and retention.
    pub settings: DeploySettings,
}

/// Follows the store's deployments until `stop`: at every `nudge` and every
/// `settings.poll`, a newer deployment is loaded and swapped in (a call in flight
/// finishes on the catalog it took); `changed` hears of each swap. Components past their
/// retention are collected every `settings.collect_every`, and retained catalogs no live
/// task needs are dropped.
pub async fn follow(
    node: Following,
    mut inbox: Inbox,
    changed: impl Fn() + Send + 'static,
    stop: CancellationToken,
) {
    let Following {
        deployer,
        store,
        catalogs,
        mut revision,
        mut settings,
    } = node;
    let mut collected = Instant::now();
    let mut seen = watch_marks(&deployer);
    loop {
        match inbox.next(settings.poll, &stop).await {
            Wake::Stop => return,
            Wake::Look => {}
            Wake::Reload(next) => {
                let deploy = next.deploy.clone();
                if let Some(d) = reload_settings(&deployer, &*store, &catalogs, *next).await {
                    settings = deploy;
                    revision = d.revision;
                    changed();
                }
                continue;
            }
            Wake::Rebuild(tell) => {
                let serving = catalogs.current().components();
                match deployer.catalog_of(&serving, false) {
                    Ok(next) => {
                        // The same deployment: nothing pinned to the catalog it replaces
                        // needs it kept.
                        catalogs.replace(Arc::new(next));
                        tracing::info!(revision, "the upstreams' tools changed; serving them");
                        if tell {
                            changed();
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "the upstreams' tools cannot be served with this configuration; still serving the ones before");
                    }
                }
                continue;
            }
        }
        // A watched directory that changed is deployed like configured files.
        let marks = watch_marks(&deployer);
        if marks != seen {
            seen = marks;
            if let Err(e) = deployer.seed(&*store, Seed::Changed).await {
                tracing::error!(error = %e, "the watched directory's components were refused; still serving the ones before");
            }
        }
        match store.deployment(None).await {
            Ok(Some(d)) if d.revision > revision => {
                match load_within(&deployer, &*store, &d, &stop).await {
                    None => {
                        // Stopping, or the load overran: the next look tries it again.
                        if stop.is_cancelled() {
                            return;
                        }
                    }
                    Some(Ok(next)) => {
                        catalogs.swap(Arc::new(next));
                        revision = d.revision;
                        tracing::info!(revision, components = d.components.len(), note = %d.note, "deployment swapped in");
                        changed();
                    }
                    Some(Err(e)) => {
                        tracing::error!(revision = d.revision, error = %e, "a deployment could not be loaded; still serving the one before");
                        // Not retried until the next deployment: the same bytes fail the
                        // same way.
                        revision = d.revision;
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "the current deployment could not be read"),
        }
        if let Ok(components) = store.components().await {
            catalogs.prune(|d| components.iter().any(|c| c.digest == d && c.pinned > 0));
        }
        if collected.elapsed() >= settings.collect_every {
            collected = Instant::now();
            match store
                .collect_components(settings.retention.as_millis() as u64)
                .await
            {
                Ok(gone) if !gone.is_empty() => tracing::info!(
                    components = gone.len(),
                    "collected components past their retention"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "collecting components failed"),
            }
        }
    }
}

/// The longest the follower spends loading one deployment: compiling what the cache does
/// not hold and each component's description (itself bounded by the load wall clock). A
/// load past it is abandoned and tried again at the next look, so a node keeps serving,
/// following and stopping whatever a deployment's components do.
pub const DEPLOYMENT_LOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The catalog `deployment` serves, unless `stop` comes first (`None`) or the load passes
/// [`DEPLOYMENT_LOAD_TIMEOUT`] (`None`, logged).
async fn load_within(
    deployer: &Deployer,
    store: &dyn Store,
    deployment: &Deployment,
    stop: &CancellationToken,
) -> Option<Result<Catalog, DeployError>> {
    tokio::select! {
        () = stop.cancelled() => None,
        loaded = tokio::time::timeout(DEPLOYMENT_LOAD_TIMEOUT, deployer.catalog_for(store, deployment)) => match loaded {
            Ok(result) => Some(result),
            Err(_) => {
                tracing::error!(
                    revision = deployment.revision,
                    seconds = DEPLOYMENT_LOAD_TIMEOUT.as_secs(),
                    "loading a deployment took too long; still serving the one before, trying again at the next look"
                );
                None
            }
        },
    }
}

/// What the watched directory holds now (nothing when none is configured or it cannot be
/// read: the error is logged when a deployment is attempted).
fn watch_marks(deployer: &Deployer) -> Vec<(PathBuf, String)> {
    match &deployer.opts().deploy.watch {
        Some(dir) => watched(dir).unwrap_or_default(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Closed channels (a store that announces nothing, a server without reloads) leave
    /// the poll alone to wake the node: they must not wake it at once, again and again.
    #[tokio::test(start_paused = true)]
    async fn closed_channels_leave_the_poll_to_wake_the_node() {
        let (announce, deployed) = tokio::sync::mpsc::channel(1);
        let (reload, reloads) = tokio::sync::mpsc::channel(1);
        drop((announce, reload));
        let mut inbox = Inbox {
            deployed: Some(deployed),
            reloads: Some(reloads),
            rebuilds: None,
        };
        let stop = CancellationToken::new();
        let poll = Duration::from_secs(60);
        let early = tokio::time::timeout(poll / 2, inbox.next(poll, &stop)).await;
        assert!(early.is_err(), "woke before the poll");
        assert!(inbox.deployed.is_none() && inbox.reloads.is_none());
        assert!(matches!(inbox.next(poll, &stop).await, Wake::Look));
        stop.cancel();
        assert!(matches!(inbox.next(poll, &stop).await, Wake::Stop));
    }

    /// An announcement wakes the node before the poll.
    #[tokio::test(start_paused = true)]
    async fn an_announcement_wakes_the_node_at_once() {
        let (announce, deployed) = tokio::sync::mpsc::channel(1);
        let mut inbox = Inbox {
            deployed: Some(deployed),
            reloads: None,
            rebuilds: None,
        };
        announce.send(()).await.expect("send");
        let stop = CancellationToken::new();
        let woke = tokio::time::timeout(
            Duration::from_millis(1),
            inbox.next(Duration::from_secs(60), &stop),
        )
        .await;
        assert!(matches!(woke, Ok(Wake::Look)));
    }
}
