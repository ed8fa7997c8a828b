//! Access tokens for an upstream from its authorization server: the client credentials
//! grant (RFC 6749 §4.4, the client authenticated with HTTP Basic), for the RFC 8707
//! resource that is the upstream. The host asks through the outbound sender's host path,
//! the token endpoint's origin the only host it reaches, and renews a token when four
//! fifths of its life have passed.

use std::time::Duration;

use base64::Engine;
use hyper::http::{HeaderMap, HeaderValue, header};
use serde_json::Value;
use snodo_wasm::outbound::{AllowList, Outbound, PostLimits, Secret};

use super::Upstream;

/// An access token and when to ask for the next.
#[derive(Clone)]
pub(super) struct Token {
    /// The token.
    pub(super) value: Secret,
    /// When it is renewed.
    pub(super) renew_at: tokio::time::Instant,
}

/// How long a token that states no lifetime is used before it is asked for again.
const UNSTATED_LIFETIME: Duration = Duration::from_secs(300);

/// A token for `upstream` (which must have `oauth`), each request within `timeout`.
pub(super) async fn token(
    outbound: &Outbound,
    upstream: &Upstream,
    timeout: Duration,
) -> Result<Token, String> {
    let Some(client) = &upstream.oauth else {
        return Err("no oauth client is configured".into());
    };
    let o = &client.section;
    let resource = o.resource.as_deref().unwrap_or(&upstream.section.url);
    let mut form = vec![("grant_type", "client_credentials"), ("resource", resource)];
    if let Some(scope) = &o.scope {
        form.push(("scope", scope.as_str()));
    }
    let body: Vec<String> = (form.iter())
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect();
    let basic = format!(
        "{}:{}",
        form_encode(&o.client_id),
        form_encode(client.secret.expose())
    );
    let basic = base64::engine::general_purpose::STANDARD.encode(basic);
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    let mut auth = HeaderValue::from_str(&format!("Basic {basic}"))
        .map_err(|_| "the client credentials cannot be sent in a header".to_owned())?;
    auth.set_sensitive(true);
    headers.insert(header::AUTHORIZATION, auth);
    let allowed = AllowList::parse(&[client.origin.as_str()]).map_err(|e| e.to_string())?;
    let key = format!("upstreams.{}.oauth.token_url", upstream.section.name);
    let limits = PostLimits {
        connect_timeout: timeout,
        answer_timeout: timeout,
        max_answer_bytes: 64 << 10,
    };
    let answer = outbound
        .post(
            &allowed,
            &key,
            &o.token_url,
            headers,
            body.join("&").into_bytes(),
            limits,
        )
        .await
        .map_err(|e| format!("the token endpoint: {e}"))?;
    let reply: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    if answer.status != 200 {
        let error = reply["error"].as_str().unwrap_or("no error named");
        return Err(format!(
            "the token endpoint answered HTTP {} ({error})",
            answer.status
        ));
    }
    let Some(access) = reply["access_token"].as_str().filter(|t| !t.is_empty()) else {
        return Err("the token endpoint answered without an access_token".into());
    };
    // Bounded: a token said to live a second would have the node renew, list and rebuild
    // its catalog every second; one said to live for ages would overflow the clock.
    let lifetime = (reply["expires_in"].as_u64())
        .map_or(UNSTATED_LIFETIME, Duration::from_secs)
        .clamp(Duration::from_secs(30), Duration::from_secs(24 * 3_600));
    Ok(Token {
        value: Secret::new(access),
        renew_at: tokio::time::Instant::now() + lifetime.mul_f64(0.8),
    })
}

/// `application/x-www-form-urlencoded` of one value (RFC 6749 Appendix B).
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_form_encoded() {
        assert_eq!(form_encode("a b/c:d~é"), "a+b%2Fc%3Ad%7E%C3%A9");
        assert_eq!(form_encode("plain-._*"), "plain-._*");
    }
}
