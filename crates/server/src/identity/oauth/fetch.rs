//! The small HTTP client the resource server talks to identity providers with: their
//! metadata and key sets (GET) and token introspection (POST of a form). HTTPS with the
//! WebPKI roots (and an operator's CA file); plain HTTP only to a loopback address, for an
//! identity provider on the same machine. Redirects are not followed, bodies are capped,
//! and every exchange has one deadline.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Request, Uri};
use serde_json::Value;

/// The largest document accepted from an identity provider.
pub(crate) const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// Why a document could not be fetched; the text names the URL and never a credential.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{url}: {reason}")]
pub(crate) struct FetchError {
    url: String,
    reason: String,
}

impl FetchError {
    pub(crate) fn new(url: &str, reason: impl Into<String>) -> Self {
        Self {
            url: url.to_owned(),
            reason: reason.into(),
        }
    }
}

fn fail(url: &str, reason: impl Into<String>) -> FetchError {
    FetchError::new(url, reason)
}

/// Fetches JSON documents from identity providers.
pub(crate) struct Fetcher {
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
}

/// Where a URL points, once checked.
struct Target {
    https: bool,
    host: String,
    port: u16,
    path: String,
}

/// Whether `host` (a name or an address literal, IPv6 without brackets) is loopback.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks that `url` is one this client fetches: `https://`, or `http://` to loopback.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    parse(url).map(|_| ())
}

fn parse(url: &str) -> Result<Target, String> {
    let uri: Uri = url.parse().map_err(|_| "not a URL".to_owned())?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("the scheme must be https".into()),
    };
    let authority = uri.authority().ok_or("the URL has no host")?;
    if authority.as_str().contains('@') {
        return Err("the URL must not carry credentials".into());
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if !https && !is_loopback_host(&host) {
        return Err("the scheme must be https (http is accepted for loopback only)".into());
    }
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    Ok(Target {
        https,
        host,
        port,
        path,
    })
}

/// Percent-encodes `s` for an `application/x-www-form-urlencoded` body.
pub(crate) fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Fetcher {
    /// A client trusting the WebPKI roots, and the certificates in `ca_file` if given.
    pub(crate) fn new(ca_file: Option<&Path>, timeout: Duration) -> Result<Self, String> {
        let tls = snodo_wasm::outbound::tls_client(ca_file)?;
        Ok(Self { tls, timeout })
    }

    /// GETs the JSON document at `url`.
    pub(crate) async fn get_json(&self, url: &str) -> Result<Value, FetchError> {
        self.exchange(url, None).await
    }

    /// POSTs `form` to `url`, authenticated with HTTP Basic as `client` (id, secret) when
    /// given, and reads the JSON answer.
    pub(crate) async fn post_form(
        &self,
        url: &str,
        client: Option<(&str, &str)>,
        form: &[(&str, &str)],
    ) -> Result<Value, FetchError> {
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        // RFC 6749 §2.3.1: the id and secret are form-encoded before they are joined.
        let basic = client.map(|(id, secret)| {
            let pair = format!("{}:{}", form_encode(id), form_encode(secret));
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        self.exchange(url, Some((body, basic))).await
    }

    async fn exchange(
        &self,
        url: &str,
        post: Option<(String, Option<String>)>,
    ) -> Result<Value, FetchError> {
        match tokio::time::timeout(self.timeout, self.exchange_now(url, post)).await {
            Ok(answered) => answered,
            Err(_) => Err(fail(
                url,
                format!("no answer within {} ms", self.timeout.as_millis()),
            )),
        }
    }

    async fn exchange_now(
        &self,
        url: &str,
        post: Option<(String, Option<String>)>,
    ) -> Result<Value, FetchError> {
        let target = parse(url).map_err(|e| fail(url, e))?;
        let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
            .await
            .map_err(|e| fail(url, format!("connect: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let authority = if target.host.contains(':') {
            format!("[{}]:{}", target.host, target.port)
        } else {
            format!("{}:{}", target.host, target.port)
        };
        let mut builder = Request::builder()
            .uri(target.path.as_str())
            .header(hyper::header::HOST, authority)
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::USER_AGENT, "snodo");
        let body = match post {
            Some((form, basic)) => {
                builder = builder.method("POST").header(
                    hyper::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                );
                if let Some(b) = basic {
                    builder = builder.header(hyper::header::AUTHORIZATION, b);
                }
                form
            }
            None => {
                builder = builder.method("GET");
                String::new()
            }
        };
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| fail(url, e.to_string()))?;
        let response = if target.https {
            let name = rustls::pki_types::ServerName::try_from(target.host.clone())
                .map_err(|_| fail(url, "not a TLS server name"))?;
            let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| fail(url, format!("TLS: {e}")))?;
            send(url, hyper_util::rt::TokioIo::new(tls), request).await?
        } else {
            send(url, hyper_util::rt::TokioIo::new(tcp), request).await?
        };
        let (head, body) = response.into_parts();
        if !head.status.is_success() {
            return Err(fail(url, format!("answered {}", head.status)));
        }
        let bytes = Limited::new(body, MAX_DOCUMENT_BYTES)
            .collect()
            .await
            .map_err(|e| fail(url, format!("body: {e}")))?
            .to_bytes();
        serde_json::from_slice(&bytes).map_err(|e| fail(url, format!("not JSON: {e}")))
    }
}

async fn send<I>(
    url: &str,
    io: I,
    request: Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, FetchError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| fail(url, format!("HTTP: {e}")))?;
    // The connection lives as long as this exchange (the caller's deadline bounds both).
    let driver = tokio::spawn(conn);
    let answered = sender
        .send_request(request)
        .await
        .map_err(|e| fail(url, format!("HTTP: {e}")));
    if answered.is_err() {
        driver.abort();
    }
    answered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        assert!(check_url("https://idp.example.com/jwks").is_ok());
        assert!(check_url("http://127.0.0.1:8080/jwks").is_ok());
        assert!(check_url("http://[::1]:8080/jwks").is_ok());
        assert!(check_url("http://localhost/jwks").is_ok());
        assert!(check_url("http://idp.example.com/jwks").is_err());
        assert!(check_url("ftp://idp.example.com/jwks").is_err());
        assert!(check_url("https://user:pw@idp.example.com/").is_err());
        assert!(check_url("jwks").is_err());
    }

    #[test]
    fn forms_are_percent_encoded() {
        assert_eq!(form_encode("a b+c/é"), "a%20b%2Bc%2F%C3%A9");
        assert_eq!(form_encode("AZaz09-._~"), "AZaz09-._~");
    }
}
