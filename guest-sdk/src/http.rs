//! Outbound HTTP through the host's `wasi:http`: a small blocking client with JSON helpers.
//!
//! ```no_run
//! use snodo_guest::http;
//!
//! #[derive(serde::Deserialize)]
//! struct Issue {
//!     title: String,
//! }
//!
//! # fn main() -> Result<(), http::HttpError> {
//! let issue: Issue = http::get("https://api.example.com/issues/1").send()?.json()?;
//! let created = http::post("https://api.example.com/issues")
//!     .json(&serde_json::json!({ "title": issue.title }))
//!     .send()?
//!     .error_for_status()?;
//! # let _ = created;
//! # Ok(())
//! # }
//! ```
//!
//! The host decides whether a request goes out (`allowed_outbound_hosts`), adds the
//! headers it injects (secrets the tool never sees), and in a task answers a replayed
//! attempt from the task's journal, so a request made before a crash or a question is not
//! sent twice (docs/outbound.md). A request the host refuses is [`HttpError::Denied`], whose
//! text begins with the code (`HttpRequestDenied`, `DestinationIpProhibited`) and names the
//! URL, the tool and the configuration key that would allow it; any other failure is
//! [`HttpError::Request`] naming the host's error code.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use wasip2::io::streams::StreamError;

/// Why a request produced no response, or why a response is not what was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL cannot be sent (no `http://` or `https://`, no host).
    Url(String),
    /// The host refused the request (the allow-list, the address rules, the rules on
    /// injected secrets): its explanation, beginning with the code it stands for
    /// (`HttpRequestDenied: GET https://… (tool `t`) … add "…" to
    /// tools.t.allowed_outbound_hosts`).
    Denied(String),
    /// The host failed the request: its `wasi:http` error code.
    Request(String),
    /// The response's body could not be read.
    Body(String),
    /// The response has an error status ([`Response::error_for_status`]).
    Status {
        /// The status code.
        status: u16,
        /// The body, as text.
        body: String,
    },
    /// The body is not the JSON asked for.
    Json(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Url(m) => write!(f, "bad URL: {m}"),
            HttpError::Denied(m) => write!(f, "refused by the host: {m}"),
            HttpError::Request(m) => write!(f, "request failed: {m}"),
            HttpError::Body(m) => write!(f, "reading the response failed: {m}"),
            HttpError::Status { status, body } => write!(f, "HTTP {status}: {body}"),
            HttpError::Json(m) => write!(f, "the response is not the expected JSON: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// A request being built.
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    /// Why the request cannot be sent, found while it was built (`send` reports it).
    broken: Option<HttpError>,
}

/// `GET url`.
pub fn get(url: impl Into<String>) -> Request {
    Request::new(Method::Get, url)
}

/// `POST url`.
pub fn post(url: impl Into<String>) -> Request {
    Request::new(Method::Post, url)
}

/// `PUT url`.
pub fn put(url: impl Into<String>) -> Request {
    Request::new(Method::Put, url)
}

/// `PATCH url`.
pub fn patch(url: impl Into<String>) -> Request {
    Request::new(Method::Patch, url)
}

/// `DELETE url`.
pub fn delete(url: impl Into<String>) -> Request {
    Request::new(Method::Delete, url)
}

impl Request {
    fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            broken: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_ref().to_vec()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the body to `value` as JSON, with `content-type: application/json`.
    /// A value that cannot be JSON (a map with non-string keys) makes `send` fail with
    /// [`HttpError::Json`].
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => self.header("content-type", "application/json").body(body),
            Err(e) => {
                self.broken = Some(HttpError::Json(e.to_string()));
                self
            }
        }
    }

    /// Sends it and reads the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        let (https, authority, path) = split_url(&self.url)?;
        let mut entries: Vec<(String, Vec<u8>)> = self.headers;
        if !self.body.is_empty() && !entries.iter().any(|(n, _)| n == "content-length") {
            entries.push(("content-length".into(), self.body.len().to_string().into()));
        }
        let headers = Fields::from_list(&entries)
            .map_err(|e| HttpError::Request(format!("a header is not allowed: {e:?}")))?;
        let request = OutgoingRequest::new(headers);
        let set = |ok: Result<(), ()>, what: &str| {
            ok.map_err(|()| HttpError::Url(format!("{what} is not valid: {}", self.url)))
        };
        set(request.set_method(&self.method), "the method")?;
        set(
            request.set_scheme(Some(if https { &Scheme::Https } else { &Scheme::Http })),
            "the scheme",
        )?;
        set(request.set_authority(Some(authority)), "the authority")?;
        set(request.set_path_with_query(Some(&path)), "the path")?;
        let body = request
            .body()
            .map_err(|()| HttpError::Request("the request has no body".into()))?;
        // Handed over first: the host reads the body as it is written.
        let future = outgoing_handler::handle(request, None).map_err(|e| request_error(&e))?;
        write_body(&body, &self.body)?;
        OutgoingBody::finish(body, None).map_err(|e| request_error(&e))?;
        let response = loop {
            match future.get() {
                Some(Ok(Ok(r))) => break r,
                Some(Ok(Err(e))) => return Err(request_error(&e)),
                Some(Err(())) => return Err(HttpError::Request("the response was taken".into())),
                None => future.subscribe().block(),
            }
        };
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(n, v)| (n, String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response
            .consume()
            .map_err(|()| HttpError::Body("the body was taken".into()))?;
        let body = read_body(&incoming)?;
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// A response, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| HttpError::Json(e.to_string()))
    }

    /// The response itself when its status is below 400, else [`HttpError::Status`].
    pub fn error_for_status(self) -> Result<Self, HttpError> {
        if self.status < 400 {
            Ok(self)
        } else {
            Err(HttpError::Status {
                status: self.status,
                body: self.text(),
            })
        }
    }
}

