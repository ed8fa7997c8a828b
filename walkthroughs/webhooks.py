"""Walkthrough: a webhook receiver that was down catches up by cursor, and nothing is lost to
a kill -9 on the way.

A redb node is subscribed (`[[webhooks.subscriptions]]`) to its callers' finished tasks; a
receiver in this script checks every delivery's Standard Webhooks signature (HMAC-SHA256 of
`id.timestamp.body` under the `whsec_` secret, with the standard library) and keeps the
events by id. First a task's completion arrives signed. Then the receiver goes down: the
node's tries fail and are repeated on the exact retry list, then the event becomes a dead
letter. Meanwhile the node is killed with SIGKILL with a second task's event still in its
outbox; it comes back and tries that one too. The receiver comes back up, reads everything
it missed from `snodo webhooks events --after <cursor>` (the admin API's
`/admin/v1/events?after=`), and an operator redelivers the dead letters: the receiver sees
their ids again and drops them as duplicates. At the end it holds every completion exactly
once.
"""

import base64
import hashlib
import hmac
import json
import os
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from snodo_client import GUESTS, SNODO, Server, check, cli, free_port, node_config

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()


class Receiver:
    def __init__(self):
        self.port = free_port()
        self.up = True
        self.events = {}
        self.tries = 0
        self.duplicates = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.tries += 1
                status = 503
                if receiver.up:
                    receiver.take(self.headers, body)
                    status = 204
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, headers, body):
        msg_id, at = headers["webhook-id"], headers["webhook-timestamp"]
        key = base64.b64decode(SECRET.removeprefix("whsec_"))
        want = base64.b64encode(hmac.new(key, f"{msg_id}.{at}.".encode() + body, hashlib.sha256).digest()).decode()
        signatures = [s.removeprefix("v1,") for s in headers["webhook-signature"].split(" ")]
        check(any(hmac.compare_digest(want, s) for s in signatures), f"delivery {msg_id} is signed with the secret")
        check(abs(time.time() - int(at)) < 300, "and recent")
        if msg_id in self.events:
            self.duplicates += 1
        self.events[msg_id] = json.loads(body)


hooks = Receiver()
data = tempfile.mkdtemp(prefix="snodo-webhooks-")
conf = node_config(data, "node-a", {"kind": "redb", "path": f"{data}/tasks.redb"}, [f"{GUESTS}/fixtures.wasm"], f"""
[webhooks]
allowed_hosts = ["http://127.0.0.1:{hooks.port}"]
retry_ms = [300, 600]

[[webhooks.subscriptions]]
name = "finished"
tenant = "local"
url = "http://127.0.0.1:{hooks.port}/hooks"
events = ["completed", "failed", "cancelled"]
secret = "{SECRET}"
""")


def until(what, probe, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.05)
    raise SystemExit(f"never: {what}")


def finished(server, tool, args):
    task = server.call(tool, args)["taskId"]
    server.wait(task, lambda t: t["status"] == "completed", "completed")
    return task


server = Server(config=conf).start()
try:
    first = finished(server, "test_whoami", {})
    until("the first delivery", lambda: hooks.events)
    check(list(hooks.events.values())[0]["data"]["taskId"] == first, f"task {first}'s completion arrived signed")
    cursor = cli(server, "webhooks", "events")["next"]

    hooks.up = False
    print("-- the receiver is down")
    second = finished(server, "test_whoami", {})
    dead = until("a dead letter", lambda: (w := cli(server, "webhooks", "show", "finished"))["dead"] and w)
    check(dead["dead"][0]["attempts"] == 3, "tried at once, after 300 ms and after 600 ms, then a dead letter")
    third = server.call("test_whoami", {})["taskId"]
    server.kill9()
    print("-- killed the node with SIGKILL; restarted on the same file")
    server = Server(config=conf).start()
    server.wait(third, lambda t: t["status"] == "completed", "completed after the restart")
    until("both missed events are dead letters", lambda: len(cli(server, "webhooks", "show", "finished")["dead"]) == 2)

    hooks.up = True
    print("-- the receiver is back: it reads what it missed by cursor")
    page = cli(server, "webhooks", "events", "--after", str(cursor))
    missed = [e for e in page["events"] if e["id"] not in hooks.events]
    check(sorted(e["payload"]["data"]["taskId"] for e in missed) == sorted([second, third]),
          f"the cursor after {cursor} holds the two completions it missed")
    for e in missed:
        hooks.events[e["id"]] = e["payload"]
    print(subprocess.run([SNODO, "webhooks", "list", "--url", f"http://127.0.0.1:{server.port}"],
                         capture_output=True, text=True, check=True).stdout)
    redelivered = cli(server, "webhooks", "redeliver", "finished")
    check(redelivered["redelivering"] == 2, "an operator redelivers both dead letters")
    until("the redeliveries", lambda: hooks.duplicates == 2)
    check(len(hooks.events) == 3 and {e["data"]["taskId"] for e in hooks.events.values()} == {first, second, third},
          f"the receiver holds every completion once ({hooks.tries} requests, {hooks.duplicates} duplicates dropped)")
finally:
    server.stop()
print("webhooks walkthrough: ok")
