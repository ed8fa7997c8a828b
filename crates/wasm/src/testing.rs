//! Helpers for tests of the crates that run guests (cargo feature `testing`): one way to
//! build an engine and load the example guests into it.

use std::sync::Arc;

use crate::{Component, ComponentLoader, EngineConfig, WasmEngine};

/// The example guests (built by `snodo-test-guests`), loaded into one engine.
pub struct Guests {
    /// The loader they were loaded with (its engine and caches).
    pub loader: ComponentLoader,
    /// The conformance fixture tools, resources and prompts.
    pub fixtures: Arc<Component>,
    /// The example tools.
    pub examples: Arc<Component>,
    /// The hostile guests: loops, memory hogs, traps.
    pub hostile: Arc<Component>,
    /// Tools that reach the world through `wasi:http` (`fetch`, `open_ticket`).
    pub outbound: Arc<Component>,
}

/// A pooling engine with `max_instances` slots of `max_memory_bytes`, and the guests.
pub async fn load_guests(max_instances: u32, max_memory_bytes: usize) -> Guests {
    load_guests_with(EngineConfig {
        max_instances,
        max_memory_bytes,
        ..EngineConfig::default()
    })
    .await
}

/// An engine built with `config`, and the guests, compiled once per build into
/// [`snodo_test_guests::COMPONENT_CACHE`].
pub async fn load_guests_with(config: EngineConfig) -> Guests {
    let engine = WasmEngine::new(config).expect("engine");
    let loader = ComponentLoader::new(engine, Some(snodo_test_guests::COMPONENT_CACHE.into()))
        .expect("loader");
    let fixtures = loader
        .load(snodo_test_guests::FIXTURES)
        .await
        .expect("fixtures");
    let examples = loader
        .load(snodo_test_guests::EXAMPLES)
        .await
        .expect("examples");
    let hostile = loader
        .load(snodo_test_guests::HOSTILE)
        .await
        .expect("hostile");
    let outbound = loader
        .load(snodo_test_guests::OUTBOUND)
        .await
        .expect("outbound");
    Guests {
        loader,
        fixtures,
        examples,
        hostile,
        outbound,
    }
}

/// A local HTTP server for outbound tests: it records every request it receives and
/// answers by path.
///
/// - `GET /template`: 200, `template-1`.
/// - `POST /tickets`: 201, `{"id": N}` (N counts the POSTs).
/// - `GET /headers`: 200, the request's headers, one `name: value` per line (the echo);
///   gzip-encoded when the request accepts gzip, and the asked part (206) when it asks for
///   a range `bytes=FIRST-LAST`, as a server of static pages would.
/// - `GET /gzip/headers`: the echo, gzip-encoded whatever the request accepts.
/// - `GET /base64/headers`: the echo in base64.
/// - `GET /header-names`: 200, and for each request header whose value can be a header
///   name, a header `x-echo-VALUE: 1`.
/// - `GET /piece?from=N&len=M`: 206, those bytes of the echo, asked for or not.
/// - `GET /big?n=BYTES`: 200, that many bytes.
/// - `GET /slow`: never answers.
/// - `GET /stall`: answers, sends one byte of its body, and never the rest.
/// - `GET /flaky`, `POST /flaky`: 503 to the first request of that method, then 200,
///   `recovered`: an upstream with a transient failure.
/// - `GET /redirect`: 302 to `http://169.254.169.254/latest/meta-data/`.
/// - anything else: 404.
pub struct HttpRecorder {
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    seen: Arc<parking_lot::Mutex<Vec<Recorded>>>,
    _server: tokio::task::JoinHandle<()>,
}

/// One request the recorder received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The method.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Recorded {
    /// The value of header `name`, if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The test CA's certificate (PEM): what `outbound.ca_bundle` names to trust
/// [`HttpRecorder::start_tls`]. Its key was discarded when the certificates were made.
pub const TEST_CA_PEM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/ca.pem");

impl HttpRecorder {
    /// Starts one on 127.0.0.1 at a free port.
    pub async fn start() -> Self {
        Self::serve(None).await
    }

