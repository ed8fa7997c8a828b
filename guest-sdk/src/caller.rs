//! Who a tool runs for: the principal of the call (for a task, the one stored when it was
//! created, so every attempt sees the same), and the mode rule's view of a call.

use serde_json::{Map, Value};

use crate::Mode;
use crate::bindings::snodo::tasks0_4_0::caller as wit;

/// The caller of a tool: its tenant and subject, the scopes it was granted, and the token
/// claims the operator passes to this tool (`[tools.NAME] claims`). Never a credential.
///
/// ```
/// # fn f(cx: &snodo_guest::Context) {
/// let caller = cx.caller();
/// if caller.has_scope("reports:export") {
///     let email = caller.claim("email").and_then(|v| v.as_str());
///     # let _ = email;
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    /// The tenant whose tasks these are.
    pub tenant: String,
    /// The caller within the tenant (the token's subject, or a static token's).
    pub subject: String,
    /// The granted scopes; `None`: every scope (a static token, or no authorization).
    pub scopes: Option<Vec<String>>,
    /// The claims passed to this tool.
    pub claims: Map<String, Value>,
}

impl Caller {
    /// Whether the caller holds `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes
            .as_ref()
            .is_none_or(|s| s.iter().any(|x| x == scope))
    }

    /// The claim `name`, if the operator passes it to this tool and the token had it.
    pub fn claim(&self, name: &str) -> Option<&Value> {
        self.claims.get(name)
    }

    pub(crate) fn from_wit(p: wit::Principal) -> Self {
        Self {
            tenant: p.tenant,
            subject: p.subject,
            scopes: match p.scopes {
                wit::Granted::All => None,
                wit::Granted::Only(s) => Some(s),
            },
            claims: match serde_json::from_str(&p.claims) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(),
            },
        }
    }

    /// The caller of the running call.
    pub(crate) fn current() -> Self {
        Self::from_wit(wit::current())
    }
}

/// The capabilities the calling client declared (a JSON object).
pub(crate) fn client_capabilities() -> Value {
    serde_json::from_str(&wit::client_capabilities()).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// One call a mode rule decides: who makes it and what its client can do.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeCall {
    /// Who makes the call.
    pub caller: Caller,
    /// What its client declared (a JSON object: `elicitation`, `extensions`, ...).
    pub client_capabilities: Value,
}

impl ModeCall {
    /// Whether the client declared the capability `name` (a top-level key such as
    /// `"elicitation"`).
    pub fn client_can(&self, name: &str) -> bool {
        self.client_capabilities.get(name).is_some()
    }
}

/// What a mode rule decides: the mode, and optionally the task's TTL and poll interval
/// (the host keeps them within its bounds: at most the tool's configured TTL, at least a
/// minute and the retry schedule; polls from 100 ms to a minute).
///
/// ```
/// use snodo_guest::{Mode, ModeChoice};
/// let choice = ModeChoice::from(Mode::Optional).ttl_ms(3_600_000).poll_interval_ms(5_000);
/// # let _ = choice;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeChoice {
    pub(crate) mode: Mode,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) poll_interval_ms: Option<u64>,
}

impl From<Mode> for ModeChoice {
    fn from(mode: Mode) -> Self {
        Self {
            mode,
            ttl_ms: None,
            poll_interval_ms: None,
        }
    }
}

impl ModeChoice {
    /// How long the task is kept.
    pub fn ttl_ms(mut self, ttl_ms: u64) -> Self {
        self.ttl_ms = Some(ttl_ms);
        self
    }

    /// How often its client should poll.
    pub fn poll_interval_ms(mut self, ms: u64) -> Self {
        self.poll_interval_ms = Some(ms);
        self
    }
}
