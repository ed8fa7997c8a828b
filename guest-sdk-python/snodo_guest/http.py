"""Outbound HTTP through the host's `wasi:http`: a small blocking client.

    from snodo_guest import http

    issue = http.get("https://api.example.com/issues/1").error_for_status().json()
    http.post("https://api.example.com/issues", json={"title": issue["title"]})

The host decides whether a request goes out (`allowed_outbound_hosts`), adds the headers it
injects (secrets the tool never sees), and in a task answers a replayed attempt from the
task's journal, so a request made before a crash or a question is not sent twice
(docs/outbound.md). A request the host refuses raises `HttpError` of kind `denied`, whose
`detail` begins with the code (`HttpRequestDenied`, `DestinationIpProhibited`) and names the
URL, the tool and the configuration key that would allow it; any other failure is kind
`request`, naming the host's error code.

Only a component built against the world that imports `wasi:http` can send (`snodo new
--lang python` makes one; `build.sh` assembles its WIT); elsewhere `request` raises
`HttpError("unavailable", ...)`.
"""

import json as _json
from urllib.parse import urlsplit

#: The host's `wasi:http` bindings (types, outgoing-handler, streams, `Ok`, `Err`), set
#: by `snodo_guest.exports` when the component imports them.
_wasi = None

_CHUNK = 4096


class HttpError(Exception):
    """Why a request produced no response, or a response is not what was asked for:
    `kind` is `url`, `denied` (the host refused it; its explanation in `detail`), `request`
    (the host's error code in `detail`), `body`, `status` (`status` and `body` set), `json`
    or `unavailable`."""

    def __init__(self, kind, detail, status=None, body=None):
        super().__init__(f"HTTP {status}: {detail}" if kind == "status" else f"{kind}: {detail}")
        self.kind, self.detail, self.status, self.body = kind, detail, status, body


class Response:
    """A whole response: `status`, `headers` (a list of `(name, value)` strings) and
    `body` (bytes)."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)

    def text(self):
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        try:
            return _json.loads(self.body)
        except ValueError as e:
            raise HttpError("json", str(e)) from None

    def error_for_status(self):
        """This response, or `HttpError` when its status is 400 or above."""
        if self.status >= 400:
            raise HttpError("status", self.text(), status=self.status, body=self.body)
        return self


def get(url, **kwargs):
    return request("GET", url, **kwargs)


def post(url, **kwargs):
    return request("POST", url, **kwargs)


def put(url, **kwargs):
    return request("PUT", url, **kwargs)


def delete(url, **kwargs):
    return request("DELETE", url, **kwargs)


def request(method, url, headers=None, body=None, json=None):
    """Sends one request and reads the whole response. `headers`: a dict or a list of
    pairs; `body`: bytes or text; `json`: a value sent as JSON (with its content type)."""
    if _wasi is None:
        raise HttpError("unavailable", "this component does not import wasi:http; build it with build.sh")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError("url", f"{url!r} is not an http:// or https:// URL with a host")
    pairs = list((headers or {}).items()) if isinstance(headers, dict) else list(headers or [])
    if json is not None:
        body = _json.dumps(json).encode()
        if not any(k.lower() == "content-type" for k, _ in pairs):
            pairs.append(("content-type", "application/json"))
    if isinstance(body, str):
        body = body.encode()
    return _send(method.upper(), parts, pairs, body or b"")


def _method(t, method):
    known = {"GET": t.Method_Get, "HEAD": t.Method_Head, "POST": t.Method_Post, "PUT": t.Method_Put,
             "DELETE": t.Method_Delete, "CONNECT": t.Method_Connect, "OPTIONS": t.Method_Options,
             "TRACE": t.Method_Trace, "PATCH": t.Method_Patch}
    return known[method]() if method in known else t.Method_Other(method)


#: How the host's denials begin: `internal-error` text led by the name of the code it stands
#: for, since `HTTP-request-denied` and `destination-IP-prohibited` carry no text.
_DENIALS = ("HttpRequestDenied: ", "DestinationIpProhibited: ")


def _failed(e):
    """The `HttpError` for the host's error code `e`: a denial, or a failed request."""
    name = type(e).__name__.split("_", 1)[-1]
    value = getattr(e, "value", None)
    if name == "InternalError" and isinstance(value, str) and value.startswith(_DENIALS):
        return HttpError("denied", value)
    if name in ("HttpRequestDenied", "DestinationIpProhibited"):
        return HttpError("denied", name)
    return HttpError("request", _code(e))


def _code(e):
    """The host's error code, by its WIT case name in CamelCase (`HttpRequestDenied`)."""
    name = type(e).__name__.split("_", 1)[-1]
    value = getattr(e, "value", None)
    return f"{name}({value})" if value not in (None, ()) and not hasattr(value, "__dict__") else name


def _send(method, parts, pairs, body):
    w = _wasi
    t, Err = w.types, w.Err
    try:
        fields = t.Fields.from_list([(k, v.encode() if isinstance(v, str) else bytes(v)) for k, v in pairs])
    except Err as e:
        raise HttpError("request", f"header refused: {_code(e.value)}") from None
    req = t.OutgoingRequest(fields)
    req.set_method(_method(t, method))
    req.set_scheme(t.Scheme_Https() if parts.scheme == "https" else t.Scheme_Http())
    req.set_authority(parts.netloc)
    req.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing = req.body()
    # Handed over first: the host reads the body as it is written (its channel holds only
    # a few chunks, so writing a long body before handing the request over would block).
    try:
        future = w.handler.handle(req, None)
    except Err as e:
        outgoing.__exit__(None, None, None)
        raise _failed(e.value) from None
    with outgoing.write() as stream:
        for i in range(0, len(body), _CHUNK):
            stream.blocking_write_and_flush(body[i:i + _CHUNK])
    t.OutgoingBody.finish(outgoing, None)
    with future:
        with future.subscribe() as ready:
            ready.block()
        got = future.get()
    # option<result<result<incoming-response, error-code>>>: present once ready.
    if got is None or isinstance(got, Err):
        raise HttpError("request", "no response")
    if isinstance(got.value, Err):
        raise _failed(got.value.value)
    with got.value.value as response:
        status = response.status()
        with response.headers() as h:
            headers = [(k, v.decode("latin-1")) for k, v in h.entries()]
        incoming = response.consume()
        chunks = []
        with incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(65536))
                except Err as e:
                    if type(e.value).__name__.endswith("Closed"):
                        break
                    raise HttpError("body", "the response body could not be read") from None
        t.IncomingBody.finish(incoming).__exit__(None, None, None)
    return Response(status, headers, b"".join(chunks))
