// An upstream MCP server for the gateway tests, built with the official TypeScript SDK
// (1.x, 2025-11-25, Streamable HTTP with sessions, the SDK's usual setup): a small ticket
// desk. Every call it receives is appended to a log file (one JSON line: the tool, its
// arguments, the Idempotency-Key and Authorization headers), so that a test can judge how
// many times a call reached it. Each session opened and closed is appended to LOG.sessions
// (`open ID`, `close ID`). Usage: upstream.mjs PORT LOG TOKEN; a request without
// `Authorization: Bearer TOKEN` is refused with 401.

import { randomUUID } from "node:crypto";
import { appendFileSync, readFileSync } from "node:fs";
import { createServer } from "node:http";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

const [port, log, token] = process.argv.slice(2);

function record(tool, args, extra) {
  const headers = extra?.requestInfo?.headers ?? {};
  const line = {
    tool,
    arguments: args,
    idempotency_key: headers["idempotency-key"] ?? null,
    authorization: headers.authorization ?? null,
    at: Date.now() / 1000,
  };
  appendFileSync(log, JSON.stringify(line) + "\n");
}

// Tools added while serving (`grow`), on every session's server, each of which tells its
// client that its tools changed.
const grown = [];
const servers = new Set();

function addGrown(server, name) {
  server.registerTool(
    name,
    { description: `A tool added while serving (${name}).`, inputSchema: {} },
    async () => ({ content: [{ type: "text", text: `${name} here` }] }),
  );
}

function desk() {
  const server = new McpServer({ name: "tickets-ts", version: "1.0.0" });
  servers.add(server);
  for (const name of grown) addGrown(server, name);
  server.registerTool(
    "create_ticket",
    {
      description: "Opens a ticket and says its number.",
      inputSchema: { title: z.string(), priority: z.number().int().optional() },
    },
    async ({ title, priority = 3 }, extra) => {
      record("create_ticket", { title, priority }, extra);
      const n = readFileSync(log, "utf8")
        .split("\n")
        .filter((l) => l && JSON.parse(l).tool === "create_ticket").length;
      return { content: [{ type: "text", text: `ticket ${n}: ${title} (priority ${priority})` }] };
    },
  );
  server.registerTool(
    "slow_echo",
    { description: "Waits, then answers with the text.", inputSchema: { text: z.string(), seconds: z.number() } },
    async ({ text, seconds }, extra) => {
      record("slow_echo", { text, seconds }, extra);
      await new Promise((ok) => setTimeout(ok, seconds * 1000));
      return { content: [{ type: "text", text: `echo: ${text}` }] };
    },
  );
  server.registerTool(
    "ask_priority",
    { description: "Asks its client for a priority, and says what came of asking.", inputSchema: {} },
    async (_args, extra) => {
      record("ask_priority", {}, extra);
      try {
        const answer = await server.server.elicitInput({
          message: "Which priority?",
          requestedSchema: { type: "object", properties: { priority: { type: "number" } } },
        });
        return { content: [{ type: "text", text: `asked: ${JSON.stringify(answer)}` }] };
      } catch (e) {
        return { content: [{ type: "text", text: `cannot ask: ${e.message}` }] };
      }
    },
  );
  server.registerTool(
    "grow",
    { description: "Adds a tool named `name` to the desk.", inputSchema: { name: z.string() } },
    async ({ name }, extra) => {
      record("grow", { name }, extra);
      grown.push(name);
      for (const s of servers) {
        try {
          addGrown(s, name);
        } catch {
          // A server of a closed session.
        }
      }
      return { content: [{ type: "text", text: `added ${name}` }] };
    },
  );
  return server;
}

const sessions = new Map();

async function body(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
}

createServer(async (req, res) => {
  if (req.headers.authorization !== `Bearer ${token}`) {
    res.writeHead(401, { "content-type": "application/json" }).end('{"error":"unauthorized"}');
    return;
  }
  const id = req.headers["mcp-session-id"];
  const parsed = req.method === "POST" ? await body(req) : undefined;
  let transport = id ? sessions.get(id) : undefined;
  if (!transport) {
    if (id || !isInitializeRequest(parsed)) {
      res.writeHead(404, { "content-type": "application/json" }).end(
        JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "Session not found" } }),
      );
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => {
        sessions.set(sid, transport);
        appendFileSync(`${log}.sessions`, `open ${sid}\n`);
      },
    });
    const server = desk();
    transport.onclose = () => {
      if (transport.sessionId) {
        sessions.delete(transport.sessionId);
        appendFileSync(`${log}.sessions`, `close ${transport.sessionId}\n`);
      }
      servers.delete(server);
    };
    await server.connect(transport);
  }
  await transport.handleRequest(req, res, parsed);
}).listen(Number(port), "127.0.0.1");
