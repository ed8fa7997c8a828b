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
                // A deployment swapped in changes them; subscription streams that ask
                // hear of it.
                "tools": {"listChanged": true},
                "resources": {"listChanged": true},
                "prompts": {"listChanged": true},
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
