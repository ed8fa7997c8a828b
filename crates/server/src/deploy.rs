//! Deployments on a serving node: the components the store's current deployment names,
//! loaded on this node's engine, and the catalog rebuilt and swapped whenever the
//! deployment changes (found by polling the store, and at once when another node
//! announces one on PostgreSQL).
//!
//! What serves is always the store's current deployment, so every node sharing a store
//! serves the same versions. A node's configured component files seed it: at start, a
//! node deploys its configured set when that exact set was never deployed before (a first
//! start, or files rebuilt since), and otherwise serves what is current (a node restarted
//! with the files of an earlier deployment does not roll the others back).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use snodo_core::model::{Deployment, RetryPolicy, component_digest};
use snodo_core::store::{Store, StoreError};
use snodo_runner::{Catalog, CatalogSource, CatalogTool, Catalogs, ComponentPolicy};
use snodo_wasm::{Component, ComponentLoader, EngineConfig, WasmEngine};
use tokio_util::sync::CancellationToken;

use crate::trust::{TrustCounters, TrustPolicy};

/// Why a deployment, a component or the settings of a deployer were refused. Each kind
/// means something different to a node: `serve` exits with a code of its own for each.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    /// The settings are wrong (a TTL shorter than the retries, a setting naming a tool no
    /// component provides, an unreadable watched directory).
    #[error("{0}")]
    Config(String),
    /// A component cannot be read, verified or loaded, or the wasm engine cannot be built.
    #[error("{0}")]
    Component(String),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Settings for one tool (or the defaults for all); `None` keeps what the tool says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolSettings {
    /// A pinned task mode.
    pub mode: Option<snodo_wasm::TaskMode>,
    /// The retry policy for its tasks.
    pub retry_policy: Option<RetryPolicy>,
    /// Task TTL in ms (0 = unlimited).
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval in ms.
    pub poll_interval_ms: Option<u64>,
    /// Per-execution limits.
    pub limits: Option<snodo_core::model::ExecutionLimits>,
    /// WASI grants.
    pub grants: Option<snodo_wasm::WasiGrants>,
    /// The token claims its guest is shown.
    pub claims: Option<Vec<String>>,
}

/// What a [`Deployer`] loads components and builds catalogs under: the part of a node's
/// configuration that deployments read. A reload replaces it as a whole.
#[derive(Debug, Clone)]
pub struct DeployerSettings {
    /// This node's identity (named in the notes of the deployments it makes).
    pub node: String,
    /// The configured component files.
    pub components: Vec<PathBuf>,
    /// Where precompiled components are cached.
    pub cache_dir: Option<PathBuf>,
    /// The WebAssembly engine (fuel metering is turned on when any tool sets fuel).
    pub engine: EngineConfig,
    /// TTL of created tasks.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: u64,
    /// Settings applied to every tool.
    pub defaults: ToolSettings,
    /// Settings by tool name (over the defaults).
    pub tool_settings: std::collections::BTreeMap<String, ToolSettings>,
    /// How long a guest may wait for input before its task is parked (the runner's
    /// `park_after`): a tool's TTL must outlive it.
    pub park_after: Duration,
    /// What recovery does with tasks pinned to a component version no longer deployed.
    pub component_policy: ComponentPolicy,
    /// How deployments reach this node.
    pub deploy: DeploySettings,
}

/// How deployments reach a serving node. Settings of `[deploy]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploySettings {
    /// How often the store is asked for a new deployment. Default 2 s: the bound on how
    /// long a node serves an old deployment (on PostgreSQL an announcement usually brings
    /// it within milliseconds).
    pub poll: Duration,
    /// How long a component the current deployment no longer names stays stored once no
    /// live task is pinned to it (a rollback within it needs nothing re-stored). Default
    /// 7 days.
    pub retention: Duration,
    /// How often this node collects components past their retention. Default 1 hour.
    pub collect_every: Duration,
    /// The keys components must be signed with (none by default: nothing checked).
    pub trust: TrustPolicy,
    /// A directory whose `.wasm` files are served beside the configured components: a
    /// changed, added or removed file is deployed at the next poll (for development).
    pub watch: Option<PathBuf>,
}

impl Default for DeploySettings {
    fn default() -> Self {
        Self {
            poll: Duration::from_secs(2),
            retention: Duration::from_secs(7 * 24 * 3_600),
            collect_every: Duration::from_secs(3_600),
            trust: TrustPolicy::default(),
            watch: None,
        }
    }
}

