"""A tiny MCP client and server launcher for the walkthroughs (standard library only)."""

import atexit
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNODO = os.path.join(ROOT, "target", "debug", "snodo")
GUESTS = os.path.join(ROOT, "target", "guests", "wasm32-wasip2", "release")
TASKS = "io.modelcontextprotocol/tasks"
CAPS = {"elicitation": {}, "extensions": {TASKS: {}}}

# Data directories a Server made for itself: a walkthrough may restart a server on the same
# directory (recovery), so they are removed when the walkthrough ends, not when one stops.
_MADE = []
atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _MADE])


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """Runs `snodo serve` on a free port; data in a temporary directory unless given."""

    def __init__(self, *args, data=None, config=None):
        self.port = free_port()
        if data is None:
            data = tempfile.mkdtemp(prefix="snodo-walkthrough-")
            _MADE.append(data)
        self.data = data
        # With a configuration file the store and everything else come from it.
        self.args = ["--config", config] if config else ["--data", self.data, *args]
        self.proc = None

    def start(self):
        env = dict(os.environ, MCP_PORT=str(self.port), RUST_LOG="warn")
        self.proc = subprocess.Popen(
            [SNODO, "serve", *self.args],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
        )
        # A node compiles its components before it answers; the Python and JavaScript ones
        # take tens of seconds of cranelift on a loaded two-core machine.
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("the server exited: " + self.proc.stderr.read().decode())
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    return self
            except OSError:
                time.sleep(0.05)
        raise SystemExit("the server did not start")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def rpc(self, method, params, caps=CAPS, rid=1, meta=None):
        params = dict(params)
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": caps,
            **(meta or {}),
        }
        headers = {"Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
        name = params.get("name") or params.get("taskId") or params.get("uri")
        if name:
            headers["Mcp-Name"] = name
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}), headers)
        body = json.loads(c.getresponse().read())
        if "error" in body:
            raise SystemExit(f"{method} failed: {body['error']}")
        return body["result"]

    def call(self, tool, arguments):
        return self.rpc("tools/call", {"name": tool, "arguments": arguments})

    def get(self, task_id):
        return self.rpc("tasks/get", {"taskId": task_id})

    def wait(self, task_id, pred, what, timeout=60, seen=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            t = self.get(task_id)
            if seen is not None and t.get("statusMessage") and t["statusMessage"] not in seen:
                seen.append(t["statusMessage"])
            if pred(t):
                return t
            time.sleep(0.05)
        raise SystemExit(f"task {task_id} never became {what}: {self.get(task_id)}")


PG_URL = os.environ.get("SNODO_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")


def postgres_available(what):
    """Whether the PostgreSQL the walkthroughs use answers. Absent, `what` is skipped
    loudly, and under CI=true the walkthrough fails instead."""
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
        return True
    except OSError:
        if "SNODO_TEST_POSTGRES" in os.environ:
            return True
    if os.environ.get("CI") == "true":
        raise SystemExit("FAILED: PostgreSQL is required under CI=true and 127.0.0.1:5432 does not answer")
    print(f"SKIPPED: PostgreSQL is not reachable; {what} did not run")
    return False


def node_config(directory, node, store, components, rest=""):
    """Writes the configuration of `node` to `<directory>/<node>.toml` and returns its path:
    the node's id, its cache in `directory`, the keys of its `[store]` section (`store`, a
    dict of strings), one `[[components]]` entry for each path in `components`, then `rest`
    (more sections, as TOML) as it is."""
    lines = ['listen = "127.0.0.1:0"', f'cache_dir = "{directory}/cache"', "", "[node]", f'id = "{node}"',
             "", "[store]"]
    lines += [f'{key} = "{value}"' for key, value in store.items()]
    for component in components:
        lines += ["", "[[components]]", f'path = "{component}"']
    path = os.path.join(directory, f"{node}.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n\n" + rest)
    return path


@contextlib.contextmanager
def two_postgres_nodes(what, config):
    """Nodes A and B sharing a new PostgreSQL schema, started and yielded as (a, b); both
    stopped and the schema dropped afterwards. `config(store, data, node, postgres)` writes
    a node's configuration file (see `node_config`) and returns its path."""
    data = tempfile.mkdtemp(prefix=f"snodo-{what}-nodes-")
    _MADE.append(data)
    schema = f"snodo_{what}_walk_{os.getpid()}"
    pg = {"url": PG_URL, "schema": schema}
    a_conf = config("postgres", data, "node-a", pg)
    b_conf = config("postgres", data, "node-b", pg)
    out = subprocess.run([SNODO, "migrate", "--config", a_conf], capture_output=True, text=True)
    check(out.returncode == 0, f"snodo migrate created schema {schema}")
    a = Server(config=a_conf).start()
    b = Server(config=b_conf).start()
    try:
        yield a, b
    finally:
        b.stop()
        a.stop()
        subprocess.run(["psql", PG_URL, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], capture_output=True)


class HandshakeClient:
    """What a 2025-11-25 client sends: initialize once, then the session id on every
    request. It asks for plain JSON replies (no event stream), so a tool cannot ask it
    anything mid-call."""

    def __init__(self, port):
        self.port = port
        self.session = None
        self.next_id = 0

    def post(self, body):
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
            headers["MCP-Protocol-Version"] = "2025-11-25"
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("POST", "/mcp", json.dumps(body), headers)
        resp = c.getresponse()
        raw = resp.read()
        return resp, (json.loads(raw) if raw else None)

    def request(self, method, params=None):
        self.next_id += 1
        _, body = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return body

    def initialize(self):
        resp, body = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "walkthrough", "version": "1"}}})
        self.session = resp.getheader("Mcp-Session-Id")
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return body["result"]


def cli(server, *args):
    """`snodo ARGS --url <server> --json`: what the admin API answered, as JSON."""
    out = subprocess.run([SNODO, *args, "--url", f"http://127.0.0.1:{server.port}", "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"snodo {' '.join(args)} failed: {out.stderr}")
    return json.loads(out.stdout)


def check(cond, what):
    if not cond:
        raise SystemExit("FAILED: " + what)
    print("verified:", what)


def inspect(store_file, task_id):
    out = subprocess.run([SNODO, "inspect", task_id, "--store", store_file], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
