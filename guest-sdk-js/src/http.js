//! Outbound HTTP through the host's `wasi:http`: a small blocking client.
//!
//! ```js
//! import { http } from "snodo-guest";
//! const issue = http.get("https://api.example.com/issues/1").errorForStatus().json();
//! http.post("https://api.example.com/issues", { json: { title: issue.title } });
//! ```
//!
//! The host decides whether a request goes out (`allowed_outbound_hosts`), adds the headers
//! it injects (secrets the tool never sees), and in a task answers a replayed attempt from
//! the task's journal, so a request made before a crash or a question is not sent twice
//! (docs/outbound.md). A request the host refuses throws `HttpError` of kind `denied`, whose
//! `detail` begins with the code (`HttpRequestDenied`, `DestinationIpProhibited`) and names
//! the URL, the tool and the configuration key that would allow it; any other failure is
//! kind `request`, naming the host's error code.

import { handle } from "wasi:http/outgoing-handler@0.2.12";
import { Fields, IncomingBody, OutgoingBody, OutgoingRequest } from "wasi:http/types@0.2.12";

const CHUNK = 4096;

/** Why a request produced no response, or a response is not what was asked for: `kind` is
 * `url`, `denied` (the host refused it; its explanation in `detail`), `request` (the host's
 * error code in `detail`), `body`, `status` or `json`. */
export class HttpError extends Error {
  constructor(kind, detail, status, body) {
    super(kind === "status" ? `HTTP ${status}: ${detail}` : `${kind}: ${detail}`);
    this.name = "HttpError";
    this.kind = kind;
    this.detail = detail;
    this.status = status;
    this.body = body;
  }
}

/** A whole response: `status`, `headers` (`[name, value]` strings) and `body` (bytes). */
export class Response {
  constructor(status, headers, body) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }
  header(name) {
    const n = name.toLowerCase();
    return this.headers.find(([k]) => k.toLowerCase() === n)?.[1];
  }
  text() {
    return new TextDecoder().decode(this.body);
  }
  json() {
    try {
      return JSON.parse(this.text());
    } catch (e) {
      throw new HttpError("json", e.message);
    }
  }
  /** This response, or `HttpError` when its status is 400 or above. */
  errorForStatus() {
    if (this.status >= 400) throw new HttpError("status", this.text(), this.status, this.body);
    return this;
  }
}

function code(e) {
  const v = e?.payload ?? e;
  return typeof v?.tag === "string" ? v.tag : String(e?.message ?? e);
}

// How the host's denials begin: `internal-error` text led by the name of the code it stands
// for, since `HTTP-request-denied` and `destination-IP-prohibited` carry no text.
const DENIALS = ["HttpRequestDenied: ", "DestinationIpProhibited: "];

/** The `HttpError` for the host's error code `e`: a denial, or a failed request. */
export function failed(e) {
  const v = e?.payload ?? e;
  if (v?.tag === "internal-error" && typeof v.val === "string") {
    if (DENIALS.some((d) => v.val.startsWith(d))) return new HttpError("denied", v.val);
    return new HttpError("request", `internal-error: ${v.val}`);
  }
  if (v?.tag === "HTTP-request-denied" || v?.tag === "destination-IP-prohibited") {
    return new HttpError("denied", v.tag);
  }
  return new HttpError("request", code(e));
}

function drop(resource) {
  resource?.[Symbol.dispose]?.();
}

const METHODS = ["get", "head", "post", "put", "delete", "connect", "options", "trace", "patch"];

/** Sends one request and reads the whole response. `options.headers`: an object or a list
 * of pairs; `options.body`: a string or bytes; `options.json`: a value sent as JSON. */
export function request(method, url, options = {}) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new HttpError("url", `${url} is not a URL`);
  }
  if ((parsed.protocol !== "http:" && parsed.protocol !== "https:") || !parsed.host) {
    throw new HttpError("url", `${url} is not an http:// or https:// URL with a host`);
  }
  const pairs = Array.isArray(options.headers) ? [...options.headers] : Object.entries(options.headers ?? {});
  let body = options.body;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    if (!pairs.some(([k]) => k.toLowerCase() === "content-type")) pairs.push(["content-type", "application/json"]);
  }
  if (typeof body === "string") body = new TextEncoder().encode(body);
  body ??= new Uint8Array();

  const encoder = new TextEncoder();
  let fields;
  try {
    fields = Fields.fromList(pairs.map(([k, v]) => [k, typeof v === "string" ? encoder.encode(v) : v]));
  } catch (e) {
    throw new HttpError("request", `header refused: ${code(e)}`);
  }
  const req = new OutgoingRequest(fields);
  const m = method.toLowerCase();
  req.setMethod(METHODS.includes(m) ? { tag: m } : { tag: "other", val: method });
  req.setScheme({ tag: parsed.protocol === "https:" ? "HTTPS" : "HTTP" });
  req.setAuthority(parsed.host);
  req.setPathWithQuery(`${parsed.pathname || "/"}${parsed.search}`);
  const outgoing = req.body();
  // Handed over first: the host reads the body as it is written (its channel holds only a
  // few chunks, so writing a long body before handing the request over would block).
  let future;
  try {
    future = handle(req, undefined);
  } catch (e) {
    drop(outgoing);
    throw failed(e);
  }
  const stream = outgoing.write();
  for (let i = 0; i < body.length; i += CHUNK) stream.blockingWriteAndFlush(body.subarray(i, i + CHUNK));
  drop(stream);
  OutgoingBody.finish(outgoing, undefined);
  const ready = future.subscribe();
  ready.block();
  drop(ready);
  const got = future.get();
  drop(future);
  // option<result<result<incoming-response, error-code>>>: present once ready.
  if (got === undefined || got.tag === "err") throw new HttpError("request", "no response");
  if (got.val.tag === "err") throw failed(got.val.val);
  const response = got.val.val;
  const status = response.status();
  const h = response.headers();
  const decoder = new TextDecoder("latin1");
  const headers = h.entries().map(([k, v]) => [k, decoder.decode(v)]);
  drop(h);
  const incoming = response.consume();
  const input = incoming.stream();
  const chunks = [];
  let size = 0;
  for (;;) {
    let chunk;
    try {
      chunk = input.blockingRead(65536n);
    } catch (e) {
      if (code(e) === "closed") break;
      throw new HttpError("body", "the response body could not be read");
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  drop(input);
  drop(IncomingBody.finish(incoming));
  drop(response);
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return new Response(status, headers, all);
}

export const get = (url, options) => request("GET", url, options);
export const post = (url, options) => request("POST", url, options);
export const put = (url, options) => request("PUT", url, options);
export const del = (url, options) => request("DELETE", url, options);
