//! `[admin]`: how operators are recognised (admin tokens, cross-tenant tenants, the
//! console's sessions and its sign-in through the identity provider), and its checks.

use serde::Deserialize;
use snodo_core::config::SettingError;
use snodo_core::model::Principal;

/// The default console sign-in: eight hours.
pub const DEFAULT_SESSION_MS: u64 = 8 * 60 * 60 * 1000;

/// The longest console sign-in: a week.
const MAX_SESSION_MS: u64 = 7 * 24 * 3_600_000;

/// How operators are recognised: the `[admin]` section of the configuration file, with the
/// values the host resolves beside it (the tokens read from their variables, the admin
/// scopes of `[auth.scopes]`, the loopback case) kept out of the file's keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// `[[admin.tokens]]` as written: each resolved into [`Self::tokens`].
    #[serde(rename = "tokens")]
    pub token_entries: Vec<AdminToken>,
    /// Admin bearer tokens: `(token, principal, cross_tenant)`. They work on the admin API
    /// and the console only, never on `/mcp`.
    #[serde(skip)]
    pub tokens: Vec<(String, Principal, bool)>,
    /// Tenants whose operators act on every tenant (`admin.cross_tenant`, none by default).
    pub cross_tenant: Vec<String>,
    /// The scopes an OAuth caller needs to be an operator (`[auth.scopes] admin`).
    #[serde(skip)]
    pub scopes: Vec<String>,
    /// No authentication is configured (a loopback-only server): the local caller is an
    /// operator of every tenant. Set by the routes from the authenticator they are built
    /// with (`http::router` without tokens), whatever is given here.
    #[serde(skip)]
    pub open_locally: bool,
    /// How long a console sign-in lasts, in ms (`admin.session_ms`, default
    /// [`DEFAULT_SESSION_MS`]: eight hours; from a minute to a week).
    pub session_ms: u64,
    /// Console sign-in through the identity provider (authorization code with PKCE), when
    /// OAuth is configured (`[admin.oauth]`).
    #[serde(rename = "oauth")]
    pub sign_in: Option<SignIn>,
    /// The directory a backup through the server may be written in (`admin.backup_dir`;
    /// default: the one holding the store file). A backup names a path on the server's
    /// machine, so the server writes nowhere else; `None` refuses every such backup.
    pub backup_dir: Option<std::path::PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            token_entries: Vec::new(),
            tokens: Vec::new(),
            cross_tenant: Vec::new(),
            scopes: Vec::new(),
            open_locally: false,
            session_ms: DEFAULT_SESSION_MS,
            sign_in: None,
            backup_dir: None,
        }
    }
}

/// `[[admin.tokens]]`: one admin token as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminToken {
    /// The token itself (prefer `token_env`).
    pub token: Option<String>,
    /// An environment variable holding the token.
    pub token_env: Option<String>,
    /// The operator's tenant.
    pub tenant: String,
    /// Who the operator is (default `operator`).
    pub subject: Option<String>,
    /// Whether it acts on every tenant (default false).
    #[serde(default)]
    pub cross_tenant: bool,
}

impl AdminToken {
    /// The operator this token stands for.
    pub fn principal(&self) -> Principal {
        Principal::new(
            &self.tenant,
            self.subject.clone().unwrap_or_else(|| "operator".into()),
        )
    }
}

/// The console's client at the identity provider (`[admin.oauth]`).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// One of `[[auth.oauth.issuers]]`.
    pub issuer: String,
    /// The console's client id there.
    pub client_id: String,
    /// An environment variable holding its secret (a confidential client); read into
    /// [`Self::client_secret`] by the host.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// Its secret, for a confidential client (HTTP Basic at the token endpoint).
    #[serde(skip)]
    pub client_secret: Option<String>,
    /// The scopes asked for (default: the admin scopes).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Where the provider sends the browser back; default: this resource's origin and
    /// `/console/oauth/callback`.
    #[serde(default)]
    pub redirect_uri: Option<String>,
}

