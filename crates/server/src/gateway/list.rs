//! Listing an upstream's tools: the revision it speaks (asked with `server/discover`, else
//! the 2025-11-25 handshake) and every page of `tools/list`. The host sends these itself,
//! through the outbound sender's host path: the upstream's origin is the only host it
//! reaches, under the address rules every request meets.

use hyper::http::{self, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use snodo_wasm::outbound::{AllowList, Answer, Listening, Outbound, PostLimits, Secret};

use super::Upstream;
use super::settings::PROTOCOLS;

/// What an upstream listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    /// The revision it speaks.
    pub protocol: &'static str,
    /// Its tools, as it described them.
    pub tools: Vec<Value>,
}

/// At most this many pages of `tools/list` are read: a cursor that never ends is the
/// upstream's fault, not a reason to list forever.
const MAX_PAGES: usize = 100;

/// The most bytes of one answer read.
const MAX_ANSWER_BYTES: u64 = 4 << 20;

/// The longest a session's end (`DELETE`) is waited for.
const END_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// One conversation with an upstream: its allow-list, limits, and the session a
/// 2025-11-25 upstream gave.
struct Conversation<'a> {
    outbound: &'a Outbound,
    upstream: &'a Upstream,
    bearer: Option<&'a Secret>,
    allowed: AllowList,
    limits: PostLimits,
    protocol: Option<&'static str>,
    session: Option<HeaderValue>,
    next_id: u64,
}

/// Lists `upstream`'s tools with its credential `bearer`, each request within `timeout`. A
/// 2025-11-25 session opened for it is ended after.
pub async fn list(
    outbound: &Outbound,
    upstream: &Upstream,
    bearer: Option<&Secret>,
    timeout: std::time::Duration,
) -> Result<Listed, String> {
    let mut c = Conversation::new(outbound, upstream, bearer, timeout)?;
    let listed = c.list().await;
    c.end().await;
    listed
}

impl<'a> Conversation<'a> {
    /// A conversation with `upstream` on its origin alone, each request within `timeout`,
    /// its revision not known yet.
    fn new(
        outbound: &'a Outbound,
        upstream: &'a Upstream,
        bearer: Option<&'a Secret>,
        timeout: std::time::Duration,
    ) -> Result<Self, String> {
        let allowed = AllowList::parse(&[upstream.origin.as_str()]).map_err(|e| e.to_string())?;
        Ok(Self {
            outbound,
            upstream,
            bearer,
            allowed,
            limits: PostLimits {
                connect_timeout: timeout,
                answer_timeout: timeout,
                max_answer_bytes: MAX_ANSWER_BYTES,
            },
            protocol: None,
            session: None,
            next_id: 1,
        })
    }

