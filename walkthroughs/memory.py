"""Walkthrough: a task on the in-memory store: create, poll, complete; metrics move."""

from snodo_client import Server, check

server = Server("--store", "memory").start()
try:
    before = server.metrics()
    created = server.call("quick_report", {"rows": 5_000_000})
    check(created["resultType"] == "task", "a large quick_report becomes a task (CreateTaskResult)")
    task_id = created["taskId"]
    check(server.get(task_id)["taskId"] == task_id, "tasks/get resolves the task at once")
    done = server.wait(task_id, lambda t: t["status"] == "completed", "completed")
    check(done["result"]["structuredContent"]["rows"] == 5_000_000, "the result is inlined in tasks/get")
    small = server.call("quick_report", {"rows": 10})
    check(small["resultType"] == "complete", "a small quick_report runs synchronously")
    after = server.metrics()
    check(after["snodo_tasks_created_total"] == before["snodo_tasks_created_total"] + 1, "metrics: one task created")
    check(after["snodo_attempts_started_total"] > before["snodo_attempts_started_total"], "metrics: an attempt started")
    print("memory walkthrough: ok")
finally:
    server.stop()
