//! Snodo tools in JavaScript and TypeScript: `tool()`, `resource()` and `prompt()` declare
//! what a component serves; `snodo-guest-build` (bin/build.mjs) bundles the app with this
//! SDK and builds it with componentize-js against Snodo's WIT (`snodo:tasks@0.5.0`).
//!
//! ```js
//! import { tool, z } from "snodo-guest";
//!
//! tool({ name: "greet", description: "Says hello", input: z.object({ name: z.string() }) },
//!   (cx, { name }) => `Hello, ${name}!`);
//! ```
//!
//! Schemas are zod schemas (turned into JSON Schema, and used to parse the arguments) or
//! plain JSON Schema objects (the host checks the arguments against them). A tool returns a
//! string (one text block), an object (structured content, also shown as text), a
//! `ToolResult`, or throws `RpcError` (the task fails with it) or `Retry` (the attempt is
//! retried under the task's retry policy). Every function runs synchronously: the host
//! blocks the guest while it waits for input, and `cx.sleep` is a sleep the host keeps (a
//! long one parks the task: see `Context.sleep`).

import * as host from "snodo:tasks/context@0.1.0";
import * as callerHost from "snodo:tasks/caller@0.4.0";
import * as timers from "snodo:tasks/timers@0.5.0";
import { z } from "zod";
import { toJSONSchema } from "zod/v4/core";

z.config({ jitless: true });
export { z };
export * as http from "./http.js";

/** The tools declared so far, by name, in declaration order. */
export const TOOLS = new Map();
/** Fixed resources by URI, templates by URI template, prompts by name. */
export const RESOURCES = new Map();
export const TEMPLATES = new Map();
export const PROMPTS = new Map();

/** The modes a tool may declare or a mode rule may choose. */
export const MODES = ["sync", "optional", "required"];

/** A JSON-RPC error: thrown by a tool, the task fails with it. */
export class RpcError extends Error {
  constructor(code, message, data, statusMessage) {
    super(String(message));
    this.name = "RpcError";
    this.code = Math.trunc(Number(code)) || -32603;
    this.data = data;
    this.statusMessage = statusMessage === undefined ? undefined : String(statusMessage);
  }
  static invalidParams(message) {
    return new RpcError(-32602, message);
  }
  static internal(message) {
    return new RpcError(-32603, message);
  }
}

/** Thrown by a tool: try again later under the task's retry policy (or fail with `error`,
 * an `RpcError` or a message for an internal error, once it is used up), showing
 * `statusMessage` (default: the error's message) meanwhile. */
export class Retry extends Error {
  constructor(error, statusMessage) {
    const e = error instanceof RpcError ? error : RpcError.internal(String(error?.message ?? error));
    const status = statusMessage === undefined ? e.message : String(statusMessage);
    super(status);
    this.name = "Retry";
    this.error = e;
    this.statusMessage = status;
  }
}

/** A tool's result: MCP content blocks (`{type: "text", text}`, `{type: "image" | "audio",
 * data, mimeType}`, `{type: "resource", resource}`, `{type: "resource_link", uri, name}`),
 * structured content and an error flag. */
export class ToolResult {
  constructor({ text, content = [], structured, isError = false } = {}) {
    this.content = text === undefined ? [...content] : [{ type: "text", text }, ...content];
    this.structured = structured;
    this.isError = isError;
  }
  static text(text) {
    return new ToolResult({ text });
  }
  static error(text) {
    return new ToolResult({ text, isError: true });
  }
}

/** An elicitation form: a message and flat fields (MCP's restricted schema). */
export class Form {
  constructor(message) {
    this.message = message;
    this.properties = {};
    this.required = [];
  }
  field(name, schema) {
    this.properties[name] = schema;
    return this;
  }
  string(name, title, extra = {}) {
    return this.field(name, { type: "string", title, ...extra });
  }
  number(name, title, extra = {}) {
    return this.field(name, { type: "number", title, ...extra });
  }
  integer(name, title, extra = {}) {
    return this.field(name, { type: "integer", title, ...extra });
  }
  boolean(name, title, extra = {}) {
    return this.field(name, { type: "boolean", title, ...extra });
  }
  choice(name, title, options, extra = {}) {
    return this.field(name, { type: "string", title, enum: [...options], ...extra });
  }
  require(...names) {
    for (const n of names) if (!this.required.includes(n)) this.required.push(n);
    return this;
  }
  schema() {
    const s = { type: "object", properties: this.properties };
    if (this.required.length) s.required = [...this.required];
    return s;
  }
}

