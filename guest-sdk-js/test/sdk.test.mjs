//! The SDK's logic without a component: declarations, the exports' conversions to the
//! WIT's shapes, failures, mode rules, prepare hooks, questions and the catalog, against
//! stand-ins for the host (stubs/host.js).

import assert from "node:assert/strict";
import { test } from "node:test";

import { Form, Retry, RpcError, ToolResult, prompt, resource, tool, z } from "snodo-guest";
import { catalog, execution, modes, tools } from "../src/world.js";
import { failed } from "../src/http.js";

const host = globalThis.host;
const work = (tool, args) => ({ taskId: "t1", tool, arguments: JSON.stringify(args), idempotencyKey: "t1", attempt: 1 });

tool({ name: "hello", input: z.object({ name: z.string().default("World") }) }, (cx, { name }) => `Hello, ${name}!`);
tool(
  { name: "typed", mode: "optional", input: { type: "object", properties: { n: { type: "integer" } } }, output: z.object({ n: z.number() }) },
  (cx, { n }) => ({ n }),
);
tool({ name: "fails", mode: "required" }, () => {
  throw new RpcError(-32001, "no such row", { row: 7 });
});
tool({ name: "retries", mode: "required" }, () => {
  throw new Retry("upstream busy");
});
tool({ name: "buggy" }, () => null.field);
tool({ name: "promised" }, async () => "late");
tool({ name: "tool_error" }, () => ToolResult.error("the input was rejected"));
tool(
  {
    name: "ruled",
    mode: "optional",
    modeRule: (args) => {
      if (args.boom) throw new Error("rule bug");
      return args.long ? { mode: "optional", ttlMs: 1500.7, pollIntervalMs: 250 } : "sync";
    },
    prepare: (cx, args) => (args.skip ? undefined : { ...args, prepared: true }),
  },
  () => "ran",
);
tool({ name: "asks", mode: "required" }, (cx) => {
  const a = cx.elicit("confirm", new Form("Go?").boolean("go", "Go").require("go"));
  return a.accepted && a.get("go") === true ? "went" : "stayed";
});

test("describe lists every tool with JSON Schemas from zod or as given", () => {
  const described = Object.fromEntries(tools.describe().map((t) => [t.name, t]));
  assert.deepEqual(JSON.parse(described.hello.inputSchema).properties.name, { type: "string", default: "World" });
  assert.ok(!("$schema" in JSON.parse(described.hello.inputSchema)));
  assert.deepEqual(JSON.parse(described.typed.inputSchema), { type: "object", properties: { n: { type: "integer" } } });
  assert.equal(JSON.parse(described.typed.outputSchema).properties.n.type, "number");
  assert.equal(described.hello.outputSchema, undefined);
  assert.equal(described.fails.mode, "required");
  assert.equal(described.ruled.hasModeRule, true);
  assert.equal(described.ruled.hasPrepare, true);
  assert.equal(described.hello.hasPrepare, false);
  assert.throws(() => tool({ name: "hello" }, () => ""), /two tools are named hello/);
  assert.throws(() => tool({ name: "x", mode: "sometimes" }, () => ""), /mode is one of/);
});

test("results become content blocks, structured content and error flags", () => {
  assert.deepEqual(tools.execute(work("hello", {})), {
    tag: "completed",
    val: { content: [{ tag: "text", val: "Hello, World!" }], structuredContent: undefined, isError: false },
  });
  const typed = execution.execute(work("typed", { n: 3 }));
  assert.equal(typed.val.structuredContent, '{"n":3}');
  const failed = execution.execute(work("tool_error", {}));
  assert.equal(failed.val.isError, true);
  assert.equal(failed.val.content[0].val, "the input was rejected");
});

test("failures keep their codes; bugs, bad arguments and promises fail cleanly", () => {
  const failed = execution.execute(work("fails", {}));
  assert.equal(failed.tag, "failed");
  assert.equal(failed.val.error.code, -32001n);
  assert.equal(failed.val.error.data, '{"row":7}');
  const retry = execution.execute(work("retries", {}));
  assert.equal(retry.tag, "retry");
  assert.equal(retry.val.error.code, -32603n);
  assert.equal(retry.val.statusMessage, "upstream busy");
  const bug = execution.execute(work("buggy", {}));
  assert.equal(bug.val.error.code, -32603n);
  assert.match(bug.val.error.message, /TypeError/);
  const bad = execution.execute(work("hello", { name: 5 }));
  assert.equal(bad.val.error.code, -32602n);
  assert.match(bad.val.error.message, /name/);
  const promised = execution.execute(work("promised", {}));
  assert.equal(promised.val.error.code, -32603n);
  assert.match(promised.val.error.message, /Promise/);
  assert.equal(execution.execute(work("nope", {})).val.error.code, -32602n);
});

