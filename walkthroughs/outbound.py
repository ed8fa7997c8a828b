"""Walkthrough: a tool that calls an API, once, across a crash.

`open_ticket` (example-guests/outbound, written with wstd) GETs a template from a ticket
service, asks the user to confirm, then POSTs the ticket. Two tasks wait for their
confirmation when the server is killed with SIGKILL; after the restart they are answered,
a fresh guest replays each task, and the service has received exactly one GET and one POST
per task: the GET was answered from the task's journal, and the POST carried
`Idempotency-Key: <task id>-1`. The service's API key is injected by the host from a secret
the guest never sees; it is in no reply, no log line and no store file.

Run on both durable single-node stores: redb (the default) and SQLite, and on redb with the
same tool written in Python and in JavaScript (the fixtures scripts/guests builds); then, where
PostgreSQL answers, on two nodes sharing it: the task asks on node A, A is killed, and node
B takes the answer and replays the task's journal.
"""

import json
import os
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from snodo_client import GUESTS, ROOT, Server, check, node_config, postgres_available, two_postgres_nodes

RUST = f"{GUESTS}/outbound.wasm"
PYTHON = os.path.join(ROOT, "target", "guests", "python", "fixtures.wasm")
JS = os.path.join(ROOT, "target", "guests", "js", "fixtures.wasm")

SECRET = "tk_walkthrough_" + os.urandom(8).hex()
os.environ["SNODO_WALKTHROUGH_TICKET_KEY"] = SECRET

seen = []
lock = threading.Lock()


class TicketService(BaseHTTPRequestHandler):
    def _record(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        with lock:
            seen.append({"method": self.command, "path": self.path,
                         "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
            return sum(1 for r in seen if r["method"] == "POST")

    def do_GET(self):
        self._record()
        if self.path == "/template":
            self._reply(200, b"template-1")
        else:
            self._reply(404, b"not found")

    def do_POST(self):
        posts = self._record()
        if self.path == "/tickets":
            self._reply(201, json.dumps({"id": posts}).encode())
        else:
            self._reply(404, b"not found")

    def _reply(self, status, body):
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


service = ThreadingHTTPServer(("127.0.0.1", 0), TicketService)
threading.Thread(target=service.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{service.server_port}"


def config(store, data, node="node-a", postgres=None, component=RUST):
    """A node on `store` in `data`: its file there, or the PostgreSQL `postgres` names."""
    keys = {"kind": store, **(postgres or {"path": f"{data}/tasks.{store}"})}
    return node_config(data, node, keys, [component], f"""[runner]
lease_ms = 3000
heartbeat_ms = 500

[secrets]
ticket_key = {{ env = "SNODO_WALKTHROUGH_TICKET_KEY" }}

[tools.open_ticket]
allowed_outbound_hosts = ["{base}"]
inject = [{{ host = "{base}", header = "X-Api-Key", value = "{{secret.ticket_key}}" }}]
""")


def store_bytes(data, store):
    out = b""
    for name in os.listdir(data):
        if name.startswith("tasks."):
            with open(os.path.join(data, name), "rb") as f:
                out += f.read()
    return out


for store, component, lang in (("redb", RUST, "Rust"), ("sqlite", RUST, "Rust"),
                               ("redb", PYTHON, "Python"), ("redb", JS, "JavaScript")):
    print(f"-- store: {store}, the tool in {lang}")
    with lock:
        seen.clear()
    data = tempfile.mkdtemp(prefix="snodo-outbound-")
    conf = config(store, data, component=component)
    server = Server(config=conf).start()
    # The second ticket's body is far longer than one write: the body streams to the host
    # while it sends the request.
    tasks = [server.call("open_ticket", {"base": base, "title": t})["taskId"]
             for t in ("disk full", "cert expiring: " + "x" * 20_000)]
    for task_id in tasks:
        server.wait(task_id, lambda t: t["status"] == "input_required", "input_required")
    check(sum(1 for r in seen if r["method"] == "GET") == 2, "each task fetched its template before asking")
    server.kill9()
    print("killed the server with SIGKILL while both tasks waited for their confirmation")

    server = Server(config=conf).start()
    replies = []
    try:
        for task_id in tasks:
            ack = server.rpc("tasks/update", {"taskId": task_id, "inputResponses": {
                "confirm-ticket": {"action": "accept", "content": {"confirm": True}}}})
            check(ack == {"resultType": "complete"}, "the answer was accepted after the restart")
        for task_id in tasks:
            done = server.wait(task_id, lambda t: t["status"] == "completed", "completed")
            replies.append(json.dumps(done))
            check(done["result"]["structuredContent"]["status"] == 201, "the ticket was created")
        metrics = server.metrics()
    finally:
        server.stop()
    log = server.proc.stderr.read().decode(errors="replace")

    with lock:
        gets = [r for r in seen if r["method"] == "GET"]
        posts = [r for r in seen if r["method"] == "POST"]
    check(len(gets) == 2 and len(posts) == 2, "the service received exactly one GET and one POST per task")
    keys = sorted(r["headers"].get("idempotency-key", "") for r in posts)
    check(keys == sorted(f"{t}-1" for t in tasks), "each POST carried Idempotency-Key <task id>-1")
    check(all(b"template-1" in r["body"] for r in posts), "the replayed guest got the template from the journal")
    check(all(r["headers"].get("x-api-key") == SECRET for r in seen), "the host injected the API key into every request")
    replayed = metrics.get('snodo_outbound_requests_total{tool="open_ticket",source="journal"}', 0)
    check(replayed == 2, "the restarted server answered both GETs from the journal")
    check(SECRET not in "".join(replies), "the secret is in no reply")
    check(SECRET not in log, "the secret is in no log line")
    check(SECRET.encode() not in store_bytes(data, store), f"the secret is in no byte of the {store} files")

if postgres_available("the two-node part"):
    print("-- two nodes on postgres")
    with lock:
        seen.clear()
    with two_postgres_nodes("outbound", config) as (a, b):
        task_id = a.call("open_ticket", {"base": base, "title": "node failover"})["taskId"]
        a.wait(task_id, lambda t: t["status"] == "input_required", "input_required on A")
        a.kill9()
        print("killed node A with SIGKILL while its task waited for the confirmation")
        ack = b.rpc("tasks/update", {"taskId": task_id, "inputResponses": {
            "confirm-ticket": {"action": "accept", "content": {"confirm": True}}}})
        check(ack == {"resultType": "complete"}, "node B accepted the answer")
        done = b.wait(task_id, lambda t: t["status"] == "completed", "completed on B", timeout=90)
        check(done["result"]["structuredContent"]["status"] == 201, "node B finished the task")
        with lock:
            methods = sorted(r["method"] for r in seen)
        check(methods == ["GET", "POST"], "one GET (on A, replayed on B from the journal) and one POST")
        replayed = b.metrics().get('snodo_outbound_requests_total{tool="open_ticket",source="journal"}', 0)
        check(replayed == 1, "node B answered the GET from the journal node A recorded")
print("outbound walkthrough: ok")