/// The host's error code as its name, e.g. `ConnectionTimeout`, with its detail.
fn code(e: &ErrorCode) -> String {
    format!("{e:?}")
}

/// How the host's denials begin: `internal-error` text led by the name of the code it
/// stands for, since `HTTP-request-denied` and `destination-IP-prohibited` carry no text.
const DENIALS: [&str; 2] = ["HttpRequestDenied: ", "DestinationIpProhibited: "];

/// The host's error code as an [`HttpError`]: a denial as [`HttpError::Denied`], anything
/// else as [`HttpError::Request`].
fn request_error(e: &ErrorCode) -> HttpError {
    match e {
        ErrorCode::InternalError(Some(m)) if DENIALS.iter().any(|d| m.starts_with(d)) => {
            HttpError::Denied(m.clone())
        }
        ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => {
            HttpError::Denied(code(e))
        }
        _ => HttpError::Request(code(e)),
    }
}

/// `(https, authority, path-and-query)` of an `http://` or `https://` URL.
fn split_url(url: &str) -> Result<(bool, &str, String), HttpError> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(HttpError::Url(format!("{url} is not an http or https URL")));
    };
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(cut);
    if authority.is_empty() {
        return Err(HttpError::Url(format!("{url} has no host")));
    }
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    Ok((https, authority, path))
}

fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), HttpError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let stream = body
        .write()
        .map_err(|()| HttpError::Request("the body cannot be written".into()))?;
    // At most 4 KiB per call: what `blocking-write-and-flush` accepts.
    for chunk in bytes.chunks(4096) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| match e {
                StreamError::LastOperationFailed(err) => HttpError::Request(err.to_debug_string()),
                StreamError::Closed => {
                    HttpError::Request("the host closed the request body".into())
                }
            })?;
    }
    Ok(())
}

fn read_body(incoming: &IncomingBody) -> Result<Vec<u8>, HttpError> {
    let stream = incoming
        .stream()
        .map_err(|()| HttpError::Body("the body cannot be read".into()))?;
    let mut out = Vec::new();
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => out.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(out),
            Err(StreamError::LastOperationFailed(err)) => {
                return Err(HttpError::Body(err.to_debug_string()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        assert_eq!(
            split_url("https://api.example.com/a?b=1"),
            Ok((true, "api.example.com", "/a?b=1".to_owned()))
        );
        assert_eq!(
            split_url("http://127.0.0.1:8080"),
            Ok((false, "127.0.0.1:8080", "/".to_owned()))
        );
        assert_eq!(split_url("http://h?x"), Ok((false, "h", "/?x".to_owned())));
        assert!(split_url("ftp://h/").is_err());
        assert!(split_url("https:///path").is_err());
    }

    #[test]
    fn a_body_that_cannot_be_json_fails_the_send_before_anything_is_sent() {
        let keys = std::collections::HashMap::from([((1, 2), "a")]);
        let err = post("https://api.example.com/").json(&keys).send();
        assert!(matches!(err, Err(HttpError::Json(_))), "{err:?}");
    }

    #[test]
    fn a_denial_is_told_apart_from_other_failures_and_keeps_the_hosts_explanation() {
        let why = "HttpRequestDenied: GET http://x.test/ (tool `t`): add \"http://x.test\" to \
                   tools.t.allowed_outbound_hosts";
        let e = request_error(&ErrorCode::InternalError(Some(why.into())));
        assert_eq!(e, HttpError::Denied(why.into()));
        assert!(
            e.to_string().contains("tools.t.allowed_outbound_hosts"),
            "{e}"
        );
        assert!(
            matches!(
                request_error(&ErrorCode::HttpRequestDenied),
                HttpError::Denied(m) if m.contains("HttpRequestDenied")
            ),
            "a host that gives no text"
        );
        let other = request_error(&ErrorCode::InternalError(Some(
            "the journal cannot be read".into(),
        )));
        assert!(matches!(other, HttpError::Request(_)), "{other:?}");
        let timeout = request_error(&ErrorCode::ConnectionTimeout);
        assert!(
            matches!(&timeout, HttpError::Request(m) if m.contains("ConnectionTimeout")),
            "{timeout:?}"
        );
    }

    #[test]
    fn an_error_status_is_an_error_with_its_body() {
        let r = Response {
            status: 404,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: b"no such issue".to_vec(),
        };
        assert_eq!(r.header("Content-Type"), Some("text/plain"));
        assert_eq!(
            r.error_for_status(),
            Err(HttpError::Status {
                status: 404,
                body: "no such issue".into()
            })
        );
    }
}
