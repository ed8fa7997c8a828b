"""The gateway against a real upstream: a FastMCP server (interop/upstreams/fastmcp_tickets.py)
whose tools a Snodo node serves as its own, called by the FastMCP client with tasks. The
upstream's log of the calls it received is the judge of how often a call reached it, with
which idempotency key and which credential."""

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
import pytest
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from fastmcp_tasks import call_tool_task

import sys

from conftest import (
    FIXTURES, ROOT, SNODO, START_SECONDS, TOKEN, calls, configured, free_port, gateway_config, healthy,
    upstream,
)

sys.path.insert(0, str(ROOT / "walkthroughs"))
from idp import Client as Registered, IdentityProvider  # noqa: E402

pytestmark = pytest.mark.anyio

DEADLINE = 60


@pytest.fixture(scope="module")
def desk():
    """One upstream and one node serving it (memory store): the node's URL and the log."""
    work = tempfile.mkdtemp(prefix="snodo-gateway-")
    with upstream(work) as (port, log, _):
        with configured(work, {"kind": "memory"}, gateway_config(port)) as (_, url):
            yield url, log


def accept(answer):
    seen = []

    async def handler(message, response_type, params, context):
        seen.append(message)
        return answer

    return handler, seen


async def test_the_upstreams_tools_are_listed_under_their_prefixes(desk):
    url, _ = desk
    with anyio.fail_after(DEADLINE):
        async with Client(url) as client:
            tools = {t.name: t for t in await client.list_tools()}
    assert {"tickets_create_ticket", "tickets_slow_echo", "tickets_refuse", "old_slow_echo"} <= set(tools)
    assert "old_create_ticket" not in tools, "upstreams.tools leaves it out"
    assert "gateway" not in tools, "the gateway component serves no tool of its own"
    t = tools["tickets_create_ticket"]
    assert t.description == "Opens a ticket and says its number."
    assert t.input_schema["properties"]["title"]["type"] == "string"
    assert t.input_schema["required"] == ["title"]


async def test_a_call_is_a_task_that_reaches_the_upstream_once_with_its_key_and_credential(desk):
    url, log = desk
    before = len(calls(log))
    with anyio.fail_after(DEADLINE):
        async with Client(url) as client:
            task = await call_tool_task(client, "tickets_slow_echo", {"text": "hi", "seconds": 0.2})
            result = await task.result()
    assert not result.is_error
    assert result.content[0].text == "echo: hi"
    got = calls(log)[before:]
    assert [c["tool"] for c in got] == ["slow_echo"]
    assert got[0]["arguments"] == {"text": "hi", "seconds": 0.2}
    assert got[0]["idempotency_key"].startswith(task.task_id + "-"), "the task's request key goes upstream"
    assert got[0]["authorization"] == f"Bearer {TOKEN}", "the host injects the bearer token"


async def test_a_2025_11_25_upstream_is_called_after_its_handshake(desk):
    url, log = desk
    before = len(calls(log))
    with anyio.fail_after(DEADLINE):
        async with Client(url) as client:
            task = await call_tool_task(client, "old_slow_echo", {"text": "old", "seconds": 0})
            result = await task.result()
    assert result.content[0].text == "echo: old"
    got = calls(log)[before:]
    assert [c["tool"] for c in got] == ["slow_echo"]
    assert got[0]["idempotency_key"].startswith(task.task_id + "-")


async def test_a_confirmed_tool_asks_first_and_sends_only_when_accepted(desk):
    url, log = desk
    before = len(calls(log))
    with anyio.fail_after(DEADLINE):
        handler, seen = accept({"confirm": True})
        async with Client(url, elicitation_handler=handler) as client:
            task = await call_tool_task(client, "tickets_create_ticket", {"title": "printer on fire"})
            parked = await task.wait(state="input_required", timeout=30)
            assert list(parked.input_requests) == ["confirm"]
            assert calls(log)[before:] == [], "nothing goes upstream before the answer"
            result = await task.result()
    assert len(seen) == 1
    assert "create_ticket" in seen[0] and "printer on fire" in seen[0], seen[0]
    assert not result.is_error
    assert "printer on fire" in result.content[0].text
    assert [c["tool"] for c in calls(log)[before:]] == ["create_ticket"]

    before = len(calls(log))
    with anyio.fail_after(DEADLINE):
        handler, seen = accept(ElicitResult(action="decline"))
        async with Client(url, elicitation_handler=handler) as client:
            task = await call_tool_task(client, "tickets_create_ticket", {"title": "not this one"},
                                        raise_on_error=False)
            result = await task.result()
    assert len(seen) == 1
    assert result.is_error
    assert "not confirmed" in result.content[0].text
    assert calls(log)[before:] == [], "a declined call never goes upstream"


