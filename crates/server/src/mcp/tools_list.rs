//! `tools/list`: the served tools with their schemas.

use serde_json::{Value, json};

use crate::protocol::ResultObject;
use snodo_wasm::TaskMode;

use super::{Ctx, McpServer};

impl McpServer {
    pub(super) fn tools_list(&self, ctx: &Ctx<'_>) -> Value {
        let catalog = self.config.catalog.current();
        // A client that may call without a task may be answered with a handle, by tools
        // that give one: it is shown the tool that follows them, and no output schema a
        // handle would not meet.
        let handled = catalog.handles() && !ctx.dialect.follows_tasks(false, &ctx.meta);
        let mut tools: Vec<Value> = catalog
            .tools()
            .iter()
            .map(|t| {
                let mut v = ResultObject::new();
                v.insert("name".into(), json!(t.info.name));
                v.insert("inputSchema".into(), t.info.input_schema.clone());
                if let Some(title) = &t.info.title {
                    v.insert("title".into(), json!(title));
                }
                if let Some(d) = &t.info.description {
                    v.insert("description".into(), json!(d));
                }
                if let Some(o) = &t.info.output_schema
                    && !(handled && t.handle_after_ms.is_some())
                {
                    v.insert("outputSchema".into(), o.clone());
                }
                let mut mode = t.mode.unwrap_or(t.info.mode);
                // A task-only tool that gives handles also serves a call without a task.
                if handled && t.handle_after_ms.is_some() && mode == TaskMode::Required {
                    mode = TaskMode::Optional;
                }
                if let Some(e) = ctx.dialect.tool_execution(mode) {
                    v.insert("execution".into(), e);
                }
                Value::Object(v)
            })
            .collect();
        if handled {
            tools.push(super::handle::task_result_tool());
        }
        let mut result = ResultObject::new();
        result.insert("tools".into(), Value::from(tools));
        ctx.dialect.complete_uncached(result)
    }
}
