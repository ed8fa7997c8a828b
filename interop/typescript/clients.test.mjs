// Real TypeScript MCP clients against the fixture server: the official SDK's Client
// (protocol 2025-11-25, the initialize handshake) and the MCP Inspector CLI, on tools,
// resources, prompts and completion. The server is
// `snodo serve` with the memory store and the conformance fixture component, started here
// on a free port and stopped at the end.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, openSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../..");
const SNODO = join(ROOT, "target/debug/snodo");
const FIXTURES = join(ROOT, "target/guests/wasm32-wasip2/release/fixtures.wasm");
const INSPECTOR = join(HERE, "node_modules/.bin/mcp-inspector");

let server;
let url;
let data;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

async function healthy(port) {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/healthz`);
    return r.ok;
  } catch {
    return false;
  }
}

before(async () => {
  for (const p of [SNODO, FIXTURES]) {
    assert.ok(existsSync(p), `${p} is missing: run \`cargo test --workspace --no-run\` first`);
  }
  const port = await freePort();
  data = mkdtempSync(join(tmpdir(), "snodo-interop-ts-"));
  const log = openSync(join(data, "server.log"), "w");
  server = spawn(
    SNODO,
    ["serve", "--store", "memory", "--data", data, "--component", FIXTURES],
    { env: { ...process.env, MCP_PORT: String(port), NO_COLOR: "1" }, stdio: ["ignore", log, log] },
  );
  const exited = new Promise((ok) => server.once("exit", ok));
  const deadline = Date.now() + 60_000;
  while (!(await healthy(port))) {
    const gone = await Promise.race([exited.then(() => true), new Promise((ok) => setTimeout(() => ok(false), 50))]);
    assert.ok(!gone, "the server exited:\n" + readFileSync(join(data, "server.log"), "utf8"));
    assert.ok(Date.now() < deadline, "the server did not answer /healthz within 60 s");
  }
  url = `http://127.0.0.1:${port}/mcp`;
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((ok) => server.once("exit", ok));
    server.kill("SIGTERM");
    await exited;
  }
  if (process.exitCode) {
    console.log("--- server log (last 40 lines) ---");
    console.log(readFileSync(join(data, "server.log"), "utf8").split("\n").slice(-40).join("\n"));
  }
  rmSync(data, { recursive: true, force: true });
});

async function connect(capabilities = {}) {
  const client = new Client({ name: "snodo-interop", version: "1.0.0" }, { capabilities });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  return { client, transport };
}

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}

test("the SDK client connects on 2025-11-25 and lists and calls tools", async () => {
  const { client, transport } = await connect();
  try {
    assert.equal(transport.protocolVersion, "2025-11-25");
    assert.ok(transport.sessionId, "initialize gives a session id");
    assert.deepEqual(client.getServerCapabilities().tools, { listChanged: false });
    assert.equal(client.getServerVersion().name, "snodo");
    await client.ping();
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ["greet", "slow_compute", "test_tool_with_task"]) {
      assert.ok(names.includes(n), `${n} in ${names}`);
    }
    const r = await client.callTool({ name: "greet", arguments: { name: "Ada" } });
    assert.equal(text(r), "Hello, Ada!");
    assert.equal(r.isError, false);
    assert.equal(r.resultType, undefined, "no 2026-07-28 fields on this revision");
  } finally {
    await transport.terminateSession();
    await client.close();
  }
});

test("an optional task tool runs synchronously; a required one names what is missing", async () => {
  const { client } = await connect();
  try {
    const r = await client.callTool({ name: "slow_compute", arguments: { seconds: 1, label: "sync" } });
    assert.equal(r.isError, false, JSON.stringify(r));
    assert.ok(text(r).length > 0);
    await assert.rejects(
      client.callTool({ name: "test_tool_with_task", arguments: {} }),
      (e) => {
        assert.equal(e.code, -32021);
        assert.match(e.message, /2026-07-28/);
        assert.match(e.message, /io\.modelcontextprotocol\/tasks/);
        return true;
      },
    );
  } finally {
    await client.close();
  }
});

test("a tool's questions reach the client as server requests on the call's stream", async () => {
  const { client } = await connect({ elicitation: {}, sampling: {} });
  try {
    const asked = [];
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      asked.push(req.params.requestedSchema);
      return { action: "accept", content: { username: "ada", email: "ada@example.com" } };
    });
    client.setRequestHandler(CreateMessageRequestSchema, async (req) => ({
      role: "assistant",
      content: { type: "text", text: `Paris (asked: ${req.params.messages[0].content.text})` },
      model: "test-model",
      stopReason: "endTurn",
    }));
    const r = await client.callTool({ name: "test_elicitation", arguments: { message: "Who are you?" } });
    assert.equal(asked.length, 1);
    assert.deepEqual(Object.keys(asked[0].properties).sort(), ["email", "username"]);
    assert.match(text(r), /username=ada/);
    const s = await client.callTool({ name: "test_sampling", arguments: { prompt: "Capital of France?" } });
    assert.equal(text(s), "LLM response: Paris (asked: Capital of France?)");
  } finally {
    await client.close();
  }
});