async def test_an_upstreams_own_question_reaches_the_client_and_its_answer_goes_back(desk):
    # The upstream asks with an incomplete result (2026-07-28's multi-round-trip request):
    # its question becomes the task's, and the answer is sent back with the call again.
    url, log = desk
    before = len(calls(log))
    with anyio.fail_after(DEADLINE):
        handler, seen = accept({"ok": True})
        async with Client(url, elicitation_handler=handler) as client:
            task = await call_tool_task(client, "tickets_refund", {"amount": 7})
            parked = await task.wait(state="input_required", timeout=30)
            [(key, request)] = parked.input_requests.items()
            assert key.endswith("approve"), key
            assert request["params"]["message"] == "Refund 7?"
            result = await task.result()
    assert seen == ["Refund 7?"]
    assert result.content[0].text == "refunded 7"
    got = calls(log)[before:]
    assert got == [dict(got[0], tool="refund", arguments={"amount": 7, "approved": True})], got


async def test_an_upstream_task_is_followed_to_its_result(desk):
    # FastMCP answers `report` with a task of its own (2026-07-28 Tasks): the gateway
    # polls it between durable sleeps, and the Snodo task ends with its result.
    url, log = desk
    before = len(calls(log))
    with anyio.fail_after(DEADLINE):
        async with Client(url) as client:
            task = await call_tool_task(client, "tickets_report", {"name": "q3", "seconds": 0.2})
            result = await task.result()
    assert result.content[0].text == "report q3 is ready"
    assert [c["tool"] for c in calls(log)[before:]] == ["report"]


async def test_an_upstream_that_answers_503_gets_the_call_again_with_its_key(desk):
    # A 503 is not recorded in the task's journal: the retry sends the call again, at its
    # position, with the same Idempotency-Key (a recorded failure would only be replayed).
    url, log = desk
    before = len(calls(log))
    with anyio.fail_after(DEADLINE):
        async with Client(url) as client:
            task = await call_tool_task(client, "tickets_busy_once", {"label": "x"})
            result = await task.result()
    assert result.content[0].text == "done x"
    got = calls(log)[before:]
    assert [c["tool"] for c in got] == ["busy", "busy_once"], got
    assert got[0]["idempotency_key"] == got[1]["idempotency_key"]
    assert got[0]["idempotency_key"].startswith(task.task_id + "-")


async def test_an_upstream_failure_comes_back_as_its_result(desk):
    url, log = desk
    with anyio.fail_after(DEADLINE):
        async with Client(url) as client:
            task = await call_tool_task(client, "tickets_refuse", {"reason": "closed on sundays"})
            final = await task.wait(timeout=30)
    assert final.status == "completed", final
    assert final.result["isError"] is True
    assert "closed on sundays" in final.result["content"][0]["text"]
    assert calls(log)[-1]["tool"] == "refuse"


def sessions(log):
    """The sessions the TypeScript upstream opened, and those that were closed."""
    opened, closed = set(), set()
    try:
        with open(f"{log}.sessions") as f:
            for line in f:
                what, sid = line.split()
                (opened if what == "open" else closed).add(sid)
    except FileNotFoundError:
        pass
    return opened, closed


