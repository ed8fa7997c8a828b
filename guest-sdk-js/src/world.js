//! The component's exports: the `executor` world of `snodo:tasks@0.5.0` (`tools`,
//! `execution`, `modes`, `catalog`) over what `tool()`, `resource()` and `prompt()`
//! declared. bin/build.mjs re-exports these from the bundle it builds; an app never
//! imports this module itself.

import {
  Context,
  MODES,
  PROMPTS,
  RESOURCES,
  Retry,
  RpcError,
  TEMPLATES,
  TOOLS,
  ToolResult,
  _principal,
} from "./index.js";

function witError(e) {
  return { code: BigInt(e.code), message: String(e.message), data: e.data === undefined ? undefined : JSON.stringify(e.data) };
}

/** `e` as the error a `result<_, rpc-error>` export fails with. */
function fail(e) {
  const err = new Error(e.message);
  err.payload = witError(e);
  return err;
}

function block(c) {
  switch (c?.type) {
    case "text":
      return { tag: "text", val: String(c.text) };
    case "image":
    case "audio":
      return { tag: c.type, val: { data: c.data, mimeType: c.mimeType } };
    case "resource": {
      const r = c.resource;
      return { tag: "embedded-resource", val: { uri: r.uri, mimeType: r.mimeType, text: r.text, blob: r.blob } };
    }
    case "resource_link":
      return { tag: "resource-link", val: { uri: c.uri, name: c.name, mimeType: c.mimeType, description: c.description } };
    default:
      throw new TypeError(`not a content block: ${JSON.stringify(c)}`);
  }
}

function result(value) {
  if (typeof value?.then === "function") {
    throw RpcError.internal("the tool returned a Promise: a tool's function runs synchronously (http and elicit block)");
  }
  if (value instanceof ToolResult) {
    const structured = value.structured === undefined ? undefined : JSON.stringify(value.structured);
    let content = value.content.map(block);
    if (!content.length && structured !== undefined) content = [{ tag: "text", val: structured }];
    return { content, structuredContent: structured, isError: value.isError };
  }
  if (typeof value === "string") return { content: [{ tag: "text", val: value }], structuredContent: undefined, isError: false };
  if (value === undefined || value === null) return { content: [], structuredContent: undefined, isError: false };
  const text = JSON.stringify(value);
  const structured = typeof value === "object" && !Array.isArray(value) ? text : undefined;
  return { content: [{ tag: "text", val: text }], structuredContent: structured, isError: false };
}

/** Runs `f`, with a tool's own failures as values: `RpcError` and `Retry` as thrown, any
 * other exception as an internal error naming it (a bug fails its task, it does not trap). */
function guarded(f) {
  try {
    return f();
  } catch (e) {
    if (e instanceof RpcError || e instanceof Retry) return e;
    console.error(e?.stack ?? String(e));
    return RpcError.internal(`${e?.name ?? "Error"}: ${e?.message ?? e}`);
  }
}

function parseArgs(spec, args) {
  if (spec.input && typeof spec.input.safeParse === "function") {
    const parsed = spec.input.safeParse(args);
    if (!parsed.success) {
      throw RpcError.invalidParams(parsed.error.issues.map((i) => `${i.path.join(".") || "arguments"}: ${i.message}`).join("; "));
    }
    return parsed.data;
  }
  return args;
}

function run(work) {
  const spec = TOOLS.get(work.tool);
  if (!spec) return RpcError.invalidParams(`Unknown tool: ${work.tool}`);
  return guarded(() => result(spec.run(new Context(work), parseArgs(spec, JSON.parse(work.arguments || "{}")))));
}

/** The mode rule's decision, or the tool's declared mode when it has none, throws, or
 * answers something that is not a mode. */
function choice(spec, call) {
  if (spec.modeRule) {
    try {
      const out = spec.modeRule(call.arguments, call);
      const c = typeof out === "string" ? { mode: out } : out;
      if (MODES.includes(c?.mode)) return c;
      console.error(`${call.tool}: the mode rule answered ${JSON.stringify(out)}, not a mode`);
    } catch (e) {
      console.error(e?.stack ?? String(e));
    }
  }
  return { mode: spec.mode };
}

function u64(n) {
  return n == null || !Number.isFinite(Number(n)) ? undefined : BigInt(Math.max(0, Math.trunc(Number(n))));
}

