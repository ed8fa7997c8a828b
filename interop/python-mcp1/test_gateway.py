"""A 2025-11-25 client (the Python `mcp` 1.30.0 SDK's experimental tasks) using a tool the
gateway fronts: the FastMCP ticket desk's `create_ticket`, confirmed through the client's
elicitation callback during `tasks/result`, reaches the upstream once."""

import tempfile

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import calls, configured, gateway_config, upstream

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:The experimental tasks API is deprecated:DeprecationWarning"),
]


async def test_a_fronted_tool_runs_as_a_2025_11_25_task_confirmed_during_tasks_result():
    asked = []

    async def elicit(_context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    work = tempfile.mkdtemp(prefix="snodo-gateway-mcp1-")
    with upstream(work) as (port, log, _):
        with configured(work, {"kind": "memory"}, gateway_config(port)) as (_, url):
            with anyio.fail_after(60):
                async with streamable_http_client(url) as (read, write, _):
                    async with ClientSession(read, write, elicitation_callback=elicit) as s:
                        await s.initialize()
                        tools = {t.name: t for t in (await s.list_tools()).tools}
                        assert tools["tickets_create_ticket"].execution.taskSupport == "optional"
                        created = await s.experimental.call_tool_as_task(
                            "tickets_create_ticket", {"title": "from 2025"})
                        task_id = created.task.taskId
                        result = await s.experimental.get_task_result(task_id, types.CallToolResult)
    assert len(asked) == 1 and "from 2025" in asked[0], asked
    assert result.content[0].text == "ticket 1: from 2025 (priority 3)"
    got = calls(log)
    assert [c["tool"] for c in got] == ["create_ticket"]
    assert got[0]["idempotency_key"].startswith(task_id + "-")
