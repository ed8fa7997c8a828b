//! What an operator does to deployments, wherever it is asked: `snodo deploy`, `snodo
//! rollback` and `snodo deployments` on a store they open themselves, and the admin API's
//! `/admin/v1/deployments` on the store a running server holds. One logic for both, so a
//! single-file server deploys exactly as PostgreSQL's nodes do.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use snodo_core::model::Deployment;
use snodo_core::store::{Store, StoreError};
use snodo_wasm::Component;

use super::{DeployError, Deployer, provides};

/// What deploys through a serving node: its deployer, and the nudge that makes it look at
/// the store at once (so a deployment through the admin API serves before it answers its
/// next poll).
#[derive(Clone)]
pub struct Deploying {
    /// Loads and checks what is deployed, under the node's trust policy.
    pub deployer: Arc<Deployer>,
    /// Wakes the node's [`super::follow`].
    pub nudge: tokio::sync::mpsc::Sender<()>,
}

impl Deploying {
    /// Tells the node a deployment was committed. A full channel already holds a nudge.
    pub fn nudge(&self) {
        let _ = self.nudge.try_send(());
    }
}

/// Why an operator's deployment was refused; nothing was deployed.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// What was asked cannot be served or does not exist (a component that does not load,
    /// two providing one tool, no deployment to go back to).
    #[error("{0}")]
    Invalid(String),
    /// Another deployment was committed meanwhile: asking again decides on the new one.
    #[error("another deployment (revision {0}) was committed meanwhile; run the command again")]
    Moved(u64),
    /// The store failed.
    #[error("{0}")]
    Store(StoreError),
}

impl From<DeployError> for Refused {
    fn from(e: DeployError) -> Self {
        match e {
            DeployError::Store(e) => Self::Store(e),
            other => Self::Invalid(other.to_string()),
        }
    }
}

fn store_refused(e: StoreError) -> Refused {
    match e {
        StoreError::Conflict { current } => Refused::Moved(current),
        other => Refused::Store(other),
    }
}

/// A component to deploy, already loaded and stored: `label` names it in what is reported
/// (a file, or the digest it was uploaded under).
pub struct NewComponent {
    /// Its file or origin.
    pub label: String,
    /// Its digest in the store.
    pub digest: String,
    /// It, loaded (which checked its signature against this node's trust policy).
    pub component: Arc<Component>,
}

/// A deployment committed by [`deploy`], with the components it stopped serving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployed {
    /// The new deployment.
    pub deployment: DeploymentView,
    /// Each component the new ones replaced, with the one that replaced it.
    pub retired: Vec<Retired>,
}

/// A component a deployment stopped serving because a new one provides what it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Retired {
    /// Its digest.
    pub digest: String,
    /// What replaced it.
    pub replaced_by: String,
}

/// One deployment as operators see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentView {
    /// Its revision (1, 2, …).
    pub revision: u64,
    /// When it was committed (RFC 3339).
    pub deployed_at: String,
    /// The digests of the components it serves.
    pub components: Vec<String>,
    /// What was recorded with it.
    pub note: String,
}

impl From<&Deployment> for DeploymentView {
    fn from(d: &Deployment) -> Self {
        Self {
            revision: d.revision,
            deployed_at: crate::rfc3339(d.deployed_at),
            components: d.components.clone(),
            note: d.note.clone(),
        }
    }
}

/// One stored component as operators see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentView {
    /// Its digest.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was stored.
    pub stored_at: String,
    /// When a deployment stopped naming it (`None`: serving).
    pub retired_at: Option<String>,
    /// Whether a signature is stored with it.
    pub signed: bool,
    /// How many live tasks are pinned to it.
    pub pinned_tasks: u64,
    /// Up to the asked number of them.
    pub pinned_task_ids: Vec<String>,
}

/// The deployments, newest first, and the stored components with the live tasks pinned to
/// each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    /// The newest deployments.
    pub deployments: Vec<DeploymentView>,
    /// Every stored component.
    pub components: Vec<ComponentView>,
}

