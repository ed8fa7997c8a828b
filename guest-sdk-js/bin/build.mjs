#!/usr/bin/env node
//! `snodo-guest-build APP.js -o APP.wasm [--wit DIR]`: builds a Snodo tool component from a
//! JavaScript (or TypeScript) app that declares tools with snodo-guest.
//!
//! 1. esbuild bundles the app, this SDK and zod into one ES module whose exports are the
//!    world's (`tools`, `execution`, `modes`, `catalog`); the host's interfaces stay imports.
//! 2. The WIT is assembled: Snodo's (`--wit`, default the `wit/` beside this SDK) and the
//!    WASI 0.2 packages the SDK's `sleep` and `http` import (from jco's own WIT), under a
//!    world that includes `snodo:tasks/executor@0.5.0`.
//! 3. componentize-js builds the component (SpiderMonkey, pre-initialized with the app
//!    loaded, so an instance starts from a snapshot).

import { componentize } from "@bytecodealliance/componentize-js";
import { build } from "esbuild";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const SDK = dirname(dirname(realpathSync(fileURLToPath(import.meta.url))));
const WASI = "0.2.12";

function usage(message) {
  if (message) console.error(`snodo-guest-build: ${message}`);
  console.error("usage: snodo-guest-build APP.js -o APP.wasm [--wit DIR]");
  process.exit(2);
}

const args = process.argv.slice(2);
let app, out, wit = join(SDK, "..", "wit");
for (let i = 0; i < args.length; i++) {
  if (args[i] === "-o" || args[i] === "--out") out = args[++i];
  else if (args[i] === "--wit") wit = args[++i];
  else if (args[i] === "-h" || args[i] === "--help") usage();
  else if (!app) app = args[i];
  else usage(`unexpected argument ${args[i]}`);
}
if (!app || !out) usage("an app and -o are required");
app = resolve(app);
out = resolve(out);

const work = mkdtempSync(join(tmpdir(), "snodo-guest-build-"));
try {
  const bundled = await build({
    stdin: {
      contents: `import ${JSON.stringify(app)};\nexport { tools, execution, modes, catalog } from ${JSON.stringify(join(SDK, "src", "world.js"))};\n`,
      resolveDir: dirname(app),
      sourcefile: "snodo-entry.js",
      loader: "js",
    },
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    write: false,
    external: ["snodo:*", "wasi:*"],
    alias: { "snodo-guest": join(SDK, "src", "index.js") },
    mainFields: ["module", "main"],
    conditions: ["import", "default"],
    logLevel: "warning",
  });
  const source = bundled.outputFiles[0].text;

  // The WIT: Snodo's packages (the main package of `--wit` and its deps) and WASI's, as
  // deps of a one-world package.
  const witDir = join(work, "wit");
  const deps = join(witDir, "deps");
  mkdirSync(deps, { recursive: true });
  cpSync(join(wit, "deps"), deps, { recursive: true });
  mkdirSync(join(deps, "snodo-tasks"));
  for (const f of readdirSync(wit)) {
    if (f.endsWith(".wit")) cpSync(join(wit, f), join(deps, "snodo-tasks", f));
  }
  const jcoMain = fileURLToPath(import.meta.resolve("@bytecodealliance/jco"));
  const jco = jcoMain.slice(0, jcoMain.lastIndexOf("/@bytecodealliance/jco/") + "/@bytecodealliance/jco".length);
  const jcoWit = join(jco, "lib", "wit", "builtin", WASI);
  for (const p of readdirSync(jcoWit)) cpSync(join(jcoWit, p), join(deps, p), { recursive: true });
  writeFileSync(
    join(witDir, "guest.wit"),
    `package snodo:js-guest;\n\nworld tool {\n  include snodo:tasks/executor@0.5.0;\n` +
      `  import wasi:clocks/monotonic-clock@${WASI};\n  import wasi:io/poll@${WASI};\n` +
      `  import wasi:http/outgoing-handler@${WASI};\n}\n`,
  );

  const { component } = await componentize({
    sourceName: "app.js",
    sourcePath: (writeFileSync(join(work, "app.js"), source), join(work, "app.js")),
    witPath: witDir,
    worldName: "tool",
  });
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, component);
  console.log(`snodo-guest-build: ${out} (${(component.length / 1048576).toFixed(1)} MiB)`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