async def test_a_typescript_sdk_upstream_with_sessions_is_fronted_the_same_way():
    work = tempfile.mkdtemp(prefix="snodo-gateway-ts-")
    with upstream(work, typescript=True) as (port, log, _):
        config = f"""[secrets]
tickets_token = {{ value = "{TOKEN}", development = true }}

[[upstreams]]
name = "desk"
url = "http://127.0.0.1:{port}/mcp"
confirm = ["create_ticket"]
bearer = "tickets_token"
"""
        with configured(work, {"kind": "memory"}, config) as (_, url):
            with anyio.fail_after(DEADLINE):
                handler, seen = accept({"confirm": True})
                async with Client(url, elicitation_handler=handler) as client:
                    tools = {t.name for t in await client.list_tools()}
                    assert {"desk_create_ticket", "desk_slow_echo"} <= tools
                    echo = await call_tool_task(client, "desk_slow_echo", {"text": "ts", "seconds": 0.1})
                    assert (await echo.result()).content[0].text == "echo: ts"
                    ticket = await call_tool_task(client, "desk_create_ticket", {"title": "from ts"})
                    result = await ticket.result()
                    # A 2025-11-25 upstream asks on the call's own stream, which is not
                    # forwarded (decisions.md 38): the gateway's handshake says it cannot
                    # be asked, so the SDK's tool learns so at once instead of waiting.
                    asking = await call_tool_task(client, "desk_ask_priority", {})
                    asked = (await asking.result()).content[0].text
            assert len(seen) == 1
            assert result.content[0].text == "ticket 1: from ts (priority 3)"
            assert asked.startswith("cannot ask: ") and "elicitation" in asked, asked
            # A tool added upstream is served at once: the node follows the session's
            # stream, where the upstream says its tools changed (the listing alone would
            # take gateway.refresh_ms, a minute).
            with anyio.fail_after(DEADLINE):
                async with Client(url) as client:
                    grown = await call_tool_task(client, "desk_grow", {"name": "stapler"})
                    await grown.result()
                    while "desk_stapler" not in {t.name for t in await client.list_tools()}:
                        await anyio.sleep(0.05)
                    stapler = await call_tool_task(client, "desk_stapler", {})
                    assert (await stapler.result()).content[0].text == "stapler here"
            # Every session the node opened (a listing's, a call's) is ended with DELETE,
            # but the one its change stream is held on.
            with anyio.fail_after(DEADLINE):
                while True:
                    opened, closed = sessions(log)
                    if len(opened) >= 5 and len(opened - closed) == 1:
                        break
                    await anyio.sleep(0.05)
    got = calls(log)
    assert [c["tool"] for c in got] == ["slow_echo", "create_ticket", "ask_priority", "grow"], got
    assert got[0]["idempotency_key"].startswith(echo.task_id + "-")
    assert got[1]["idempotency_key"].startswith(ticket.task_id + "-")
    assert {c["authorization"] for c in got} == {f"Bearer {TOKEN}"}


def server_pid(config):
    """The pid of the `snodo serve` reading `config`."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(config).encode() in argv and b"serve" in argv:
            return int(proc.name)
    pytest.fail(f"no server reads {config}")


async def wait_for_log(log_path, line, times):
    """Waits until `line` is in the server's log `times` times."""
    with anyio.fail_after(DEADLINE):
        while Path(log_path).read_text(errors="replace").count(line) < times:
            await anyio.sleep(0.05)


async def test_a_rotated_upstream_credential_is_taken_on_reload_without_a_restart():
    # The operator rotates the upstream's token: a new value in the secret's file, the
    # upstream restarted to accept only it, then SIGHUP. The node takes it while serving:
    # its next listing and its next call carry the new one, and neither reaches its log.
    work = Path(tempfile.mkdtemp(prefix="snodo-gateway-rotate-"))
    secret = work / "tickets-token"
    secret.write_text(TOKEN + "\n")
    rotated = "rotated-" + TOKEN
    port = free_port()
    config = f"""[secrets]
tickets_token = {{ file = "{secret}" }}

[[upstreams]]
name = "tickets"
url = "http://127.0.0.1:{port}/mcp"
protocol = "2026-07-28"
tools = ["slow_echo"]
bearer = "tickets_token"
"""
    server_log = work / "server.log"
    serving_line = "the upstreams' tools changed; serving them"
    with contextlib.ExitStack() as stack:
        first_upstream = contextlib.ExitStack()
        _, log, _ = first_upstream.enter_context(upstream(work, port))
        stack.push(first_upstream)
        _, url = stack.enter_context(configured(work, {"kind": "memory"}, config))
        with anyio.fail_after(DEADLINE):
            async with Client(url) as client:
                assert "tickets_slow_echo" in {t.name for t in await client.list_tools()}
                first = await call_tool_task(client, "tickets_slow_echo", {"text": "a", "seconds": 0})
                assert (await first.result()).content[0].text == "echo: a"
        assert [c["authorization"] for c in calls(log)] == [f"Bearer {TOKEN}"]
        first_upstream.close()
        with upstream(work, port, token=rotated) as (_, log, _):
            served = server_log.read_text(errors="replace").count(serving_line)
            secret.write_text(rotated + "\n")
            os.kill(server_pid(work / "snodo.toml"), signal.SIGHUP)
            await wait_for_log(server_log, "upstream credentials rotated", 1)
            # Listed again with the new token, and the tools' grants rebuilt with it.
            await wait_for_log(server_log, serving_line, served + 1)
            with anyio.fail_after(DEADLINE):
                async with Client(url) as client:
                    second = await call_tool_task(client, "tickets_slow_echo", {"text": "b", "seconds": 0})
                    assert (await second.result()).content[0].text == "echo: b"
            got = calls(log)
            assert [c["authorization"] for c in got if c["tool"] == "slow_echo"][-1:] == [f"Bearer {rotated}"], got
        text = server_log.read_text(errors="replace")
        assert "apply after a restart" not in text, "a rotated credential needs no restart"
        assert TOKEN not in text, "no token is logged"


