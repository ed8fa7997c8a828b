//! What the resource server learns from its issuers and tells its clients: authorization
//! server metadata (RFC 8414, OpenID Connect discovery) fetched with a backoff, key sets
//! cached and refreshed, the endpoints a browser's sign-in uses, and this resource's
//! Protected Resource Metadata (RFC 9728).

use std::sync::Arc;

use serde_json::{Value, json};

use super::fetch::FetchError;
use super::jwt::KeySet;
use super::{Failed, Issuer, Keys, METADATA_BACKOFF_MAX_SECS, Refusal, ResourceServer};

/// The well-known path of the metadata of `resource` (RFC 9728 §3.1): the well-known
/// prefix, then the resource's path (`/.well-known/oauth-protected-resource/mcp`).
pub fn metadata_path(resource: &str) -> String {
    let path = resource
        .parse::<axum::http::Uri>()
        .map(|u| u.path().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    format!("/.well-known/oauth-protected-resource{path}")
}

pub(super) fn metadata_url(resource: &str) -> String {
    match resource.parse::<axum::http::Uri>() {
        Ok(u) => format!(
            "{}://{}{}",
            u.scheme_str().unwrap_or("https"),
            u.authority().map_or("", |a| a.as_str()),
            metadata_path(resource)
        ),
        Err(_) => String::new(),
    }
}

impl ResourceServer {
    /// Whether the issuer's JWTs are verified with its key set: one is configured, or its
    /// metadata names one, or there is no introspection to ask instead.
    pub(super) async fn has_keys(&self, issuer: &Issuer) -> Result<bool, Refusal> {
        if issuer.config.jwks_uri.is_some() || issuer.config.introspection.is_none() {
            return Ok(true);
        }
        let meta = self.metadata(issuer).await.map_err(Refusal::from)?;
        Ok(meta["jwks_uri"].is_string())
    }

    /// The issuer's keys, fetched when none are held, when they are older than
    /// `jwks_max_age`, or when `kid` is unknown and the last fetch is older than
    /// `jwks_min_refresh`. A failed fetch keeps the keys held.
    pub(super) async fn keys(
        &self,
        issuer: &Issuer,
        kid: Option<&str>,
    ) -> Result<Arc<KeySet>, Refusal> {
        let now = (self.clock)();
        let due = |held: &Option<Keys>, last: Option<u64>| -> bool {
            let recently = last.is_some_and(|t| now < t + self.config.jwks_min_refresh.as_secs());
            match held {
                None => !recently,
                Some(k) => {
                    let stale = now >= k.fetched_at + self.config.jwks_max_age.as_secs();
                    let unknown = kid.is_some_and(|kid| !k.set.has(kid));
                    (stale || unknown) && !recently
                }
            }
        };
        if !due(&issuer.keys.read(), *issuer.last_fetch.lock()) {
            return held_keys(issuer);
        }
        let _one = issuer.fetching.lock().await;
        // Another request may have fetched while this one waited.
        if due(&issuer.keys.read(), *issuer.last_fetch.lock()) {
            *issuer.last_fetch.lock() = Some(now);
            match self.fetch_keys(issuer).await {
                Ok(set) => {
                    tracing::info!(issuer = %issuer.config.issuer, keys = set.len(), "fetched the issuer's key set");
                    *issuer.keys.write() = Some(Keys {
                        set: Arc::new(set),
                        fetched_at: now,
                    });
                }
                Err(e) => {
                    let refusal = Refusal::from(e);
                    if issuer.keys.read().is_none() {
                        return Err(refusal);
                    }
                }
            }
        }
        held_keys(issuer)
    }

    /// `configured`, else the URL the issuer's metadata names in `field`.
    pub(super) async fn endpoint(
        &self,
        issuer: &Issuer,
        configured: Option<&String>,
        field: &str,
    ) -> Result<String, FetchError> {
        if let Some(u) = configured {
            return Ok(u.clone());
        }
        let meta = self.metadata(issuer).await?;
        match meta[field].as_str() {
            Some(u) if super::fetch::check_url(u).is_ok() => Ok(u.to_owned()),
            _ => Err(FetchError::new(
                &issuer.config.issuer,
                format!("the issuer's metadata names no usable {field}"),
            )),
        }
    }

    pub(super) fn issuer(&self, issuer: &str) -> Result<&Issuer, String> {
        self.issuers
            .iter()
            .find(|i| i.config.issuer == issuer)
            .ok_or_else(|| format!("{issuer:?} is not one of [[auth.oauth.issuers]]"))
    }

    /// The authorization and token endpoints of the configured issuer `issuer`, from its
    /// metadata: where a browser signs in (the console's authorization code flow).
    pub(crate) async fn sign_in_endpoints(&self, issuer: &str) -> Result<(String, String), String> {
        let i = self.issuer(issuer)?;
        let authorize = self
            .endpoint(i, None, "authorization_endpoint")
            .await
            .map_err(|e| e.to_string())?;
        let token = self
            .endpoint(i, None, "token_endpoint")
            .await
            .map_err(|e| e.to_string())?;
        Ok((authorize, token))
    }

    /// Redeems an authorization code at `token_endpoint` of `issuer` (`form` holds the
    /// grant; `client` authenticates a confidential client): the access token.
    pub(crate) async fn redeem_code(
        &self,
        issuer: &str,
        token_endpoint: &str,
        client: Option<(&str, &str)>,
        form: &[(&str, &str)],
    ) -> Result<String, String> {
        let answer = self
            .issuer(issuer)?
            .fetcher
            .post_form(token_endpoint, client, form)
            .await
            .map_err(|e| e.to_string())?;
        match answer["access_token"].as_str() {
            Some(t) => Ok(t.to_owned()),
            None => Err(format!(
                "the token endpoint gave no access token ({})",
                answer["error"].as_str().unwrap_or("no error named")
            )),
        }
    }

    pub(super) async fn fetch_keys(&self, issuer: &Issuer) -> Result<KeySet, FetchError> {
        let uri = self
            .endpoint(issuer, issuer.config.jwks_uri.as_ref(), "jwks_uri")
            .await?;
        let doc = issuer.fetcher.get_json(&uri).await?;
        KeySet::from_document(&doc).map_err(|e| FetchError::new(&uri, e.to_string()))
    }

    /// The issuer's authorization server metadata (RFC 8414, or OpenID Connect
    /// discovery), whose `issuer` must be the configured one.
    pub(super) async fn metadata(&self, issuer: &Issuer) -> Result<Value, FetchError> {
        if let Some(meta) = issuer.metadata.get() {
            return Ok(meta.clone());
        }
        let backing_off = || {
            let now = (self.clock)();
            issuer
                .metadata_failed
                .lock()
                .as_ref()
                .filter(|f| now < f.retry_at)
                .map(|f| f.error.clone())
        };
        if let Some(error) = backing_off() {
            return Err(error);
        }
        let fetched = issuer
            .metadata
            .get_or_try_init(|| async {
                // Requests that queued behind a failed fetch take its answer.
                if let Some(error) = backing_off() {
                    return Err(error);
                }
                let iss = issuer.config.issuer.trim_end_matches('/');
                let (origin, path) = match iss
                    .find("://")
                    .and_then(|s| iss[s + 3..].find('/').map(|p| s + 3 + p))
                {
                    Some(cut) => (&iss[..cut], &iss[cut..]),
                    None => (iss, ""),
                };
                let candidates = [
                    format!("{origin}/.well-known/oauth-authorization-server{path}"),
                    format!("{iss}/.well-known/openid-configuration"),
                ];
                let mut last = None;
                for url in candidates {
                    match issuer.fetcher.get_json(&url).await {
                        Ok(meta) if meta["issuer"] == issuer.config.issuer.as_str() => {
                            return Ok(meta);
                        }
                        Ok(_) => {
                            last = Some(FetchError::new(
                                &url,
                                "the metadata's issuer is not the configured issuer",
                            ));
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let error = last.unwrap_or_else(|| FetchError::new(iss, "no metadata"));
                let mut failed = issuer.metadata_failed.lock();
                let wait = failed
                    .as_ref()
                    .map_or(1, |f| (f.wait * 2).min(METADATA_BACKOFF_MAX_SECS));
                *failed = Some(Failed {
                    error: error.clone(),
                    retry_at: (self.clock)() + wait,
                    wait,
                });
                Err(error)
            })
            .await
            .cloned();
        if fetched.is_ok() {
            *issuer.metadata_failed.lock() = None;
        }
        fetched
    }
}

impl ResourceServer {
    /// The Protected Resource Metadata document (RFC 9728).
    pub fn metadata_document(&self) -> Value {
        let mut doc = json!({
            "resource": self.resource(),
            "authorization_servers": self.config.issuers.iter().map(|i| i.issuer.clone()).collect::<Vec<_>>(),
            "bearer_methods_supported": ["header"],
            "resource_name": "Snodo",
        });
        if !self.config.scopes_supported.is_empty() {
            doc["scopes_supported"] = json!(self.config.scopes_supported);
        }
        doc
    }
}

/// The key set `issuer` holds, or 503 when none could be fetched yet.
fn held_keys(issuer: &Issuer) -> Result<Arc<KeySet>, Refusal> {
    issuer
        .keys
        .read()
        .as_ref()
        .map(|k| k.set.clone())
        .ok_or_else(|| {
            Refusal::Unavailable("the issuer's keys could not be fetched; try again".into())
        })
}
