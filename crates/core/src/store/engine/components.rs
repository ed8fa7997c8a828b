//! Stored components and deployments: a component's bytes are stored once under their
//! digest, a deployment names the components that serve, and the ones no deployment names
//! and no live task is pinned to are collected after a retention.

use crate::ids::{hex, unhex};
use crate::model::{
    ComponentInfo, Deployment, MAX_COMPONENT_BYTES, MAX_SIGNATURE_BYTES, StoredComponent, Timestamp,
};
use crate::store::{StoreError, StoreResult};

use super::{Count, Ctx, Kv, Txn, View};

/// What the store keeps about a component beside its bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ComponentMeta {
    pub(crate) size: u64,
    pub(crate) stored_at: Timestamp,
    pub(crate) retired_at: Option<Timestamp>,
    /// The signature stored with it, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) signature: Option<String>,
}

impl ComponentMeta {
    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> StoreResult<Self> {
        serde_json::from_slice(bytes)
            .map_err(|e| StoreError::corrupt(format!("a component's metadata is unreadable: {e}")))
    }
}

/// Stores a component's bytes under its digest (the caller computed it from the bytes);
/// one already stored is left as it is.
pub(crate) fn store_component(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    digest: &str,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> StoreResult<()> {
    check_component(digest, bytes, signature)?;
    let signature = signature.map(hex);
    if let Some(mut meta) = component_meta(txn, digest)? {
        // Stored once; an unsigned one gains a signature, a signed one keeps its own.
        if meta.signature.is_none() && signature.is_some() {
            meta.signature = signature;
            txn.kv_put(Kv::ComponentMeta, digest.as_bytes(), &meta.encode())?;
        }
        return Ok(());
    }
    txn.kv_put(Kv::ComponentBytes, digest.as_bytes(), bytes)?;
    let meta = ComponentMeta {
        size: bytes.len() as u64,
        stored_at: ctx.now,
        // Not deployed yet: collectable after the retention unless a deployment names it.
        retired_at: Some(ctx.now),
        signature,
    };
    txn.kv_put(Kv::ComponentMeta, digest.as_bytes(), &meta.encode())
}

/// A stored component's bytes and signature.
pub(crate) fn component(view: &dyn View, digest: &str) -> StoreResult<Option<StoredComponent>> {
    let Some(meta) = component_meta(view, digest)? else {
        return Ok(None);
    };
    let bytes = view
        .kv_get(Kv::ComponentBytes, digest.as_bytes())?
        .ok_or_else(|| StoreError::corrupt(format!("component {digest} has no bytes")))?;
    let signature = match meta.signature {
        None => None,
        Some(s) => Some(unhex(&s).ok_or_else(|| {
            StoreError::corrupt(format!("component {digest} has an unreadable signature"))
        })?),
    };
    Ok(Some(StoredComponent { bytes, signature }))
}

/// What every adapter checks before storing a component.
pub(crate) fn check_component(
    digest: &str,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> StoreResult<()> {
    crate::model::check_digest(digest)?;
    if let Some(s) = signature
        && (s.is_empty() || s.len() > MAX_SIGNATURE_BYTES)
    {
        return Err(StoreError::invalid(format!(
            "a component's signature is 1..={MAX_SIGNATURE_BYTES} bytes, got {}",
            s.len()
        )));
    }
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(StoreError::invalid(format!(
            "a component is at most {MAX_COMPONENT_BYTES} bytes, got {}",
            bytes.len()
        )));
    }
    if crate::model::component_digest(bytes) != digest {
        return Err(StoreError::invalid(format!(
            "the bytes given do not have digest {digest}"
        )));
    }
    Ok(())
}

fn component_meta(view: &dyn View, digest: &str) -> StoreResult<Option<ComponentMeta>> {
    view.kv_get(Kv::ComponentMeta, digest.as_bytes())?
        .map(|b| ComponentMeta::decode(&b))
        .transpose()
}

/// The newest deployment, if there is one.
pub(crate) fn current_deployment(view: &dyn View) -> StoreResult<Option<Deployment>> {
    Ok(deployments(view, 1)?.into_iter().next())
}

/// Up to `limit` deployments, newest first.
pub(crate) fn deployments(view: &dyn View, limit: usize) -> StoreResult<Vec<Deployment>> {
    view.kv_scan(Kv::Deployments, limit, true)?
        .into_iter()
        .map(|(_, v)| Deployment::decode(&v).map_err(|e| StoreError::corrupt(e.0)))
        .collect()
}

/// One deployment by revision.
pub(crate) fn deployment(view: &dyn View, revision: u64) -> StoreResult<Option<Deployment>> {
    view.kv_get(Kv::Deployments, &revision.to_be_bytes())?
        .map(|v| Deployment::decode(&v).map_err(|e| StoreError::corrupt(e.0)))
        .transpose()
}

/// Commits a new deployment naming `components` (each already stored), when the current
/// revision is `expected` (0: none yet; `None`: whatever it is). Components the previous
/// deployment named and this one does not are retired now; those this one names are not.
pub(crate) fn deploy(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    components: &[String],
    note: &str,
    expected: Option<u64>,
) -> StoreResult<Deployment> {
    crate::model::check_deployment(components, note)?;
    let current = current_deployment(txn)?;
    let at = current.as_ref().map_or(0, |d| d.revision);
    if expected.is_some_and(|e| e != at) {
        return Err(StoreError::Conflict { current: at });
    }
    let mut metas = Vec::with_capacity(components.len());
    for d in components {
        match component_meta(txn, d)? {
            Some(m) => metas.push(m),
            None => {
                return Err(StoreError::invalid(format!(
                    "component {d} is not stored: store it before deploying it"
                )));
            }
        }
    }
    if let Some(cur) = &current {
        for d in cur.components.iter().filter(|d| !components.contains(d)) {
            if let Some(mut m) = component_meta(txn, d)? {
                m.retired_at = Some(ctx.now);
                txn.kv_put(Kv::ComponentMeta, d.as_bytes(), &m.encode())?;
            }
        }
    }
    for (d, mut m) in components.iter().zip(metas) {
        if m.retired_at.is_some() {
            m.retired_at = None;
            txn.kv_put(Kv::ComponentMeta, d.as_bytes(), &m.encode())?;
        }
    }
    let dep = Deployment {
        revision: at + 1,
        deployed_at: ctx.now,
        components: components.to_vec(),
        note: note.to_owned(),
    };
    txn.kv_put(Kv::Deployments, &dep.revision.to_be_bytes(), &dep.encode())?;
    Ok(dep)
}

/// Every stored component, with its pins.
pub(crate) fn components(view: &dyn View) -> StoreResult<Vec<ComponentInfo>> {
    let mut out = Vec::new();
    for (k, v) in view.kv_scan(Kv::ComponentMeta, usize::MAX, false)? {
        let digest = String::from_utf8(k)
            .map_err(|_| StoreError::corrupt("a component digest is not UTF-8"))?;
        let m = ComponentMeta::decode(&v)?;
        out.push(ComponentInfo {
            pinned: view.count(Count::Pinned, &digest)?,
            digest,
            size: m.size,
            stored_at: m.stored_at,
            retired_at: m.retired_at,
            signed: m.signature.is_some(),
        });
    }
    Ok(out)
}

/// Removes the components retired at least `retention_ms` ago that no live task is pinned
/// to, and returns their digests.
pub(crate) fn collect_components(
    txn: &mut dyn Txn,
    ctx: &Ctx,
    retention_ms: u64,
) -> StoreResult<Vec<String>> {
    let mut gone = Vec::new();
    for c in components(txn)? {
        let due = c
            .retired_at
            .is_some_and(|at| at.as_millis().saturating_add(retention_ms) <= ctx.now.as_millis());
        if due && c.pinned == 0 {
            txn.kv_del(Kv::ComponentBytes, c.digest.as_bytes())?;
            txn.kv_del(Kv::ComponentMeta, c.digest.as_bytes())?;
            gone.push(c.digest);
        }
    }
    Ok(gone)
}
