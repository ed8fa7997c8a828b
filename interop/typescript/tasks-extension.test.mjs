// The official Tasks client, `@modelcontextprotocol/ext-tasks` (entry `/client`), on the
// official SDK's Client 2.x speaking 2026-07-28 against the fixture server (server.mjs):
// immediate results, durable tasks polled to their end, input asked through `tasks/update`
// and through the MRTR retry of `tools/call`, cancellation, a tool that fails in its domain
// and one that fails with a JSON-RPC error, and a task handed off by one session and resumed
// in a new one with `resumeTask`, whose question is answered there.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  TaskFailedError,
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

import { startServer } from "./server.mjs";

const VERSION = "2026-07-28";
const CLIENT_INFO = { name: "snodo-interop-tasks", version: "1.0.0" };
// One endpoint identity for every session here: a reference handed off by one session is
// resumed by another of the same endpoint.
const ENDPOINT = "snodo-interop";
// A test that waits longer than this has hung.
const DEADLINE_MS = 60_000;

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

// The JSON-RPC message answering request `id` in a reply body: JSON, or an event stream
// whose `data:` lines carry it among notifications.
function answerIn(contentType, body, id) {
  if (!contentType.startsWith("text/event-stream")) return JSON.parse(body);
  for (const line of body.split("\n")) {
    if (!line.startsWith("data:")) continue;
    const message = JSON.parse(line.slice(5));
    if (message.id === id && ("result" in message || "error" in message)) return message;
  }
  throw new Error(`no answer to request ${id} in the stream:\n${body}`);
}

let nextId = 1;

// The package's `rawDispatch`: the SDK Client's codecs do not take the extension's wire
// shapes (a CreateTaskResult answering `tools/call`, the `tasks/*` methods), so the package
// leaves sending those to the host. The package frames `_meta`; the routing headers are the
// transport's (`Mcp-Name` of `tasks/*` comes in `context.headers`).
async function rawDispatch(request, options = {}) {
  const id = nextId++;
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": VERSION,
    "mcp-method": request.method,
    ...(request.method === "tools/call" ? { "mcp-name": request.params.name } : {}),
    ...options.context?.headers,
  };
  const r = await fetch(server.url, {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id, ...request }),
    signal: options.signal,
  });
  const message = answerIn(r.headers.get("content-type") ?? "", await r.text(), id);
  return "error" in message ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
}

