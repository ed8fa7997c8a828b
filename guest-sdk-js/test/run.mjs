#!/usr/bin/env node
//! Runs the SDK's tests under Node: bundles each `*.test.mjs` with the SDK, the host's
//! imports (`snodo:*`, `wasi:*`) replaced by the stand-ins in stubs/, then `node --test`.

import { build } from "esbuild";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = mkdtempSync(join(tmpdir(), "snodo-guest-js-test-"));
const stubs = {
  name: "host-stubs",
  setup(b) {
    b.onResolve({ filter: /^(snodo|wasi):/ }, () => ({ path: join(here, "stubs", "host.js") }));
  },
};
try {
  const tests = readdirSync(here).filter((f) => f.endsWith(".test.mjs"));
  for (const t of tests) {
    await build({
      entryPoints: [join(here, t)],
      bundle: true,
      format: "esm",
      platform: "node",
      outfile: join(out, t),
      plugins: [stubs],
      alias: { "snodo-guest": join(here, "..", "src", "index.js") },
      logLevel: "warning",
    });
  }
  const run = spawnSync(process.execPath, ["--test", ...tests.map((t) => join(out, t))], { stdio: "inherit" });
  process.exitCode = run.status ?? 1;
} finally {
  rmSync(out, { recursive: true, force: true });
}
