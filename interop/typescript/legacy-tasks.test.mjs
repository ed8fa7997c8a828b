// The official TypeScript SDK 1.32.2's 2025-11-25 experimental tasks
// (`client.experimental.tasks`, SEP-1686) against the fixture server: each method, a
// question answered during tasks/result, a reconnect that is asked again, cancel, and a
// failing tool. The server (server.mjs) is started for this file and stopped at the end.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

import { startServer } from "./server.mjs";

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

// A connected client that declares elicitation and has listed the tools (which tells the
// SDK each tool's taskSupport); `answer` answers the elicitations it is asked.
async function connect(answer = async () => ({ action: "accept", content: { confirm: true } })) {
  const client = new Client({ name: "snodo-interop-tasks", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, answer);
  const transport = new StreamableHTTPClientTransport(new URL(server.url));
  await client.connect(transport);
  await client.listTools();
  return client;
}

async function collect(stream) {
  const messages = [];
  for await (const m of stream) {
    messages.push(m);
  }
  return messages;
}

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}

test("the server offers tasks, and callToolStream, getTask, getTaskResult and listTasks follow one", async () => {
  const client = await connect();
  try {
    assert.ok(client.getServerCapabilities().tasks?.requests?.tools?.call);
    const { tools } = await client.listTools();
    const slow = tools.find((t) => t.name === "slow_compute");
    assert.equal(slow.execution?.taskSupport, "optional");
    const messages = await collect(
      client.experimental.tasks.callToolStream({ name: "slow_compute", arguments: { seconds: 1, label: "ts" } }),
    );
    assert.equal(messages[0].type, "taskCreated", JSON.stringify(messages));
    const taskId = messages[0].task.taskId;
    const last = messages.at(-1);
    assert.equal(last.type, "result", JSON.stringify(messages));
    assert.match(text(last.result), /Completed ts/);
    const task = await client.experimental.tasks.getTask(taskId);
    assert.equal(task.status, "completed");
    assert.equal(typeof task.ttl, "number");
    const again = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    assert.match(text(again), /Completed ts/);
    assert.equal(again._meta["io.modelcontextprotocol/related-task"].taskId, taskId);
    const { tasks } = await client.experimental.tasks.listTasks();
    assert.ok(tasks.some((t) => t.taskId === taskId), JSON.stringify(tasks));
  } finally {
    await client.close();
  }
});

test("a question is asked during tasks/result and its answer completes the task", async () => {
  const asked = [];
  const client = await connect(async (req) => {
    asked.push(req.params);
    return { action: "accept", content: { confirm: true } };
  });
  try {
    const messages = await collect(
      client.experimental.tasks.callToolStream({ name: "confirm_delete", arguments: { filename: "a.txt" } }),
    );
    const last = messages.at(-1);
    assert.equal(last.type, "result", JSON.stringify(messages));
    assert.equal(text(last.result), "Deleted a.txt");
    assert.equal(asked.length, 1);
    assert.ok(asked[0]._meta?.["io.modelcontextprotocol/related-task"]?.taskId);
  } finally {
    await client.close();
  }
});

test("a client that reconnects and calls tasks/result again is asked again", async () => {
  let heard;
  const heardIt = new Promise((ok) => (heard = ok));
  // The first client is asked and never answers; it goes away.
  const first = await connect(() => {
    heard();
    return new Promise(() => {});
  });
  const stream = first.experimental.tasks.callToolStream({ name: "confirm_delete", arguments: { filename: "b.txt" } });
  const created = (await stream.next()).value;
  assert.equal(created.type, "taskCreated");
  const taskId = created.task.taskId;
  const pending = first.experimental.tasks.getTaskResult(taskId, CallToolResultSchema).catch(() => {});
  await heardIt;
  await first.close();
  await pending;
  const second = await connect();
  try {
    const r = await second.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    assert.equal(text(r), "Deleted b.txt");
    assert.equal((await second.experimental.tasks.getTask(taskId)).status, "completed");
  } finally {
    await second.close();
  }
});

test("cancelTask cancels, and a finished task cannot be cancelled", async () => {
  const client = await connect();
  try {
    const stream = client.experimental.tasks.callToolStream({ name: "slow_compute", arguments: { seconds: 60, label: "c" } });
    const created = (await stream.next()).value;
    assert.equal(created.type, "taskCreated");
    const taskId = created.task.taskId;
    await stream.return();
    const cancelled = await client.experimental.tasks.cancelTask(taskId);
    assert.equal(cancelled.status, "cancelled");
    assert.equal((await client.experimental.tasks.getTask(taskId)).status, "cancelled");
    await assert.rejects(client.experimental.tasks.cancelTask(taskId), (e) => {
      assert.equal(e.code, -32602);
      return true;
    });
  } finally {
    await client.close();
  }
});

test("a tool that fails in its own domain is a failed task whose result says why", async () => {
  const client = await connect();
  try {
    const messages = await collect(client.experimental.tasks.callToolStream({ name: "failing_job", arguments: {} }));
    const created = messages.find((m) => m.type === "taskCreated");
    assert.equal(messages.at(-1).type, "error", JSON.stringify(messages));
    const r = await client.experimental.tasks.getTaskResult(created.task.taskId, CallToolResultSchema);
    assert.equal(r.isError, true);
    assert.match(text(r), /The job failed/);
  } finally {
    await client.close();
  }
});