// A connected SDK Client on 2026-07-28 and a Tasks session over it; `answer(request,
// context)` answers the questions the session is asked, and `asked` records them.
async function tasksSession(answer = undefined) {
  const capabilities = { elicitation: {} };
  const client = new Client(CLIENT_INFO, { capabilities, versionNegotiation: { mode: { pin: VERSION } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  assert.equal(client.getProtocolEra(), "modern");
  const asked = [];
  const session = createTaskSessionFromClient(client, {
    endpointId: ENDPOINT,
    rawDispatch,
    v2RequestFraming: { protocolVersion: VERSION, clientInfo: CLIENT_INFO, clientCapabilities: capabilities },
    ...(answer === undefined
      ? {}
      : {
          onInputRequest: async (request, context) => {
            asked.push({ request, context });
            return answer(request, context);
          },
        }),
  });
  const close = async () => {
    await session.close();
    await client.close();
  };
  return { client, session, asked, close };
}

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}

// Settles `execution` within the deadline, recording the task statuses it saw.
async function settle(execution) {
  const statuses = [];
  const { outcome } = await execution.settle({
    signal: AbortSignal.timeout(DEADLINE_MS),
    onEvent: (e) => {
      if (e.type === "task") statuses.push(e.task.status);
    },
  });
  return { outcome, statuses };
}

test("the server offers the extension, and an immediate call settles at once", async () => {
  const { client, session, close } = await tasksSession();
  try {
    assert.deepEqual(client.getServerCapabilities().extensions["io.modelcontextprotocol/tasks"], {});
    assert.equal(session.capabilities.execution, true);
    assert.equal(session.capabilities.cancellation, true);
    assert.equal(session.capabilities.inputResponses, true);
    const greet = await session.callTool("greet", { name: "Ada" });
    assert.equal(greet.kind, "immediate");
    const { outcome } = await settle(greet);
    assert.equal(outcome.status, "completed");
    assert.equal(text(resultFromTaskOutcome(outcome)), "Hello, Ada!");
    // An optional tool with little to do answers at once too.
    const quick = await session.callTool("slow_compute", { seconds: 0, label: "quick" });
    assert.equal(quick.kind, "immediate");
    assert.equal(text(resultFromTaskOutcome((await settle(quick)).outcome)), "Completed quick after 0 seconds");
  } finally {
    await close();
  }
});

test("a durable task is polled to its completed result", async () => {
  const { session, close } = await tasksSession();
  try {
    const execution = await session.callTool("slow_compute", { seconds: 1, label: "poll" });
    assert.equal(execution.kind, "task");
    assert.match(execution.handle.taskId, /^[0-9a-f]{32}$/);
    const { outcome, statuses } = await settle(execution);
    assert.equal(outcome.status, "completed", JSON.stringify(outcome));
    const result = resultFromTaskOutcome(outcome);
    assert.equal(result.isError, false);
    assert.equal(text(result), "Completed poll after 1 seconds");
    assert.equal(statuses[0], "working");
    assert.equal(statuses.at(-1), "completed");
    // The task stays readable once it ended.
    const view = await session.task(execution.handle.taskId).snapshot();
    assert.equal(view.status, "completed");
  } finally {
    await close();
  }
});

test("a task's question is answered through tasks/update", async () => {
  const { session, asked, close } = await tasksSession(() => ({ action: "accept", content: { confirm: true } }));
  try {
    const execution = await session.callTool("confirm_delete", { filename: "a.txt" });
    assert.equal(execution.kind, "task");
    const { outcome, statuses } = await settle(execution);
    assert.equal(text(resultFromTaskOutcome(outcome)), "Deleted a.txt");
    assert.ok(statuses.includes("input_required"), statuses.join());
    assert.equal(asked.length, 1);
    const [{ request, context }] = asked;
    assert.equal(request.kind, "elicitation");
    assert.equal(request.params.message, "Delete a.txt?");
    assert.deepEqual(
      [context.scope, context.delivery, context.inputId, context.taskId],
      ["task", "task-update", "confirm", execution.handle.taskId],
    );
  } finally {
    await close();
  }
});

test("a question before the task is answered by retrying tools/call (MRTR)", async () => {
  const { session, asked, close } = await tasksSession(() => ({ action: "accept", content: { name: "Grace" } }));
  try {
    const execution = await session.callTool("test_tool_with_task", {});
    assert.equal(execution.kind, "task");
    assert.deepEqual(
      asked.map(({ request, context }) => [request.params.message, context.scope, context.delivery, context.inputId]),
      [["What is your name?", "request", "request-retry", "user_name"]],
    );
    const { outcome } = await settle(execution);
    assert.equal(text(resultFromTaskOutcome(outcome)), "Hello, Grace! (async)");
  } finally {
    await close();
  }
});

test("a cancelled task ends cancelled, for the client and on the server", async () => {
  const { session, close } = await tasksSession();
  try {
    const execution = await session.callTool("slow_compute", { seconds: 60, label: "long" });
    assert.equal(execution.kind, "task");
    await execution.cancel(AbortSignal.timeout(DEADLINE_MS));
    const outcome = await execution.result();
    assert.equal(outcome.status, "cancelled");
    assert.throws(() => resultFromTaskOutcome(outcome), { name: "TaskCancelledError" });
    const view = await session.task(execution.handle.taskId).snapshot();
    assert.equal(view.status, "cancelled");
  } finally {
    await close();
  }
});

test("a tool's own failure completes the task; a JSON-RPC error fails it", async () => {
  const { session, close } = await tasksSession();
  try {
    const failing = await session.callTool("failing_job", {});
    assert.equal(failing.kind, "task");
    const { outcome } = await settle(failing);
    assert.equal(outcome.status, "completed", "isError is the tool's answer, not a failed task");
    const result = resultFromTaskOutcome(outcome);
    assert.equal(result.isError, true);
    assert.equal(text(result), "The job failed: the input data was rejected");

    const broken = await session.callTool("protocol_error_job", {});
    const failed = (await settle(broken)).outcome;
    assert.equal(failed.status, "failed");
    assert.ok(failed.error instanceof TaskFailedError);
    assert.equal(failed.error.code, -32603);
    assert.equal(failed.error.message, "Internal error while processing the job");
  } finally {
    await close();
  }
});

test("a task handed off is resumed by a new session, which answers its question", async () => {
  // The first session sees the question but leaves it open: its handler waits until the
  // execution lets go of it (the handoff), so nothing is answered there.
  let seen;
  const questionSeen = new Promise((ok) => (seen = ok));
  const first = await tasksSession(
    (request, context) =>
      new Promise((_, fail) => {
        seen(request);
        context.signal.addEventListener("abort", () => fail(new Error("handed off")), { once: true });
      }),
  );
  let reference;
  try {
    const execution = await first.session.callTool("confirm_delete", { filename: "b.txt" });
    assert.equal(execution.kind, "task");
    const question = await questionSeen;
    assert.equal(question.params.message, "Delete b.txt?");
    await execution.handoff((r) => {
      // What an application would write down to come back to the task later.
      reference = JSON.parse(JSON.stringify(r));
    });
    // Works around the package (0.2.2): closing a session cancels every execution whose
    // driver has not yet settled, a handed-off one included, and a detached driver settles
    // only when its next poll timer fires (it arms the timer on an already aborted signal).
    // Waiting for the execution's local end keeps the close from cancelling the task.
    assert.equal((await execution.result()).status, "failed", "ended locally as detached");
  } finally {
    await first.close();
  }
  assert.deepEqual(Object.keys(reference).sort(), ["endpointId", "generation", "originalOperation", "taskId"]);
  assert.equal(reference.generation, "v2");

  const second = await tasksSession(() => ({ action: "accept", content: { confirm: true } }));
  try {
    const resumed = await second.session.resumeTask(reference);
    assert.equal(resumed.kind, "task");
    assert.equal(resumed.handle.taskId, reference.taskId);
    const { outcome } = await settle(resumed);
    assert.equal(text(resultFromTaskOutcome(outcome)), "Deleted b.txt");
    assert.equal(second.asked.length, 1);
    assert.equal(second.asked[0].request.params.message, "Delete b.txt?");
    assert.equal(second.asked[0].context.delivery, "task-update");
  } finally {
    await second.close();
  }
});
