//! Who a guest runs for (`snodo:tasks/caller@0.4.0`): the principal, the scopes it was
//! granted, the token claims the operator passes to the tool, and the capabilities its
//! client declared. For a task it is rebuilt from what the store keeps with the task, so
//! every attempt sees the same caller; it never holds a credential.

use serde_json::{Map, Value};

use crate::bindings::v4::snodo::tasks0_4_0::caller as wit;
use crate::host::HostState;

/// The caller an execution is made for.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GuestCaller {
    /// The tenant.
    pub tenant: String,
    /// The subject within the tenant.
    pub subject: String,
    /// The granted scopes; `None`: every scope (a static token, or no authorization).
    pub scopes: Option<Vec<String>>,
    /// The claims passed to the tool.
    pub claims: Map<String, Value>,
    /// What the client declared (a JSON object; `{}` when nothing is known).
    pub client_capabilities: Value,
}

impl GuestCaller {
    pub(crate) fn principal(&self) -> wit::Principal {
        wit::Principal {
            tenant: self.tenant.clone(),
            subject: self.subject.clone(),
            scopes: match &self.scopes {
                None => wit::Granted::All,
                Some(s) => wit::Granted::Only(s.clone()),
            },
            claims: Value::Object(self.claims.clone()).to_string(),
        }
    }

    pub(crate) fn capabilities(&self) -> String {
        match &self.client_capabilities {
            Value::Object(_) => self.client_capabilities.to_string(),
            _ => "{}".to_owned(),
        }
    }
}

impl wit::Host for HostState {
    fn current(&mut self) -> wasmtime::Result<wit::Principal> {
        Ok(self.caller.principal())
    }

    fn client_capabilities(&mut self) -> wasmtime::Result<String> {
        Ok(self.caller.capabilities())
    }
}