async def test_an_upstream_behind_oauth_is_called_with_tokens_from_its_authorization_server():
    # The upstream is another Snodo node, a resource server trusting the provider: the
    # gateway node gets its tokens with the client credentials grant, for that resource.
    idp = IdentityProvider({"gateway": Registered("gateway-secret", claims={"org_id": "acme"})})
    inner, outer = tempfile.mkdtemp(prefix="snodo-gateway-rs-"), tempfile.mkdtemp(prefix="snodo-gateway-oauth-")
    # Its fixture tool test_trigger_tool_change moves a component into the directory it
    # deploys from: its tool list changes (examples' flaky among them).
    deploy = Path(inner) / "deploy"
    deploy.mkdir()
    shutil.copy(FIXTURES.parent / "examples.wasm", deploy / "extra.wasm.off")
    watching = f"""{idp.trusted_as("org_id")}
[deploy]
poll_ms = 100
watch = "{deploy}"

[tools.test_trigger_tool_change.grants]
dirs = [{{ host = "{deploy}", guest = "/deploy", writable = true }}]
"""
    try:
        with configured(inner, {"kind": "memory"}, watching) as (_, upstream_url):
            config = f"""[secrets]
gateway_client = {{ value = "gateway-secret", development = true }}

[[upstreams]]
name = "inner"
url = "{upstream_url}"
tools = ["greet", "test_trigger_tool_change", "flaky"]

[upstreams.oauth]
token_url = "{idp.issuer}/token"
client_id = "gateway"
client_secret = "gateway_client"
"""
            with configured(outer, {"kind": "memory"}, config) as (port, url):
                with anyio.fail_after(DEADLINE):
                    async with Client(url) as client:
                        assert "inner_greet" in {t.name for t in await client.list_tools()}
                        task = await call_tool_task(client, "inner_greet", {"name": "Ada"})
                        result = await task.result()
                        # The upstream announces a change of its tools on the stream its
                        # subscriptions/listen opened: the node hears it, and lists again.
                        heard = 'snodo_upstream_changes_total{upstream="inner"}'
                        assert metric(port, heard) == 0
                        listed = metric(port, 'snodo_upstream_listings_total{upstream="inner",outcome="listed"}')
                        assert "inner_flaky" not in {t.name for t in await client.list_tools()}
                        await client.call_tool("inner_test_trigger_tool_change", {})
                        while "inner_flaky" not in {t.name for t in await client.list_tools()}:
                            await anyio.sleep(0.05)
                        assert metric(port, heard) >= 1
                        assert metric(port, 'snodo_upstream_listings_total{upstream="inner",outcome="listed"}') > listed
        assert result.content[0].text == "Hello, Ada!"
        assert idp.issued, "the gateway node asked the provider for a token"
        client_id, resource, _, _ = idp.issued[0]
        assert (client_id, resource) == ("gateway", upstream_url), "for the upstream as resource"
    finally:
        idp.close()


def metric(port, series):
    """The value of `series` on the node's /metrics."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0


async def test_an_upstream_that_is_down_is_retried_then_named_in_the_failure():
    work = tempfile.mkdtemp(prefix="snodo-gateway-down-")
    with upstream(work) as (port, log, proc):
        with configured(work, {"kind": "memory"}, gateway_config(port, retry="[100, 100]")) as (_, url):
            proc.kill()
            proc.wait()
            with anyio.fail_after(DEADLINE):
                async with Client(url) as client:
                    task = await call_tool_task(client, "tickets_slow_echo", {"text": "x", "seconds": 0})
                    final = await task.wait(timeout=30)
    assert final.status == "failed", final
    assert "upstream tickets" in final.status_message, final
    assert "no answer" in final.status_message, final


# kill -9: the node on redb, killed while a confirmation waits and while an upstream call
# is in flight, then started again on the same file under the same node id.

@contextlib.contextmanager
def node(work, port, rest):
    """`snodo serve` on redb in `work`, on `port`, with `rest`: yields the process, which a
    test may kill; the node id is fixed, so a restart takes back its own claims at once."""
    config = Path(work) / "snodo.toml"
    config.write_text(f"""listen = "127.0.0.1:{port}"

[node]
id = "gateway-test"

[store]
kind = "redb"
path = "{Path(work) / 'tasks.redb'}"

[[components]]
path = "{FIXTURES}"

