"""Walkthrough: deploy a new version of a component while two nodes serve, without a restart.

Two nodes share PostgreSQL and serve the fixtures component (version 1). A task asks for a
confirmation and its guest parks. Version 2 (the same tools, another build) is deployed
with `snodo deploy`: both nodes serve it within the poll bound, new tasks are pinned to it,
and the waiting task, once answered, finishes on version 1. `snodo deployments` shows both
versions and what pins them; `snodo rollback` brings version 1 back on both nodes.
"""

import hashlib
import json
import os
import subprocess
import tempfile
import time

from snodo_client import GUESTS, PG_URL, SNODO, Server, check, node_config, postgres_available

URL = PG_URL
if not postgres_available("the deploy walkthrough"):
    raise SystemExit(0)

data = tempfile.mkdtemp(prefix="snodo-deploy-")
schema = f"snodo_deploy_walk_{os.getpid()}"
v1_path = os.path.join(GUESTS, "fixtures.wasm")
with open(v1_path, "rb") as f:
    v1_bytes = f.read()


def leb(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n == 0:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


# Version 2: the same component with a custom section appended, as a rebuild that changes
# nothing the tools do still changes the digest.
name = b"snodo-walkthrough-version"
section = leb(len(name)) + name + b"2"
v2_bytes = v1_bytes + b"\x00" + leb(len(section)) + section
v2_path = os.path.join(data, "fixtures-v2.wasm")
with open(v2_path, "wb") as f:
    f.write(v2_bytes)
v1 = hashlib.sha256(v1_bytes).hexdigest()
v2 = hashlib.sha256(v2_bytes).hexdigest()


def config(node):
    return node_config(data, node, {"kind": "postgres", "url": URL, "schema": schema}, [v1_path], """[runner]
park_after_ms = 300

[deploy]
poll_ms = 1000
""")


def snodo(*args):
    out = subprocess.run([SNODO, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"snodo {' '.join(args)} failed: {out.stderr}")
    return out.stdout


def inspect(task_id):
    return json.loads(snodo("inspect", task_id, "--config", a_conf))


def serves(node, digest, what):
    """Creates tasks on `node` until one is pinned to `digest`; returns the seconds it took."""
    started = time.time()
    while time.time() < started + 60:
        task_id = node.call("slow_compute", {"seconds": 1, "label": "v"})["taskId"]
        if inspect(task_id)["work"]["componentDigest"] == digest:
            return time.time() - started
        time.sleep(0.1)
    raise SystemExit(f"FAILED: {what}")


a_conf, b_conf = config("node-a"), config("node-b")
snodo("migrate", "--config", a_conf)
a = Server(config=a_conf).start()
b = Server(config=b_conf).start()
try:
    check(serves(a, v1, "version 1") >= 0, "node A deployed its configured component as version 1")
    waiting = a.call("confirm_delete", {"filename": "v1.txt"})["taskId"]
    a.wait(waiting, lambda t: t["status"] == "input_required", "input_required")
    deadline = time.time() + 60
    while inspect(waiting)["claim"] is not None:
        if time.time() > deadline:
            raise SystemExit("FAILED: the waiting guest was never parked")
        time.sleep(0.1)
    check(inspect(waiting)["work"]["componentDigest"] == v1, "a task waits for its confirmation on version 1, its guest parked")

    said = snodo("deploy", v2_path, "--config", a_conf)
    check("deployed revision 2" in said and v2 in said, "snodo deploy committed version 2 as revision 2")
    took_a = serves(a, v2, "node A never served version 2")
    took_b = serves(b, v2, "node B never served version 2")
    check(True, f"both nodes serve version 2 without a restart (A after {took_a:.1f} s, B after {took_b:.1f} s; bound 1 s poll)")

    ack = b.rpc("tasks/update", {"taskId": waiting, "inputResponses": {
        "confirm": {"action": "accept", "content": {"confirm": True}}}})
    check(ack == {"resultType": "complete"}, "node B accepted the answer")
    done = b.wait(waiting, lambda t: t["status"] in ("completed", "failed"), "finished")
    check(done["status"] == "completed" and done["result"]["content"][0]["text"] == "Deleted v1.txt",
          "the waiting task finished on version 1, the version it was created against")

    listed = json.loads(snodo("deployments", "--json", "--config", b_conf))
    check([d["revision"] for d in listed["deployments"]] == [2, 1], "snodo deployments lists revisions 2 and 1")
    states = {c["digest"]: c for c in listed["components"]}
    check(states[v1]["retiredAt"] is not None and states[v2]["retiredAt"] is None,
          "version 1 is retired and kept; version 2 serves")

    said = snodo("rollback", "--config", b_conf)
    check("deployed revision 3" in said, "snodo rollback deployed version 1 again as revision 3")
    serves(a, v1, "node A never rolled back")
    serves(b, v1, "node B never rolled back")
    check(True, "both nodes serve version 1 again")
finally:
    b.stop()
    a.stop()
    subprocess.run(["psql", URL, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], capture_output=True)
print("deploy walkthrough: ok")
