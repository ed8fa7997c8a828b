//! `[[upstreams]]` and `[gateway]`: which upstream MCP servers' tools are served, under
//! which names, with which credential; where the gateway component is and how often the
//! upstreams are listed again.

use std::path::PathBuf;
use std::time::Duration;

use hyper::http;

use snodo_core::config::SettingError;
use snodo_wasm::outbound::Secret;

/// The revisions an upstream may speak.
pub const PROTOCOLS: [&str; 2] = ["2025-11-25", "2026-07-28"];

/// One `[[upstreams]]` entry as written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSection {
    /// Names the upstream in logs, metrics, messages and the tools' environment
    /// (lowercase letters, digits, `_` and `-`).
    pub name: String,
    /// Its Streamable HTTP endpoint.
    pub url: String,
    /// What each of its tools is served under: this, then the upstream's name for it
    /// (default `"<name>_"`; `""` serves them under their own names).
    pub prefix: Option<String>,
    /// The upstream's tools to serve (default: every tool it lists).
    pub tools: Option<Vec<String>>,
    /// The upstream's tools a person confirms before each call goes out (`"*"`: all).
    #[serde(default)]
    pub confirm: Vec<String>,
    /// `"2025-11-25"` or `"2026-07-28"`; default: asked (`server/discover`, then the
    /// 2025-11-25 handshake).
    pub protocol: Option<String>,
    /// The `[secrets]` entry sent as `Authorization: Bearer <value>`, added by the host to
    /// every request to the upstream (the gateway component never sees it).
    pub bearer: Option<String>,
    /// Access tokens from the upstream's authorization server (the client credentials
    /// grant), sent as the bearer token is and renewed before they expire.
    pub oauth: Option<OAuthSection>,
}

/// `[upstreams.oauth]`: the client credentials grant (RFC 6749 §4.4) against the upstream's
/// authorization server.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSection {
    /// The token endpoint.
    pub token_url: String,
    /// This client's id there.
    pub client_id: String,
    /// The `[secrets]` entry holding its secret (sent with HTTP Basic authentication).
    pub client_secret: String,
    /// The scope asked for (default none).
    pub scope: Option<String>,
    /// The RFC 8707 resource the token is for (default: the upstream's URL).
    pub resource: Option<String>,
}

/// An upstream's OAuth client, its secret read.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthClient {
    /// What was written.
    pub section: OAuthSection,
    /// The client secret.
    pub secret: Secret,
    /// `scheme://host:port` of the token endpoint.
    pub origin: String,
}

/// An upstream, checked, its credential read. Equal only when the credentials' values are
/// too, so a rotated secret is a change a reload hands the gateway (`Gateway::rotate`).
#[derive(Clone, PartialEq, Eq)]
pub struct Upstream {
    /// What was written.
    pub section: UpstreamSection,
    /// `scheme://host:port` of the URL: the one place its tools may reach.
    pub origin: String,
    /// The bearer token's value.
    pub bearer: Option<Secret>,
    /// The OAuth client tokens come from, instead of a fixed bearer token.
    pub oauth: Option<OAuthClient>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("section", &self.section)
            .field("origin", &self.origin)
            .field("bearer", &self.bearer.as_ref().map(|_| "<secret>"))
            .field("oauth", &self.oauth.as_ref().map(|o| &o.section))
            .finish()
    }
}

impl Upstream {
    /// The secrets written for it (its bearer token, its OAuth client secret): what is
    /// scrubbed from anything of its answers that is logged, with its current token.
    pub fn secrets(&self) -> Vec<Secret> {
        let mut out: Vec<Secret> = self.bearer.iter().cloned().collect();
        out.extend(self.oauth.as_ref().map(|o| o.secret.clone()));
        out
    }

