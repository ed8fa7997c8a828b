//! The operators' queries on the shared store: a listing walks the same index a filter picks
//! on the embedded stores (`store/listing.rs`), here as SQL indexes over the task row's
//! tenant, status, tool and creation-time columns, and counts sum the tally's shards.

use tokio_postgres::types::ToSql;

use crate::model::{TaskStatus, Timestamp};
use crate::store::listing::{self, Cursor, Fed, PageBuilder, TaskCounts, TaskPage, TaskQuery};
use crate::store::{Store, StoreError, StoreResult};

use super::{PgStore, pg_error, pool_error, staged::claim_cols};

/// A listing's statement: per status the filter allows, the rows of the index it walks
/// (tenant and status, or status alone), newest first from the cursor on, merged; a row's
/// body only when its tool can match, so a skipped row costs no body. The last parameter is
/// the chunk size.
fn list_sql(q: &TaskQuery, params: &mut Vec<Box<dyn ToSql + Sync + Send>>) -> String {
    let f = &q.filter;
    let mut next = |v: Box<dyn ToSql + Sync + Send>| {
        params.push(v);
        format!("${}", params.len())
    };
    let mut conds = Vec::new();
    if let Some(t) = &f.tenant {
        conds.push(format!("tenant = {}", next(Box::new(t.clone()))));
    }
    if let Some(a) = f.created_after {
        conds.push(format!("created_at >= {}", next(Box::new(millis(a)))));
    }
    if let Some(b) = f.created_before {
        conds.push(format!("created_at < {}", next(Box::new(millis(b)))));
    }
    if let Some(c) = q.after {
        let at = next(Box::new(millis(c.created_at)));
        let id = next(Box::new(c.id.as_bytes().to_vec()));
        conds.push(format!("(created_at, id) < ({at}, {id})"));
    }
    let body = match &f.tool {
        Some(tool) => format!(
            "CASE WHEN tool = {} THEN body END",
            next(Box::new(listing::cut(tool).to_owned()))
        ),
        None => "body".to_owned(),
    };
    let limit = next(Box::new(0i64));
    let statuses: Vec<TaskStatus> = match f.status {
        Some(s) => vec![s],
        None => listing::ALL_STATUSES.to_vec(),
    };
    let arms: Vec<String> = statuses
        .iter()
        .map(|s| {
            let mut c = conds.clone();
            // A literal, so the planner sees which index range each arm walks.
            c.push(format!("status = '{}'", s.as_str()));
            format!(
                "(SELECT id, created_at, tool, {body} AS body, claim_generation, claim_token, \
                 claim_epoch, claim_expires_at, claim_owner FROM tasks WHERE {} \
                 ORDER BY created_at DESC, id DESC LIMIT {limit})",
                c.join(" AND ")
            )
        })
        .collect();
    format!(
        "SELECT * FROM ({}) arms ORDER BY created_at DESC, id DESC LIMIT {limit}",
        arms.join(" UNION ALL ")
    )
}

fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

impl PgStore {
    pub(super) async fn pg_list(&self, mut q: TaskQuery) -> StoreResult<TaskPage> {
        q.check()?;
        let now = self.now().await?;
        let client = self.pool.get().await.map_err(pool_error)?;
        // A first page without checks left reads one more row than it shows.
        let chunk = if q.filter.tool.is_some() || q.filter.updated_after.is_some() {
            256
        } else {
            q.limit + 1
        };
        let original = q.clone();
        let mut page = PageBuilder::new(&original, now);
        loop {
            let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
            let sql = list_sql(&q, &mut params);
            if let Some(last) = params.last_mut() {
                *last = Box::new(chunk as i64);
            }
            let refs: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let rows = client.query(&sql, &refs).await.map_err(pg_error)?;
            let exhausted = rows.len() < chunk;
            for r in &rows {
                let at = Cursor {
                    created_at: Timestamp(r.get::<_, i64>(1) as u64),
                    id: crate::store::sql::id_of(r.get(0))?,
                };
                let tool: String = r.get(2);
                let body: Option<&[u8]> = r.get(3);
                let task = match body {
                    Some(body) => Some(crate::store::sql::decode_task(body, claim_cols(r, 4))?),
                    None => None,
                };
                q.after = Some(at);
                if let Fed::Done = page.feed(at, task.as_ref().map(|t| (t, tool.as_str()))) {
                    return Ok(page.finish(false));
                }
            }
            if exhausted {
                return Ok(page.finish(true));
            }
        }
    }

    pub(super) async fn pg_counts(&self, tenant: Option<String>) -> StoreResult<TaskCounts> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let rows = client
            .query(
                "SELECT tool, status, sum(n)::bigint FROM tally
                 WHERE $1::text IS NULL OR tenant = $1
                 GROUP BY tool, status",
                &[&tenant],
            )
            .await
            .map_err(pg_error)?;
        let mut counts = TaskCounts::default();
        for r in &rows {
            let (tool, status, n): (String, String, i64) = (r.get(0), r.get(1), r.get(2));
            let status = TaskStatus::parse(&status).ok_or_else(|| {
                StoreError::corrupt(format!("a tally names an unknown status {status:?}"))
            })?;
            counts.add(&tool, status, u64::try_from(n).unwrap_or(0));
        }
        Ok(counts.with_every_status())
    }
}