    /// Starts one speaking TLS, with a certificate for `localhost` and 127.0.0.1 issued by
    /// the test CA ([`TEST_CA_PEM`]), which no usual root store trusts.
    pub async fn start_tls() -> Self {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_slice_iter(include_bytes!("../testdata/server.pem"))
            .collect::<Result<Vec<_>, _>>()
            .expect("the test certificate");
        let key = PrivateKeyDer::from_pem_slice(include_bytes!("../testdata/server.key"))
            .expect("the test key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a server certificate");
        Self::serve(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a test port");
        let addr = listener.local_addr().expect("its address");
        let seen: Arc<parking_lot::Mutex<Vec<Recorded>>> = Arc::default();
        let recorded = seen.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let recorded = recorded.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let recorded = recorded.clone();
                        async move { answer(req, &recorded).await }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(stream).await {
                                let io = hyper_util::rt::TokioIo::new(stream);
                                let _ = http.serve_connection(io, service).await;
                            }
                        }
                        None => {
                            let io = hyper_util::rt::TokioIo::new(stream);
                            let _ = http.serve_connection(io, service).await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            seen,
            _server: server,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Recorded> {
        self.seen.lock().clone()
    }

    /// The requests received with this method and path.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.seen
            .lock()
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    }
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    recorded: &parking_lot::Mutex<Vec<Recorded>>,
) -> Result<hyper::Response<TestBody>, std::convert::Infallible> {
    use http_body_util::BodyExt;
    let method = req.method().as_str().to_owned();
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let (posts, same) = {
        let mut seen = recorded.lock();
        seen.push(Recorded {
            method: method.clone(),
            path: path.clone(),
            headers: headers.clone(),
            body,
        });
        let posts = seen.iter().filter(|r| r.method == "POST").count();
        let same = seen
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count();
        (posts, same)
    };
    let echo: String = headers.iter().map(|(n, v)| format!("{n}: {v}\n")).collect();
    let response = match (method.as_str(), path.split('?').next().unwrap_or("")) {
        ("GET", "/template") => reply(200, b"template-1".to_vec()),
        ("POST", "/tickets") => reply(201, format!("{{\"id\":{posts}}}").into_bytes()),
        ("GET", "/headers") => echo_headers(&headers, echo),
        ("GET", "/gzip/headers") => gzipped(&echo),
        ("GET", "/base64/headers") => reply(200, base64(echo.as_bytes()).into_bytes()),
        ("GET", "/header-names") => echo_into_names(&headers),
        ("GET", "/piece") => {
            let query = |key: &str| {
                path.split(['?', '&'])
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0)
            };
            piece(&echo, query("from"), query("len"))
        }
        ("GET", "/big") => {
            let n = path
                .split("n=")
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0usize);
            reply(200, vec![b'x'; n])
        }
        ("GET", "/stall") => {
            let mut r = reply(200, Vec::new());
            *r.body_mut() = TestBody::Stalls(true);
            r
        }
        ("GET", "/slow") => {
            std::future::pending::<()>().await;
            reply(200, Vec::new())
        }
        ("GET" | "POST", "/flaky") if same == 1 => reply(503, b"try again".to_vec()),
        ("GET" | "POST", "/flaky") => reply(200, b"recovered".to_vec()),
        ("GET", "/redirect") => {
            let mut r = reply(302, Vec::new());
            r.headers_mut().insert(
                hyper::header::LOCATION,
                hyper::header::HeaderValue::from_static("http://169.254.169.254/latest/meta-data/"),
            );
            r
        }
        _ => reply(404, b"not found".to_vec()),
    };
    Ok(response)
}

/// A whole response of `status` with `body`.
fn reply(status: u16, body: Vec<u8>) -> hyper::Response<TestBody> {
    let mut r = hyper::Response::new(TestBody::Whole(Some(bytes::Bytes::from(body))));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    r
}

/// `text` gzipped, saying so.
fn gzipped(text: &str) -> hyper::Response<TestBody> {
    let mut r = reply(200, gzip(text.as_bytes()));
    r.headers_mut().insert(
        hyper::header::CONTENT_ENCODING,
        hyper::header::HeaderValue::from_static("gzip"),
    );
    r
}