{rest}""")
    log = open(Path(work) / "node.log", "ab")
    proc = subprocess.Popen([str(SNODO), "serve", "--config", str(config)], stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ, NO_COLOR="1"))
    try:
        deadline = time.monotonic() + START_SECONDS
        while not healthy(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the node did not start:\n" + (Path(work) / "node.log").read_text())
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def rpc(port, method, params):
    """One 2026-07-28 request from a client with tasks and elicitation: its result."""
    params = dict(params, _meta={
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
    })
    headers = {"content-type": "application/json", "accept": "application/json",
               "mcp-protocol-version": "2026-07-28", "mcp-method": method}
    name = params.get("name") or params.get("taskId")
    if name:
        headers["mcp-name"] = name
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}), headers)
    reply = json.loads(c.getresponse().read())
    c.close()
    assert "result" in reply, reply
    return reply["result"]


def until(port, task_id, statuses, seconds=60, pred=lambda _: True):
    deadline = time.monotonic() + seconds
    while True:
        got = rpc(port, "tasks/get", {"taskId": task_id})
        if got["status"] in statuses and pred(got):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


def test_a_confirmation_waiting_across_kill_9_sends_the_call_once():
    # The upstream is down too when the node starts again, so that its tools are not
    # listed: the waiting task still finds its way to it once it is back.
    work = tempfile.mkdtemp(prefix="snodo-gateway-kill-")
    port, up = free_port(), free_port()
    with upstream(work, up) as (_, log, _):
        with node(work, port, gateway_config(up)) as proc:
            created = rpc(port, "tools/call", {"name": "tickets_create_ticket", "arguments": {"title": "survives"}})
            task_id = created["taskId"]
            asked = until(port, task_id, {"input_required"})
            assert list(asked["inputRequests"]) == ["confirm"]
            proc.kill()
            proc.wait()
    assert calls(log) == [], "nothing went upstream before the answer"
    with node(work, port, gateway_config(up)):
        listed = rpc(port, "tools/list", {})
        assert "tickets_create_ticket" not in {t["name"] for t in listed["tools"]}, "not listed yet"
        asked = until(port, task_id, {"input_required"})
        assert list(asked["inputRequests"]) == ["confirm"]
        with upstream(work, up):
            rpc(port, "tasks/update", {"taskId": task_id, "inputResponses": {
                "confirm": {"action": "accept", "content": {"confirm": True}}}})
            done = until(port, task_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    assert "survives" in done["result"]["content"][0]["text"]
    got = calls(log)
    assert [c["tool"] for c in got] == ["create_ticket"], got
    assert got[0]["idempotency_key"].startswith(task_id + "-")


def test_an_upstream_task_followed_across_kill_9_is_started_once():
    # The upstream answered the call with its task before the kill: the journal holds that
    # answer, so the node started again follows the same upstream task.
    work = tempfile.mkdtemp(prefix="snodo-gateway-follow-")
    port = free_port()
    with upstream(work) as (up, log, _):
        with node(work, port, gateway_config(up)) as proc:
            created = rpc(port, "tools/call", {"name": "tickets_report", "arguments": {"name": "kill", "seconds": 3}})
            task_id = created["taskId"]
            # It sleeps between polls only once the upstream answered with its task.
            until(port, task_id, {"working"}, pred=lambda t: t.get("statusMessage", "").startswith("sleeping until"))
            proc.kill()
            proc.wait()
        with node(work, port, gateway_config(up)):
            done = until(port, task_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "report kill is ready"
    assert [c["tool"] for c in calls(log)] == ["report"], "the upstream started the report once"


def test_a_call_in_flight_at_kill_9_is_sent_again_with_the_same_key():
    work = tempfile.mkdtemp(prefix="snodo-gateway-flight-")
    port = free_port()
    with upstream(work) as (up, log, _):
        with node(work, port, gateway_config(up)) as proc:
            created = rpc(port, "tools/call", {"name": "tickets_slow_echo", "arguments": {"text": "again", "seconds": 2}})
            task_id = created["taskId"]
            deadline = time.monotonic() + 30
            while not calls(log):
                assert time.monotonic() < deadline, "the call never reached the upstream"
                time.sleep(0.02)
            proc.kill()
            proc.wait()
        with node(work, port, gateway_config(up)):
            done = until(port, task_id, {"completed", "failed"})
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "echo: again"
    got = calls(log)
    assert [c["tool"] for c in got] == ["slow_echo", "slow_echo"], got
    keys = {c["idempotency_key"] for c in got}
    assert len(keys) == 1 and keys.pop().startswith(task_id + "-"), "one key for both sends"
