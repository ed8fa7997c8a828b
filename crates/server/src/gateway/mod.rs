//! Upstream MCP servers' tools served as this host's (docs/gateway.md, decision 37): each
//! `[[upstreams]]` entry is listed at start and every `gateway.refresh_ms`, and its tools
//! are handed to the deployer as tools of the gateway component, which every catalog then
//! serves beside the deployment's. A call of one is a task's execution like any other: the
//! component sends it upstream through the host's outbound sender, under the grants built
//! here (the upstream's origin as the only host, its credential injected by the host) and
//! the operator's settings of the served name.
//!
//! Listing is discovery, not a call: the host sends it itself ([`list`]). An upstream that
//! cannot be listed serves nothing until it can (its earlier listing, if any, stays).

mod list;
mod oauth;
mod settings;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use snodo_wasm::outbound::{AllowList, AllowedHost, HttpGrant, Injection, Outbound, Secret};
use snodo_wasm::{Component, TaskMode, ToolInfo};
use tokio_util::sync::CancellationToken;

use crate::deploy::{DeployError, Deployer, UpstreamChange, UpstreamTool};

pub use list::{Listed, list};
pub use settings::{
    GatewaySettings, OAuthClient, OAuthSection, PROTOCOLS, Upstream, UpstreamSection,
    same_but_credentials,
};

/// Where the gateway component is looked for when `gateway.component` is not set: beside
/// the binary (a release archive's `components/`), in `../share/snodo/components/` from it
/// (the image's layout), then where the build puts it.
pub fn default_component() -> Option<PathBuf> {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from));
    let installed = dir
        .into_iter()
        .flat_map(|d| [d.join("components"), d.join("../share/snodo/components")]);
    let built = PathBuf::from("target/guests/wasm32-wasip2/release");
    installed
        .chain([built])
        .map(|d| d.join("gateway.wasm"))
        .find(|p| p.is_file())
}

/// The upstreams of a node, their last listings, and the component their tools run on.
pub struct Gateway {
    deployer: Arc<Deployer>,
    outbound: Arc<Outbound>,
    component: Arc<Component>,
    /// The upstreams as configured; a reload may replace their credentials, nothing else
    /// ([`Gateway::rotate`]), so their number and order never change.
    upstreams: Upstreams,
    /// Wakes [`Gateway::run`] for a listing at once (credentials were rotated).
    wake: tokio::sync::Notify,
    settings: GatewaySettings,
    /// The last listing of each upstream that could be listed, by name.
    listed: parking_lot::Mutex<BTreeMap<String, Listed>>,
    /// The current access token of each upstream with `oauth`, by name.
    tokens: Tokens,
}

/// The current access token of each upstream with `oauth`, by name: shared with the
/// routes of work before a listing.
type Tokens = Arc<parking_lot::Mutex<BTreeMap<String, oauth::Token>>>;

/// The upstreams with their current credentials: shared with the routes of work before a
/// listing.
type Upstreams = Arc<parking_lot::RwLock<Arc<Vec<Upstream>>>>;

/// What a reloaded configuration's upstreams did to those served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rotation {
    /// Nothing changed.
    Same,
    /// Only credentials changed, and these upstreams' were taken at once.
    Rotated(Vec<String>),
    /// Something else changed too (an upstream added, removed, or moved elsewhere): the
    /// node takes it at its next start.
    NeedsRestart,
}

