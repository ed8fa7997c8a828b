"""Starts the fixture server once for the interop tests: `snodo serve` on a free port with
the memory store and the conformance fixture component."""

import contextlib
import json
import http.client
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNODO = ROOT / "target" / "debug" / "snodo"
FIXTURES = ROOT / "target" / "guests" / "wasm32-wasip2" / "release" / "fixtures.wasm"


# How long a node may take to start (it compiles its components first).
START_SECONDS = 180


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        c.request("GET", "/healthz")
        return c.getresponse().status == 200
    except OSError:
        return False
    finally:
        c.close()


@pytest.fixture(scope="session")
def anyio_backend():
    return "asyncio"


@contextlib.contextmanager
def serving(args, port, data):
    """`snodo serve ARGS` on `port`, logging into `data`, until the block ends: yields the
    MCP endpoint's URL."""
    for path in (SNODO, FIXTURES):
        if not path.exists():
            pytest.fail(f"{path} is missing: build with `scripts/build`")
    log_path = Path(data) / "server.log"
    env = dict(os.environ, MCP_PORT=str(port))
    env.setdefault("RUST_LOG", "info")
    env.setdefault("NO_COLOR", "1")  # the log is a file
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(SNODO), "serve", *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        )
    try:
        # Generous: a node compiles its components before it answers, and the Python and
        # JavaScript fixtures take tens of seconds of cranelift on a loaded two-core machine.
        deadline = time.monotonic() + START_SECONDS
        while not healthy(port):
            if proc.poll() is not None:
                pytest.fail("the server exited:\n" + log_path.read_text())
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer /healthz within {START_SECONDS}s:\n" + log_path.read_text())
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        print("\n--- server log (last 40 lines) ---")
        print("\n".join(log_path.read_text(errors="replace").splitlines()[-40:]))


@contextlib.contextmanager
def configured(work, store, rest):
    """`snodo serve` of the fixtures on a free port from a configuration file written into
    `work`: the keys of its `[store]` section (`store`, a dict of strings), then `rest`
    (more sections, as TOML). Yields the port and the MCP endpoint's URL."""
    port = free_port()
    config = Path(work) / "snodo.toml"
    keys = "\n".join(f'{key} = "{value}"' for key, value in store.items())
    config.write_text(f"""listen = "127.0.0.1:{port}"

[store]
{keys}

[[components]]
path = "{FIXTURES}"

{rest}""")
    with serving(["--config", str(config)], port, work) as url:
        yield port, url


@contextlib.contextmanager
def memory_server(component):
    """A server of `component` on the memory store, its data directory removed after."""
    data = tempfile.mkdtemp(prefix="snodo-interop-")
    try:
        with serving(["--store", "memory", "--data", data, "--component", str(component)], free_port(), data) as url:
            yield url
    finally:
        shutil.rmtree(data, ignore_errors=True)


async def computes_at_once(client, seconds, label):
    """Calls the fixtures' `slow_compute` through `client` (a client of any of the Python
    SDKs) and checks its answer, which comes in the call's reply."""
    result = await client.call_tool("slow_compute", {"seconds": seconds, "label": label})
    assert not result.is_error
    assert result.content[0].text == f"Completed {label} after {seconds} seconds"


@pytest.fixture(scope="session")
def server_url():
    with memory_server(FIXTURES) as url:
        yield url


# The tools that give handles in the handle tests of both Python SDKs (test_handle.py here
# and in interop/python-mcp1/): a short wait for slow_compute, so its calls get a handle,
# and a long one for confirm_delete, so its question is asked on the call.
HANDLES = """[tools.slow_compute]
handle_after_ms = 300

[tools.confirm_delete]
handle_after_ms = 30000
"""


# A tenant's caller and an operator of every tenant, for the tests that act as both.
ALICE = "alice-token-0123456789"
OPS = "root-ops-token-0123456789"
ALICE_AND_OPS = f"""[[auth.tokens]]
token = "{ALICE}"
tenant = "acme"
subject = "alice"

[[admin.tokens]]
token = "{OPS}"
tenant = "ops"
subject = "root"
cross_tenant = true
"""


def start_task(port, name, arguments, token):
    """Starts a task of `name` over the raw wire as the caller of `token`, from a client that
    declares the tasks extension and can answer questions: the task's id."""
    body = {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "interop", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {
                "elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
        }},
    }
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/mcp", json.dumps(body), {
        "content-type": "application/json", "accept": "application/json",
        "authorization": f"Bearer {token}", "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call", "mcp-name": name,
    })
    reply = json.loads(c.getresponse().read())
    c.close()
    return reply["result"]["taskId"]


# The gateway's upstreams (interop/upstreams/, interop/typescript/upstream.mjs): ticket desks
# that log every call they receive, fronted by a node in test_gateway.py here and in
# interop/python-mcp1/.
TOKEN = "upstream-token-0123456789"
UPSTREAM = ROOT / "interop" / "upstreams" / "fastmcp_tickets.py"
TS_UPSTREAM = ROOT / "interop" / "typescript" / "upstream.mjs"
# FastMCP lives in this suite's virtualenv, whichever one runs the test.
VENV_PYTHON = ROOT / ".tools" / "venv" / "bin" / "python"


@contextlib.contextmanager
def upstream(work, port=None, typescript=False, token=TOKEN):
    """The FastMCP ticket desk (the TypeScript SDK's with `typescript`) on `port` (a free
    one by default), requiring `token`: yields its port, its log's path and the process."""
    port = port or free_port()
    log = Path(work) / f"upstream-{port}.log"
    log.touch()
    out = open(Path(work) / f"upstream-{port}.out", "wb")
    program = [str(ROOT / "scripts" / "node"), str(TS_UPSTREAM)] if typescript else [str(VENV_PYTHON), str(UPSTREAM)]
    proc = subprocess.Popen([*program, str(port), str(log), token], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the upstream did not start:\n" + (Path(work) / f"upstream-{port}.out").read_text())
            time.sleep(0.05)
        yield port, log, proc
    finally:
        proc.kill()
        proc.wait()
        out.close()


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def calls(log):
    """The calls an upstream logged, oldest first."""
    return [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]


def gateway_config(port, retry="[]"):
    """Two upstreams on the desk at `port`: `tickets` (asked, confirming create_ticket) and
    `legacy` (spoken to as 2025-11-25, serving slow_echo as old_slow_echo)."""
    return f"""[secrets]
tickets_token = {{ value = "{TOKEN}", development = true }}

[[upstreams]]
name = "tickets"
url = "http://127.0.0.1:{port}/mcp"
confirm = ["create_ticket"]
bearer = "tickets_token"

[[upstreams]]
name = "legacy"
url = "http://127.0.0.1:{port}/mcp"
protocol = "2025-11-25"
prefix = "old_"
tools = ["slow_echo"]
bearer = "tickets_token"

[tools.tickets_slow_echo]
retry = {retry}

[tools.tickets_busy_once]
retry = [100]
"""