/** The user's answer to a form. */
export class Answer {
  constructor(raw) {
    this.raw = raw;
    this.action = raw?.action;
    this.content = raw?.content ?? {};
  }
  get accepted() {
    return this.action === "accept";
  }
  get(name) {
    return this.content[name];
  }
}

/** A question could not be asked or answered: `kind` is `cancelled`, `unsupported`,
 * `key-conflict` (the key was used for another question) or `invalid`. */
export class InputError extends Error {
  constructor(kind, detail) {
    super(detail ? `${kind}: ${detail}` : kind);
    this.name = "InputError";
    this.kind = kind;
    this.detail = detail;
  }
}

function inputError(e) {
  const v = e?.payload ?? e;
  if (v && typeof v.tag === "string") return new InputError(v.tag, v.val);
  return e;
}

function request(q) {
  if (q instanceof Form) {
    return { tag: "elicit-form", val: { message: q.message, requestedSchema: JSON.stringify(q.schema()) } };
  }
  switch (q?.kind) {
    case "url":
      return { tag: "elicit-url", val: { message: q.message, url: q.url, elicitationId: q.elicitationId } };
    case "sampling":
      return { tag: "sampling", val: JSON.stringify(q.params) };
    case "roots":
      return { tag: "roots" };
    default:
      throw new TypeError(`not a question: ${JSON.stringify(q)}`);
  }
}

function principal(p) {
  return {
    tenant: p.tenant,
    subject: p.subject,
    scopes: p.scopes.tag === "only" ? p.scopes.val : null,
    claims: JSON.parse(p.claims || "{}"),
  };
}

/** Runs one of the host's sleeps: `true` when it ran its course, `false` when the task was
 * cancelled. */
function hostSleep(sleep) {
  try {
    sleep();
    return true;
  } catch (e) {
    if (e?.payload === "cancelled") return false;
    throw e;
  }
}

/** What an execution may ask of the host. In a `prepare` hook there is no task yet:
 * `taskId`, `attempt` and `idempotencyKey` are `undefined`. */
export class Context {
  constructor(work) {
    this.taskId = work?.taskId;
    this.attempt = work?.attempt;
    this.idempotencyKey = work?.idempotencyKey;
  }
  isCancelled() {
    return host.isCancelled();
  }
  /** Sleeps `seconds`, waking early when the task is cancelled: `false` when it was.
   *
   * The host keeps the time. In a task, a sleep at least as long as the host's threshold
   * (`runner.sleep_park_after_ms`, 1 s by default) parks the task: this guest stops here for
   * good, the task holds no execution slot meanwhile, and when the time comes a fresh guest
   * runs the tool again from the start (journaled requests and answers are handed back) and
   * this call returns at once. What the tool does before a long sleep must be safe to do
   * again. Shorter sleeps, and those of synchronous calls, wait in place. */
  sleep(seconds) {
    return hostSleep(() => timers.sleepFor(BigInt(Math.max(0, Math.ceil(Number(seconds) * 1000)))));
  }
  /** Sleeps until `when` (a `Date` or milliseconds since the epoch, the host's clock), as
   * `sleep` does; a time already past returns at once. */
  sleepUntil(when) {
    const ms = when instanceof Date ? when.getTime() : Number(when);
    return hostSleep(() => timers.sleepUntil(BigInt(Math.max(0, Math.floor(ms)))));
  }
  setStatus(message) {
    host.setStatus(message);
  }
  progress(progress, total, message) {
    host.progress(progress, total, message);
  }
  log(message, level = "info") {
    host.log(level, message);
  }
  /** Asks the user `form` under `key` and waits for the answer; a replayed execution
   * asking the same gets the stored answer at once. */
  elicit(key, form) {
    return new Answer(this.ask(key, form));
  }
  /** Asks several forms at once, `[[key, form], ...]`; the answers in the order asked. */
  elicitAll(questions) {
    return this.askAll(questions).map((a) => new Answer(a));
  }
  elicitUrl(key, message, url, elicitationId) {
    return new Answer(this.ask(key, { kind: "url", message, url, elicitationId }));
  }
  sample(key, params) {
    return this.ask(key, { kind: "sampling", params });
  }
  roots(key) {
    return this.ask(key, { kind: "roots" });
  }
  ask(key, question) {
    try {
      return JSON.parse(host.awaitInput(key, request(question)));
    } catch (e) {
      throw inputError(e);
    }
  }
  askAll(questions) {
    try {
      return host.awaitInputs(questions.map(([k, q]) => [k, request(q)])).map((a) => JSON.parse(a));
    } catch (e) {
      throw inputError(e);
    }
  }
  /** Who called: tenant, subject, granted scopes (`null`: every scope) and claims. */
  caller() {
    return principal(callerHost.current());
  }
  clientCapabilities() {
    return JSON.parse(callerHost.clientCapabilities() || "{}");
  }
}

