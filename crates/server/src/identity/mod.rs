//! Who is calling, below every edge that asks: a [`Caller`] (a principal and its scopes),
//! the [`Authenticator`] that turns a request's headers into one, configured static bearer
//! tokens ([`StaticTokens`]), and the OAuth resource server ([`oauth::ResourceServer`]).
//!
//! `http`, `mcp` and `admin` all read identity from here; nothing here knows MCP, the
//! admin API or the HTTP routes. Which scopes an MCP operation needs is the MCP server's
//! policy (`mcp::ScopePolicy`), not identity's.

mod caller;
pub mod oauth;
mod tokens;

pub use caller::{Authentication, Authenticator, Caller, Scopes, Unauthenticated};
pub use oauth::ResourceServer;
pub use tokens::{
    MIN_TOKEN_LEN, StaticTokens, TokenError, bearer_token, check_token, local_principal,
};
pub(crate) use tokens::{TokenTable, digest};
