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

mod follow;
pub mod operate;
mod settings;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use snodo_core::model::{Deployment, component_digest};
use snodo_core::store::{Store, StoreError};
use snodo_runner::{Catalog, CatalogSource, CatalogTool};
use snodo_wasm::{Component, ComponentLoader, WasmEngine};

use crate::trust::TrustCounters;

pub use follow::{DEPLOYMENT_LOAD_TIMEOUT, Following, Inbox, follow, start};
pub use settings::{DeployError, DeploySettings, DeployerSettings, ToolSettings};

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
    /// The upstream servers' tools every catalog serves beside a deployment's.
    upstream: parking_lot::RwLock<Vec<UpstreamTool>>,
    /// The gateway component, once loaded: it serves no tool of its own.
    gateway: parking_lot::RwLock<Option<Arc<Component>>>,
    /// What listing the upstreams did, for the metrics.
    upstream_counters: Arc<UpstreamCounters>,
    /// The tool a served name stands for when no listing names it yet (an upstream not
    /// listed since this node started): work created for it before runs all the same.
    unlisted: parking_lot::RwLock<Option<Unlisted>>,
}

/// What changed in the upstream tools handed to a [`Deployer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamChange {
    /// Nothing.
    None,
    /// What they run under (a renewed credential): clients see nothing new.
    Grants,
    /// What they are: clients are told.
    Tools,
}

/// Listings of each upstream by outcome, and the tool changes it announced, by upstream
/// name (`snodo_upstream_listings_total`, `snodo_upstream_changes_total`).
#[derive(Debug, Default)]
pub struct UpstreamCounters(parking_lot::Mutex<BTreeMap<String, [u64; 3]>>);

impl UpstreamCounters {
    /// A listing of `upstream` that succeeded (`listed`) or failed.
    pub fn listing(&self, upstream: &str, listed: bool) {
        self.0.lock().entry(upstream.to_owned()).or_default()[usize::from(!listed)] += 1;
    }

    /// `upstream` announced that its tools changed.
    pub fn change(&self, upstream: &str) {
        self.0.lock().entry(upstream.to_owned()).or_default()[2] += 1;
    }

    /// Per upstream: listings that succeeded, listings that failed, changes announced.
    pub fn snapshot(&self) -> BTreeMap<String, [u64; 3]> {
        self.0.lock().clone()
    }
}

/// Finds the upstream tool a name stands for without a listing ([`Deployer::set_unlisted`]).
pub type Unlisted = Arc<dyn Fn(&str) -> Option<UpstreamTool> + Send + Sync>;

