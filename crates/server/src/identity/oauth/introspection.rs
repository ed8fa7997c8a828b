//! Opaque tokens asked about at the issuer's introspection endpoint (RFC 7662): one request
//! per token however many callers carry it, at most `introspections_per_second` per issuer,
//! and the answers cached.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::{INACTIVE_CACHE_SECS, INTROSPECTION_CACHE_ENTRIES, Issuer, Refusal, ResourceServer};
use crate::identity::{Caller, digest};

/// A place in the line of requests introspecting one token; the line's entry is removed
/// when the last of them leaves.
struct SingleFlight<'a> {
    lines: &'a Mutex<HashMap<[u8; 32], Arc<tokio::sync::Mutex<()>>>>,
    key: [u8; 32],
    gate: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> SingleFlight<'a> {
    fn enter(
        lines: &'a Mutex<HashMap<[u8; 32], Arc<tokio::sync::Mutex<()>>>>,
        key: [u8; 32],
    ) -> Self {
        let gate = lines.lock().entry(key).or_default().clone();
        Self { lines, key, gate }
    }
}

impl Drop for SingleFlight<'_> {
    fn drop(&mut self) {
        let mut lines = self.lines.lock();
        // The map's reference and this one: nobody else waits.
        if Arc::strong_count(&self.gate) <= 2 {
            lines.remove(&self.key);
        }
    }
}

/// An introspection answer kept for reuse.
pub(super) struct Cached {
    answer: Result<Caller, String>,
    until: u64,
}

impl ResourceServer {
    pub(super) async fn introspect(&self, token: &str) -> Result<Caller, Refusal> {
        let mut last =
            Refusal::Invalid("the token is not a JWT and no issuer introspects tokens".into());
        for issuer in self
            .issuers
            .iter()
            .filter(|i| i.config.introspection.is_some())
        {
            match self.introspect_at(issuer, token).await {
                Ok(caller) => return Ok(caller),
                Err(r) => last = r,
            }
        }
        Err(last)
    }

    pub(super) async fn introspect_at(
        &self,
        issuer: &Issuer,
        token: &str,
    ) -> Result<Caller, Refusal> {
        let Some(config) = &issuer.config.introspection else {
            return Err(Refusal::Invalid(
                "the issuer does not introspect tokens".into(),
            ));
        };
        let now = (self.clock)();
        let mut key = digest(token);
        // One token may be asked about at several issuers: each answer has its own entry.
        for (k, b) in key.iter_mut().zip(digest(&issuer.config.issuer)) {
            *k ^= b;
        }
        let cached = || {
            self.introspected
                .lock()
                .get(&key)
                .filter(|c| now < c.until)
                .map(|c| c.answer.clone().map_err(Refusal::Invalid))
        };
        if let Some(answer) = cached() {
            return answer;
        }
        let gate = SingleFlight::enter(&self.introspecting, key);
        let _turn = gate.gate.lock().await;
        // The request this one waited for may have answered it.
        if let Some(answer) = cached() {
            return answer;
        }
        self.take_introspection(issuer, now)?;
        let endpoint = self
            .endpoint(issuer, config.endpoint.as_ref(), "introspection_endpoint")
            .await?;
        let answer = issuer
            .fetcher
            .post_form(
                &endpoint,
                Some((&config.client_id, &config.client_secret)),
                &[("token", token), ("token_type_hint", "access_token")],
            )
            .await?;
        let decided = self.introspected_caller(issuer, &answer, now);
        let until = match &decided {
            Ok(_) => {
                let exp = answer["exp"].as_u64().unwrap_or(u64::MAX);
                exp.min(now + self.config.introspection_cache.as_secs())
            }
            Err(_) => now + INACTIVE_CACHE_SECS,
        };
        let mut cache = self.introspected.lock();
        if cache.len() >= INTROSPECTION_CACHE_ENTRIES {
            cache.retain(|_, c| now < c.until);
            if cache.len() >= INTROSPECTION_CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Cached {
                answer: decided.clone(),
                until,
            },
        );
        decided.map_err(Refusal::Invalid)
    }

    /// Counts one introspection request against the issuer's `introspections_per_second`.
    pub(super) fn take_introspection(&self, issuer: &Issuer, now: u64) -> Result<(), Refusal> {
        let mut sent = issuer.introspections.lock();
        if sent.0 != now {
            *sent = (now, 0);
        }
        if sent.1 >= self.config.introspections_per_second {
            tracing::debug!(issuer = %issuer.config.issuer, "introspection rate reached");
            return Err(Refusal::Unavailable(format!(
                "too many tokens to ask the identity provider about at once \
                 (auth.oauth.introspections_per_second = {}); try again",
                self.config.introspections_per_second
            )));
        }
        sent.1 += 1;
        Ok(())
    }

    pub(super) fn introspected_caller(
        &self,
        issuer: &Issuer,
        answer: &Value,
        now: u64,
    ) -> Result<Caller, String> {
        let Some(claims) = answer.as_object() else {
            return Err("the introspection answer is not an object".into());
        };
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err("the token is not active".into());
        }
        // A refresh token is active too, but it is not an access token.
        if let Some(kind) = claims.get("token_type").and_then(Value::as_str)
            && !kind.eq_ignore_ascii_case("access_token")
            && !kind.eq_ignore_ascii_case("bearer")
            && !kind.eq_ignore_ascii_case("urn:ietf:params:oauth:token-type:access_token")
        {
            return Err("the token is not an access token".into());
        }
        if let Some(iss) = claims.get("iss")
            && iss != issuer.config.issuer.as_str()
        {
            return Err("the token's issuer is not the introspecting issuer".into());
        }
        let leeway = self.config.leeway.as_secs();
        if let Some(exp) = claims.get("exp").and_then(Value::as_u64)
            && now >= exp.saturating_add(leeway)
        {
            return Err("the token has expired".into());
        }
        if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64)
            && now.saturating_add(leeway) < nbf
        {
            return Err("the token is not valid yet".into());
        }
        let fail = |r: Refusal| match r {
            Refusal::Invalid(w) | Refusal::Unavailable(w) => w,
        };
        self.check_audience(issuer, claims.get("aud"))
            .map_err(fail)?;
        self.caller(issuer, claims).map_err(fail)
    }
}
