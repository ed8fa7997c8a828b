"""Walkthrough: two nodes on one PostgreSQL database.

Create a task on node A, answer its question on node B; cancel on B a task running on A;
kill -9 node A while it runs a task and watch B finish it once A's lease has run out.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from snodo_client import GUESTS, PG_URL, SNODO, Server, check, postgres_available

URL = PG_URL
SCHEMA = f"snodo_walkthrough_{os.getpid()}"

if not postgres_available("the multi-node walkthrough"):
    sys.exit(0)

work = tempfile.mkdtemp(prefix="snodo-nodes-")


def config(node):
    path = os.path.join(work, f"{node}.toml")
    with open(path, "w") as f:
        f.write(f"""listen = "127.0.0.1:0"
cache_dir = "{work}/cache"

[node]
id = "{node}"

[store]
kind = "postgres"
url = "{URL}"
schema = "{SCHEMA}"

[[components]]
path = "{GUESTS}/examples.wasm"

[[components]]
path = "{GUESTS}/fixtures.wasm"

[runner]
lease_ms = 3000
heartbeat_ms = 500
""")
    return path


a_conf, b_conf = config("node-a"), config("node-b")
out = subprocess.run([SNODO, "migrate", "--config", a_conf], capture_output=True, text=True)
check(out.returncode == 0 and "applied" in out.stdout, f"snodo migrate created schema {SCHEMA}")
a = Server(config=a_conf).start()
b = Server(config=b_conf).start()
try:
    # 1. Create on A, answer on B.
    task_id = a.call("durable_export", {"dataset": "sales"})["taskId"]
    b.wait(task_id, lambda t: t["status"] == "input_required", "input_required on B")
    ack = b.rpc("tasks/update", {"taskId": task_id, "inputResponses": {
        "export-confirmation": {"action": "accept", "content": {"confirm": True}}}})
    check(ack == {"resultType": "complete"}, "node B accepted the answer to a task created on node A")
    done = a.wait(task_id, lambda t: t["status"] == "completed", "completed on A")
    check(done["result"]["structuredContent"]["exportId"] == "export-" + task_id, "the task completed, read on A")

    # 2. Cancel on B a task that runs on A (or on B: any node may claim it first).
    task_id = a.call("slow_compute", {"seconds": 600, "label": "long"})["taskId"]
    a.wait(task_id, lambda t: t.get("statusMessage") == "computing long", "running")
    running = [s for s in (a, b) if s.metrics().get("snodo_active_guests", 0) == 1]
    check(len(running) == 1, "exactly one node runs the guest")
    other = b if running[0] is a else a
    other.rpc("tasks/cancel", {"taskId": task_id})
    other.wait(task_id, lambda t: t["status"] == "cancelled", "cancelled")
    deadline = time.time() + 30
    while running[0].metrics().get("snodo_active_guests", 0) != 0:
        if time.time() > deadline:
            raise SystemExit("FAILED: the guest kept running after the cancel")
        time.sleep(0.01)
    check(True, "the cancel accepted on one node stopped the guest on the other")

    # 3. kill -9 node A while it runs a task; B finishes it after A's lease (3 s) runs out.
    ids = [a.call("slow_compute", {"seconds": 2, "label": f"k{i}"})["taskId"] for i in range(3)]
    for i, t in enumerate(ids):
        b.wait(t, lambda t, i=i: t.get("statusMessage") == f"computing k{i}", "running")
    a.kill9()
    print("killed node A with SIGKILL while its guests ran")
    for t in ids:
        done = b.wait(t, lambda t: t["status"] != "working", "finished", timeout=60)
        check(done["status"] == "completed", f"task {t[:8]} completed exactly once, on node B")
    print("multi-node walkthrough: ok")
finally:
    a.stop()
    b.stop()
    if shutil.which("psql"):
        subprocess.run(["psql", URL, "-qc", f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