impl std::fmt::Debug for SignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIn")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("client_secret_env", &self.client_secret_env)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("scopes", &self.scopes)
            .field("redirect_uri", &self.redirect_uri)
            .finish()
    }
}

impl AdminConfig {
    /// The rules of `[admin]` that need no other section, each naming its key (relative to
    /// the section): cross-tenant entries name tenants, a session lasts from a minute to a
    /// week, and the sign-in client has an id and a safe redirect.
    pub fn check(&self) -> Result<(), SettingError> {
        if let Some(t) = self.cross_tenant.iter().find(|t| t.is_empty()) {
            return Err(SettingError::new(
                "cross_tenant",
                format!("{t:?} is not a tenant"),
            ));
        }
        if let Some(s) = &self.sign_in {
            s.check().map_err(|e| e.under("oauth"))?;
        }
        if !(60_000..=MAX_SESSION_MS).contains(&self.session_ms) {
            return Err(SettingError::new(
                "session_ms",
                "from 60000 (a minute) to 604800000 (a week)",
            ));
        }
        Ok(())
    }
}

impl SignIn {
    /// The client id is given, and the browser is sent back over https or to loopback.
    fn check(&self) -> Result<(), SettingError> {
        if self.client_id.is_empty() {
            return Err(SettingError::new("client_id", "must not be empty"));
        }
        if let Some(u) = &self.redirect_uri
            && !(u.starts_with("https://")
                || u.starts_with("http://127.0.0.1")
                || u.starts_with("http://localhost")
                || u.starts_with("http://[::1]"))
        {
            return Err(SettingError::new(
                "redirect_uri",
                "https, or plain http to loopback only",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(v: serde_json::Value) -> AdminConfig {
        serde_json::from_value(v).expect("parses")
    }

    #[test]
    fn admin_settings_read_their_keys_and_check_them() {
        let d = parse(json!({}));
        assert_eq!(d.session_ms, DEFAULT_SESSION_MS);
        assert_eq!(d.check(), Ok(()));
        let a = parse(json!({
            "tokens": [{"token_env": "OPS", "tenant": "a", "cross_tenant": true}],
            "cross_tenant": ["ops"],
            "oauth": {"issuer": "https://idp.example.com", "client_id": "console",
                      "client_secret_env": "CONSOLE_SECRET"},
        }));
        assert_eq!(
            a.token_entries[0].principal(),
            Principal::new("a", "operator")
        );
        assert!(a.token_entries[0].cross_tenant);
        let s = a.sign_in.as_ref().expect("sign-in");
        assert_eq!(s.client_secret_env.as_deref(), Some("CONSOLE_SECRET"));
        assert_eq!(s.client_secret, None, "read by the host");
        assert_eq!(a.check(), Ok(()));
        let sign_in = |extra: serde_json::Value| {
            let mut o = json!({"issuer": "https://idp.example.com", "client_id": "c"});
            o.as_object_mut()
                .expect("object")
                .extend(extra.as_object().expect("object").clone());
            json!({ "oauth": o })
        };
        for (v, key) in [
            (json!({"session_ms": 10}), "session_ms"),
            (json!({"session_ms": MAX_SESSION_MS + 1}), "session_ms"),
            (json!({"cross_tenant": [""]}), "cross_tenant"),
            (sign_in(json!({"client_id": ""})), "oauth.client_id"),
            (
                sign_in(json!({"redirect_uri": "http://console.example.com/cb"})),
                "oauth.redirect_uri",
            ),
        ] {
            assert_eq!(parse(v).check().expect_err(key).key, key);
        }
        assert!(
            parse(sign_in(json!({"redirect_uri": "http://127.0.0.1:9/cb"})))
                .check()
                .is_ok()
        );
        assert!(
            serde_json::from_value::<AdminConfig>(sign_in(json!({"client_secret": "s"}))).is_err(),
            "the secret itself is not a key"
        );
    }
}