    /// The revision the upstream speaks (the configured one, else asked) and every page of
    /// its `tools/list`.
    async fn list(&mut self) -> Result<Listed, String> {
        let protocol = match self.upstream.section.protocol.as_deref() {
            Some(p) if p == PROTOCOLS[1] => {
                self.discover().await?;
                PROTOCOLS[1]
            }
            Some(_) => {
                self.handshake().await?;
                PROTOCOLS[0]
            }
            // An upstream that does not know `server/discover` speaks an earlier revision.
            None => match self.discover_quietly().await {
                Some(p) => p,
                None => {
                    self.handshake().await?;
                    PROTOCOLS[0]
                }
            },
        };
        self.protocol = Some(protocol);
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut params = json!({});
            if let Some(next) = &cursor {
                params["cursor"] = next.clone().into();
            }
            let page = self.request("tools/list", params).await?;
            let listed = page["tools"]
                .as_array()
                .ok_or("tools/list answered without a tools array")?;
            tools.extend(listed.iter().cloned());
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                return Ok(Listed { protocol, tools });
            }
        }
        Err(format!(
            "tools/list gave more than {MAX_PAGES} pages; the cursor does not end"
        ))
    }

    /// Ends the 2025-11-25 session the upstream gave, if it gave one (`DELETE`, as the
    /// revision asks of a client done with a session): an upstream keeps each session
    /// until then or until it expires them, and this host opens one per listing. Best
    /// effort: an upstream that answers 405 keeps its sessions until they expire.
    async fn end(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let mut headers = match self.headers("DELETE", &mut json!({})) {
            Ok(h) => h,
            Err(_) => return,
        };
        headers.remove(http::header::CONTENT_TYPE);
        headers.insert(HeaderName::from_static("mcp-session-id"), session);
        let key = self.key();
        // An end is asked for on the way out too (a node shutting down): an upstream that
        // does not answer at once does not hold it up.
        let within = self.limits.answer_timeout.min(END_WAIT);
        let ending = self.outbound.listen(
            http::Method::DELETE,
            &self.allowed,
            &key,
            &self.upstream.section.url,
            headers,
            Vec::new(),
            within,
        );
        match tokio::time::timeout(within, ending).await {
            Ok(Ok(answer)) => {
                tracing::debug!(upstream = %self.upstream.section.name, status = answer.status, "session ended");
            }
            Ok(Err(e)) => {
                tracing::debug!(upstream = %self.upstream.section.name, error = %e, "the session could not be ended");
            }
            Err(_) => {
                tracing::debug!(upstream = %self.upstream.section.name, "the session's end was not answered in time");
            }
        }
    }

    /// `server/discover` on a 2026-07-28 upstream: it must list that revision.
    async fn discover(&mut self) -> Result<(), String> {
        self.protocol = Some(PROTOCOLS[1]);
        let found = self.request("server/discover", json!({})).await?;
        let supported = found["supportedVersions"].as_array();
        if !supported.is_some_and(|v| v.iter().any(|v| v == PROTOCOLS[1])) {
            return Err(format!(
                "server/discover does not list {} among its supportedVersions",
                PROTOCOLS[1]
            ));
        }
        Ok(())
    }

    /// The revision `server/discover` finds, or `None` when the upstream does not take it.
    async fn discover_quietly(&mut self) -> Option<&'static str> {
        match self.discover().await {
            Ok(()) => Some(PROTOCOLS[1]),
            Err(why) => {
                tracing::debug!(upstream = %self.upstream.section.name, %why, "server/discover not taken; trying the 2025-11-25 handshake");
                self.protocol = None;
                None
            }
        }
    }

    /// The 2025-11-25 handshake: `initialize`, its session kept, then `initialized`.
    async fn handshake(&mut self) -> Result<(), String> {
        self.protocol = None;
        let params = json!({
            "protocolVersion": PROTOCOLS[0],
            "capabilities": {},
            "clientInfo": {"name": "snodo", "version": env!("CARGO_PKG_VERSION")},
        });
        let id = self.next_id;
        self.next_id += 1;
        let answer = self.post("initialize", Some(id), params).await?;
        self.session = answer.headers.get("mcp-session-id").cloned();
        result_of(&answer, id)?;
        self.protocol = Some(PROTOCOLS[0]);
        let sent = self
            .post("notifications/initialized", None, json!({}))
            .await?;
        if !(200..300).contains(&sent.status) {
            return Err(format!(
                "notifications/initialized was answered HTTP {}",
                sent.status
            ));
        }
        Ok(())
    }

    /// One request and its `result`.
    async fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let answer = self.post(method, Some(id), params).await?;
        result_of(&answer, id)
    }

    /// The headers of a message of `method` (and its `params` given `_meta` on 2026-07-28):
    /// the revision, the credential, the session.
    fn headers(&self, method: &str, params: &mut Value) -> Result<HeaderMap, String> {
        let mut headers = HeaderMap::new();
        let mut set = |name: &'static str, value: &str| {
            let v = HeaderValue::from_str(value)
                .map_err(|_| format!("the {name} header cannot carry {value:?}"))?;
            headers.insert(HeaderName::from_static(name), v);
            Ok::<_, String>(())
        };
        set("content-type", "application/json")?;
        set("accept", "application/json, text/event-stream")?;
        if let Some(p) = self.protocol {
            set("mcp-protocol-version", p)?;
        }
        if self.protocol == Some(PROTOCOLS[1]) {
            set("mcp-method", method)?;
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": PROTOCOLS[1],
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "snodo", "version": env!("CARGO_PKG_VERSION")},
            });
        }
        if let Some(bearer) = self.bearer {
            let v = format!("Bearer {}", bearer.expose());
            let mut v = HeaderValue::from_str(&v)
                .map_err(|_| "the bearer secret cannot be sent in a header".to_owned())?;
            v.set_sensitive(true);
            headers.insert(http::header::AUTHORIZATION, v);
        }
        if let Some(s) = &self.session {
            headers.insert(HeaderName::from_static("mcp-session-id"), s.clone());
        }
        Ok(headers)
    }

    /// The configuration key naming where requests go, for refusals.
    fn key(&self) -> String {
        format!("upstreams.{}.url", self.upstream.section.name)
    }

    /// POSTs one message (a request with `id`, or a notification).
    async fn post(
        &self,
        method: &str,
        id: Option<u64>,
        mut params: Value,
    ) -> Result<Answer, String> {
        let headers = self.headers(method, &mut params)?;
        let mut message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if let Some(id) = id {
            message["id"] = id.into();
        }
        let body = serde_json::to_vec(&message).map_err(|e| e.to_string())?;
        let answer = self
            .outbound
            .post(
                &self.allowed,
                &self.key(),
                &self.upstream.section.url,
                headers,
                body,
                self.limits,
            )
            .await
            .map_err(|e| format!("{method}: {e}"))?;
        refused(method, answer.status, self.upstream)?;
        Ok(answer)
    }

    /// The stream the upstream tells its tool changes on: `subscriptions/listen` for
    /// `toolsListChanged` (2026-07-28), or the session's GET stream (2025-11-25).
    async fn changes(&mut self) -> Result<Listening, String> {
        let (method, verb, body) = if self.protocol == Some(PROTOCOLS[1]) {
            let id = self.next_id;
            self.next_id += 1;
            let mut params = json!({"notifications": {"toolsListChanged": true}});
            let mut headers = self.headers("subscriptions/listen", &mut params)?;
            headers.insert(
                http::header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            );
            let message = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params});
            let body = serde_json::to_vec(&message).map_err(|e| e.to_string())?;
            ("subscriptions/listen", (http::Method::POST, headers), body)
        } else {
            let mut headers = self.headers("GET", &mut json!({}))?;
            headers.remove(http::header::CONTENT_TYPE);
            headers.insert(
                http::header::ACCEPT,
                HeaderValue::from_static("text/event-stream"),
            );
            ("the GET stream", (http::Method::GET, headers), Vec::new())
        };
        let (verb, headers) = verb;
        let listening = self
            .outbound
            .listen(
                verb,
                &self.allowed,
                &self.key(),
                &self.upstream.section.url,
                headers,
                body,
                self.limits.connect_timeout,
            )
            .await
            .map_err(|e| format!("{method}: {e}"))?;
        refused(method, listening.status, self.upstream)?;
        let sse = (listening.headers.get(http::header::CONTENT_TYPE))
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if listening.status != 200 || !sse {
            return Err(format!(
                "{method} was answered HTTP {} without an event stream: the upstream does not \
                 tell its changes (they are found by listing every gateway.refresh_ms)",
                listening.status
            ));
        }
        Ok(listening)
    }
}