impl Gateway {
    /// Loads the gateway component and lists every upstream once (those that cannot be
    /// listed are logged, and tried again by [`Gateway::run`]); their tools are the
    /// deployer's from the next catalog it builds.
    pub async fn start(
        deployer: Arc<Deployer>,
        outbound: Arc<Outbound>,
        upstreams: Vec<Upstream>,
        settings: GatewaySettings,
    ) -> Result<Arc<Self>, DeployError> {
        let path = match &settings.component {
            Some(p) => p.clone(),
            None => default_component().ok_or_else(|| {
                DeployError::Config(
                    "gateway.component: no gateway component beside the binary \
                     (components/gateway.wasm) or in the build; set it"
                        .into(),
                )
            })?,
        };
        let component = deployer.load_gateway(&path).await?;
        let tokens = Tokens::default();
        let upstreams: Upstreams = Arc::new(parking_lot::RwLock::new(Arc::new(upstreams)));
        deployer.set_unlisted(unlisted(
            component.clone(),
            upstreams.clone(),
            tokens.clone(),
        ));
        let gateway = Arc::new(Self {
            deployer,
            outbound,
            component,
            upstreams,
            wake: tokio::sync::Notify::new(),
            settings,
            listed: parking_lot::Mutex::default(),
            tokens,
        });
        gateway.refresh().await;
        Ok(gateway)
    }

    /// Lists every upstream again and hands the tools to the deployer: what changed (the
    /// catalog must then be built again), and whether every upstream answered.
    pub async fn refresh(&self) -> (UpstreamChange, bool) {
        let timeout = self.settings.list_timeout;
        self.renew_tokens().await;
        let upstreams = self.upstreams();
        let credentials: Vec<Option<Secret>> =
            upstreams.iter().map(|u| self.credential(u)).collect();
        let listings = futures_util::future::join_all(
            (upstreams.iter().zip(&credentials))
                .map(|(u, c)| list(&self.outbound, u, c.as_ref(), timeout)),
        )
        .await;
        let mut all = true;
        {
            let mut listed = self.listed.lock();
            for (u, got) in upstreams.iter().zip(listings) {
                let name = &u.section.name;
                self.deployer.upstream_counters().listing(name, got.is_ok());
                match got {
                    Ok(l) => {
                        if listed.get(name) != Some(&l) {
                            tracing::info!(upstream = %name, protocol = l.protocol, tools = l.tools.len(), "upstream listed");
                        }
                        listed.insert(name.clone(), l);
                    }
                    Err(why) => {
                        all = false;
                        let why = self.scrubbed(u, why);
                        tracing::warn!(upstream = %name, url = %u.section.url, error = %why, "the upstream could not be listed; its tools are served as last listed, if ever");
                    }
                }
            }
        }
        let tools = self.tools();
        (self.deployer.set_upstream_tools(tools), all)
    }

    /// The upstreams with their current credentials.
    fn upstreams(&self) -> Arc<Vec<Upstream>> {
        self.upstreams.read().clone()
    }

    /// Takes the credentials of `next` (a reloaded configuration's upstreams) when nothing
    /// else of them changed: the next listing, change stream and call of each upstream
    /// whose credential changed carry the new one (an OAuth client's next token is asked
    /// for with its new secret at once); tasks running meanwhile finish on the one they
    /// started with. Anything else waits for a restart, and nothing is taken.
    pub fn rotate(&self, next: &[Upstream]) -> Rotation {
        let rotated: Vec<String> = {
            let mut held = self.upstreams.write();
            if !settings::same_but_credentials(&held, next) {
                return Rotation::NeedsRestart;
            }
            let rotated: Vec<String> = (held.iter().zip(next))
                .filter(|(a, b)| a != b)
                .map(|(a, _)| a.section.name.clone())
                .collect();
            if rotated.is_empty() {
                return Rotation::Same;
            }
            *held = Arc::new(next.to_vec());
            rotated
        };
        {
            // A token from the client before is not the new client's: asked for again.
            let mut tokens = self.tokens.lock();
            for name in &rotated {
                tokens.remove(name);
            }
        }
        self.wake.notify_one();
        Rotation::Rotated(rotated)
    }

