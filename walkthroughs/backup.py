"""Walkthrough: an online backup of a serving redb node, taken while clients create tasks,
survives a kill -9 of the node and restores; a finished task is archived when its TTL runs
out and read back after the reaper removed it.

A redb node serves while a client thread keeps creating tasks. `snodo backup` finds the
store file held by the node and asks the node, through its admin API, for a backup: one
snapshot of every table, written beside its path, read back and counted, then linked at its
path. The node is then killed with SIGKILL. `snodo restore` refuses nothing it should not:
it checks the backup, keeps the killed store aside and puts the copy in place; a node
started on it has every task acknowledged before the backup began, and finishes them.

The node archives into a directory (`[archive]`). A task of a tool with a 3 s TTL finishes;
when the TTL runs out the reaper writes it to the archive, then removes it: the node answers
that it does not know the task, and `snodo archive show` prints it from the archive.
"""

import json
import os
import subprocess
import tempfile
import threading
import time

from snodo_client import GUESTS, SNODO, Server, check, node_config

data = tempfile.mkdtemp(prefix="snodo-backup-")
store = f"{data}/tasks.redb"
archive = f"{data}/archive"
conf = node_config(data, "node-a", {"kind": "redb", "path": store}, [f"{GUESTS}/fixtures.wasm"], f"""[runner]
park_after_ms = 500

[tools.test_sleep]
ttl_ms = 3000

[archive]
directory = "{archive}"
interval_ms = 250
""")


def snodo(*args, url=None):
    env = dict(os.environ, SNODO_URL=url) if url else dict(os.environ)
    out = subprocess.run([SNODO, *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"snodo {' '.join(args)} failed: {out.stderr}")
    return out.stdout


server = Server(config=conf).start()
acked = []
stop = threading.Event()


def load():
    n = 0
    while not stop.is_set():
        n += 1
        try:
            acked.append(server.call("slow_compute", {"seconds": 1, "label": f"load-{n}"})["taskId"])
        except Exception as e:
            print(f"-- a client stopped: {e!r}")
            return
        time.sleep(0.01)


clients = [threading.Thread(target=load, daemon=True) for _ in range(2)]
for c in clients:
    c.start()
try:
    deadline = time.time() + 60
    while len(acked) < 40:
        if time.time() > deadline:
            raise SystemExit("the clients never got 40 tasks accepted")
        time.sleep(0.05)
    before = list(acked)
    url = f"http://127.0.0.1:{server.port}"
    copy = f"{data}/backup-{int(time.time())}.redb"
    said = snodo("backup", "--config", conf, "--to", copy, url=url)
    print(said)
    check("by the server holding the store" in said, "the node that holds the file took the backup while serving")
    taken = json.loads(snodo("backup", "--config", conf, "--to", copy + ".2", "--json", url=url))
    check(taken["tasks"] >= len(before), f"a second one holds {taken['tasks']} tasks, counted table by table: {taken['rows']}")
    after_backup = len(acked)
    time.sleep(0.3)
    check(len(acked) > after_backup, "the clients went on creating tasks throughout")
    server.kill9()
    stop.set()
    print("-- killed the node with SIGKILL while clients were creating tasks")

    said = snodo("restore", copy, "--config", conf)
    print(said)
    check("kept at" in said, "the killed store is kept aside, the backup put in its place")
    server = Server(config=conf).start()
    for task in before:
        server.wait(task, lambda t: t["status"] == "completed", "completed on the restored store")
    check(True, f"all {len(before)} tasks acknowledged before the backup are in the restored store and completed")

    short = server.call("test_sleep", {"ms": 10})["taskId"]
    server.wait(short, lambda t: t["status"] == "completed", "completed")
    print(f"-- task {short} completed; its TTL is 3 s")
    expected = os.path.join(archive, short[-2:], f"{short}.ndjson")
    deadline = time.time() + 60
    while not os.path.exists(expected):
        if time.time() > deadline:
            raise SystemExit("the reaper never archived the task")
        time.sleep(0.1)
    objects = [os.path.join(d, f) for d, _, fs in os.walk(archive) for f in fs if not f.startswith(".")]
    check(objects == [expected], f"the reaper archived it as one object: {objects}")
    try:
        server.get(short)
        raise SystemExit("the node still answers for a task past its TTL")
    except SystemExit as gone:
        check("not found" in str(gone).lower(), f"the node no longer knows it: {gone}")
    shown = snodo("archive", "show", short, "--config", conf)
    print(shown)
    check(f"task      {short}" in shown and "status    completed" in shown, "snodo archive show reads it back after the reap")
    record = json.loads(snodo("archive", "show", short, "--config", conf, "--json"))
    check([e["event"] for e in record["task"]["history"]["entries"]][-1] == "completed", "with its whole history")
finally:
    stop.set()
    server.stop()
print("backup walkthrough: ok")
