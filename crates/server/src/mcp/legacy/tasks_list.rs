//! `tasks/list` (2025-11-25): the caller's own tasks, newest first, a page at a time behind
//! an opaque cursor.

use serde_json::{Value, json};

use crate::protocol::{ResultObject, RpcError};
use snodo_core::store::{Cursor, StoreError, TaskFilter, TaskQuery};

use super::super::request::TasksList;
use super::super::{Ctx, Handled, McpServer, store_unavailable};
use super::task;

/// How many tasks a page walks. Each is read through the caller's authorization, so a page
/// holds the caller's own tasks only and may hold fewer (another subject's, under
/// per-subject isolation, or one that expired meanwhile).
const PAGE: usize = 50;

impl McpServer {
    /// The listing runs on the operators' index, narrowed to the caller's tenant, and each
    /// task it names is read as `tasks/get` reads it: a task the caller may not see is left
    /// out, never shown.
    pub(in crate::mcp) async fn tasks_list(&self, list: TasksList, ctx: &Ctx<'_>) -> Handled {
        let after = match list.cursor.as_deref().map(Cursor::parse) {
            None => None,
            Some(Ok(c)) => Some(c),
            Some(Err(_)) => {
                return Err(RpcError::invalid_params(
                    "params.cursor is not one this server gave: start again without it",
                ));
            }
        };
        let filter = TaskFilter {
            tenant: Some(ctx.principal.tenant.clone()),
            ..TaskFilter::default()
        };
        let mut query = TaskQuery::new(filter, PAGE);
        query.after = after;
        let page = self.tasks().list(&query).await.map_err(|e| {
            tracing::warn!(error = %e, "tasks could not be listed");
            store_unavailable()
        })?;
        let mut tasks: Vec<Value> = Vec::with_capacity(page.tasks.len());
        for summary in &page.tasks {
            match self
                .tasks()
                .view(ctx.principal, &summary.id.to_string())
                .await
            {
                Ok(view) => tasks.push(task::task(&view)),
                Err(StoreError::NotFound) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "a listed task could not be read");
                    return Err(store_unavailable());
                }
            }
        }
        let mut result = ResultObject::new();
        result.insert("tasks".into(), json!(tasks));
        if let Some(next) = page.next {
            result.insert("nextCursor".into(), json!(next.encode()));
        }
        Ok(ctx.dialect.complete(result))
    }
}