    /// Asks for a token for each upstream with `oauth` whose token is due for renewal (or
    /// that has none); a failure is logged and the token before, if any, kept.
    async fn renew_tokens(&self) {
        let now = tokio::time::Instant::now();
        for u in self.upstreams().iter().filter(|u| u.oauth.is_some()) {
            let name = &u.section.name;
            let due = (self.tokens.lock().get(name)).is_none_or(|t| t.renew_at <= now);
            if !due {
                continue;
            }
            match oauth::token(&self.outbound, u, self.settings.list_timeout).await {
                Ok(t) => {
                    tracing::info!(upstream = %name, "upstream access token obtained");
                    self.tokens.lock().insert(name.clone(), t);
                }
                Err(why) => {
                    let why = self.scrubbed(u, why);
                    tracing::warn!(upstream = %name, error = %why, "no access token for the upstream; its requests go with the token before, if any");
                    // Asked again after a fifth of refresh_ms, not at once and again.
                    if let Some(t) = self.tokens.lock().get_mut(name) {
                        t.renew_at = tokio::time::Instant::now() + self.settings.refresh / 5;
                    }
                }
            }
        }
    }

    /// When the next token is due for renewal, if any upstream has one.
    fn next_renewal(&self) -> Option<tokio::time::Instant> {
        self.tokens.lock().values().map(|t| t.renew_at).min()
    }

    /// What `u`'s requests carry as `Authorization: Bearer`: its token, fixed or current.
    fn credential(&self, u: &Upstream) -> Option<Secret> {
        credential(u, &self.tokens)
    }

    /// Every served upstream tool, as last listed.
    fn tools(&self) -> Vec<UpstreamTool> {
        let upstreams = self.upstreams();
        let listed = self.listed.lock();
        let mut out = Vec::new();
        for u in upstreams.iter() {
            let Some(l) = listed.get(&u.section.name) else {
                continue;
            };
            let http = Arc::new(grant(u, self.credential(u).as_ref()));
            for t in &l.tools {
                let Some(name) = t["name"].as_str() else {
                    continue;
                };
                if !u.serves(name) {
                    continue;
                }
                match info(u, name, t) {
                    Ok(info) => out.push(UpstreamTool {
                        component: self.component.clone(),
                        env: env(u, call_protocol(u), name),
                        info,
                        http: http.clone(),
                    }),
                    Err(why) => {
                        tracing::warn!(upstream = %u.section.name, tool = name, %why, "an upstream tool is not served");
                    }
                }
            }
            for wanted in u.section.tools.iter().flatten() {
                if !l.tools.iter().any(|t| t["name"] == wanted.as_str()) {
                    tracing::warn!(upstream = %u.section.name, tool = %wanted, "upstreams.tools names a tool the upstream does not list");
                }
            }
        }
        out
    }

    /// Lists the upstreams again every `gateway.refresh_ms` (a fifth of it while one
    /// cannot be listed), at once when one announces that its tools changed, and when an
    /// access token is due, until `stop`; calls `changed` with what changed, when
    /// anything did.
    pub async fn run(
        self: Arc<Self>,
        changed: impl Fn(UpstreamChange) + Send + 'static,
        stop: CancellationToken,
    ) {
        let heard = Arc::new(tokio::sync::Notify::new());
        let count = self.upstreams().len();
        let followers: Vec<_> = (0..count)
            .map(|i| tokio::spawn(self.clone().follow(i, heard.clone(), stop.clone())))
            .collect();
        let mut all = self.listed.lock().len() == count;
        loop {
            let wait = if all {
                self.settings.refresh
            } else {
                self.settings.refresh / 5
            };
            let mut at = tokio::time::Instant::now() + wait;
            if let Some(renew) = self.next_renewal() {
                at = at.min(renew);
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep_until(at) => {}
                () = heard.notified() => {}
                () = self.wake.notified() => {}
            }
            let (change, answered) = self.refresh().await;
            all = answered;
            if change != UpstreamChange::None {
                changed(change);
            }
        }
        for f in followers {
            let _ = f.await;
        }
    }