test("a client without the capability is told so, not asked", async () => {
  const { client } = await connect({});
  try {
    const r = await client.callTool({ name: "test_elicitation", arguments: { message: "Who?" } });
    assert.equal(r.isError, true);
    assert.match(text(r), /elicitation/);
  } finally {
    await client.close();
  }
});

test("progress and log notifications arrive while the tool runs", async () => {
  const { client } = await connect();
  try {
    const logs = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
    await client.setLoggingLevel("debug");
    await client.callTool({ name: "test_tool_with_logging", arguments: {} });
    assert.deepEqual(
      logs.map((l) => [l.level, l.data]),
      [
        ["info", "Tool execution started"],
        ["info", "Tool processing data"],
        ["info", "Tool execution completed"],
      ],
    );
    // A level above the guest's lines silences them.
    logs.length = 0;
    await client.setLoggingLevel("error");
    await client.callTool({ name: "test_tool_with_logging", arguments: {} });
    assert.deepEqual(logs, []);

    const progress = [];
    await client.callTool({ name: "test_tool_with_progress", arguments: {} }, undefined, {
      onprogress: (p) => progress.push([p.progress, p.total]),
    });
    assert.deepEqual(progress, [[0, 100], [50, 100], [100, 100]]);
  } finally {
    await client.close();
  }
});

test("resources, prompts and completions from a component", async () => {
  const { client } = await connect({ elicitation: {} });
  try {
    const caps = client.getServerCapabilities();
    assert.ok(caps.resources && caps.prompts && caps.completions, JSON.stringify(caps));
    const { resources } = await client.listResources();
    assert.ok(resources.some((r) => r.uri === "test://static-text"));
    const { resourceTemplates } = await client.listResourceTemplates();
    assert.deepEqual(resourceTemplates.map((t) => t.uriTemplate), ["test://template/{id}/data"]);
    const read = await client.readResource({ uri: "test://template/42/data" });
    assert.deepEqual(JSON.parse(read.contents[0].text), { id: "42", templateTest: true, data: "Data for ID: 42" });
    await assert.rejects(client.readResource({ uri: "test://missing" }), (e) => e.code === -32602);

    const { prompts } = await client.listPrompts();
    assert.ok(prompts.some((p) => p.name === "test_prompt_with_arguments"));
    const p = await client.getPrompt({ name: "test_prompt_with_arguments", arguments: { arg1: "a", arg2: "b" } });
    assert.equal(p.messages[0].content.text, "Prompt with arguments: arg1='a', arg2='b'");
    const img = await client.getPrompt({ name: "test_prompt_with_image" });
    assert.equal(img.messages[0].content.type, "image");

    const c = await client.complete({
      ref: { type: "ref/prompt", name: "test_prompt_with_arguments" },
      argument: { name: "arg1", value: "par" },
    });
    assert.deepEqual(c.completion.values, ["paris", "park", "party"]);
    await client.subscribeResource({ uri: "test://watched-resource" });
    await client.unsubscribeResource({ uri: "test://watched-resource" });
  } finally {
    await client.close();
  }
});

test("an ended session is refused with 404", async () => {
  const { client, transport } = await connect();
  const id = transport.sessionId;
  await transport.terminateSession();
  await client.close();
  const r = await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-11-25",
      "mcp-session-id": id,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(r.status, 404);
  const body = await r.json();
  assert.equal(body.id, 1);
  assert.match(body.error.message, /initialize/);
});

const run = promisify(execFile);

async function inspector(...args) {
  const { stdout } = await run(process.execPath, [INSPECTOR, "--cli", url, ...args], {
    // The Inspector keeps a catalog under $HOME: a fresh one per run.
    env: { ...process.env, HOME: data },
    timeout: 60_000,
  });
  return JSON.parse(stdout);
}

test("the MCP Inspector CLI lists and calls tools, reads a resource and gets a prompt", async () => {
  const list = await inspector("--method", "tools/list");
  assert.ok(list.tools.some((t) => t.name === "greet"));
  const call = await inspector("--method", "tools/call", "--tool-name", "greet", "--tool-arg", "name=Inspector");
  assert.equal(text(call), "Hello, Inspector!");
  const read = await inspector("--method", "resources/read", "--uri", "test://static-text");
  assert.equal(read.contents[0].text, "This is the content of the static text resource.");
  const prompt = await inspector(
    "--method", "prompts/get", "--prompt-name", "test_prompt_with_arguments", "--prompt-args", "arg1=x", "arg2=y",
  );
  assert.equal(prompt.messages[0].content.text, "Prompt with arguments: arg1='x', arg2='y'");
});