/// A refusal of the upstream's credential, named.
fn refused(method: &str, status: u16, upstream: &Upstream) -> Result<(), String> {
    if status == 401 || status == 403 {
        return Err(format!(
            "{method} was refused (HTTP {status}): check upstreams.{}.bearer or .oauth",
            upstream.section.name
        ));
    }
    Ok(())
}

/// An upstream's announcements of tool changes, open, on its conversation (the 2025-11-25
/// session it holds, ended by [`Changes::end`]).
pub(super) struct Changes<'a> {
    conversation: Conversation<'a>,
    listening: Listening,
    /// What has arrived of the event being read. Bytes, not text: a frame may end inside a
    /// character.
    buffered: Vec<u8>,
}

/// Opens the stream `upstream` (which speaks `protocol`) tells its tool changes on, with its
/// credential `bearer`: `subscriptions/listen` (2026-07-28), or the handshake and the
/// session's GET stream (2025-11-25). A session opened for a stream that could not be is
/// ended at once.
pub(super) async fn changes<'a>(
    outbound: &'a Outbound,
    upstream: &'a Upstream,
    bearer: Option<&'a Secret>,
    protocol: &'static str,
    timeout: std::time::Duration,
) -> Result<Changes<'a>, String> {
    let mut c = Conversation::new(outbound, upstream, bearer, timeout)?;
    c.protocol = Some(protocol);
    let opened = if protocol == PROTOCOLS[0] {
        match c.handshake().await {
            Ok(()) => c.changes().await,
            Err(why) => Err(why),
        }
    } else {
        c.changes().await
    };
    match opened {
        Ok(listening) => Ok(Changes {
            conversation: c,
            listening,
            buffered: Vec::new(),
        }),
        Err(why) => {
            c.end().await;
            Err(why)
        }
    }
}

