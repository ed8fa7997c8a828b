//! The conformance fixture tools in JavaScript: the seven tools the official suite's ten
//! `tasks-*` scenarios call, with the behaviour example-guests/fixtures gives them in Rust,
//! plus `open_ticket` (outbound HTTP, as example-guests/outbound has it), a resource, a
//! resource template and a prompt, built with snodo-guest.

import { Form, RpcError, ToolResult, http, prompt, resource, tool, z } from "snodo-guest";

/** Busy for `seconds` with a live guest, as a computation is: slices shorter than any sleep
 * the host parks. `false` when cancelled. */
function compute(cx, seconds) {
  for (let left = seconds; left > 0; left -= 0.05) {
    if (!cx.sleep(Math.min(left, 0.05))) return false;
  }
  return !cx.isCancelled();
}

tool(
  { name: "greet", description: "Greets someone by name (default: World)", input: z.object({ name: z.string().default("World") }) },
  (cx, { name }) => `Hello, ${name}!`,
);

tool(
  {
    name: "slow_compute",
    description: "Computes for the given number of seconds",
    mode: "optional",
    input: z.object({ seconds: z.number().min(0).default(0), label: z.string().default("computation") }),
    modeRule: (args) => ((args.seconds ?? 0) < 1 ? "sync" : "optional"),
  },
  (cx, { seconds, label }) => {
    const s = Math.min(seconds, 3600);
    cx.setStatus(`computing ${label}`);
    if (!compute(cx, s)) return ToolResult.error("slow_compute was cancelled");
    return ToolResult.text(`Completed ${label} after ${s} seconds`);
  },
);

tool(
  { name: "test_sleep", description: "Sleeps the host's durable sleep, then says which attempt woke", mode: "required", input: z.object({ ms: z.number().min(0).default(0) }) },
  (cx, { ms }) => (cx.sleep(ms / 1000) ? `woke on attempt ${cx.attempt}` : ToolResult.error("test_sleep was cancelled")),
);

tool({ name: "failing_job", description: "A job that fails in its own domain", mode: "required" }, (cx) => {
  compute(cx, 1);
  return ToolResult.error("The job failed: the input data was rejected");
});

tool({ name: "protocol_error_job", description: "A job that fails with a protocol error", mode: "required" }, () => {
  throw RpcError.internal("Internal error while processing the job");
});

tool(
  {
    name: "confirm_delete",
    description: "Deletes a file after asking for confirmation",
    mode: "required",
    input: { type: "object", properties: { filename: { type: "string" } }, required: ["filename"] },
  },
  (cx, { filename }) => {
    const answer = cx.elicit("confirm", new Form(`Delete ${filename}?`).boolean("confirm", "Confirm deletion").require("confirm"));
    if (answer.accepted && answer.get("confirm") !== false) return `Deleted ${filename}`;
    return `Kept ${filename}: deletion was not confirmed`;
  },
);

tool({ name: "multi_input", description: "Asks two questions at once", mode: "required" }, (cx) => {
  const [a, b] = cx.elicitAll([
    ["input-a", new Form("What is your name?").string("name", "Name")],
    ["input-b", new Form("Do you confirm?").boolean("confirm", "Confirm")],
  ]);
  return `Received both answers: ${JSON.stringify(a.raw)} and ${JSON.stringify(b.raw)}`;
});

tool(
  {
    name: "test_tool_with_task",
    description: "Asks for a name, then greets asynchronously",
    mode: "required",
    input: z.object({ name: z.string().optional() }),
    prepare: (cx, args) => {
      const answer = cx.elicit("user_name", new Form("What is your name?").string("name", "Name").require("name"));
      return { ...args, name: answer.get("name") ?? "stranger" };
    },
  },
  (cx, { name }) => `Hello, ${name ?? "stranger"}! (async)`,
);

tool({ name: "test_whoami", description: "Answers with the caller the host shows it and the attempt", mode: "optional" }, (cx) => ({
  ...cx.caller(),
  attempt: cx.attempt,
  elicitation: "elicitation" in cx.clientCapabilities(),
}));

tool(
  {
    name: "open_ticket",
    title: "Open a ticket",
    description: "Reads the ticket template, asks to confirm, then opens the ticket",
    mode: "required",
    input: z.object({ base: z.string(), title: z.string() }),
  },
  (cx, { base, title }) => {
    let template;
    try {
      template = http.get(`${base}/template`).errorForStatus().text();
    } catch (e) {
      return ToolResult.error(`template: ${e.message}`);
    }
    const answer = cx.elicit("confirm-ticket", new Form(`Open the ticket ${JSON.stringify(title)}?`).boolean("confirm", "Open it").require("confirm"));
    if (!(answer.accepted && answer.get("confirm") === true)) return ToolResult.text("The ticket was not opened");
    try {
      const created = http.post(`${base}/tickets`, { json: { title, template } }).errorForStatus();
      return new ToolResult({ structured: { status: created.status, ticket: created.json() } });
    } catch (e) {
      return ToolResult.error(`creating the ticket: ${e.message}`);
    }
  },
);

resource(
  { uri: "test://static-text", name: "static-text", mimeType: "text/plain", description: "A fixed text resource" },
  () => "This is the content of the static text resource.",
);

resource(
  {
    uri: "test://template/{id}/data",
    name: "template-data",
    mimeType: "application/json",
    description: "Data for one id",
    complete: { id: (value) => ["alpha", "beta", "gamma"].filter((i) => i.startsWith(value)) },
  },
  ({ id }) => ({ id, templateTest: true, data: `Data for ID: ${id}` }),
);

prompt(
  {
    name: "test_prompt_with_arguments",
    description: "A prompt with arguments",
    arguments: [
      { name: "arg1", description: "First test argument", required: true },
      { name: "arg2", description: "Second test argument", required: true },
    ],
  },
  ({ arg1, arg2 }) => `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`,
);
