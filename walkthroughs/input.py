"""Walkthrough: mid-task input: a confirmation form answered with tasks/update."""

from snodo_client import Server, check

server = Server().start()
try:
    task_id = server.call("durable_export", {"dataset": "sales"})["taskId"]
    parked = server.wait(task_id, lambda t: t["status"] == "input_required", "input_required")
    request = parked["inputRequests"]["export-confirmation"]
    check(request["method"] == "elicitation/create", "the task asks with an elicitation form")
    check(request["params"]["requestedSchema"]["properties"]["confirm"]["type"] == "boolean", "the form has a confirm field")
    ack = server.rpc("tasks/update", {"taskId": task_id, "inputResponses": {
        "export-confirmation": {"action": "accept", "content": {"confirm": True}}}})
    check(ack == {"resultType": "complete"}, "tasks/update is acknowledged")
    done = server.wait(task_id, lambda t: t["status"] == "completed", "completed")
    out = done["result"]["structuredContent"]
    check(out["exportId"] == "export-" + task_id, "the export is keyed by the task's idempotency key")
    print("input walkthrough: ok")
finally:
    server.stop()
