"""Walkthrough: durable recovery: kill -9 the server mid-task, restart, the task completes once,
in its caller's trace; and a task a 2025-11-25 client created is collected after the crash.

Run on both durable single-node stores: redb (the default) and SQLite.
"""

import os

from snodo_client import HandshakeClient, Server, check, inspect

for store, file in (("redb", "tasks.redb"), ("sqlite", "tasks.sqlite")):
    print(f"-- store: {store}")
    server = Server("--store", store, "--trace-context").start()
    data = server.data
    # The caller's trace context (SEP-414 `_meta` keys) is kept with the task.
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    task_id = server.rpc("tools/call", {"name": "slow_compute", "arguments": {"seconds": 3, "label": "report"}},
                         meta={"traceparent": traceparent})["taskId"]
    server.wait(task_id, lambda t: t.get("statusMessage") == "computing report", "running")
    server.kill9()
    print("killed the server with SIGKILL mid-task")

    server = Server("--store", store, "--trace-context", data=data).start()
    try:
        t = server.get(task_id)
        check(t["taskId"] == task_id, "the task survived the crash")
        done = server.wait(task_id, lambda t: t["status"] == "completed", "completed")
        check(done["result"]["content"][0]["text"] == "Completed report after 3 seconds", "the recovered task completed")
    finally:
        server.stop()
    facts = inspect(os.path.join(data, file), task_id)
    check(facts["attempt"] == 2, "it ran twice: the first attempt died with the process")
    check(facts["generation"] == 2, "the recovery claimed it with a new generation (the old one is fenced)")
    check(facts["status"] == "completed", "one terminal state")
    trace = facts["work"]["trace"]
    check(trace["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736" and trace["parentSpanId"] == "00f067aa0ba902b7",
          "the recovered task still continues its caller's trace")
# Without --trace-context (the default) a node keeps no caller's trace: a node of an
# earlier build sharing the store could not read it.
server = Server("--store", "redb").start()
try:
    task_id = server.rpc("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "untraced"}},
                         meta={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})["taskId"]
    server.wait(task_id, lambda t: t["status"] == "completed", "completed")
finally:
    server.stop()
check(inspect(os.path.join(server.data, "tasks.redb"), task_id)["work"]["trace"] is None,
      "by default the caller's trace context is not stored")
# A 2025-11-25 client's task (its experimental tasks) is the same durable task: it survives
# kill -9, and the client's session, which lives in its id, follows it after the restart.
server = Server("--store", "redb").start()
old = HandshakeClient(server.port)
old.initialize()
created = old.request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 3, "label": "legacy"},
                                     "task": {"ttl": 600000}})["result"]["task"]
server.wait(created["taskId"], lambda t: t.get("statusMessage") == "computing legacy", "running")
server.kill9()
print("killed the server with SIGKILL mid-task (a 2025-11-25 task)")
server = Server("--store", "redb", data=server.data).start()
try:
    old.port = server.port
    check(old.request("tasks/get", {"taskId": created["taskId"]})["result"]["taskId"] == created["taskId"],
          "2025-11-25: the same session reads its task after the crash")
    collected = old.request("tasks/result", {"taskId": created["taskId"]})["result"]
    check(collected["content"][0]["text"] == "Completed legacy after 3 seconds",
          "2025-11-25: tasks/result collects what the recovered task computed")
finally:
    server.stop()
print("recovery walkthrough: ok")