/// An upstream MCP server's tool, served on the gateway component: what the upstream
/// listed, and what the component is told and allowed for it. The operator's settings of
/// the name it is served under apply over these as they do to any tool.
#[derive(Clone)]
pub struct UpstreamTool {
    /// The gateway component.
    pub component: Arc<Component>,
    /// The tool under its served name, as the upstream described it.
    pub info: snodo_wasm::ToolInfo,
    /// What the component reads to know where the name leads.
    pub env: Vec<(String, String)>,
    /// The upstream's origin alone, and its credential, injected by the host. The tool's
    /// own outbound limits and journal setting replace this grant's.
    pub http: Arc<snodo_wasm::outbound::HttpGrant>,
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
    let signature =
        crate::trust::signature_beside(path).map_err(|e| DeployError::Component(e.to_string()))?;
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
        let engine = WasmEngine::new(engine).map_err(|e| DeployError::Component(e.to_string()))?;
        let loader = ComponentLoader::new(engine, opts.cache_dir.clone())
            .map_err(|e| DeployError::Component(e.to_string()))?;
        Ok(Self {
            opts: parking_lot::RwLock::new(opts.clone()),
            loader,
            trust: Arc::default(),
            upstream: parking_lot::RwLock::default(),
            gateway: parking_lot::RwLock::default(),
            unlisted: parking_lot::RwLock::default(),
            upstream_counters: Arc::default(),
        })
    }

    /// Serves `tools` beside every deployment's from the next catalog built (replacing
    /// the upstream tools before): whether anything differs from those, and whether what
    /// clients see does (a renewed credential changes only the grants).
    pub fn set_upstream_tools(&self, tools: Vec<UpstreamTool>) -> UpstreamChange {
        let mut held = self.upstream.write();
        let same_len = held.len() == tools.len();
        let seen = same_len && held.iter().zip(&tools).all(|(a, b)| a.info == b.info);
        let same = seen
            && held.iter().zip(&tools).all(|(a, b)| {
                a.env == b.env && a.http == b.http && Arc::ptr_eq(&a.component, &b.component)
            });
        *held = tools;
        match (same, seen) {
            (true, _) => UpstreamChange::None,
            (false, true) => UpstreamChange::Grants,
            (false, false) => UpstreamChange::Tools,
        }
    }

    /// What listing the upstreams did.
    pub fn upstream_counters(&self) -> &Arc<UpstreamCounters> {
        &self.upstream_counters
    }

    /// Sets where work finds an upstream tool no listing names yet.
    pub fn set_unlisted(&self, unlisted: Unlisted) {
        *self.unlisted.write() = Some(unlisted);
    }

    /// Whether `component` is the gateway, which serves no tool of its own.
    fn is_gateway(&self, component: &Arc<Component>) -> bool {
        (self.gateway.read().as_ref()).is_some_and(|g| Arc::ptr_eq(g, component))
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
        let policy = self.opts().deploy.trust();
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

    /// Loads the gateway component shipped beside the binary. The trust policy is for what
    /// is deployed; this file is trusted as the binary is.
    pub async fn load_gateway(&self, path: &Path) -> Result<Arc<Component>, DeployError> {
        let bytes = std::fs::read(path).map_err(|e| {
            DeployError::Component(format!(
                "the gateway component {}: cannot read the file: {e}",
                path.display()
            ))
        })?;
        let loaded = self.loader.load_bytes(path.to_path_buf(), bytes).await;
        let component =
            loaded.map_err(|e| DeployError::Component(format!("the gateway component: {e}")))?;
        *self.gateway.write() = Some(component.clone());
        Ok(component)
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
        let upstream = self.upstream.read().clone();
        let own = (components.iter())
            .filter(|c| !self.is_gateway(c))
            .flat_map(|c| c.tools().iter().map(move |info| (c, info, None)));
        let served = (upstream.iter()).map(|t| (&t.component, &t.info, Some(t)));
        for (component, info, upstream) in own.chain(served) {
            // An upstream names its tools itself: one that takes a name already served
            // is left out, never the deployment refused for it.
            if upstream.is_some() && catalog.tool(&info.name).is_some() {
                tracing::warn!(tool = %info.name, "an upstream tool takes a name already served; it is not served (change its upstream's prefix)");
                continue;
            }
            catalog
                .add(catalog_tool(opts, component, info, upstream)?)
                .map_err(|e| DeployError::Component(e.to_string()))?;
        }
        if let Some(unlisted) = self.unlisted.read().clone() {
            let opts = opts.clone();
            catalog.set_fallback(Arc::new(move |name: &str| {
                let u = unlisted(name)?;
                catalog_tool(&opts, &u.component, &u.info, Some(&u)).ok()
            }));
        }
        for component in components.iter().filter(|c| !self.is_gateway(c)) {
            // Resources and prompts run under the defaults' limits and grants.
            catalog
                .add_source(CatalogSource {
                    component: component.clone(),
                    limits: opts.defaults.limits.unwrap_or_default(),
                    grants: opts.defaults.grants.clone().unwrap_or_default(),
                })
                .map_err(|e| DeployError::Component(e.to_string()))?;
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
            // The configured files were deployed once, and another deployment is current
            // since (a later deploy, or a rollback): the node serves the current one, and
            // says so, so that nobody expects it to serve its files.
            if matches!(when, Seed::AtStart)
                && let Some(now) = history.first()
                && !same(now)
                && let Some(configured) = history.iter().find(|d| same(d))
            {
                tracing::warn!(
                    configured = configured.revision,
                    serving = now.revision,
                    "this node's configured components are deployment {}, an earlier one: it \
                     serves the current deployment {} (the store's). `snodo rollback --config FILE --to {}` \
                     serves the configured ones again; `snodo deploy` makes other files current",
                    configured.revision,
                    now.revision,
                    configured.revision
                );
            }
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

/// The catalog entry of `info` on `component` under `opts` (the settings of its name, over
/// the defaults), with an upstream's environment and grant when it is one's.
fn catalog_tool(
    opts: &DeployerSettings,
    component: &Arc<Component>,
    info: &snodo_wasm::ToolInfo,
    upstream: Option<&UpstreamTool>,
) -> Result<CatalogTool, DeployError> {
    let s = opts.tool_settings.get(&info.name).unwrap_or(&opts.defaults);
    let ttl_ms = match s.ttl_ms {
        Some(0) => None,
        Some(t) => Some(t),
        None => opts.ttl_ms,
    };
    let retry_policy = s.retry_policy.clone().unwrap_or_default();
    // The TTL runs from creation: it must outlive every retry delay plus the time a guest
    // may wait for input before it is parked, or a default setup would reap work that is
    // still going (decision 25).
    let must_outlive: u64 =
        retry_policy.delays_ms().iter().sum::<u64>() + opts.park_after.as_millis() as u64;
    if let Some(ttl) = ttl_ms
        && ttl <= must_outlive
    {
        return Err(DeployError::Config(format!(
            "tools.{}.ttl_ms: a TTL of {ttl} ms does not outlive the retry schedule plus runner.park_after_ms ({must_outlive} ms); tasks would be reaped while still running",
            info.name
        )));
    }
    let mut grants = s.grants.clone().unwrap_or_default();
    if let Some(u) = upstream {
        grants = upstream_grants(grants, s.outbound.as_ref(), u);
    }
    Ok(CatalogTool {
        component: component.clone(),
        info: info.clone(),
        mode: s.mode,
        retry_policy,
        ttl_ms,
        poll_interval_ms: s.poll_interval_ms.unwrap_or(opts.poll_interval_ms),
        limits: s.limits.unwrap_or_default(),
        grants,
        claims: s.claims.clone().unwrap_or_default(),
        handle_after_ms: s.handle_after_ms,
    })
}

/// An upstream tool's grants: the operator's for its served name, with the environment
/// that tells the gateway where the name leads, and the upstream's origin as the only
/// host it may reach (with its credential). Its limits are the gateway's, with each one
/// the operator wrote (`written`, at `[defaults]` or for the served name) in its place,
/// and the tool's journal setting.
fn upstream_grants(
    mut grants: snodo_wasm::WasiGrants,
    written: Option<&snodo_wasm::outbound::ToolOutbound>,
    tool: &UpstreamTool,
) -> snodo_wasm::WasiGrants {
    grants
        .env
        .retain(|(k, _)| !tool.env.iter().any(|(t, _)| t == k));
    grants.env.extend(tool.env.iter().cloned());
    let http = upstream_http(&tool.http, written, grants.http.as_deref());
    // Under the journal the host keys each request of a task itself; the component keys
    // its call only where the host does not.
    let journal = if http.journal { "true" } else { "false" };
    grants.env.retain(|(k, _)| k != "SNODO_UPSTREAM_JOURNAL");
    grants
        .env
        .push(("SNODO_UPSTREAM_JOURNAL".into(), journal.into()));
    grants.http = Some(Arc::new(http));
    grants
}

/// The gateway's grant for an upstream (`base`) under what the operator set for the served
/// name: each limit written in place of the gateway's, the tool's journal setting (`own`,
/// resolved), and the secrets its environment carries still scrubbed.
fn upstream_http(
    base: &snodo_wasm::outbound::HttpGrant,
    written: Option<&snodo_wasm::outbound::ToolOutbound>,
    own: Option<&snodo_wasm::outbound::HttpGrant>,
) -> snodo_wasm::outbound::HttpGrant {
    let mut http = base.clone();
    if let Some(w) = written {
        w.apply_to(&mut http.limits);
    }
    if let Some(own) = own {
        http.journal = own.journal;
        http.scrub.extend(own.scrub.iter().cloned());
        http.scrub.dedup();
    }
    http
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

#[cfg(test)]
mod tests {
    use super::*;
    use snodo_wasm::outbound::{AllowList, HttpGrant, OutboundLimits, Secret, ToolOutbound};

    #[test]
    fn an_upstream_grant_keeps_the_gateway_limits_the_operator_did_not_write() {
        let mut base = HttpGrant::new(AllowList::parse(&["http://127.0.0.1:9"]).expect("list"));
        base.limits.max_requests = crate::gateway::UPSTREAM_MAX_REQUESTS;
        base.retry_transient = true;
        let defaults = OutboundLimits::default();
        // Nothing written: the gateway's own limits, whatever the tool's resolved ones are.
        let http = upstream_http(&base, None, None);
        assert_eq!(
            http.limits.max_requests,
            crate::gateway::UPSTREAM_MAX_REQUESTS
        );
        assert!(http.journal && http.retry_transient);
        // A value written is taken even when it equals the host's default.
        let written = ToolOutbound {
            max_requests: Some(defaults.max_requests),
            max_response_bytes: Some(4096),
            ..ToolOutbound::default()
        };
        let mut own = HttpGrant::new(AllowList::default());
        own.journal = false;
        own.limits.max_requests = 1;
        own.scrub.push(Secret::new("from-the-environment"));
        let http = upstream_http(&base, Some(&written), Some(&own));
        assert_eq!(http.limits.max_requests, defaults.max_requests);
        assert_eq!(http.limits.max_response_bytes, 4096);
        assert_eq!(http.limits.connect_timeout, defaults.connect_timeout);
        assert!(!http.journal, "the tool's journal setting");
        assert_eq!(http.allowed, base.allowed, "the upstream's origin alone");
        assert!(
            http.scrub
                .iter()
                .any(|s| s.expose() == "from-the-environment")
        );
    }
}
