"""Walkthrough: one tool as a durable task from every kind of client, each across a kill -9 of
the server (redb): a 2026-07-28 client with the tasks extension follows it with tasks/get; a
2025-11-25 client with that revision's tasks collects it with tasks/result; and a client
that declared no tasks at all, given a handle because the operator set `handle_after_ms` on
the tool, picks the outcome up with the built-in task_result tool.
"""

import os
import tempfile

from snodo_client import GUESTS, HandshakeClient, Server, check, node_config

NO_TASKS = {"elicitation": {}}
data = tempfile.mkdtemp(prefix="snodo-walkthrough-")
conf = node_config(data, "one", {"kind": "redb", "path": os.path.join(data, "tasks.redb")},
                   [f"{GUESTS}/fixtures.wasm"], """[tools.slow_compute]
handle_after_ms = 1500
""")


def text(result):
    return result["content"][0]["text"]


def restart(server, what):
    """Kills the server with SIGKILL while `what` runs, and starts it again on the same store."""
    server.kill9()
    print(f"killed the server with SIGKILL mid-task ({what})")
    return Server(config=conf).start()


server = Server(config=conf).start()
try:
    # 2026-07-28, with the tasks extension: the call answers with the task at once.
    modern = server.call("slow_compute", {"seconds": 3, "label": "modern"})
    check(modern["resultType"] == "task", "2026-07-28 with the extension: tools/call answers with a task")
    server.wait(modern["taskId"], lambda t: t.get("statusMessage") == "computing modern", "running")
    server = restart(server, "2026-07-28")
    done = server.wait(modern["taskId"], lambda t: t["status"] == "completed", "completed")
    check(text(done["result"]) == "Completed modern after 3 seconds",
          "2026-07-28: tasks/get reads the result the recovered task computed")

    # 2025-11-25, its experimental tasks: params.task asks for one.
    old = HandshakeClient(server.port)
    old.initialize()
    created = old.request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 3, "label": "legacy"},
                                         "task": {"ttl": 600000}})["result"]["task"]
    server.wait(created["taskId"], lambda t: t.get("statusMessage") == "computing legacy", "running")
    server = restart(server, "2025-11-25")
    old.port = server.port
    collected = old.request("tasks/result", {"taskId": created["taskId"]})["result"]
    check(collected["content"][0]["text"] == "Completed legacy after 3 seconds",
          "2025-11-25: the same session's tasks/result collects it after the crash")

    # No tasks at all: past handle_after_ms the call answers with a handle naming the task.
    handle = server.rpc("tools/call", {"name": "slow_compute", "arguments": {"seconds": 3, "label": "plain"}},
                        caps=NO_TASKS)
    task_id = handle["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
    check(f"still running as task {task_id}" in text(handle) and "task_result" in text(handle),
          "no tasks: past handle_after_ms the call answers with a result naming the task and task_result")
    server = restart(server, "a client with no tasks")
    follow = {"name": "task_result", "arguments": {"taskId": task_id}}
    outcome = handle
    for _ in range(60):
        # Each call waits up to the tool's handle_after_ms on the server.
        outcome = server.rpc("tools/call", follow, caps=NO_TASKS)
        if "still running" not in text(outcome):
            break
    check(text(outcome) == "Completed plain after 3 seconds",
          "no tasks: task_result picks up what the recovered task computed")
    # A call that finishes within handle_after_ms answers with its result, as if inline.
    quick = server.rpc("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "now"}},
                       caps=NO_TASKS)
    check(text(quick) == "Completed now after 1 seconds"
          and "io.modelcontextprotocol/related-task" in quick["_meta"],
          "no tasks: a call that finishes within handle_after_ms answers with its result, from a task")
finally:
    server.stop()
print("every client walkthrough: ok")
