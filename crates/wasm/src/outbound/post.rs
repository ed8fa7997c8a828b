//! The host's own requests (a webhook's delivery, an upstream's listing and its stream of
//! changes) under the rules a guest's request meets:
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
    /// Its headers.
    pub headers: HeaderMap,
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
        let exchange = async {
            let opened = self
                .open(
                    Method::POST,
                    allowed,
                    allow_key,
                    url,
                    headers,
                    body,
                    limits.connect_timeout,
                )
                .await?;
            let Opened {
                response,
                driver,
                origin,
            } = opened;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let read = collect(response.into_body(), limits.max_answer_bytes, None).await;
            drop(driver);
            let body = match read {
                Ok(b) => b,
                // An answer longer than read is still an answer: its status stands.
                Err(Collect::TooLarge) => Vec::new(),
                Err(Collect::Failed(e)) => return Err(PostError::Failed(format!("{origin}: {e}"))),
            };
            Ok(Answer {
                status,
                headers,
                body,
            })
        };
        let answered = tokio::time::timeout(limits.answer_timeout, exchange).await;
        answered.unwrap_or_else(|_| {
            Err(PostError::Failed(format!(
                "{}: no answer within {} ms",
                origin_of(url),
                limits.answer_timeout.as_millis()
            )))
        })
    }

    /// Sends `method` with `body` to `url` under the same rules as [`Outbound::post`], and
    /// answers as soon as the response's head arrives: its body (an event stream, say) is
    /// read by the caller for as long as it keeps [`Listening`], which holds the connection.
    /// `connect_timeout` bounds the connection and the wait for the head.
    #[allow(clippy::too_many_arguments)]
    pub async fn listen(
        &self,
        method: Method,
        allowed: &AllowList,
        allow_key: &str,
        url: &str,
        headers: HeaderMap,
        body: Vec<u8>,
        connect_timeout: Duration,
    ) -> Result<Listening, PostError> {
        let opening = self.open(
            method,
            allowed,
            allow_key,
            url,
            headers,
            body,
            connect_timeout,
        );
        let opened = tokio::time::timeout(connect_timeout.saturating_mul(2), opening)
            .await
            .unwrap_or_else(|_| {
                Err(PostError::Failed(format!(
                    "{}: no answer within {} ms",
                    origin_of(url),
                    connect_timeout.saturating_mul(2).as_millis()
                )))
            })?;
        let (parts, body) = opened.response.into_parts();
        Ok(Listening {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            _driver: opened.driver,
        })
    }

    /// Connects to `url` where the rules allow and sends the request: the response head
    /// and the task driving the connection.
    #[allow(clippy::too_many_arguments)]
    async fn open(
        &self,
        method: Method,
        allowed: &AllowList,
        allow_key: &str,
        url: &str,
        headers: HeaderMap,
        body: Vec<u8>,
        connect_timeout: Duration,
    ) -> Result<Opened, PostError> {
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
        let (mut sender, conn) = match open(self, &target, &addrs, connect_timeout).await {
            Ok(o) => o,
            Err(Opening::TimedOut) => {
                return Err(failed(&format_args!(
                    "no connection within {} ms",
                    connect_timeout.as_millis()
                )));
            }
            Err(Opening::Failed(e)) => return Err(failed(&e)),
        };
        let driver = Driver(tokio::spawn(async move {
            let _ = conn.await;
        }));
        let path = encode_target(uri.path_and_query().map_or("/", |p| p.as_str()));
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| failed(&e))?;
        *request.headers_mut() = headers;
        let host = HeaderValue::from_str(&target.host_header()).map_err(|e| failed(&e))?;
        request.headers_mut().insert(http::header::HOST, host);
        let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
        Ok(Opened {
            response,
            driver,
            origin: target.origin(),
        })
    }
}

/// `scheme://host:port` of `url` for a message, or the URL's text when it has none.
fn origin_of(url: &str) -> String {
    (url.parse::<http::Uri>().ok())
        .and_then(|u| target_of(&u).map(|t| t.origin()))
        .unwrap_or_else(|| url.to_owned())
}

/// A sent request's response head, and its connection.
struct Opened {
    response: http::Response<hyper::body::Incoming>,
    driver: Driver,
    origin: String,
}

