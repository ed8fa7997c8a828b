//! Operators: who may act on tasks outside MCP, and what they may do (the admin API under
//! `/admin/v1/…`, the console at `/console` and `snodo tasks` all go through here).
//!
//! An operator is a caller holding the admin scopes (`[auth.scopes] admin`) or presenting
//! an admin token (`[[admin.tokens]]`); a loopback-only server without authentication
//! treats its local caller as an operator of every tenant. An operator sees and acts on its
//! own tenant's tasks only, unless its tenant is listed in `admin.cross_tenant` (or its
//! token says `cross_tenant`): another tenant's task is reported exactly like an unknown
//! one. Every action goes through the task service the MCP methods use (`crate::tasks`),
//! with the same hand-offs to the runner, so a cancel stops the attempt and an answer
//! resumes the task.
//!
//! - `operator`: who is an operator ([`Operator`], `Admin`: admin tokens, admin scopes).
//! - `actions`: what operators do to tasks (`Operators`), and what they see ([`TaskDetail`]).
//! - `query`: a listing's query string.
//! - `api`: the JSON API under `/admin/v1`; `console`: the HTML console; `session`: its
//!   sealed sign-in cookie; `answer`: an operator's answer checked against its question.

mod actions;
mod answer;
pub(crate) mod api;
pub(crate) mod console;
mod operator;
mod query;
mod session;

use serde_json::{Value, json};

use snodo_core::model::Principal;
use snodo_core::store::StoreError;

pub(crate) use actions::Operators;
pub use actions::{BulkFailure, BulkOutcome, Question, TaskDetail};
pub use api::{AnswerBody, BulkBody, CancelBody};
pub(crate) use operator::Admin;
pub use operator::Operator;
pub use session::{SECURE_SESSION_COOKIE, SESSION_COOKIE};

/// The most tasks one bulk cancel acts on, unless the request asks for fewer.
pub const DEFAULT_BULK_CAP: usize = 1_000;
/// The largest cap a bulk cancel may ask for.
pub const MAX_BULK_CAP: usize = 10_000;
/// The most listing pages one bulk cancel (or preview) walks, each at most
/// [`snodo_core::store::LIST_SCAN`] entries: a filter that matches little cannot make it
/// walk the whole store. Past it the outcome says `incomplete`.
pub const MAX_BULK_PAGES: usize = 40;

/// How operators are recognised (`[admin]`).
#[derive(Debug, Clone, Default)]
pub struct AdminConfig {
    /// Admin bearer tokens: `(token, principal, cross_tenant)`. They work on the admin API
    /// and the console only, never on `/mcp`.
    pub tokens: Vec<(String, Principal, bool)>,
    /// Tenants whose operators act on every tenant.
    pub cross_tenant: Vec<String>,
    /// The scopes an OAuth caller needs to be an operator (`[auth.scopes] admin`).
    pub scopes: Vec<String>,
    /// No authentication is configured (a loopback-only server): the local caller is an
    /// operator of every tenant. Set by the routes from the authenticator they are built
    /// with (`http::router` without tokens), whatever is given here.
    pub open_locally: bool,
    /// How long a console sign-in lasts, in ms.
    pub session_ms: u64,
    /// Console sign-in through the identity provider (authorization code with PKCE), when
    /// OAuth is configured.
    pub sign_in: Option<SignIn>,
}

/// The console's client at the identity provider (`[admin.oauth]`).
#[derive(Clone, PartialEq, Eq)]
pub struct SignIn {
    /// One of `[[auth.oauth.issuers]]`.
    pub issuer: String,
    /// The console's client id there.
    pub client_id: String,
    /// Its secret, for a confidential client (HTTP Basic at the token endpoint).
    pub client_secret: Option<String>,
    /// The scopes asked for (default: the admin scopes).
    pub scopes: Vec<String>,
    /// Where the provider sends the browser back; default: this resource's origin and
    /// `/console/oauth/callback`.
    pub redirect_uri: Option<String>,
}

impl std::fmt::Debug for SignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIn")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri)
            .finish()
    }
}

/// The default console sign-in: eight hours.
pub const DEFAULT_SESSION_MS: u64 = 8 * 60 * 60 * 1000;

/// Why an operator's request failed; each maps to one HTTP status and a JSON body
/// `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// 401: no credential, or not a valid one.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: authenticated, but not an operator (or not of that tenant).
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such task (or another tenant's).
    #[error("no such task")]
    NotFound,
    /// 400: the request is malformed or asks for what cannot be.
    #[error("{0}")]
    Invalid(String),
    /// 409: the task's state does not allow it (finished, not waiting).
    #[error("{0}")]
    Conflict(String),
    /// 503: the store cannot answer now.
    #[error("{0}")]
    Unavailable(String),
}

impl AdminError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Self::Unauthenticated(_) => 401,
            Self::Forbidden(_) => 403,
            Self::NotFound => 404,
            Self::Invalid(_) => 400,
            Self::Conflict(_) => 409,
            Self::Unavailable(_) => 503,
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated(_) => "unauthenticated",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound => "not_found",
            Self::Invalid(_) => "invalid",
            Self::Conflict(_) => "conflict",
            Self::Unavailable(_) => "unavailable",
        }
    }

    pub(crate) fn body(&self) -> Value {
        json!({"error": {"code": self.code(), "message": self.to_string()}})
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::NotFound,
            StoreError::Invalid(m) => Self::Invalid(m.to_string()),
            StoreError::Terminal { status } => {
                Self::Conflict(format!("the task has already finished ({status})"))
            }
            StoreError::Unavailable(m) => Self::Unavailable(m.to_string()),
            other => Self::Unavailable(other.to_string()),
        }
    }
}