    /// Follows upstream `index`'s announcements of tool changes (its `subscriptions/listen`
    /// or session stream), telling `heard` of each, until `stop`. A stream that ends, or
    /// stays silent for [`IDLE_REFRESHES`] × `refresh_ms` (a connection that died without
    /// a word looks the same), is closed, its session ended, and opened again after a
    /// fifth of `refresh_ms`; an upstream that has none is asked again every `refresh_ms`
    /// (the listing finds its changes meanwhile).
    async fn follow(
        self: Arc<Self>,
        index: usize,
        heard: Arc<tokio::sync::Notify>,
        stop: CancellationToken,
    ) {
        loop {
            // Taken again on each opening: a rotated credential is used from the next one.
            let u = &self.upstreams()[index];
            let name = &u.section.name;
            let protocol = self.listed.lock().get(name).map(|l| l.protocol);
            let credential = self.credential(u);
            let opened = match protocol {
                Some(p) => {
                    let timeout = self.settings.list_timeout;
                    tokio::select! {
                        () = stop.cancelled() => return,
                        o = list::changes(&self.outbound, u, credential.as_ref(), p, timeout) => o,
                    }
                }
                None => Err(String::new()),
            };
            let wait = match opened {
                Ok(mut changes) => {
                    tracing::info!(upstream = %name, "following the upstream's tool changes");
                    let why = self.read_changes(name, &mut changes, &heard, &stop).await;
                    changes.end().await;
                    let Some(why) = why else {
                        return;
                    };
                    tracing::info!(upstream = %name, "the upstream's change stream {why}; opened again shortly");
                    self.settings.refresh / 5
                }
                // Not listed yet: tried again once it may be.
                Err(why) if why.is_empty() => self.settings.refresh / 5,
                Err(why) => {
                    let why = self.scrubbed(u, why);
                    tracing::debug!(upstream = %name, %why, "the upstream's tool changes are not followed; they are found by listing");
                    self.settings.refresh
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Reads upstream `name`'s `changes`, telling `heard` of each change of its tools, until
    /// the stream ends or stays silent for [`IDLE_REFRESHES`] × `refresh_ms`: why it
    /// stopped, or `None` when `stop` came first.
    async fn read_changes(
        &self,
        name: &str,
        changes: &mut list::Changes<'_>,
        heard: &tokio::sync::Notify,
        stop: &CancellationToken,
    ) -> Option<&'static str> {
        let idle = self.settings.refresh * IDLE_REFRESHES;
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => return None,
                n = tokio::time::timeout(idle, changes.next()) => n,
            };
            match next {
                Ok(Some(true)) => {
                    self.deployer.upstream_counters().change(name);
                    heard.notify_one();
                }
                Ok(Some(false)) => {}
                Ok(None) => return Some("ended"),
                Err(_) => return Some("stayed silent past its idle limit"),
            }
        }
    }

    /// `text` with every form of `u`'s credentials replaced (its bearer token, its client
    /// secret, its current access token): an upstream or its authorization server may echo
    /// them in an error body, and the excerpt of one is logged.
    fn scrubbed(&self, u: &Upstream, text: String) -> String {
        let mut secrets = u.secrets();
        secrets.extend(self.credential(u));
        snodo_wasm::outbound::scrub_text(&text, &secrets).unwrap_or(text)
    }
}

/// How many `refresh_ms` a change stream may stay silent before it is opened again.
const IDLE_REFRESHES: u32 = 5;

/// The upstream tool a served name stands for without a listing: an upstream whose
/// prefix begins the name (a prefix that is not empty) or whose `tools` names what follows
/// it. The revision is the configured one, else the component asks (`auto`); the schema
/// is the upstream's to check.
fn unlisted(
    component: Arc<Component>,
    upstreams: Upstreams,
    tokens: Tokens,
) -> crate::deploy::Unlisted {
    Arc::new(move |served: &str| {
        let upstreams = upstreams.read().clone();
        // The longest prefix that fits decides (checked at configuration: no two are
        // prefixes of each other, but an empty one fits every name `tools` lists).
        let (u, tool) =
            (upstreams.iter())
                .filter_map(|u| {
                    let prefix = u.served_name("");
                    let tool = served.strip_prefix(prefix.as_str())?;
                    let named = (u.section.tools.iter()).flatten().any(|t| t == tool);
                    (!tool.is_empty() && (named || (!prefix.is_empty() && u.serves(tool))))
                        .then_some((prefix.len(), u, tool))
                })
                .max_by_key(|(len, _, _)| *len)
                .map(|(_, u, tool)| (u, tool))?;
        let protocol = call_protocol(u);
        let schema = serde_json::json!({"type": "object"});
        let described = serde_json::json!({"name": tool, "inputSchema": schema});
        Some(UpstreamTool {
            component: component.clone(),
            info: info(u, tool, &described).ok()?,
            env: env(u, protocol, tool),
            http: Arc::new(grant(u, credential(u, &tokens).as_ref())),
        })
    })
}

/// The requests one attempt of an upstream call may make, replayed ones included, unless
/// the operator wrote `outbound.max_requests` (in `[defaults]` or for the served name).
pub(crate) const UPSTREAM_MAX_REQUESTS: u32 = 100_000;

/// The revision a call is made in: the configured one, else `auto` (the component asks
/// the upstream with `server/discover` first), the same whether or not the upstream was
/// listed when the call ran, so that every replay sends what the first attempt sent.
fn call_protocol(u: &Upstream) -> &str {
    u.section.protocol.as_deref().unwrap_or("auto")
}

/// What `u`'s requests carry as `Authorization: Bearer`: its fixed token, or the current
/// one from its authorization server.
fn credential(u: &Upstream, tokens: &Tokens) -> Option<Secret> {
    (u.bearer.clone()).or_else(|| tokens.lock().get(&u.section.name).map(|t| t.value.clone()))
}

/// What the gateway component reads to know where a served name leads.
fn env(u: &Upstream, protocol: &str, tool: &str) -> Vec<(String, String)> {
    let confirm = if u.confirms(tool) { "true" } else { "false" };
    [
        ("SNODO_UPSTREAM_NAME", u.section.name.as_str()),
        ("SNODO_UPSTREAM_URL", u.section.url.as_str()),
        ("SNODO_UPSTREAM_TOOL", tool),
        ("SNODO_UPSTREAM_PROTOCOL", protocol),
        ("SNODO_UPSTREAM_CONFIRM", confirm),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The upstream's origin as the only host, its bearer token (`credential`) injected there.
fn grant(u: &Upstream, credential: Option<&Secret>) -> HttpGrant {
    let allowed = AllowList::parse(&[u.origin.as_str()]).unwrap_or_default();
    let mut grant = HttpGrant::new(allowed);
    // A failed answer is not kept, so the retry list sends the call again with its key.
    grant.retry_transient = true;
    // Following an upstream task polls it, and a replay counts what it replays: the
    // journal's size (`outbound.journal_task_bytes`) bounds a task's requests instead.
    grant.limits.max_requests = UPSTREAM_MAX_REQUESTS;
    if let (Some(token), Ok(host)) = (credential, AllowedHost::parse(&u.origin)) {
        let value = Secret::new(format!("Bearer {}", token.expose()));
        grant.scrub.push(token.clone());
        grant.scrub.push(value.clone());
        grant.inject.push(Injection {
            host,
            header: "authorization".into(),
            value,
        });
    }
    grant
}

/// The served tool: the upstream's description under the served name. It is optional as
/// a task (a client with tasks gets one; the operator may pin a mode); its arguments are
/// checked by the upstream, which owns the schema.
fn info(u: &Upstream, name: &str, t: &Value) -> Result<ToolInfo, String> {
    let served = u.served_name(name);
    let valid = (1..=128).contains(&served.len())
        && (served.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid {
        return Err(format!(
            "{served:?} is not a tool name this host serves (1..=128 of A-Z a-z 0-9 _ - .)"
        ));
    }
    let input_schema = match t.get("inputSchema") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => return Err("it has no inputSchema object".into()),
    };
    let text = |k: &str| t.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok(ToolInfo {
        name: served,
        title: text("title"),
        description: text("description"),
        input_schema,
        output_schema: t.get("outputSchema").filter(|s| s.is_object()).cloned(),
        mode: TaskMode::Optional,
        required_capabilities: None,
        has_prepare: false,
        has_mode_rule: false,
        header_params: Vec::new(),
    })
}
