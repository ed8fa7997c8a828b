//! What operators do to deployments through a running server (list them with the
//! components and the tasks pinned to each, upload a component, deploy, roll back): the same
//! operations `snodo deploy` runs on a store it opens itself ([`crate::deploy::operate`]),
//! here on the store the server holds, which a single-file store's server alone may open.
//! Deployments are the whole node's, so only an operator of every tenant acts on them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{AdminError, Operator, Operators};
use crate::deploy::operate::{self, Deployed, Deploying, NewComponent, Overview, Refused};

/// The body of `POST /admin/v1/deployments`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployBody {
    /// The digests of uploaded (or already stored) components, each replacing the deployed
    /// ones that provide any of its tools, resources or prompts.
    pub components: Vec<String>,
    /// Only these serve: the others stop serving new calls.
    #[serde(default)]
    pub exact: bool,
    /// What to record with the deployment (default: who deployed, through this API).
    #[serde(default)]
    pub note: Option<String>,
}

/// The body of `POST /admin/v1/rollback`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackBody {
    /// The revision to go back to (default: the one before the current).
    #[serde(default)]
    pub to: Option<u64>,
}

/// What `POST /admin/v1/components` answers: the stored component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Uploaded {
    /// Its digest, which a deployment names.
    pub digest: String,
    /// Its size in bytes.
    pub size: usize,
    /// What it provides (`tool:NAME`, `resource:URI`, `template:…`, `prompt:NAME`).
    pub provides: Vec<String>,
}

/// What `POST /admin/v1/rollback` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolledBack {
    /// The new deployment.
    pub deployment: operate::DeploymentView,
    /// The revision whose components it serves again.
    pub components_of: u64,
}

impl From<Refused> for AdminError {
    fn from(e: Refused) -> Self {
        match e {
            Refused::Invalid(m) => Self::Invalid(m),
            Refused::Moved(_) => Self::Conflict(e.to_string()),
            Refused::Store(e) => e.into(),
        }
    }
}

impl Operators {
    /// The node's deployer, for an operator of every tenant.
    fn deploying(&self, op: &Operator) -> Result<&Deploying, AdminError> {
        if !op.cross_tenant {
            return Err(AdminError::Forbidden(
                "deployments serve every tenant: only an operator of every tenant acts on them"
                    .into(),
            ));
        }
        self.deploying.as_ref().ok_or_else(|| {
            AdminError::Invalid("this server takes no deployments through its API".into())
        })
    }

    /// Who acted, for a deployment's note.
    fn by(op: &Operator) -> String {
        format!(
            "by {}/{} through the admin API",
            op.principal.tenant, op.principal.subject
        )
    }

    /// The deployments and stored components.
    pub(crate) async fn deployments(
        &self,
        op: &Operator,
        limit: usize,
        tasks: usize,
    ) -> Result<Overview, AdminError> {
        self.deploying(op)?;
        Ok(operate::overview(&**self.tasks().store(), limit, tasks).await?)
    }

    /// Stores a component once it loads and passes the node's trust policy with
    /// `signature`; deploying it is a separate step.
    pub(crate) async fn upload(
        &self,
        op: &Operator,
        name: &str,
        bytes: Vec<u8>,
        signature: Option<Vec<u8>>,
    ) -> Result<Uploaded, AdminError> {
        let d = self.deploying(op)?;
        let size = bytes.len();
        let component = d
            .deployer
            .load(PathBuf::from(name), bytes.clone(), signature.as_deref())
            .await
            .map_err(|e| AdminError::Invalid(e.to_string()))?;
        let digest = self
            .tasks()
            .store()
            .store_component(&bytes, signature.as_deref())
            .await?;
        Ok(Uploaded {
            digest,
            size,
            provides: crate::deploy::provides(&component).into_iter().collect(),
        })
    }

    /// Deploys stored components; the node swaps them in before answering its next call.
    pub(crate) async fn deploy(
        &self,
        op: &Operator,
        body: DeployBody,
    ) -> Result<Deployed, AdminError> {
        let d = self.deploying(op)?;
        let store = self.tasks().store();
        let loaded = d
            .deployer
            .load_stored(&**store, &body.components, "the deployment")
            .await
            .map_err(|e| AdminError::Invalid(e.to_string()))?;
        let new = body
            .components
            .iter()
            .zip(loaded)
            .map(|(digest, component)| NewComponent {
                label: digest.clone(),
                digest: digest.clone(),
                component,
            })
            .collect();
        let note = body.note.unwrap_or_else(|| Self::by(op));
        let deployed = operate::deploy(&d.deployer, &**store, new, body.exact, &note).await?;
        d.nudge();
        Ok(deployed)
    }

    /// Deploys again what an earlier revision named.
    pub(crate) async fn rollback(
        &self,
        op: &Operator,
        body: RollbackBody,
    ) -> Result<RolledBack, AdminError> {
        let d = self.deploying(op)?;
        let (deployment, components_of) =
            operate::roll_back(&**self.tasks().store(), body.to, &Self::by(op)).await?;
        d.nudge();
        Ok(RolledBack {
            deployment,
            components_of,
        })
    }
}
