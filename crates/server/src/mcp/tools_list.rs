//! `tools/list`: the served tools with their schemas.

use serde_json::{Value, json};

use super::McpServer;

impl McpServer {
    pub(super) fn tools_list(&self) -> Value {
        let tools: Vec<Value> = self
            .config
            .catalog
            .tools()
            .iter()
            .map(|t| {
                let mut v = json!({"name": t.info.name, "inputSchema": t.info.input_schema});
                if let Some(title) = &t.info.title {
                    v["title"] = json!(title);
                }
                if let Some(d) = &t.info.description {
                    v["description"] = json!(d);
                }
                if let Some(o) = &t.info.output_schema {
                    v["outputSchema"] = o.clone();
                }
                v
            })
            .collect();
        json!({"resultType": "complete", "tools": tools, "ttlMs": 0, "cacheScope": "private"})
    }
}