/// The deployments (at most `limit`) and the stored components, each naming at most
/// `tasks` of the live tasks pinned to it (the count is exact).
pub async fn overview(
    store: &dyn Store,
    limit: usize,
    tasks: usize,
) -> Result<Overview, StoreError> {
    let deployments = store.deployments(limit).await?;
    let mut components = Vec::new();
    for c in store.components().await? {
        // Which live tasks pin it: a scan of the live tasks, so only when some do.
        let ids = if c.pinned == 0 || tasks == 0 {
            Vec::new()
        } else {
            store.pinned_tasks(&c.digest, tasks).await?
        };
        components.push(ComponentView {
            size: c.size,
            stored_at: crate::rfc3339(c.stored_at),
            retired_at: c.retired_at.map(crate::rfc3339),
            signed: c.signed,
            pinned_tasks: c.pinned,
            pinned_task_ids: ids.iter().map(ToString::to_string).collect(),
            digest: c.digest,
        });
    }
    Ok(Overview {
        deployments: deployments.iter().map(DeploymentView::from).collect(),
        components,
    })
}

/// Deploys `new` over the current deployment: each replaces the deployed components that
/// provide any of its tools, resources or prompts, one that overlaps none is added, and with
/// `exact` only `new` serves. The result must be servable (nothing provided twice), and it
/// is committed only over the deployment it was decided on ([`Refused::Moved`] otherwise).
pub async fn deploy(
    deployer: &Deployer,
    store: &dyn Store,
    new: Vec<NewComponent>,
    exact: bool,
    note: &str,
) -> Result<Deployed, Refused> {
    if new.is_empty() {
        return Err(Refused::Invalid(
            "a deployment names at least one component".into(),
        ));
    }
    let current = store.deployment(None).await.map_err(Refused::Store)?;
    let revision = current.as_ref().map_or(0, |d| d.revision);
    let mut kept: Vec<(String, Arc<Component>)> = Vec::new();
    if let (Some(cur), false) = (&current, exact) {
        let what = format!("deployment {}", cur.revision);
        let loaded = deployer.load_stored(store, &cur.components, &what).await?;
        kept = cur.components.iter().cloned().zip(loaded).collect();
    }
    let mut retired = Vec::new();
    let mut digests: Vec<String> = Vec::new();
    let mut parts = Vec::new();
    for n in &new {
        let offers = provides(&n.component);
        let (gone, stay): (Vec<_>, Vec<_>) = kept
            .into_iter()
            .partition(|(_, c)| !provides(c).is_disjoint(&offers));
        kept = stay;
        retired.extend(gone.into_iter().map(|(digest, _)| Retired {
            digest,
            replaced_by: n.label.clone(),
        }));
        if !digests.contains(&n.digest) {
            digests.push(n.digest.clone());
            parts.push(n.component.clone());
        }
    }
    for (d, c) in kept {
        if !digests.contains(&d) {
            digests.push(d);
            parts.push(c);
        }
    }
    deployer
        .catalog_of(&parts, false)
        .map_err(|e| Refused::Invalid(format!("the deployment would not serve: {e}")))?;
    let d = store
        .deploy(&digests, note, Some(revision))
        .await
        .map_err(store_refused)?;
    // A component replaced by itself (the same bytes deployed again) is not retired.
    retired.retain(|r| !d.components.contains(&r.digest));
    Ok(Deployed {
        deployment: DeploymentView::from(&d),
        retired,
    })
}

/// Deploys again what revision `to` named (default: the one before the current), as a new
/// deployment recorded with `note`; returns it and the revision it went back to.
pub async fn roll_back(
    store: &dyn Store,
    to: Option<u64>,
    by: &str,
) -> Result<(DeploymentView, u64), Refused> {
    let current = store
        .deployment(None)
        .await
        .map_err(Refused::Store)?
        .ok_or_else(|| Refused::Invalid("nothing is deployed yet".into()))?;
    let to = match to {
        Some(r) => r,
        None if current.revision > 1 => current.revision - 1,
        None => {
            return Err(Refused::Invalid(
                "the current deployment is the first: there is nothing to roll back to".into(),
            ));
        }
    };
    if to == current.revision {
        return Err(Refused::Invalid(format!(
            "revision {to} is the current deployment"
        )));
    }
    let target = store
        .deployment(Some(to))
        .await
        .map_err(Refused::Store)?
        .ok_or_else(|| Refused::Invalid(format!("there is no deployment {to}")))?;
    let note = format!("rollback to revision {to} ({by})");
    let d = store
        .deploy(&target.components, &note, Some(current.revision))
        .await
        .map_err(|e| match e {
            StoreError::Invalid(m) => Refused::Invalid(format!(
                "{m} (collected after its retention: deploy its file again with snodo deploy)"
            )),
            other => store_refused(other),
        })?;
    Ok((DeploymentView::from(&d), to))
}
