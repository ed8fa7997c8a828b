"""Walkthrough: one component serving a tool, a resource and a prompt, used by a 2025-11-25
client (the initialize handshake, a session and that revision's experimental tasks) and by a
2026-07-28 client (stateless, with the tasks extension), side by side on the same endpoint."""

import json
import os

from snodo_client import GUESTS, HandshakeClient, Server, check


server = Server("--component", os.path.join(GUESTS, "examples.wasm")).start()
try:
    old = HandshakeClient(server.port)
    init = old.initialize()
    check(init["protocolVersion"] == "2025-11-25", "2025-11-25: initialize negotiates the client's revision")
    check(old.session is not None, "2025-11-25: the server gives a session id (the session lives in it)")
    check({"tools", "resources", "prompts", "completions"} <= set(init["capabilities"]),
          "2025-11-25: tools, resources, prompts and completions are advertised")
    report = old.request("tools/call", {"name": "quick_report", "arguments": {"rows": 10}})["result"]
    check(report["structuredContent"] == {"rows": 10, "sum": 45}, "2025-11-25: the tool answers on the call")
    big = old.request("tools/call", {"name": "quick_report", "arguments": {"rows": 200000}})["result"]
    check("structuredContent" in big and "taskId" not in big,
          "2025-11-25: a call that would be a task for a 2026-07-28 client runs synchronously")
    check("tasks" in init["capabilities"], "2025-11-25: its experimental tasks are advertised")
    export = old.request("tools/call", {"name": "durable_export", "arguments": {"dataset": "sales"}})
    check(export["error"]["code"] == -32601 and "params.task" in export["error"]["message"],
          "2025-11-25: a task-only tool called without params.task says how to call it")
    created = old.request("tools/call", {"name": "quick_report", "arguments": {"rows": 200000},
                                         "task": {"ttl": 60000}})["result"]["task"]
    check(created["status"] == "working" and isinstance(created["ttl"], int),
          "2025-11-25: with params.task the call answers at once with its task")
    check(old.request("tasks/get", {"taskId": created["taskId"]})["result"]["taskId"] == created["taskId"],
          "2025-11-25: tasks/get reads it")
    collected = old.request("tasks/result", {"taskId": created["taskId"]})["result"]
    check(collected["structuredContent"]["rows"] == 200000,
          "2025-11-25: tasks/result waits for the task and answers as tools/call would have")
    card = old.request("resources/read", {"uri": "reports://sales"})["result"]
    check(json.loads(card["contents"][0]["text"])["dataset"] == "sales",
          "2025-11-25: a templated resource is read with its variable")
    brief = old.request("prompts/get", {"name": "report_brief", "arguments": {"dataset": "sales"}})["result"]
    check(brief["messages"][1]["content"]["text"].startswith("Write a one-paragraph brief of the sales"),
          "2025-11-25: the prompt renders with its argument")
    done = old.request("completion/complete", {"ref": {"type": "ref/prompt", "name": "report_brief"},
                                               "argument": {"name": "dataset", "value": "s"}})["result"]
    check(done["completion"]["values"] == ["sales", "support", "signups"], "2025-11-25: the argument completes")

    card = server.rpc("resources/read", {"uri": "reports://support"})
    check(card["resultType"] == "complete" and card["cacheScope"] == "private",
          "2026-07-28: the same resource, with its caching hints")
    prompts = server.rpc("prompts/list", {})["prompts"]
    check([p["name"] for p in prompts] == ["report_brief"], "2026-07-28: the same prompt is listed")
    task = server.call("quick_report", {"rows": 200000})
    check(task["resultType"] == "task", "2026-07-28: the large report becomes a durable task")
    finished = server.wait(task["taskId"], lambda t: t["status"] == "completed", "completed")
    check(finished["result"]["structuredContent"]["rows"] == 200000, "2026-07-28: the task completes")
    print("two_revisions walkthrough: ok")
finally:
    server.stop()
