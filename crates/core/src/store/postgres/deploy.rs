//! Components and deployments on PostgreSQL: tables and statements of their own, outside
//! the task writes. They change rarely, and a deployment is one transaction that takes
//! the `deployments` table's lock, so deployers queue and revisions never fork.

use tokio_postgres::Row;

use crate::model::{ComponentInfo, Deployment, StoredComponent, Timestamp};
use crate::store::{StoreError, StoreResult};

use super::{NOW_PARAM, PgStore, pg_error, pool_error};

fn stamp(ms: i64) -> Timestamp {
    Timestamp(ms.max(0) as u64)
}

fn deployment_of(r: &Row) -> Deployment {
    Deployment {
        revision: r.get::<_, i64>(0).max(0) as u64,
        deployed_at: stamp(r.get(1)),
        components: r.get(2),
        note: r.get(3),
    }
}

const DEPLOYMENT_COLS: &str = "revision, deployed_at, components, note";

impl PgStore {
    /// Stored once; an unsigned one gains a signature, a signed one keeps its own.
    pub(super) async fn pg_store_component(
        &self,
        digest: &str,
        bytes: &[u8],
        signature: Option<&[u8]>,
    ) -> StoreResult<()> {
        let client = self.pool.get().await.map_err(pool_error)?;
        client
            .execute(
                &format!(
                    "INSERT INTO components (digest, bytes, size, stored_at, retired_at, signature)
                     VALUES ($2, $3, $4, {NOW_PARAM}, {NOW_PARAM}, $5)
                     ON CONFLICT (digest) DO UPDATE
                       SET signature = coalesce(components.signature, EXCLUDED.signature)"
                ),
                &[
                    &self.now_param(),
                    &digest,
                    &bytes,
                    &(bytes.len() as i64),
                    &signature,
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(())
    }

    pub(super) async fn pg_component(&self, digest: &str) -> StoreResult<Option<StoredComponent>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                "SELECT bytes, signature FROM components WHERE digest = $1",
                &[&digest],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows.first().map(|r| StoredComponent {
            bytes: r.get(0),
            signature: r.get(1),
        }))
    }

    pub(super) async fn pg_components(&self) -> StoreResult<Vec<ComponentInfo>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                "SELECT c.digest, c.size, c.stored_at, c.retired_at,
                        coalesce((SELECT sum(n) FROM pinned p WHERE p.digest = c.digest), 0)::bigint,
                        c.signature IS NOT NULL
                 FROM components c ORDER BY c.digest",
                &[],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows
            .iter()
            .map(|r| ComponentInfo {
                digest: r.get(0),
                size: r.get::<_, i64>(1).max(0) as u64,
                stored_at: stamp(r.get(2)),
                retired_at: r.get::<_, Option<i64>>(3).map(stamp),
                pinned: r.get::<_, i64>(4).max(0) as u64,
                signed: r.get(5),
            })
            .collect())
    }

    pub(super) async fn pg_deploy(
        &self,
        components: &[String],
        note: &str,
        expected: Option<u64>,
    ) -> StoreResult<Deployment> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let tx = client.transaction().await.map_err(pg_error)?;
        tx.batch_execute("LOCK TABLE deployments IN EXCLUSIVE MODE")
            .await
            .map_err(pg_error)?;
        let now: i64 = tx
            .query_one(&format!("SELECT {NOW_PARAM}"), &[&self.now_param()])
            .await
            .map_err(pg_error)?
            .get(0);
        let current = tx
            .query(
                &format!(
                    "SELECT {DEPLOYMENT_COLS} FROM deployments ORDER BY revision DESC LIMIT 1"
                ),
                &[],
            )
            .await
            .map_err(pg_error)?
            .first()
            .map(deployment_of);
        let at = current.as_ref().map_or(0, |d| d.revision);
        if expected.is_some_and(|e| e != at) {
            return Err(StoreError::Conflict { current: at });
        }
        let stored: Vec<String> = tx
            .query(
                "SELECT digest FROM components WHERE digest = ANY($1)",
                &[&components],
            )
            .await
            .map_err(pg_error)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if let Some(missing) = components.iter().find(|d| !stored.contains(d)) {
            return Err(StoreError::invalid(format!(
                "component {missing} is not stored: store it before deploying it"
            )));
        }
        let before = current.map(|d| d.components).unwrap_or_default();
        tx.execute(
            "UPDATE components SET retired_at = $1
             WHERE digest = ANY($2) AND NOT digest = ANY($3)",
            &[&now, &before, &components],
        )
        .await
        .map_err(pg_error)?;
        tx.execute(
            "UPDATE components SET retired_at = NULL
             WHERE digest = ANY($1) AND retired_at IS NOT NULL",
            &[&components],
        )
        .await
        .map_err(pg_error)?;
        let dep = Deployment {
            revision: at + 1,
            deployed_at: stamp(now),
            components: components.to_vec(),
            note: note.to_owned(),
        };
        tx.execute(
            "INSERT INTO deployments (revision, deployed_at, components, note)
             VALUES ($1, $2, $3, $4)",
            &[&(dep.revision as i64), &now, &dep.components, &dep.note],
        )
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        self.notifier.announce_deployment(&client).await;
        Ok(dep)
    }

    pub(super) async fn pg_deployments(
        &self,
        revision: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<Deployment>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = match revision {
            Some(r) => {
                client
                    .query(
                        &format!("SELECT {DEPLOYMENT_COLS} FROM deployments WHERE revision = $1"),
                        &[&(r.min(i64::MAX as u64) as i64)],
                    )
                    .await
            }
            None => client
                .query(
                    &format!(
                        "SELECT {DEPLOYMENT_COLS} FROM deployments ORDER BY revision DESC LIMIT $1"
                    ),
                    &[&(limit.min(i64::MAX as usize) as i64)],
                )
                .await,
        }
        .map_err(pg_error)?;
        Ok(rows.iter().map(deployment_of).collect())
    }

    /// A scan of the live tasks' work: for operators.
    pub(super) async fn pg_pinned_tasks(
        &self,
        digest: &str,
        limit: usize,
    ) -> StoreResult<Vec<crate::model::TaskId>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                "SELECT id FROM tasks WHERE live
                   AND convert_from(work, 'UTF8')::jsonb #>> '{work,componentDigest}' = $1
                 ORDER BY id LIMIT $2",
                &[&digest, &(limit.min(i64::MAX as usize) as i64)],
            )
            .await
            .map_err(pg_error)?;
        rows.iter()
            .map(|r| crate::store::sql::id_of(r.get(0)))
            .collect()
    }

    pub(super) async fn pg_collect_components(
        &self,
        retention_ms: u64,
    ) -> StoreResult<Vec<String>> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                &format!(
                    "DELETE FROM components c
                     WHERE c.retired_at IS NOT NULL AND c.retired_at + $2 <= {NOW_PARAM}
                       AND coalesce((SELECT sum(n) FROM pinned p WHERE p.digest = c.digest), 0) = 0
                     RETURNING c.digest"
                ),
                &[
                    &self.now_param(),
                    &(retention_ms.min(i64::MAX as u64 / 2) as i64),
                ],
            )
            .await
            .map_err(pg_error)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
