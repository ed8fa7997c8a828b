"""Walkthrough: subscriptions/listen with taskIds receives notifications/tasks."""

import http.client
import json

from snodo_client import CAPS, Server, check

server = Server("--store", "memory").start()
try:
    task_id = server.call("slow_compute", {"seconds": 1, "label": "watched"})["taskId"]
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": [task_id]},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": CAPS}}})
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.request("POST", "/mcp", body, {"Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
                                    "Mcp-Method": "subscriptions/listen", "Accept": "text/event-stream"})
    resp = c.getresponse()
    check(resp.getheader("content-type", "").startswith("text/event-stream"), "the listen stream is SSE")
    frames = []
    while True:
        line = resp.fp.readline().decode()
        if not line:
            break
        if line.startswith("data:"):
            frames.append(json.loads(line[5:]))
            if frames[-1].get("params", {}).get("status") == "completed":
                break
    check(frames[0]["method"] == "notifications/subscriptions/acknowledged", "the acknowledgement comes first")
    check(frames[0]["params"]["notifications"]["taskIds"] == [task_id], "the task id was accepted")
    last = frames[-1]
    check(last["method"] == "notifications/tasks" and last["params"]["taskId"] == task_id,
          "a notifications/tasks arrived for the task")
    check(last["params"]["result"]["content"][0]["text"] == "Completed watched after 1 seconds",
          "it carries the full DetailedTask, result inlined")
    check(last["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7, "tagged with the subscription id")
    print("subscription walkthrough: ok")
finally:
    # The listen stream is still open: shutdown must end it rather than wait forever.
    server.stop()
