"""Operators from their own MCP client: the `mcp` SDK's Client, holding an admin token,
connects to `/admin/mcp`, lists the operator tools, finds a waiting task, reads its question,
answers it, previews and then runs a bulk cancel, and reads the audit, where every action it
took is recorded as coming through MCP. A caller without an operator's token is refused."""

import json

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from conftest import ALICE, ALICE_AND_OPS, OPS, configured, start_task

pytestmark = pytest.mark.anyio

DEADLINE = 90
ADMIN = ALICE_AND_OPS


def start(port, name, arguments):
    """Starts a task of `name` as alice."""
    return start_task(port, name, arguments, ALICE)


def operator(port, token=OPS):
    http = create_mcp_http_client(headers={"authorization": f"Bearer {token}"})
    return Client(streamable_http_client(f"http://127.0.0.1:{port}/admin/mcp", http_client=http))


async def until(what, probe, seconds=30):
    with anyio.fail_after(seconds):
        while True:
            got = await probe()
            if got:
                return got
            await anyio.sleep(0.05)


async def test_an_operator_works_from_an_mcp_client_and_every_action_is_audited(tmp_path):
    with anyio.fail_after(DEADLINE), configured(tmp_path, {"kind": "memory"}, ADMIN) as (port, _):
        waiting = start(port, "confirm_delete", {"filename": "report.txt"})
        slow = [start(port, "slow_compute", {"seconds": 600, "label": f"s{i}"}) for i in range(3)]
        async with operator(port) as ops:
            tools = {t.name: t for t in (await ops.list_tools()).tools}
            for name in ("list_tasks", "show_task", "answer_task", "cancel_task", "bulk_cancel", "list_audit"):
                assert name in tools, sorted(tools)
            assert tools["show_task"].annotations.read_only_hint is True
            assert tools["bulk_cancel"].annotations.destructive_hint is True

            async def asked():
                r = await ops.call_tool("show_task", {"id": waiting})
                t = r.structured_content
                return t if t["status"] == "input_required" and t["questions"] else None

            task = await until("the question", asked)
            assert task["questions"][0]["key"] == "confirm", task
            listed = await ops.call_tool("list_tasks", {"status": "input_required"})
            assert waiting in [t["id"] for t in listed.structured_content["tasks"]]

            answered = await ops.call_tool("answer_task", {
                "id": waiting, "responses": {"confirm": {"action": "accept", "content": {"confirm": True}}}})
            assert not answered.is_error, answered.content[0].text

            async def done():
                r = await ops.call_tool("show_task", {"id": waiting})
                return r.structured_content if r.structured_content["status"] == "completed" else None

            finished = await until("completed", done)
            assert "report.txt" in json.dumps(finished["outcome"]), finished

            preview = await ops.call_tool("bulk_cancel", {"filter": {"tool": "slow_compute"}})
            assert preview.structured_content["preview"] is True
            assert preview.structured_content["matched"] == 3
            ran = await ops.call_tool("bulk_cancel", {"filter": {"tool": "slow_compute"}, "preview": False})
            assert ran.structured_content["cancelled"] == 3, ran.structured_content
            for sid in slow:
                shown = await ops.call_tool("show_task", {"id": sid})
                assert shown.structured_content["status"] == "cancelled"

            refused = await ops.call_tool("retry_task", {"id": waiting})
            assert refused.is_error and "conflict" in refused.content[0].text, refused.content[0].text

            audit = (await ops.call_tool("list_audit", {})).structured_content["records"]
            # Newest first by time (records of one millisecond come in no set order).
            assert [r["at"] for r in audit] == sorted((r["at"] for r in audit), reverse=True), audit
            assert sorted((r["action"], r["via"], r["outcome"], r.get("target") or "") for r in audit) == [
                ("task.answer", "mcp", "ok", waiting),
                ("task.retry", "mcp", "conflict", waiting),
                ("tasks.bulk_cancel", "mcp", "ok", ""),
            ], audit
            assert all(r["subject"] == "root" for r in audit)
            assert "report.txt" not in json.dumps(audit), "the audit keeps no argument"

        # A client's token is no operator's: the endpoint refuses it.
        with pytest.raises(Exception):
            async with operator(port, ALICE) as not_ops:
                await not_ops.list_tools()