test("mode rules decide per call and fall back to the declared mode", () => {
  const call = (args) => ({ tool: "ruled", arguments: JSON.stringify(args), caller: { tenant: "t", subject: "s", scopes: { tag: "all" }, claims: "{}" }, clientCapabilities: "{}" });
  assert.equal(modes.choose(call({})).mode, "sync");
  assert.deepEqual(modes.choose(call({ long: true })), { mode: "optional", ttlMs: 1500n, pollIntervalMs: 250n });
  assert.equal(modes.choose(call({ boom: true })).mode, "optional");
  assert.equal(tools.chooseMode("ruled", "{}"), "sync");
  assert.equal(tools.chooseMode("unknown", "{}"), "sync");
});

test("prepare returns the task's arguments, or fails naming what it returned", () => {
  assert.deepEqual(JSON.parse(tools.prepare("ruled", '{"a":1}')), { a: 1, prepared: true });
  assert.equal(tools.prepare("hello", '{"a":1}'), '{"a":1}');
  assert.throws(() => tools.prepare("ruled", '{"skip":true}'), (e) => e.payload.code === -32603n && /undefined/.test(e.message));
});

test("questions go to the host as forms, and their answers and errors come back", () => {
  host.calls.length = 0;
  host.answers.push({ action: "accept", content: { go: true } });
  assert.equal(execution.execute(work("asks", {})).val.content[0].val, "went");
  const [kind, key, request] = host.calls.find((c) => c[0] === "awaitInput");
  assert.equal(kind, "awaitInput");
  assert.equal(key, "confirm");
  assert.equal(request.tag, "elicit-form");
  assert.deepEqual(JSON.parse(request.val.requestedSchema), {
    type: "object",
    properties: { go: { type: "boolean", title: "Go" } },
    required: ["go"],
  });
  host.answers.push({ action: "decline" });
  assert.equal(execution.execute(work("asks", {})).val.content[0].val, "stayed");
  const cancelled = new Error("cancelled");
  cancelled.payload = { tag: "cancelled" };
  host.answers.push(cancelled);
  const out = execution.execute(work("asks", {}));
  assert.equal(out.tag, "failed");
  assert.match(out.val.error.message, /InputError: cancelled/);
});

test("sleeps are the host's, in milliseconds, and end early when the task is cancelled", async () => {
  const { Context } = await import("snodo-guest");
  const cx = new Context(undefined);
  host.cancelled = false;
  host.calls.length = 0;
  assert.equal(cx.sleep(0.0101), true);
  assert.equal(cx.sleepUntil(new Date(1_800_000_000_000)), true);
  assert.deepEqual(host.calls, [["sleepFor", 11n], ["sleepUntil", 1_800_000_000_000n]]);
  host.cancelled = true;
  assert.equal(cx.sleep(60), false);
  assert.equal(cx.sleepUntil(0), false);
  host.cancelled = false;
});

test("resources, templates, prompts and completions", () => {
  resource({ uri: "memo://today", mimeType: "text/plain" }, () => "sunny");
  resource({ uri: "memo://day/{day}", complete: { day: (v) => ["mon", "tue"].filter((d) => d.startsWith(v)) } }, ({ day }) => ({ day }));
  resource({ uri: "memo://blob" }, () => new Uint8Array([1, 2, 3]));
  prompt({ name: "brief", arguments: [{ name: "topic", required: true }] }, ({ topic }) => [`Brief me on ${topic}`, { role: "assistant", text: "Sure." }]);
  const c = catalog.describeCatalog();
  assert.deepEqual(c.resources.map((r) => r.uri), ["memo://today", "memo://blob"]);
  assert.deepEqual(c.resourceTemplates.map((r) => r.uriTemplate), ["memo://day/{day}"]);
  assert.equal(c.completions, true);
  assert.equal(catalog.readResource({ uri: "memo://today", template: undefined, variables: [] })[0].text, "sunny");
  const day = catalog.readResource({ uri: "memo://day/mon", template: "memo://day/{day}", variables: [["day", "mon"]] })[0];
  assert.deepEqual([day.mimeType, JSON.parse(day.text)], ["application/json", { day: "mon" }]);
  assert.equal(catalog.readResource({ uri: "memo://blob", template: undefined, variables: [] })[0].blob, "AQID");
  assert.throws(() => catalog.readResource({ uri: "memo://none", template: undefined, variables: [] }), (e) => e.payload.code === -32002n);
  const p = catalog.getPrompt("brief", '{"topic":"wasm"}');
  assert.deepEqual(p.messages.map((m) => [m.role, m.content.val]), [["user", "Brief me on wasm"], ["assistant", "Sure."]]);
  assert.deepEqual(catalog.complete({ tag: "resource-template", val: "memo://day/{day}" }, "day", "t", "{}").values, ["tue"]);
});

test("a denial is told apart from other failures and keeps the host's explanation", () => {
  const why = 'HttpRequestDenied: GET http://x.test/ (tool `t`): add "http://x.test" to tools.t.allowed_outbound_hosts';
  const denied = failed({ payload: { tag: "internal-error", val: why } });
  assert.equal(denied.kind, "denied");
  assert.equal(denied.detail, why);
  assert.match(denied.message, /tools\.t\.allowed_outbound_hosts/);
  const other = failed({ payload: { tag: "internal-error", val: "the journal cannot be read" } });
  assert.equal(other.kind, "request");
  assert.equal(failed({ payload: { tag: "connection-timeout" } }).detail, "connection-timeout");
});
