//! `server/discover`: versions, capabilities and server identity.

use serde_json::{Value, json};

use crate::protocol::{PROTOCOL_VERSION, ResultObject, TASKS_EXTENSION};

use super::{Ctx, McpServer};

impl McpServer {
    pub(super) fn discover(&self, ctx: &Ctx<'_>) -> Value {
        let info = json!({"name": self.config.name, "version": self.config.version});
        let mut result = ResultObject::new();
        result.insert("supportedVersions".into(), json!([PROTOCOL_VERSION]));
        result.insert(
            "capabilities".into(),
            json!({
                // A deployment swapped in changes the lists, and subscription streams that
                // ask hear of it; `listChanged` stays false until the official suite's
                // list-mutation hook (a tool that changes the lists) can be served, which
                // a sandboxed guest cannot do.
                "tools": {"listChanged": false},
                "resources": {"listChanged": false},
                "prompts": {"listChanged": false},
                "completions": {},
                "extensions": {TASKS_EXTENSION: {}},
            }),
        );
        result.insert(
            "_meta".into(),
            json!({"io.modelcontextprotocol/serverInfo": info}),
        );
        result.insert("serverInfo".into(), info);
        ctx.dialect.complete_uncached(result)
    }
}
