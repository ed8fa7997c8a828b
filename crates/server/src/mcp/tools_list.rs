//! `tools/list`: the served tools with their schemas.

use serde_json::{Value, json};

use crate::protocol::ResultObject;

use super::{Ctx, McpServer};

impl McpServer {
    pub(super) fn tools_list(&self, ctx: &Ctx<'_>) -> Value {
        let tools: Vec<Value> = self
            .config
            .catalog
            .current()
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
                if let Some(o) = &t.info.output_schema {
                    v.insert("outputSchema".into(), o.clone());
                }
                if let Some(e) = ctx.dialect.tool_execution(t.mode.unwrap_or(t.info.mode)) {
                    v.insert("execution".into(), e);
                }
                Value::Object(v)
            })
            .collect();
        let mut result = ResultObject::new();
        result.insert("tools".into(), Value::from(tools));
        ctx.dialect.complete_uncached(result)
    }
}