export const tools = {
  describe() {
    return [...TOOLS.entries()].map(([name, s]) => ({
      name,
      title: s.title,
      description: s.description,
      inputSchema: JSON.stringify(s.inputSchema),
      outputSchema: s.outputSchema === undefined ? undefined : JSON.stringify(s.outputSchema),
      mode: s.mode,
      requiredCapabilities: s.requiredCapabilities === undefined ? undefined : JSON.stringify(s.requiredCapabilities),
      hasPrepare: typeof s.prepare === "function",
      hasModeRule: typeof s.modeRule === "function",
    }));
  },
  chooseMode(tool, args) {
    const spec = TOOLS.get(tool);
    return spec ? choice(spec, { tool, arguments: JSON.parse(args || "{}"), caller: {}, clientCapabilities: {} }).mode : "sync";
  },
  prepare(tool, args) {
    const spec = TOOLS.get(tool);
    if (!spec?.prepare) return args;
    let out = guarded(() => spec.prepare(new Context(undefined), JSON.parse(args || "{}")));
    if (out instanceof Retry) out = out.error;
    if (!(out instanceof RpcError) && (out === null || typeof out !== "object" || Array.isArray(out))) {
      out = RpcError.internal(`${tool}: prepare returned ${out === null ? "null" : typeof out}, not the arguments (an object)`);
    }
    if (out instanceof RpcError) throw fail(out);
    return JSON.stringify(out);
  },
  execute(work) {
    const out = run(work);
    if (out instanceof RpcError) return { tag: "failed", val: witError(out) };
    if (out instanceof Retry) return { tag: "retry", val: { error: witError(out.error), statusMessage: out.statusMessage } };
    return { tag: "completed", val: out };
  },
};

export const execution = {
  execute(work) {
    const out = run(work);
    if (out instanceof RpcError) return { tag: "failed", val: { error: witError(out), statusMessage: out.statusMessage } };
    if (out instanceof Retry) return { tag: "retry", val: { error: witError(out.error), statusMessage: out.statusMessage } };
    return { tag: "completed", val: out };
  },
};

export const modes = {
  choose(call) {
    const spec = TOOLS.get(call.tool);
    if (!spec) return { mode: "sync", ttlMs: undefined, pollIntervalMs: undefined };
    const c = choice(spec, {
      tool: call.tool,
      arguments: JSON.parse(call.arguments || "{}"),
      caller: _principal(call.caller),
      clientCapabilities: JSON.parse(call.clientCapabilities || "{}"),
    });
    return { mode: c.mode, ttlMs: u64(c.ttlMs), pollIntervalMs: u64(c.pollIntervalMs) };
  },
};

function contents(uri, mimeType, value) {
  if (value instanceof Uint8Array) {
    let s = "";
    for (const b of value) s += String.fromCharCode(b);
    return [{ uri, mimeType, text: undefined, blob: btoa(s) }];
  }
  if (typeof value !== "string") return [{ uri, mimeType: mimeType ?? "application/json", text: JSON.stringify(value), blob: undefined }];
  return [{ uri, mimeType, text: value, blob: undefined }];
}

function failing(out) {
  if (out instanceof Retry) out = out.error;
  if (out instanceof RpcError) throw fail(out);
  return out;
}

function message(m) {
  if (typeof m === "string") return { role: "user", content: block({ type: "text", text: m }) };
  return { role: m.role, content: block(m.content ?? { type: "text", text: m.text }) };
}

export const catalog = {
  describeCatalog() {
    const completes = [...TEMPLATES.values(), ...PROMPTS.values()].some((e) => e.complete);
    return {
      resources: [...RESOURCES.values()].map((e) => ({ uri: e.uri, name: e.name, title: e.title, description: e.description, mimeType: e.mimeType })),
      resourceTemplates: [...TEMPLATES.values()].map((e) => ({ uriTemplate: e.uri, name: e.name, title: e.title, description: e.description, mimeType: e.mimeType })),
      prompts: [...PROMPTS.values()].map((e) => ({
        name: e.name,
        title: e.title,
        description: e.description,
        arguments: e.arguments.map((a) => ({ name: a.name, description: a.description, required: !!a.required })),
      })),
      completions: completes,
    };
  },
  readResource(request) {
    let e;
    let out;
    if (request.template !== undefined && TEMPLATES.has(request.template)) {
      e = TEMPLATES.get(request.template);
      out = guarded(() => e.read(Object.fromEntries(request.variables)));
    } else if (RESOURCES.has(request.uri)) {
      e = RESOURCES.get(request.uri);
      out = guarded(() => e.read({}));
    } else {
      throw fail(new RpcError(-32002, `Resource not found: ${request.uri}`, { uri: request.uri }));
    }
    return contents(request.uri, e.mimeType, failing(out));
  },
  getPrompt(name, args) {
    const e = PROMPTS.get(name);
    if (!e) throw fail(RpcError.invalidParams(`Unknown prompt: ${name}`));
    let out = failing(guarded(() => e.get(JSON.parse(args || "{}"))));
    let description = e.description;
    if (out && !Array.isArray(out) && typeof out === "object" && "messages" in out) {
      description = out.description ?? description;
      out = out.messages;
    }
    const messages = (Array.isArray(out) ? out : [out]).map(message);
    return { description, messages };
  },
  complete(target, argument, value, context) {
    const e = (target.tag === "prompt" ? PROMPTS : TEMPLATES).get(target.val);
    const f = e?.complete?.[argument];
    const values = f ? [...failing(guarded(() => f(value, JSON.parse(context || "{}"))))] : [];
    return { values: values.slice(0, 100), total: values.length, hasMore: values.length > 100 };
  },
};

// Pre-initialization runs this once: the export paths' code is compiled in the snapshot
// every instance starts from, instead of on each instance's first call.
tools.describe();
catalog.describeCatalog();
result(new ToolResult({ text: "", structured: {} }));
result({});
witError(RpcError.internal(""));
