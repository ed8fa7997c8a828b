"""Walkthrough: a tool that waits on a slow job with durable sleeps, across kill -9.

`await_job` (example-guests/outbound) starts a job on a job service, then polls it every
2 s until the job is done. Each 2 s sleep is past `runner.sleep_park_after_ms` (1 s): the
task parks between polls with no guest running and `tasks/get` says until when; at each
wake a fresh guest replays the task, its earlier requests answered from the journal. The
server is killed with SIGKILL while the task sleeps; after the restart it wakes at its
time, and the job service saw one start and each poll exactly once.

Run on redb (the default) and, where PostgreSQL answers, on two nodes sharing it: node A
parks the task and is killed, node B wakes it.
"""

import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from snodo_client import GUESTS, Server, check, node_config, postgres_available, two_postgres_nodes

POLLS_TO_DONE = 4
seen = []
lock = threading.Lock()


class JobService(BaseHTTPRequestHandler):
    """A job that is done at its fourth poll; every request is recorded."""

    def do_POST(self):
        with lock:
            seen.append(("POST", self.path))
            n = sum(1 for m, _ in seen if m == "POST")
        self._reply(201, {"id": f"job-{n}"})

    def do_GET(self):
        with lock:
            seen.append(("GET", self.path))
            polls = sum(1 for r in seen if r == ("GET", self.path))
        done = polls >= POLLS_TO_DONE
        self._reply(200, {"state": "done" if done else "running", "result": "42 rows" if done else None})

    def _reply(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


service = ThreadingHTTPServer(("127.0.0.1", 0), JobService)
threading.Thread(target=service.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{service.server_port}"


def config(store, data, node="node-a", postgres=None):
    keys = {"kind": store, **(postgres or {"path": f"{data}/tasks.{store}"})}
    return node_config(data, node, keys, [f"{GUESTS}/outbound.wasm"], f"""[runner]
lease_ms = 3000
heartbeat_ms = 500

[tools.await_job]
allowed_outbound_hosts = ["{base}"]
""")


def asleep(t):
    return t["status"] == "working" and (t.get("statusMessage") or "").startswith("sleeping until ")


def judge(done, started):
    """What the finished task and the job service say."""
    structured = done["result"]["structuredContent"]
    check(structured["result"] == "42 rows" and structured["polls"] == POLLS_TO_DONE,
          f"the job was done at poll {POLLS_TO_DONE}")
    check(structured["attempt"] == POLLS_TO_DONE,
          "each sleep between polls parked the task; a fresh guest took each wake")
    with lock:
        requests = list(seen)
    job = structured["job"]
    check(requests.count(("POST", "/jobs")) == 1, "the job was started once, though the tool ran from the top at every wake")
    check(requests.count(("GET", f"/jobs/{job}")) == POLLS_TO_DONE,
          "each poll reached the service once: the replays answered earlier polls from the journal")
    took = time.time() - started
    check(took >= 2 * (POLLS_TO_DONE - 1), f"the polls were {POLLS_TO_DONE - 1} sleeps of 2 s apart, never sooner ({took:.1f} s)")


print("-- store: redb")
with lock:
    seen.clear()
data = tempfile.mkdtemp(prefix="snodo-sleep-")
conf = config("redb", data)
server = Server(config=conf).start()
started = time.time()
task_id = server.call("await_job", {"base": base, "every_ms": 2000})["taskId"]
t = server.wait(task_id, asleep, "asleep")
print(f"tasks/get while it sleeps: {t['status']}, {t['statusMessage']!r}")
released = server.metrics().get("snodo_sleeping_guests_released_total", 0)
check(released >= 1, "the sleeping task's guest was released: it holds no slot while it sleeps")
server.kill9()
print("killed the server with SIGKILL while the task slept")
server = Server(config=conf).start()
try:
    done = server.wait(task_id, lambda t: t["status"] == "completed", "completed")
finally:
    server.stop()
judge(done, started)

if postgres_available("the two-node part"):
    print("-- two nodes on postgres")
    with lock:
        seen.clear()
    with two_postgres_nodes("sleep", config) as (a, b):
        started = time.time()
        task_id = a.call("await_job", {"base": base, "every_ms": 2000})["taskId"]
        a.wait(task_id, asleep, "asleep on A")
        a.kill9()
        print("killed node A with SIGKILL while its task slept")
        done = b.wait(task_id, lambda t: t["status"] == "completed", "completed on B", timeout=90)
        judge(done, started)
print("durable sleep walkthrough: ok")