/// When a node deploys its configured component files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seed {
    /// At start: when that exact set was never deployed (a node restarted with the files
    /// of an earlier deployment does not roll the others back).
    AtStart,
    /// After its operator changed them (SIGHUP, the watched directory): when the current
    /// deployment is not that set.
    Changed,
}

/// Loads components on one engine and builds catalogs from them under the node's
/// settings.
pub struct Deployer {
    /// The settings catalogs are built under; replaced by a reload.
    opts: parking_lot::RwLock<DeployerSettings>,
    loader: ComponentLoader,
    trust: Arc<TrustCounters>,
}

/// The `.wasm` files in `dir`, sorted, each with what tells a change: its length and
/// modification time (and those of its signature).
pub fn watched(dir: &Path) -> Result<Vec<(PathBuf, String)>, DeployError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| DeployError::Config(format!("deploy.watch: {}: {e}", dir.display())))?;
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| format!("{}:{:?}", m.len(), m.modified().ok()))
            .unwrap_or_default()
    };
    let mut out: Vec<(PathBuf, String)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .map(|p| {
            let mark = format!("{}/{}", stamp(&p), stamp(&crate::trust::signature_path(&p)));
            (p, mark)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// A component file and the signature beside it (`<file>.sig`), if any.
pub fn read_signed(path: &Path) -> Result<(Vec<u8>, Option<Vec<u8>>), DeployError> {
    let bytes = std::fs::read(path).map_err(|e| {
        DeployError::Component(format!("{}: cannot read the file: {e}", path.display()))
    })?;
    let signature = crate::trust::signature_beside(path).map_err(DeployError::Component)?;
    Ok((bytes, signature))
}

impl Deployer {
    /// A deployer for `opts`: its engine (fuel metered when any tool sets fuel) and a
    /// loader that caches compiled code in `opts.cache_dir`.
    pub fn new(opts: &DeployerSettings) -> Result<Self, DeployError> {
        let mut engine = opts.engine.clone();
        // A configured fuel limit must take effect: meter fuel when any tool sets one.
        engine.fuel |= std::iter::once(&opts.defaults)
            .chain(opts.tool_settings.values())
            .any(|s| s.limits.is_some_and(|l| l.fuel.is_some()));
        let engine = WasmEngine::new(engine).map_err(DeployError::Component)?;
        let loader =
            ComponentLoader::new(engine, opts.cache_dir.clone()).map_err(DeployError::Component)?;
        Ok(Self {
            opts: parking_lot::RwLock::new(opts.clone()),
            loader,
            trust: Arc::default(),
        })
    }

    fn opts(&self) -> DeployerSettings {
        self.opts.read().clone()
    }

    /// The engine every component runs on.
    pub fn engine(&self) -> &WasmEngine {
        self.loader.engine()
    }

    /// Loads the configured component files.
    pub async fn load_files(&self) -> Result<Vec<Arc<Component>>, DeployError> {
        let mut out = Vec::new();
        for path in &self.opts().components {
            let (bytes, signature) = read_signed(path)?;
            out.push(self.load(path.clone(), bytes, signature.as_deref()).await?);
        }
        Ok(out)
    }

    /// The refusals of the trust policy so far.
    pub fn trust_counters(&self) -> &Arc<TrustCounters> {
        &self.trust
    }

    /// Checks `bytes` and `signature` against the trust policy (`deploy.trusted_keys`),
    /// counting a refusal.
    pub fn check_signature(
        &self,
        origin: &Path,
        bytes: &[u8],
        signature: Option<&[u8]>,
    ) -> Result<(), DeployError> {
        let policy = self.opts().deploy.trust;
        match policy.check(bytes, signature, &self.trust) {
            Ok(Some(key)) => {
                tracing::debug!(component = %origin.display(), key, "signature verified");
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(r) => Err(DeployError::Component(
                policy.explain(&origin.display().to_string(), r),
            )),
        }
    }

    /// Loads one component from its bytes (named by `origin` in messages), after the
    /// trust policy accepted them with `signature`.
    pub async fn load(
        &self,
        origin: PathBuf,
        bytes: Vec<u8>,
        signature: Option<&[u8]>,
    ) -> Result<Arc<Component>, DeployError> {
        self.check_signature(&origin, &bytes, signature)?;
        let started = Instant::now();
        let loaded = self.loader.load_bytes(origin.clone(), bytes).await;
        let component = loaded.map_err(|e| DeployError::Component(e.to_string()))?;
        let names: Vec<&str> = component.tools().iter().map(|t| t.name.as_str()).collect();
        let served = component.catalog();
        tracing::info!(
            component = %origin.display(),
            digest = %component.info().digest,
            tools = %names.join(", "),
            resources = served.resources.len() + served.templates.len(),
            prompts = served.prompts.len(),
            cache_hit = component.info().cache_hit,
            load_ms = started.elapsed().as_millis() as u64,
            "component loaded"
        );
        Ok(component)
    }

    /// The catalog `components` serve under the node's tool settings. `strict` refuses a
    /// setting naming a tool none of them provides (a configuration being checked); a
    /// deployment that drops a tool leaves its settings unused instead, with a warning.
    pub fn catalog_of(
        &self,
        components: &[Arc<Component>],
        strict: bool,
    ) -> Result<Catalog, DeployError> {
        let opts = &self.opts();
        let mut catalog = Catalog::new();
        catalog.set_component_policy(opts.component_policy);
        for component in components {
            for info in component.tools() {
                let s = opts.tool_settings.get(&info.name).unwrap_or(&opts.defaults);
                let ttl_ms = match s.ttl_ms {
                    Some(0) => None,
                    Some(t) => Some(t),
                    None => opts.ttl_ms,
                };
                let retry_policy = s.retry_policy.clone().unwrap_or_default();
                // The TTL runs from creation: it must outlive every retry delay plus the
                // time a guest may wait for input before it is parked, or a default setup
                // would reap work that is still going (decision 25).
                let must_outlive: u64 = retry_policy.delays_ms().iter().sum::<u64>()
                    + opts.park_after.as_millis() as u64;
                if let Some(ttl) = ttl_ms
                    && ttl <= must_outlive
                {
                    return Err(DeployError::Config(format!(
                        "tools.{}.ttl_ms: a TTL of {ttl} ms does not outlive the retry schedule plus runner.park_after_ms ({must_outlive} ms); tasks would be reaped while still running",
                        info.name
                    )));
                }
                catalog
                    .add(CatalogTool {
                        component: component.clone(),
                        info: info.clone(),
                        mode: s.mode,
                        retry_policy,
                        ttl_ms,
                        poll_interval_ms: s.poll_interval_ms.unwrap_or(opts.poll_interval_ms),
                        limits: s.limits.unwrap_or_default(),
                        grants: s.grants.clone().unwrap_or_default(),
                        claims: s.claims.clone().unwrap_or_default(),
                    })
                    .map_err(DeployError::Component)?;
            }
            // Resources and prompts run under the defaults' limits and grants.
            catalog
                .add_source(CatalogSource {
                    component: component.clone(),
                    limits: opts.defaults.limits.unwrap_or_default(),
                    grants: opts.defaults.grants.clone().unwrap_or_default(),
                })
                .map_err(DeployError::Component)?;
        }
        if let Some(unknown) = opts
            .tool_settings
            .keys()
            .find(|n| catalog.tool(n).is_none())
        {
            let why = crate::suggest::with_suggestion(
                format!("tools.{unknown}: no loaded component provides a tool named {unknown:?}"),
                unknown,
                catalog.tools().iter().map(|t| t.info.name.as_str()),
            );
            if strict {
                return Err(DeployError::Config(why));
            }
            tracing::warn!("{why}; the setting is unused");
        }
        Ok(catalog)
    }

    /// Takes `next` as the settings of the catalogs it builds from now on. Refused (the
    /// settings before are kept) when `next` cannot build a catalog from `components`: a
    /// tool setting that does not hold for them.
    pub fn reconfigure(
        &self,
        next: DeployerSettings,
        components: &[Arc<Component>],
    ) -> Result<(), DeployError> {
        let before = std::mem::replace(&mut *self.opts.write(), next);
        if let Err(e) = self.catalog_of(components, false) {
            *self.opts.write() = before;
            return Err(e);
        }
        Ok(())
    }

    /// Deploys the configured component files (and the watched directory's) when `when`
    /// says they are due; returns the deployment it made, if any.
    pub async fn seed(
        &self,
        store: &dyn Store,
        when: Seed,
    ) -> Result<Option<Deployment>, DeployError> {
        let opts = self.opts();
        let mut paths = opts.components.clone();
        if let Some(dir) = &opts.deploy.watch {
            paths.extend(watched(dir)?.into_iter().map(|(p, _)| p));
        }
        if paths.is_empty() {
            return Ok(None);
        }
        let mut files = Vec::new();
        for path in &paths {
            let (bytes, signature) = read_signed(path)?;
            files.push((path, component_digest(&bytes), bytes, signature));
        }
        let set: BTreeSet<&str> = files.iter().map(|(_, d, _, _)| d.as_str()).collect();
        let history = store
            .deployments(usize::MAX)
            .await
            .map_err(DeployError::Store)?;
        let current = history.first().map_or(0, |d| d.revision);
        let same = |d: &Deployment| {
            d.components
                .iter()
                .map(String::as_str)
                .collect::<BTreeSet<_>>()
                == set
        };
        let deployed = match when {
            Seed::AtStart => history.iter().any(same),
            Seed::Changed => history.first().is_some_and(same),
        };
        if deployed {
            return Ok(None);
        }
        // Checked before anything is stored: a component that does not load is refused
        // here, not on every node that would pick the deployment up.
        let mut digests = Vec::new();
        for (path, digest, bytes, signature) in files {
            self.load((*path).clone(), bytes.clone(), signature.as_deref())
                .await?;
            store
                .store_component(&bytes, signature.as_deref())
                .await
                .map_err(DeployError::Store)?;
            digests.push(digest);
        }
        let note = format!("configured components, deployed by node {}", opts.node);
        match store.deploy(&digests, &note, Some(current)).await {
            Ok(d) => {
                tracing::info!(revision = d.revision, "deployed the configured components");
                Ok(Some(d))
            }
            // Another node deployed first: what is current serves.
            Err(StoreError::Conflict { current }) => {
                tracing::info!(current, "another deployment came first; serving it");
                Ok(None)
            }
            Err(e) => Err(DeployError::Store(e)),
        }
    }

    /// Loads the components `digests` names from the store; `what` names who needs them
    /// in the error for one not stored.
    pub async fn load_stored(
        &self,
        store: &dyn Store,
        digests: &[String],
        what: &str,
    ) -> Result<Vec<Arc<Component>>, DeployError> {
        let mut out = Vec::new();
        for digest in digests {
            let stored = store
                .component(digest)
                .await
                .map_err(DeployError::Store)?
                .ok_or_else(|| {
                    DeployError::Component(format!(
                        "{what} names component {digest}, which is not stored"
                    ))
                })?;
            // Checked again here: whoever stored it, this node trusts its own keys.
            let origin = PathBuf::from(format!("store:{digest}"));
            out.push(
                self.load(origin, stored.bytes, stored.signature.as_deref())
                    .await?,
            );
        }
        Ok(out)
    }

    /// The catalog `deployment` serves.
    pub async fn catalog_for(
        &self,
        store: &dyn Store,
        deployment: &Deployment,
    ) -> Result<Catalog, DeployError> {
        let what = format!("deployment {}", deployment.revision);
        let components = self
            .load_stored(store, &deployment.components, &what)
            .await?;
        self.catalog_of(&components, false)
    }

    /// One catalog for each stored component live tasks are still pinned to that
    /// `serving` does not hold (what a restarted node needs to finish them): versions of
    /// one component provide the same tools, so each keeps its own.
    pub async fn pinned_elsewhere(
        &self,
        store: &dyn Store,
        serving: &[String],
    ) -> Result<Vec<Catalog>, DeployError> {
        let pinned: Vec<String> = store
            .components()
            .await
            .map_err(DeployError::Store)?
            .into_iter()
            .filter(|c| c.pinned > 0 && !serving.contains(&c.digest))
            .map(|c| c.digest)
            .collect();
        let components = self.load_stored(store, &pinned, "a pinned task").await?;
        components
            .iter()
            .map(|c| self.catalog_of(std::slice::from_ref(c), false))
            .collect()
    }
}

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
}

/// Why a node following deployments woke up.
enum Wake {
    /// It is stopping.
    Stop,
    /// Time to look at the store (the poll, or an announcement).
    Look,
    /// A reloaded configuration arrived.
    Reload(Box<DeployerSettings>),
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
    changed: impl Fn(&Deployment) + Send + 'static,
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
                    changed(&d);
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
                        changed(&d);
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

/// What a component provides that no other component of a deployment may: its tools,
/// resources, resource templates and prompts, each as `kind:name`.
pub fn provides(component: &Component) -> BTreeSet<String> {
    let served = component.catalog();
    component
        .tools()
        .iter()
        .map(|t| format!("tool:{}", t.name))
        .chain(
            served
                .resources
                .iter()
                .map(|r| format!("resource:{}", r.uri)),
        )
        .chain(
            served
                .templates
                .iter()
                .map(|t| format!("template:{}", t.template.as_str())),
        )
        .chain(served.prompts.iter().map(|p| format!("prompt:{}", p.name)))
        .collect()
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
