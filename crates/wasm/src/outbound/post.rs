//! The host's own requests (a webhook's delivery) under the rules a guest's request meets:
//! an allow-list the operator wrote, the address rules (no private, loopback or metadata
//! address unless an entry names it; never this server's own listener unless an entry
//! names it to the port), TLS against the configured roots, no redirects followed, and
//! bounded times and sizes. Nothing a guest sets reaches it.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request};
use http_body_util::Full;

use super::Outbound;
use super::allow::{AllowList, AllowedHost, Refusal, check_address};
use super::send::{Collect, Opening, collect, encode_target, open, resolve, target_of};

/// The bounds of one host request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostLimits {
    /// Connecting, and the TLS handshake, each.
    pub connect_timeout: Duration,
    /// From the request sent to the whole answer read.
    pub answer_timeout: Duration,
    /// The most bytes of the answer read (the rest is not waited for).
    pub max_answer_bytes: u64,
}

impl Default for PostLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            answer_timeout: Duration::from_secs(15),
            max_answer_bytes: 64 << 10,
        }
    }
}

/// How a host request ended without an answer, in words for an operator (no secret, no
/// path or query: they may carry data).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The rules refused it; the text names the key that would allow it.
    #[error("{0}")]
    Refused(String),
    /// It could not be sent or answered in time.
    #[error("{0}")]
    Failed(String),
}

/// What a host request got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code (a redirect is an answer like any other: never followed).
    pub status: u16,
    /// The start of the body, at most [`PostLimits::max_answer_bytes`].
    pub body: Vec<u8>,
}

impl AllowList {
    /// Whether an entry allows `url`'s scheme, host and port (its addresses are checked
    /// when a request resolves the name): the check a URL is given when it is declared.
    pub fn admits(&self, url: &str) -> bool {
        let Ok(uri) = url.parse::<http::Uri>() else {
            return false;
        };
        target_of(&uri).is_some_and(|t| self.check_url(t.https, &t.host, t.port).is_ok())
    }
}

impl Outbound {
    /// POSTs `body` with `headers` to `url`, where `allowed` (the configuration key
    /// `allow_key` lists it) and the address rules allow. An answer of any status is an
    /// answer; what it means is the caller's to say.
    pub async fn post(
        &self,
        allowed: &AllowList,
        allow_key: &str,
        url: &str,
        headers: HeaderMap,
        body: Vec<u8>,
        limits: PostLimits,
    ) -> Result<Answer, PostError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|_| PostError::Refused(format!("{url:?} is not a URL")))?;
        let Some(target) = target_of(&uri) else {
            return Err(PostError::Refused(Refusal::BadUrl.to_string()));
        };
        let refused = |r: Refusal| {
            let to = target.origin();
            PostError::Refused(match r {
                Refusal::NotAllowed => format!(
                    "{to}: no entry of {allow_key} allows it; to allow it, add \"{}\" to \
                     {allow_key}",
                    target.entry()
                ),
                other => format!("{to}: {other}; an entry of {allow_key} must name it"),
            })
        };
        let allowing: Vec<AllowedHost> = allowed
            .check_url(target.https, &target.host, target.port)
            .map_err(refused)?
            .into_iter()
            .cloned()
            .collect();
        let failed = |what: &dyn std::fmt::Display| {
            PostError::Failed(format!("{}: {what}", target.origin()))
        };
        let addrs = resolve(self, &target).await.map_err(|e| failed(&e))?;
        {
            let own = self.own.read();
            let allowing: Vec<&AllowedHost> = allowing.iter().collect();
            for addr in &addrs {
                check_address(&allowing, *addr, &own).map_err(refused)?;
            }
        }
        let (mut sender, conn) = match open(self, &target, &addrs, limits.connect_timeout).await {
            Ok(o) => o,
            Err(Opening::TimedOut) => {
                return Err(failed(&format_args!(
                    "no connection within {} ms",
                    limits.connect_timeout.as_millis()
                )));
            }
            Err(Opening::Failed(e)) => return Err(failed(&e)),
        };
        let driver = tokio::spawn(conn);
        let path = encode_target(uri.path_and_query().map_or("/", |p| p.as_str()));
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| failed(&e))?;
        *request.headers_mut() = headers;
        let host = HeaderValue::from_str(&target.host_header()).map_err(|e| failed(&e))?;
        request.headers_mut().insert(http::header::HOST, host);
        let exchange = async {
            let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
            let status = response.status().as_u16();
            let body = match collect(response.into_body(), limits.max_answer_bytes, None).await {
                Ok(b) => b,
                // An answer longer than read is still an answer: its status stands.
                Err(Collect::TooLarge) => Vec::new(),
                Err(Collect::Failed(e)) => return Err(failed(&e)),
            };
            Ok(Answer { status, body })
        };
        let answered = tokio::time::timeout(limits.answer_timeout, exchange).await;
        driver.abort();
        answered.unwrap_or_else(|_| {
            Err(failed(&format_args!(
                "no answer within {} ms",
                limits.answer_timeout.as_millis()
            )))
        })
    }
}
