"""Webhooks to a receiver that checks every delivery with an independent implementation of
Standard Webhooks (the `standardwebhooks` package): a task's completion arrives signed; while
the receiver is down its tries fail and the event becomes a dead letter; the receiver catches
up by cursor (`/admin/v1/events?after=`), then an operator redelivers and the receiver drops
the duplicate by its id."""

import base64
import http.client
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import pytest
from fastmcp_tasks.client import TasksClientExtension
from mcp import Client
from standardwebhooks import Webhook

from conftest import configured, free_port

pytestmark = pytest.mark.anyio

DEADLINE = 90


class Receiver:
    """An HTTP receiver on a free port: verifies each request with `standardwebhooks`,
    keeps what verified by id (a repeat is a duplicate, dropped), and answers `status`."""

    def __init__(self, secret):
        self.port = free_port()
        self.verifier = Webhook(secret)
        self.status = 200
        self.tries = []
        self.events = {}
        self.duplicates = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {k: v for k, v in self.headers.items()}
                receiver.tries.append(headers["webhook-id"])
                if receiver.status == 200:
                    payload = receiver.verifier.verify(body, headers)
                    if headers["webhook-id"] in receiver.events:
                        receiver.duplicates += 1
                    receiver.events[headers["webhook-id"]] = payload
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def admin(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"content-type": "application/json"})
        r = c.getresponse()
        data = r.read()
        assert r.status == 200, (r.status, data)
        return json.loads(data)
    finally:
        c.close()


async def eventually(what, probe, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        await anyio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_a_receiver_verifies_catches_up_by_cursor_and_drops_a_redelivered_duplicate(tmp_path):
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    hook = Receiver(secret)
    rest = f"""[webhooks]
allowed_hosts = ["http://127.0.0.1:{hook.port}"]
retry_ms = [200, 200]

[[webhooks.subscriptions]]
name = "ops"
tenant = "local"
url = "http://127.0.0.1:{hook.port}/hook"
events = ["completed"]
secret = "{secret}"
"""
    try:
        with anyio.fail_after(DEADLINE), configured(tmp_path, {"kind": "memory"}, rest) as (port, url):
            client = Client(url, extensions=[TasksClientExtension()])
            async with client:
                # Up: delivered, and it verifies.
                result = await client.call_tool("test_whoami", {})
                assert not result.is_error
                first = await eventually("a verified delivery", lambda: list(hook.events.values()))
                assert first[0]["type"] == "task.completed"
                assert first[0]["data"]["tool"] == "test_whoami"
                seen = first[0]["data"]["eventId"]

                # Down: every try fails, and the event ends a dead letter.
                hook.status = 503
                await client.call_tool("test_whoami", {})
                row = await eventually("a dead letter", lambda: (
                    r if (r := admin(port, "GET", "/admin/v1/webhooks/ops"))["dead"] else None))
                assert len(hook.tries) == 1 + 3, hook.tries
                missed_id = row["dead"][0]["event"]["id"]
                assert set(hook.tries[1:]) == {missed_id}, "every try carries the event's id"

                # Up again: the receiver reads what it missed by cursor.
                hook.status = 200
                page = admin(port, "GET", "/admin/v1/events?after=0&tenant=local")
                ids = [e["id"] for e in page["events"]]
                assert ids == [seen, missed_id], ids
                caught_up = {e["id"]: e["payload"] for e in page["events"] if e["id"] not in hook.events}
                assert list(caught_up) == [missed_id]
                hook.events.update(caught_up)

                # The operator redelivers; the receiver sees the id again and drops it.
                answer = admin(port, "POST", "/admin/v1/webhooks/ops/redeliver", {})
                assert answer["redelivering"] == 1
                await eventually("the redelivery", lambda: hook.duplicates == 1)
                assert len(hook.events) == 2
                after = admin(port, "GET", f"/admin/v1/events?after={page['next']}")
                assert after["events"] == [] and after["next"] == page["next"]
    finally:
        hook.close()