/// The task driving one connection, stopped when dropped.
struct Driver(tokio::task::JoinHandle<()>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A response whose body is read as it comes ([`Outbound::listen`]): dropping it closes the
/// connection.
pub struct Listening {
    /// The status code.
    pub status: u16,
    /// Its headers.
    pub headers: HeaderMap,
    /// The body, read by the caller.
    pub body: hyper::body::Incoming,
    _driver: Driver,
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::super::send::tests::{serve_each, silent_server};
    use super::*;
    use crate::outbound::OutboundConfig;

    /// A server that answers every connection with `response` and sends what it read.
    async fn answering(
        response: &'static str,
    ) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
        serve_each(move |mut s, tx| async move {
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).await.unwrap_or(0);
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = s.write_all(response.as_bytes()).await;
        })
        .await
    }

    fn host() -> Outbound {
        Outbound::new(OutboundConfig::default()).expect("outbound")
    }

    fn json() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h
    }

    #[tokio::test]
    async fn a_listen_answers_at_the_head_and_its_body_streams_while_held() {
        // The server sends the head and a first event, then holds the stream open until
        // it is told to send the second.
        let (go, went) = tokio::sync::watch::channel(false);
        let (addr, mut got) = serve_each(move |mut s, tx| {
            let mut went = went.clone();
            async move {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(b"9\r\ndata: 1\n\n\r\n").await;
                let _ = went.wait_for(|g| *g).await;
                let _ = s.write_all(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n").await;
            }
        })
        .await;
        let allowed = AllowList::parse(&[format!("http://{addr}")]).expect("list");
        let mut listening = host()
            .listen(
                Method::GET,
                &allowed,
                "k",
                &format!("http://{addr}/events"),
                HeaderMap::new(),
                Vec::new(),
                Duration::from_secs(5),
            )
            .await
            .expect("a head");
        assert_eq!(listening.status, 200);
        assert!(
            got.recv()
                .await
                .expect("a request")
                .starts_with("GET /events")
        );
        use http_body_util::BodyExt;
        let first = listening
            .body
            .frame()
            .await
            .expect("a frame")
            .expect("data");
        assert_eq!(first.data_ref().map(|b| &b[..]), Some(&b"data: 1\n\n"[..]));
        go.send(true).expect("send");
        let second = listening
            .body
            .frame()
            .await
            .expect("a frame")
            .expect("data");
        assert_eq!(second.data_ref().map(|b| &b[..]), Some(&b"data: 2\n\n"[..]));
        // A refused place is refused before anything is sent.
        let elsewhere = host()
            .listen(
                Method::GET,
                &allowed,
                "upstreams.x.url",
                "http://127.0.0.1:1/",
                HeaderMap::new(),
                Vec::new(),
                Duration::from_secs(5),
            )
            .await;
        match elsewhere {
            Err(PostError::Refused(why)) => assert!(why.contains("upstreams.x.url"), "{why}"),
            Err(other) => panic!("expected a refusal, got {other}"),
            Ok(_) => panic!("expected a refusal, got an answer"),
        }
    }

    #[tokio::test]
    async fn a_post_goes_where_an_entry_names_and_a_redirect_is_an_answer_not_followed() {
        let (addr, mut got) = answering(
            "HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/\r\ncontent-length: 0\r\n\r\n",
        )
        .await;
        let allowed = AllowList::parse(&[format!("http://{addr}")]).expect("list");
        let url = format!("http://{addr}/hook?a=1");
        assert!(allowed.admits(&url));
        let answer = host()
            .post(
                &allowed,
                "webhooks.allowed_hosts",
                &url,
                json(),
                b"{}".to_vec(),
                PostLimits::default(),
            )
            .await
            .expect("an answer");
        assert_eq!(answer.status, 302, "a redirect is the answer");
        let request = got.recv().await.expect("the request");
        assert!(
            request.starts_with("POST /hook?a=1 HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains(&format!("host: {addr}")), "{request}");
        assert!(request.ends_with("{}"), "{request}");
        assert!(got.try_recv().is_err(), "nothing followed the redirect");
    }

    #[tokio::test]
    async fn the_allow_list_and_the_address_rules_refuse_and_name_the_key() {
        let (addr, mut got) = answering("HTTP/1.1 204 No Content\r\n\r\n").await;
        let url = format!("http://{addr}/hook");
        let elsewhere = AllowList::parse(&["https://hooks.example.com"]).expect("list");
        let e = host()
            .post(
                &elsewhere,
                "webhooks.allowed_hosts",
                &url,
                json(),
                Vec::new(),
                PostLimits::default(),
            )
            .await
            .unwrap_err();
        let PostError::Refused(text) = e else {
            panic!("{e:?}")
        };
        assert!(
            text.contains(&format!("add \"http://{addr}\" to webhooks.allowed_hosts")),
            "{text}"
        );
        // Every host is allowed, but a loopback address must be named.
        let any = AllowList::parse(&["http://*:*"]).expect("list");
        let e = host()
            .post(
                &any,
                "webhooks.allowed_hosts",
                &url,
                json(),
                Vec::new(),
                PostLimits::default(),
            )
            .await
            .unwrap_err();
        let PostError::Refused(text) = e else {
            panic!("{e:?}")
        };
        assert!(
            text.contains("not a public address") || text.contains("public"),
            "{text}"
        );
        // This server's own listener, even when an entry names the address.
        let own = host();
        own.listening_on(addr);
        let named = AllowList::parse(&["http://127.0.0.1:*"]).expect("list");
        let e = own
            .post(
                &named,
                "webhooks.allowed_hosts",
                &url,
                json(),
                Vec::new(),
                PostLimits::default(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(e, PostError::Refused(ref t) if t.contains("own listen address")),
            "{e:?}"
        );
        assert!(
            got.try_recv().is_err(),
            "no refused request reached the server"
        );
    }

    #[tokio::test]
    async fn a_silent_receiver_fails_within_the_answer_timeout() {
        let (addr, _accepted) = silent_server().await;
        let allowed = AllowList::parse(&[format!("http://{addr}")]).expect("list");
        let limits = PostLimits {
            answer_timeout: Duration::from_millis(200),
            ..PostLimits::default()
        };
        let e = host()
            .post(
                &allowed,
                "k",
                &format!("http://{addr}/"),
                json(),
                Vec::new(),
                limits,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(e, PostError::Failed(ref t) if t.contains("no answer within 200 ms")),
            "{e:?}"
        );
    }
}
