// Real TypeScript MCP clients against the fixture server: the official SDK's Client
// (protocol 2025-11-25, the initialize handshake) and the MCP Inspector CLI, on tools,
// resources, prompts and completion. The server (server.mjs) is `snodo serve` with the
// memory store and the conformance fixture component, started for this file on a free port
// and stopped at the end.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

import { startServer } from "./server.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const INSPECTOR = join(HERE, "node_modules/.bin/mcp-inspector");

let server;
let url;
let data;

before(async () => {
  server = await startServer();
  ({ url, data } = server);
});

after(async () => {
  await server?.stop();
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
        // Called without params.task (the SDK has not listed the tools yet, so it does not
        // know the tool is task-only): -32601, as 2025-11-25 says.
        assert.equal(e.code, -32601);
        assert.match(e.message, /params\.task/);
        // What a user reads: the tool, and what the operator could change.
        assert.match(e.message, /tool "test_tool_with_task" runs only as a durable task/);
        assert.match(e.message, /mode = "optional" under \[tools\.test_tool_with_task\]/);
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
