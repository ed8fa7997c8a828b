"""Walkthrough: a schedule fires once, on whichever of two nodes gets there, across kill -9.

Both nodes' configurations declare the same `[[schedules]]`: `greet` every two seconds,
every missed firing caught up (`missed = "all"`). Each firing is one task: its id is derived
from the schedule and the firing time, and it is created in the same commit that moves the
schedule's row past the firing, so of two nodes planning it one creates it and the other
finds the row moved. Node A is killed with SIGKILL mid-run; B goes on alone; A comes back.
At the end every firing from the schedule's start to its next one has exactly one task,
all completed, and `snodo schedules` and `snodo tasks` show it from a terminal. Then an
operator pauses the schedule, fires it once by hand, and resumes it.

On two nodes sharing PostgreSQL where it answers; else on one redb node killed and
restarted (the firings missed while it was down are caught up when it comes back).
"""

import subprocess
import tempfile
import time

from snodo_client import GUESTS, SNODO, Server, check, cli, node_config, postgres_available, two_postgres_nodes

TENANT = "greeters"
EVERY_S = 2


def config(store, data, node="node-a", postgres=None):
    keys = {"kind": store, **(postgres or {"path": f"{data}/tasks.{store}"})}
    return node_config(data, node, keys, [f"{GUESTS}/fixtures.wasm"], f"""[runner]
lease_ms = 3000
heartbeat_ms = 500

[[schedules]]
name = "greeting"
tool = "greet"
arguments = {{ name = "schedule" }}
tenant = "{TENANT}"
subject = "greeter-bot"
cron = "*/{EVERY_S} * * * * *"
zone = "UTC"
missed = "all"
catch_up = 100
""")


def schedule(server):
    return cli(server, "schedules", "show", "greeting")


def wait_fired(server, n, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = schedule(server)
        if s["fired"] >= n:
            return s
        time.sleep(0.2)
    raise SystemExit(f"the schedule never fired {n} times ({what}): {schedule(server)}")


def tasks_of(server):
    """Every task of the schedule's tenant, through the admin API."""
    out, cursor = [], None
    while True:
        args = ["tasks", "list", "--tenant", TENANT, "--limit", "500"]
        if cursor:
            args += ["--cursor", cursor]
        page = cli(server, *args)
        out += page["tasks"]
        cursor = page.get("next")
        if not cursor:
            return out


def judge(server):
    s = schedule(server)
    tasks = tasks_of(server)
    # A firing's task id starts with its firing time (ms, 12 hex digits).
    by_time = {}
    for t in tasks:
        by_time.setdefault(int(t["id"][:12], 16), []).append(t)
    twice = [at for at, ts in by_time.items() if len(ts) > 1]
    check(not twice and len(by_time) == s["fired"],
          f"{s['fired']} firings, {len(by_time)} tasks, one per firing (none twice)")
    # Every firing from the first after the anchor to the next one has its task.
    first = (s["anchor"] // (EVERY_S * 1000) + 1) * EVERY_S * 1000
    expected = list(range(first, s["nextAt"], EVERY_S * 1000))
    missing = [at for at in expected if at not in by_time]
    check(not missing and s["skipped"] == 0, f"no firing missed across the kill ({len(expected)} expected)")
    return s, tasks


def settle(server, tasks):
    """Waits until every task of the schedule finished, then checks what they said."""
    deadline = time.time() + 60
    while time.time() < deadline:
        tasks = tasks_of(server)
        if all(t["status"] in ("completed", "failed", "cancelled") for t in tasks):
            break
        time.sleep(0.2)
    check(all(t["status"] == "completed" for t in tasks), f"all {len(tasks)} firings' tasks completed")
    one = cli(server, "tasks", "show", tasks[0]["id"])
    check(one["outcome"]["result"]["content"][0]["text"] == "Hello, schedule!",
          "each ran greet with the schedule's arguments")


def operate(server):
    s = cli(server, "schedules", "pause", "greeting")
    check(s["paused"] and s["upcoming"] == [], "paused: no next firing")
    fired = s["fired"]
    time.sleep(EVERY_S + 0.5)
    check(schedule(server)["fired"] == fired, "a paused schedule fires nothing")
    run = cli(server, "schedules", "run-now", "greeting")
    check(run["schedule"]["last"]["manual"] and run["task"]["tenant"] == TENANT,
          f"run-now made task {run['task']['id']} outside the cadence")
    s = cli(server, "schedules", "resume", "greeting")
    check(not s["paused"] and len(s["upcoming"]) == 5, f"resumed: next at {s['upcoming'][0]}")
    listed = subprocess.run([SNODO, "schedules", "list", "--url", f"http://127.0.0.1:{server.port}"],
                            capture_output=True, text=True, check=True).stdout
    print(listed)
    check("greeting" in listed and "*/2 * * * * * in UTC" in listed, "snodo schedules list shows it")


if postgres_available("the two-node part"):
    print("-- two nodes on postgres")
    with two_postgres_nodes("schedules", config) as (a, b):
        wait_fired(b, 3, "both nodes up")
        a.kill9()
        print("killed node A with SIGKILL")
        fired = schedule(b)["fired"]
        wait_fired(b, fired + 3, "B alone")
        a.start()
        print("node A is back")
        fired = schedule(a)["fired"]
        wait_fired(a, fired + 2, "both again")
        s, tasks = judge(a)
        print(f"{s['fired']} firings on two nodes, last task {s['lastTask']['id']}")
        settle(a, tasks)
        operate(b)
else:
    print("-- one node on redb")
    data = tempfile.mkdtemp(prefix="snodo-schedules-")
    conf = config("redb", data)
    server = Server(config=conf).start()
    wait_fired(server, 2, "before the kill")
    server.kill9()
    print("killed the server with SIGKILL; down for 5 s")
    time.sleep(5)
    server = Server(config=conf).start()
    try:
        s = wait_fired(server, 4, "after the restart")
        s, tasks = judge(server)
        settle(server, tasks)
        operate(server)
    finally:
        server.stop()
print("schedules walkthrough: ok")