export { principal as _principal };

function isZod(s) {
  return s != null && typeof s === "object" && "_zod" in s;
}

/** A schema given as zod or as JSON Schema, as JSON Schema. */
export function jsonSchema(s) {
  if (s === undefined) return { type: "object", properties: {} };
  if (!isZod(s)) return s;
  const out = toJSONSchema(s, { io: "input", unrepresentable: "any" });
  delete out.$schema;
  return out;
}

/** Declares a tool.
 *
 * - `name`, `title`, `description`;
 * - `mode`: `sync` (never a task; the default), `optional` (a task when the client
 *   supports tasks) or `required` (always a task);
 * - `input`, `output`: zod or JSON Schema;
 * - `modeRule(args, call)`: decides each call's mode (a mode name or `{mode, ttlMs,
 *   pollIntervalMs}`);
 * - `prepare(cx, args)`: runs before the task exists, may ask the user, returns the
 *   arguments the task runs with.
 */
export function tool(spec, run) {
  const { name, mode = "sync" } = spec;
  if (typeof name !== "string" || !name) throw new TypeError("a tool needs a name");
  if (!MODES.includes(mode)) throw new TypeError(`mode is one of ${MODES.join(", ")}`);
  if (TOOLS.has(name)) throw new TypeError(`two tools are named ${name}`);
  // Parsing once while the component is pre-initialized leaves the parser's code compiled
  // in the snapshot every instance starts from.
  if (isZod(spec.input)) spec.input.safeParse({});
  TOOLS.set(name, {
    ...spec,
    mode,
    run,
    inputSchema: jsonSchema(spec.input),
    outputSchema: spec.output === undefined ? undefined : jsonSchema(spec.output),
  });
  return run;
}

/** Declares the reader of `uri` (a template when it holds `{variables}`): `read(vars)`
 * returns a string (text), a Uint8Array (a blob) or anything JSON can hold. */
export function resource(spec, read) {
  const table = spec.uri.includes("{") ? TEMPLATES : RESOURCES;
  if (table.has(spec.uri)) throw new TypeError(`two resources have the URI ${spec.uri}`);
  table.set(spec.uri, { ...spec, name: spec.name ?? spec.uri, read });
  return read;
}

/** Declares a prompt: `get(args)` returns a string (one user message), a list of strings
 * and `{role, text}` / `{role, content}` messages, or `{description, messages}`.
 * `arguments`: `[{name, description, required}]`. */
export function prompt(spec, get) {
  if (PROMPTS.has(spec.name)) throw new TypeError(`two prompts are named ${spec.name}`);
  PROMPTS.set(spec.name, { arguments: [], ...spec, get });
  return get;
}