/// `len` bytes of `text` from `from`, as a 206 with its content-range.
fn piece(text: &str, from: usize, len: usize) -> hyper::Response<TestBody> {
    let bytes = text.as_bytes();
    let from = from.min(bytes.len());
    let to = (from + len).min(bytes.len());
    let mut r = reply(206, bytes[from..to].to_vec());
    let range = format!("bytes {from}-{}/{}", to.max(from + 1) - 1, bytes.len());
    if let Ok(v) = hyper::header::HeaderValue::from_str(&range) {
        r.headers_mut().insert(hyper::header::CONTENT_RANGE, v);
    }
    r
}

/// `/headers`: the request's headers echoed as `echo`, in the range or the encoding the
/// request asked for.
fn echo_headers(headers: &[(String, String)], echo: String) -> hyper::Response<TestBody> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let range = header("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
    if let Some((first, last)) = range {
        piece(&echo, first, last + 1 - first.min(last + 1))
    } else if header("accept-encoding").is_some_and(|a| a.contains("gzip")) {
        gzipped(&echo)
    } else {
        reply(200, echo.into_bytes())
    }
}

/// `/header-names`: each request header's value echoed in a header's name.
fn echo_into_names(headers: &[(String, String)]) -> hyper::Response<TestBody> {
    let mut r = reply(200, b"ok".to_vec());
    for (_, v) in headers {
        if let Ok(name) = hyper::header::HeaderName::from_bytes(format!("x-echo-{v}").as_bytes()) {
            r.headers_mut()
                .append(name, hyper::header::HeaderValue::from_static("1"));
        }
    }
    r
}

/// `data` in standard base64, padded (what `/base64/headers` answers).
pub fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// `data` as gzip (RFC 1952): one deflate block of literals under the fixed Huffman code
/// (RFC 1951 §3.2.6), no matching, then the CRC-32 and the length. A real encoding (the
/// bytes of `data` do not appear in it), not a small one.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let (mut acc, mut held) = (0u64, 0u32);
    let mut put = |out: &mut Vec<u8>, value: u32, bits: u32| {
        acc |= u64::from(value) << held;
        held += bits;
        while held >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            held -= 8;
        }
    };
    // Huffman codes go most significant bit first into a least-significant-first stream.
    let code =
        |out: &mut Vec<u8>, put: &mut dyn FnMut(&mut Vec<u8>, u32, u32), c: u32, bits: u32| {
            put(out, c.reverse_bits() >> (32 - bits), bits);
        };
    put(&mut out, 1, 1); // the last block
    put(&mut out, 1, 2); // fixed Huffman codes
    for &b in data {
        let (c, bits) = if b < 144 {
            (0x30 + u32::from(b), 8)
        } else {
            (0x190 + u32::from(b) - 144, 9)
        };
        code(&mut out, &mut put, c, bits);
    }
    code(&mut out, &mut put, 0, 7); // end of block
    put(&mut out, 0, 7); // flush to a byte boundary
    let crc = !data.iter().fold(!0u32, |mut c, &b| {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = (c >> 1) ^ (0xedb8_8320 & (c & 1).wrapping_neg());
        }
        c
    });
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

/// A test response body: whole, or one byte and then nothing, forever.
pub enum TestBody {
    /// The body, sent at once.
    Whole(Option<bytes::Bytes>),
    /// Whether its one byte is still to send.
    Stalls(bool),
}

impl http_body::Body for TestBody {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        use std::task::Poll;
        match self.get_mut() {
            TestBody::Whole(body) => {
                Poll::Ready(body.take().map(|b| Ok(http_body::Frame::data(b))))
            }
            TestBody::Stalls(first) if *first => {
                *first = false;
                Poll::Ready(Some(Ok(http_body::Frame::data(bytes::Bytes::from_static(
                    b"x",
                )))))
            }
            TestBody::Stalls(_) => Poll::Pending,
        }
    }
}