    /// `section` checked, each refusal naming its key (relative to the entry), with the
    /// bearer token found by `secret`.
    pub fn new(
        section: UpstreamSection,
        secret: impl Fn(&str) -> Option<Secret>,
    ) -> Result<Self, SettingError> {
        let name_ok = !section.name.is_empty()
            && section.name.len() <= 64
            && (section.name.bytes())
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(SettingError::new(
                "name",
                "1 to 64 of lowercase letters, digits, _ and -",
            ));
        }
        let origin = origin_of(&section.url).map_err(|why| SettingError::new("url", why))?;
        if let Some(p) = &section.prefix
            && !p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err(SettingError::new(
                "prefix",
                "letters, digits, _, - and . only (it begins tool names)",
            ));
        }
        if let Some(p) = &section.protocol
            && !PROTOCOLS.contains(&p.as_str())
        {
            return Err(SettingError::new(
                "protocol",
                format!("{p:?}: one of {PROTOCOLS:?}, or leave it out to ask the upstream"),
            ));
        }
        if let Some(tools) = &section.tools {
            if tools.is_empty() {
                return Err(SettingError::new(
                    "tools",
                    "serves nothing: leave it out to serve every tool the upstream lists",
                ));
            }
            if let Some(c) = (section.confirm.iter()).find(|c| *c != "*" && !tools.contains(c)) {
                return Err(SettingError::new(
                    "confirm",
                    format!("{c:?} is not in tools: it would never be called"),
                ));
            }
        }
        let named = |key: &str, name: &str| {
            secret(name).ok_or_else(|| {
                SettingError::new(
                    key,
                    format!("no secret {name:?} is configured under [secrets]"),
                )
            })
        };
        let bearer = match &section.bearer {
            Some(name) => Some(named("bearer", name)?),
            None => None,
        };
        let oauth = match &section.oauth {
            Some(_) if bearer.is_some() => {
                return Err(SettingError::new(
                    "oauth",
                    "give bearer or oauth, not both: each is the upstream's credential",
                ));
            }
            Some(o) => Some(OAuthClient {
                origin: origin_of(&o.token_url)
                    .map_err(|why| SettingError::new("oauth.token_url", why))?,
                secret: named("oauth.client_secret", &o.client_secret)?,
                section: o.clone(),
            }),
            None => None,
        };
        Ok(Self {
            section,
            origin,
            bearer,
            oauth,
        })
    }

    /// Whether `other` is this upstream with at most its credentials changed (the bearer
    /// token or the OAuth client, their `[secrets]` names or values): what a reload may
    /// replace while serving. Everything that decides where calls go and under which names
    /// must be the same.
    pub fn same_but_credentials(&self, other: &Upstream) -> bool {
        let place = |u: &Upstream| UpstreamSection {
            bearer: None,
            oauth: None,
            ..u.section.clone()
        };
        place(self) == place(other) && self.origin == other.origin
    }

    /// The name the upstream's tool `tool` is served under.
    pub fn served_name(&self, tool: &str) -> String {
        match &self.section.prefix {
            Some(p) => format!("{p}{tool}"),
            None => format!("{}_{tool}", self.section.name),
        }
    }

    /// Whether the upstream's tool `tool` is served.
    pub fn serves(&self, tool: &str) -> bool {
        (self.section.tools.as_ref()).is_none_or(|t| t.iter().any(|n| n == tool))
    }

    /// Whether a person confirms each call of the upstream's tool `tool`.
    pub fn confirms(&self, tool: &str) -> bool {
        self.section.confirm.iter().any(|c| c == "*" || c == tool)
    }
}

/// Whether `next` are the upstreams `before`, in the same order, with at most their
/// credentials changed ([`Upstream::same_but_credentials`]).
pub fn same_but_credentials(before: &[Upstream], next: &[Upstream]) -> bool {
    before.len() == next.len()
        && before
            .iter()
            .zip(next)
            .all(|(a, b)| a.same_but_credentials(b))
}

/// `scheme://host:port` of an `http` or `https` URL.
fn origin_of(url: &str) -> Result<String, String> {
    let uri: http::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => "http",
        Some("https") => "https",
        _ => return Err(format!("{url:?}: http:// or https:// only")),
    };
    let Some(authority) = uri.authority() else {
        return Err(format!("{url:?} names no host"));
    };
    if authority.as_str().contains('@') {
        return Err(format!(
            "{url:?} carries credentials: give them as a secret (bearer)"
        ));
    }
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Ok(format!("{scheme}://{}:{port}", authority.host()))
}

