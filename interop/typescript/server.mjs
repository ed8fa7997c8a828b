// The fixture server the TypeScript client tests drive: `snodo serve` with the memory store
// and the conformance fixture component, on a free port and in a fresh data directory.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../..");
const SNODO = join(ROOT, "target/debug/snodo");
const FIXTURES = join(ROOT, "target/guests/wasm32-wasip2/release/fixtures.wasm");

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

// Starts a server; resolves once it answers /healthz, with its MCP endpoint's `url`, its
// data directory `data` (which holds `server.log`) and `stop()`, which ends it, prints the
// end of its log when the test run failed, and removes the directory. `toml`, when given,
// is added to a configuration file that serves the same store and component.
export async function startServer({ toml } = {}) {
  for (const p of [SNODO, FIXTURES]) {
    assert.ok(existsSync(p), `${p} is missing: build with \`scripts/build\` first`);
  }
  const port = await freePort();
  const data = mkdtempSync(join(tmpdir(), "snodo-interop-ts-"));
  const logPath = join(data, "server.log");
  const log = openSync(logPath, "w");
  let args = ["serve", "--store", "memory", "--data", data, "--component", FIXTURES];
  if (toml !== undefined) {
    const config = join(data, "snodo.toml");
    writeFileSync(
      config,
      `[store]\nkind = "memory"\n\n[[components]]\npath = "${FIXTURES}"\n\n${toml}`,
    );
    args = ["serve", "--config", config];
  }
  const server = spawn(
    SNODO,
    args,
    { env: { ...process.env, MCP_PORT: String(port), NO_COLOR: "1" }, stdio: ["ignore", log, log] },
  );
  const exited = new Promise((ok) => server.once("exit", ok));
  // Generous: a node compiles its components before it answers, on a loaded machine.
  const deadline = Date.now() + 180_000;
  while (!(await healthy(port))) {
    const gone = await Promise.race([exited.then(() => true), new Promise((ok) => setTimeout(() => ok(false), 50))]);
    assert.ok(!gone, "the server exited:\n" + readFileSync(logPath, "utf8"));
    assert.ok(Date.now() < deadline, "the server did not answer /healthz within 180 s");
  }
  const stop = async () => {
    if (server.exitCode === null) {
      server.kill("SIGTERM");
      await exited;
    }
    if (process.exitCode) {
      console.log("--- server log (last 40 lines) ---");
      console.log(readFileSync(logPath, "utf8").split("\n").slice(-40).join("\n"));
    }
    rmSync(data, { recursive: true, force: true });
  };
  return { url: `http://127.0.0.1:${port}/mcp`, data, stop };
}