impl Changes<'_> {
    /// Reads the stream up to the end of its next event: whether it announced a change of
    /// the tools; `None` once the stream ends or breaks.
    pub(super) async fn next(&mut self) -> Option<bool> {
        use http_body_util::BodyExt;
        loop {
            if let Some((at, len)) = event_end(&self.buffered) {
                let event: Vec<u8> = self.buffered.drain(..at + len).collect();
                let changed = events(&String::from_utf8_lossy(&event))
                    .filter_map(|d| serde_json::from_str::<Value>(&d).ok())
                    .any(|m| m["method"] == "notifications/tools/list_changed");
                return Some(changed);
            }
            match self.listening.body.frame().await? {
                Ok(frame) => {
                    if let Some(data) = frame.data_ref() {
                        self.buffered.extend_from_slice(data);
                    }
                    // An upstream that streams without ever ending an event is cut off.
                    if self.buffered.len() > MAX_ANSWER_BYTES as usize {
                        return None;
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Closes the stream and ends the session it was on, if any.
    pub(super) async fn end(self) {
        let Changes {
            mut conversation,
            listening,
            ..
        } = self;
        drop(listening);
        conversation.end().await;
    }
}

/// Where the first event in `buffered` ends (a blank line, `\n\n` or `\r\n\r\n`): the
/// offset of the blank line and its length.
fn event_end(buffered: &[u8]) -> Option<(usize, usize)> {
    let find = |needle: &[u8]| buffered.windows(needle.len()).position(|w| w == needle);
    match (find(b"\n\n"), find(b"\r\n\r\n")) {
        (Some(a), Some(b)) if b < a => Some((b, 4)),
        (Some(a), _) => Some((a, 2)),
        (None, Some(b)) => Some((b, 4)),
        (None, None) => None,
    }
}

/// The `result` answering request `id` in `answer` (a JSON body, or the matching event of
/// an event stream), or why there is none.
pub(crate) fn result_of(answer: &Answer, id: u64) -> Result<Value, String> {
    let text = String::from_utf8_lossy(&answer.body);
    let sse = (answer.headers.get(http::header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let messages: Vec<Value> = if sse {
        events(&text)
            .filter_map(|data| serde_json::from_str(&data).ok())
            .collect()
    } else {
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(batch)) => batch,
            Ok(one) => vec![one],
            Err(_) => {
                return Err(format!(
                    "HTTP {} and no JSON-RPC answer: {}",
                    answer.status,
                    excerpt(&text)
                ));
            }
        }
    };
    let found = (messages.into_iter())
        .find(|m| m.get("id").and_then(Value::as_u64) == Some(id) && m.get("method").is_none());
    match found {
        Some(m) => match (m.get("result"), m.get("error")) {
            (Some(r), None) => Ok(r.clone()),
            (_, Some(e)) => Err(format!(
                "error {}: {}",
                e["code"],
                e["message"].as_str().unwrap_or("(no message)")
            )),
            (None, None) => Err("an answer with neither result nor error".into()),
        },
        None => Err(format!(
            "HTTP {} without an answer to request {id}: {}",
            answer.status,
            excerpt(&text)
        )),
    }
}

/// The `data` of each event of an event stream, its lines joined.
fn events(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split("\n\n")
        .flat_map(|event| event.split("\r\n\r\n"))
        .map(|event| {
            event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|data| !data.is_empty())
}

/// At most 200 characters of `text`, for a message.
fn excerpt(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &t[..at]),
        None => t.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::response::IntoResponse;
    use snodo_wasm::outbound::OutboundConfig;

    use super::*;
    use crate::gateway::UpstreamSection;

    type Seen = Arc<Mutex<Vec<String>>>;

    /// Records `what` with the session it was sent on.
    fn note(seen: &Seen, what: &str, headers: &HeaderMap) {
        let session = headers.get("mcp-session-id").and_then(|v| v.to_str().ok());
        let line = format!("{what} {}", session.unwrap_or("-"));
        seen.lock().expect("lock").push(line);
    }

    /// A 2025-11-25 upstream with sessions, recording `<verb or method> <session>` of each
    /// request: one tool, and a GET stream of two events (the first a character split
    /// across writes, the second a tool change) that then ends.
    async fn upstream_2025(seen: Seen) -> String {
        async fn post(
            axum::extract::State(seen): axum::extract::State<Seen>,
            headers: HeaderMap,
            body: axum::body::Bytes,
        ) -> axum::response::Response {
            let message: Value = serde_json::from_slice(&body).expect("JSON");
            let method = message["method"].as_str().unwrap_or_default().to_owned();
            note(&seen, &method, &headers);
            let id = message["id"].clone();
            let result = match method.as_str() {
                "initialize" => {
                    json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": true}},
                    "serverInfo": {"name": "u", "version": "1"}})
                }
                "tools/list" => {
                    json!({"tools": [{"name": "a", "inputSchema": {"type": "object"}}]})
                }
                _ => return http::StatusCode::ACCEPTED.into_response(),
            };
            let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
            ([("mcp-session-id", "s-1")], axum::Json(body)).into_response()
        }
        async fn verb(
            axum::extract::State(seen): axum::extract::State<Seen>,
            method: http::Method,
            headers: HeaderMap,
        ) -> axum::response::Response {
            note(&seen, method.as_str(), &headers);
            if method == http::Method::DELETE {
                return http::StatusCode::OK.into_response();
            }
            let first = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"caf\u{e9}\"}}\n\n";
            let split = first.find('\u{e9}').expect("the character") + 1;
            let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> = vec![
                Ok(first.as_bytes()[..split].to_vec().into()),
                Ok(first.as_bytes()[split..].to_vec().into()),
                Ok("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\r\n\r\n".into()),
            ];
            let body = axum::body::Body::from_stream(futures_util::stream::iter(chunks));
            ([("content-type", "text/event-stream")], body).into_response()
        }
        let app = axum::Router::new()
            .route("/mcp", axum::routing::post(post).get(verb).delete(verb))
            .with_state(seen);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/mcp")
    }

    #[tokio::test]
    async fn a_2025_session_is_ended_after_a_listing_and_after_its_change_stream() {
        let seen = Seen::default();
        let url = upstream_2025(seen.clone()).await;
        let section: UpstreamSection =
            serde_json::from_value(json!({"name": "u", "url": url, "protocol": "2025-11-25"}))
                .expect("parses");
        let upstream = Upstream::new(section, |_| None).expect("valid");
        let outbound = Outbound::new(OutboundConfig::default()).expect("outbound");
        let timeout = std::time::Duration::from_secs(30);
        let listed = list(&outbound, &upstream, None, timeout)
            .await
            .expect("listed");
        assert_eq!(listed.protocol, PROTOCOLS[0]);
        assert_eq!(listed.tools.len(), 1);
        let requests = std::mem::take(&mut *seen.lock().expect("lock"));
        assert_eq!(
            requests,
            [
                "initialize -",
                "notifications/initialized s-1",
                "tools/list s-1",
                "DELETE s-1"
            ]
        );
        let mut changes = changes(&outbound, &upstream, None, PROTOCOLS[0], timeout)
            .await
            .expect("a stream");
        assert_eq!(changes.next().await, Some(false), "a message, not a change");
        assert_eq!(changes.next().await, Some(true), "the tools changed");
        assert_eq!(changes.next().await, None, "the stream ended");
        changes.end().await;
        let requests = std::mem::take(&mut *seen.lock().expect("lock"));
        assert_eq!(
            requests,
            [
                "initialize -",
                "notifications/initialized s-1",
                "GET s-1",
                "DELETE s-1"
            ]
        );
    }

    #[test]
    fn an_event_ends_at_the_first_blank_line_of_either_kind() {
        assert_eq!(event_end(b"data: a\r\n\r\ndata: b\n\n"), Some((7, 4)));
        assert_eq!(event_end(b"data: a\n\ndata: b\r\n\r\n"), Some((7, 2)));
        assert_eq!(event_end(b"data: a\r\n"), None);
    }

    fn answer(content_type: &str, body: &str) -> Answer {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_str(content_type).expect("header"),
        );
        Answer {
            status: 200,
            headers,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn an_answer_is_found_in_json_or_in_an_event_stream_past_notifications() {
        let json = answer(
            "application/json",
            r#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#,
        );
        assert_eq!(result_of(&json, 3), Ok(json!({"a": 1})));
        assert!(
            result_of(&json, 4)
                .expect_err("another id")
                .contains("request 4")
        );
        let stream = answer(
            "text/event-stream",
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
             event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32601,\"message\":\"no such method\"}}\r\n\r\n",
        );
        let e = result_of(&stream, 7).expect_err("an error");
        assert!(e.contains("-32601") && e.contains("no such method"), "{e}");
        let html = answer("text/html", "<html>gateway timeout</html>");
        assert!(
            result_of(&html, 1)
                .expect_err("not JSON")
                .contains("gateway timeout")
        );
    }
}