/// `[gateway]`: the component upstream tools run on, and how upstreams are listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewaySettings {
    /// The gateway component (default: `components/gateway.wasm` beside the binary, then
    /// where the build puts it).
    pub component: Option<PathBuf>,
    /// How often each upstream's tools are listed again (`refresh_ms`, default 60 000); an
    /// upstream that could not be listed is tried again after a fifth of it.
    #[serde(rename = "refresh_ms", with = "snodo_core::config::millis")]
    pub refresh: Duration,
    /// How long one listing may take, each request (`list_timeout_ms`, default 10 000).
    #[serde(rename = "list_timeout_ms", with = "snodo_core::config::millis")]
    pub list_timeout: Duration,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            component: None,
            refresh: Duration::from_secs(60),
            list_timeout: Duration::from_secs(10),
        }
    }
}

impl GatewaySettings {
    /// The rules of `[gateway]`, each naming its key: both times positive.
    pub fn check(&self) -> Result<(), SettingError> {
        for (key, t) in [
            ("refresh_ms", self.refresh),
            ("list_timeout_ms", self.list_timeout),
        ] {
            if t.is_zero() {
                return Err(SettingError::new(key, "must be at least 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn section(v: serde_json::Value) -> UpstreamSection {
        serde_json::from_value(v).expect("parses")
    }

    fn token(name: &str) -> Option<Secret> {
        (name == "tok").then(|| Secret::new("s3cret"))
    }

    #[test]
    fn an_upstream_is_checked_key_by_key() {
        let u = Upstream::new(
            section(
                json!({"name": "tickets", "url": "http://127.0.0.1:9000/mcp",
                "tools": ["create", "get"], "confirm": ["create"], "bearer": "tok"}),
            ),
            token,
        )
        .expect("valid");
        assert_eq!(u.origin, "http://127.0.0.1:9000");
        assert_eq!(u.served_name("create"), "tickets_create");
        assert!(u.serves("get") && !u.serves("delete"));
        assert!(u.confirms("create") && !u.confirms("get"));
        assert!(u.bearer.is_some());
        assert!(!format!("{u:?}").contains("s3cret"), "{u:?}");
        // An error body that echoes the credential is logged without it.
        let echoed = "HTTP 400: bad header Authorization: Bearer s3cret";
        let logged = snodo_wasm::outbound::scrub_text(echoed, &u.secrets()).expect("scrubbed");
        assert!(
            !logged.contains("s3cret") && logged.starts_with("HTTP 400"),
            "{logged}"
        );
        let plain = Upstream::new(
            section(json!({"name": "a", "url": "https://x.example/mcp", "prefix": ""})),
            token,
        )
        .expect("valid");
        assert_eq!(plain.origin, "https://x.example:443");
        assert_eq!(plain.served_name("t"), "t");
        assert!(plain.serves("anything"));
        for (v, key) in [
            (json!({"name": "Tickets", "url": "http://a/"}), "name"),
            (json!({"name": "t", "url": "ftp://a/"}), "url"),
            (json!({"name": "t", "url": "http://u:p@a/"}), "url"),
            (
                json!({"name": "t", "url": "http://a/", "prefix": "a b"}),
                "prefix",
            ),
            (
                json!({"name": "t", "url": "http://a/", "protocol": "2024-11-05"}),
                "protocol",
            ),
            (
                json!({"name": "t", "url": "http://a/", "tools": []}),
                "tools",
            ),
            (
                json!({"name": "t", "url": "http://a/", "tools": ["a"], "confirm": ["b"]}),
                "confirm",
            ),
            (
                json!({"name": "t", "url": "http://a/", "bearer": "missing"}),
                "bearer",
            ),
        ] {
            let e = Upstream::new(section(v.clone()), token).expect_err(key);
            assert_eq!(e.key, key, "{v}");
        }
        assert!(
            serde_json::from_value::<UpstreamSection>(json!({"name": "t", "url": "u", "x": 1}))
                .is_err()
        );
    }

    #[test]
    fn gateway_settings_refuse_zero_times() {
        assert_eq!(GatewaySettings::default().check(), Ok(()));
        let g: GatewaySettings = serde_json::from_value(json!({"refresh_ms": 0})).expect("parses");
        assert_eq!(g.check().expect_err("zero").key, "refresh_ms");
    }
}
