"""Walkthrough: a FastMCP server's tools, made durable by a Snodo node in front of it.

An upstream MCP server (FastMCP, interop/upstreams/fastmcp_tickets.py) opens tickets and
keeps a log of every call it receives, with the headers it came with. A redb node names it
under [[upstreams]]: it lists the upstream's tools at start and serves them as its own
(`tickets_create_ticket`, ...), with a person confirming each `create_ticket` before it goes
out and the upstream's bearer token added by the host.

A client creates a ticket: the call is a task that asks for confirmation, showing the
arguments. The node is killed with SIGKILL while the question waits, and started again on
the same file. The question is still there; the client accepts; the ticket is opened, once:
the upstream's log has one call, carrying the task's request key (`<task id>-<position>`,
the same on every attempt) as its Idempotency-Key and the token
the host injected.

The upstream runs on FastMCP from the interop tools (`scripts/interop --prepare` installs
them in .tools/venv).
"""

import json
import os
import subprocess
import tempfile
import time

from snodo_client import GUESTS, ROOT, Server, check, free_port, node_config

PYTHON = os.path.join(ROOT, ".tools", "venv", "bin", "python")
if not os.path.exists(PYTHON):
    raise SystemExit(f"FAILED: {PYTHON} is missing: run scripts/interop --prepare (it installs FastMCP)")

TOKEN = "upstream-token-0123456789"
data = tempfile.mkdtemp(prefix="snodo-gateway-")
log = os.path.join(data, "upstream.log")
open(log, "w").close()
up = free_port()
upstream = subprocess.Popen(
    [PYTHON, os.path.join(ROOT, "interop", "upstreams", "fastmcp_tickets.py"), str(up), log, TOKEN],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def calls():
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


try:
    deadline = time.time() + 60
    while True:
        try:
            import socket
            socket.create_connection(("127.0.0.1", up), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or upstream.poll() is not None:
                raise SystemExit("FAILED: the upstream did not start")
            time.sleep(0.05)
    print(f"upstream: FastMCP ticket desk on 127.0.0.1:{up}, requiring its bearer token")

    conf = node_config(data, "gateway-node", {"kind": "redb", "path": f"{data}/tasks.redb"},
                       [f"{GUESTS}/fixtures.wasm"], f"""[secrets]
tickets_token = {{ value = "{TOKEN}", development = true }}

[[upstreams]]
name = "tickets"
url = "http://127.0.0.1:{up}/mcp"
confirm = ["create_ticket"]
bearer = "tickets_token"

[tools.tickets_create_ticket]
mode = "required"
""")
    server = Server(config=conf).start()
    tools = {t["name"]: t for t in server.rpc("tools/list", {})["tools"]}
    served = sorted(n for n in tools if n.startswith("tickets_"))
    check({"tickets_create_ticket", "tickets_slow_echo"} <= set(served),
          f"the node serves the upstream's tools under its prefix: {served}")

    task = server.call("tickets_create_ticket", {"title": "printer on fire", "priority": 1})
    task_id = task["taskId"]
    asked = server.wait(task_id, lambda t: t["status"] == "input_required", "input_required")
    question = asked["inputRequests"]["confirm"]["params"]["message"]
    check("printer on fire" in question, f"the task asks first, showing the arguments: {question.splitlines()[0]}")
    check(calls() == [], "nothing has gone upstream while the question waits")

    server.kill9()
    print("node killed with SIGKILL while the question waits")
    server = Server(config=conf).start()
    asked = server.wait(task_id, lambda t: t["status"] == "input_required", "input_required")
    check(list(asked["inputRequests"]) == ["confirm"], "after the restart the same question waits")
    server.rpc("tasks/update", {"taskId": task_id, "inputResponses": {
        "confirm": {"action": "accept", "content": {"confirm": True}}}})
    done = server.wait(task_id, lambda t: t["status"] in ("completed", "failed"), "finished")
    check(done["status"] == "completed", f"accepted, the ticket is opened: {done['result']['content'][0]['text']}")
    got = calls()
    check([c["tool"] for c in got] == ["create_ticket"], "the upstream received the call once")
    check(got[0]["idempotency_key"].startswith(task_id + "-"), "with the task's request key as its Idempotency-Key")
    check(got[0]["authorization"] == f"Bearer {TOKEN}", "and the bearer token the host added")
    server.stop()
finally:
    upstream.kill()
    upstream.wait()
