//! A small MCP client over HTTP/1 (hyper's client connection): what the stress harness,
//! the benchmarks and the end-to-end tests speak to a server they started. It speaks
//! 2026-07-28's routing headers and nothing else; it is a test and measurement client, not
//! an SDK.

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// One keep-alive connection: requests go one at a time.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
}

/// A response whose body has not been read yet (an event stream stays open while it is
/// held).
pub type Streaming = hyper::Response<Incoming>;

impl Connection {
    /// Connects to `addr` (TCP_NODELAY, as the server sets it).
    pub async fn open(addr: SocketAddr) -> Result<Self, String> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        // The connection's I/O runs beside its sender and ends with it.
        tokio::spawn(connection);
        Ok(Self { sender })
    }

    /// Sends `request` and answers with the response head; the body is read as it comes.
    pub async fn send(
        &mut self,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<Streaming, String> {
        self.sender.ready().await.map_err(|e| e.to_string())?;
        self.sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())
    }

    /// Sends `request` and reads the whole response: its status and its body.
    pub async fn exchange(
        &mut self,
        request: hyper::Request<Full<Bytes>>,
    ) -> Result<(u16, Bytes), String> {
        let response = self.send(request).await?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }

    /// POSTs the JSON-RPC `message` to `/mcp` ([`mcp_request`]) and reads the reply as JSON
    /// (a body that is not JSON comes back as a string).
    pub async fn call(
        &mut self,
        message: &Value,
        bearer: Option<&str>,
    ) -> Result<(u16, Value), String> {
        let (status, body) = self.exchange(mcp_request(message, bearer, false)).await?;
        let value = serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
        Ok((status, value))
    }

    /// `POST path` with a JSON body: the status and the body as text.
    pub async fn post(&mut self, path: &str, body: &Value) -> Result<(u16, String), String> {
        let request = hyper::Request::post(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let (status, body) = self.exchange(request).await?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// `GET path`: the status and the body as text.
    pub async fn get(&mut self, path: &str) -> Result<(u16, String), String> {
        let request = hyper::Request::get(path)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let (status, body) = self.exchange(request).await?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// The `POST /mcp` of the JSON-RPC `message` with 2026-07-28's headers: `Mcp-Method` from
/// its method, `Mcp-Name` from `params.name` (a tool, prompt or resource) or
/// `params.taskId`, a bearer token if given, and an `Accept` that takes an event stream
/// when `stream` is set.
pub fn mcp_request(
    message: &Value,
    bearer: Option<&str>,
    stream: bool,
) -> hyper::Request<Full<Bytes>> {
    let body = serde_json::to_vec(message).map_or_else(|_| Bytes::new(), Bytes::from);
    mcp_request_of(message, body, bearer, stream)
}

/// [`mcp_request`] with `message` already serialized as `body`: a load generator sending
/// one large message again and again serializes it once.
pub fn mcp_request_of(
    message: &Value,
    body: Bytes,
    bearer: Option<&str>,
    stream: bool,
) -> hyper::Request<Full<Bytes>> {
    let method = message["method"].as_str().unwrap_or_default();
    let params = &message["params"];
    let name = params["name"]
        .as_str()
        .or_else(|| params["taskId"].as_str());
    let accept = if stream {
        "application/json, text/event-stream"
    } else {
        "application/json"
    };
    let mut request = hyper::Request::post("/mcp")
        .header("host", "localhost")
        .header("content-type", "application/json")
        .header("accept", accept)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    if let Some(token) = bearer {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = Full::new(body);
    // Every header above is a valid name and value.
    request
        .body(body)
        .unwrap_or_else(|_| hyper::Request::new(Full::new(Bytes::new())))
}

/// One call over a fresh connection, within `patience`; `None` when no complete reply came
/// (the server died or refused the connection).
pub async fn call_once(
    addr: SocketAddr,
    message: &Value,
    patience: Duration,
) -> Option<(u16, Value)> {
    let exchange = async {
        let mut connection = Connection::open(addr).await.ok()?;
        connection.call(message, None).await.ok()
    };
    tokio::time::timeout(patience, exchange)
        .await
        .ok()
        .flatten()
}

/// The events of a server-sent event stream, read from a response's body as it arrives.
pub struct Events {
    body: Incoming,
    text: String,
}

impl Events {
    /// The events of `response`, which must be an event stream.
    pub fn of(response: Streaming) -> Result<Self, String> {
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !kind.starts_with("text/event-stream") {
            return Err(format!("not an event stream: {kind:?}"));
        }
        Ok(Self {
            body: response.into_body(),
            text: String::new(),
        })
    }

    /// The next event's JSON data; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.text.find("\n\n") {
                let event: String = self.text.drain(..end + 2).collect();
                if let Some(v) = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                {
                    return Some(v);
                }
                continue;
            }
            let frame = self.body.frame().await?.ok()?;
            if let Some(data) = frame.data_ref() {
                self.text.push_str(&String::from_utf8_lossy(data));
            }
        }
    }
}
