// A client that does not follow tasks (the official SDK's Client on 2025-11-25, calling
// without `params.task`) against a server whose operator set `handle_after_ms`: a long call
// answers with a result naming its task, the built-in `task_result` tool picks the outcome
// up, and a task-only tool's question comes to the client's elicitation handler on the call.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

import { startServer } from "./server.mjs";

const RELATED = "io.modelcontextprotocol/related-task";
let server;

before(async () => {
  server = await startServer({
    toml: "[tools.slow_compute]\nhandle_after_ms = 300\n\n[tools.confirm_delete]\nhandle_after_ms = 30000\n",
  });
});

after(async () => {
  await server?.stop();
});

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}

test("a long call gives a handle that task_result follows; a question comes on the call", async () => {
  const client = new Client({ name: "snodo-interop", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push([req.params.message, req.params._meta?.[RELATED]?.taskId]);
    return { action: "accept", content: { confirm: true } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(server.url));
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    assert.ok(tools.some((t) => t.name === "task_result"), "task_result is listed");

    const first = await client.callTool({ name: "slow_compute", arguments: { seconds: 2, label: "ts" } });
    const taskId = first._meta[RELATED].taskId;
    assert.match(text(first), new RegExp(`still running as task ${taskId}`));
    assert.equal(first.isError, undefined, "a handle is no error");

    // Each follow-up waits up to the tool's handle_after_ms on the server.
    let outcome = first;
    for (let i = 0; i < 60 && text(outcome).includes("still running"); i++) {
      outcome = await client.callTool({ name: "task_result", arguments: { taskId } });
    }
    assert.equal(text(outcome), "Completed ts after 2 seconds");

    const deleted = await client.callTool({ name: "confirm_delete", arguments: { filename: "ts.txt" } });
    assert.equal(text(deleted), "Deleted ts.txt");
    assert.deepEqual(asked, [["Delete ts.txt?", deleted._meta[RELATED].taskId]]);
  } finally {
    await transport.terminateSession();
    await client.close();
  }
});
