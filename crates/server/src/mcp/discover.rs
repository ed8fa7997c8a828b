//! `server/discover`: versions, capabilities and server identity.

use serde_json::{Value, json};

use crate::protocol::{PROTOCOL_VERSION, TASKS_EXTENSION};

use super::McpServer;

impl McpServer {
    pub(super) fn discover(&self) -> Value {
        json!({
            "resultType": "complete",
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"listChanged": false},
                "prompts": {"listChanged": false},
                "completions": {},
                "extensions": {TASKS_EXTENSION: {}},
            },
            "serverInfo": {"name": self.config.name, "version": self.config.version},
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": self.config.name, "version": self.config.version}},
        })
    }
}
