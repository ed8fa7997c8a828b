"""The `mcp` SDK Client (no extensions) against the fixture server."""

import anyio
import pytest
from mcp import Client
from mcp_types import TextContent

pytestmark = pytest.mark.anyio

# Every test finishes well within this; a server that stops answering fails it instead
# of hanging the run.
DEADLINE = 60


async def test_lists_tools_and_calls_greet(server_url):
    with anyio.fail_after(DEADLINE):
        async with Client(server_url) as client:
            assert client.protocol_version == "2026-07-28"
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for name in ("greet", "slow_compute", "confirm_delete"):
                assert name in tools, f"{name} is not listed: {sorted(tools)}"
            assert tools["confirm_delete"].input_schema["required"] == ["filename"]

            result = await client.call_tool("greet", {"name": "Ada Lovelace"})
            assert not result.is_error
            assert len(result.content) == 1
            block = result.content[0]
            assert isinstance(block, TextContent)
            assert "Ada Lovelace" in block.text
            assert block.text == "Hello, Ada Lovelace!"


async def test_slow_compute_is_synchronous_without_the_tasks_extension(server_url):
    # slow_compute is a task only for a client that declares the tasks extension; this
    # client does not, so even a one-second computation answers tools/call directly.
    with anyio.fail_after(DEADLINE):
        async with Client(server_url) as client:
            result = await client.call_tool("slow_compute", {"seconds": 0, "label": "quick"})
            assert not result.is_error
            assert result.content[0].text == "Completed quick after 0 seconds"
            result = await client.call_tool("slow_compute", {"seconds": 1, "label": "inline"})
            assert not result.is_error
            assert result.content[0].text == "Completed inline after 1 seconds"
