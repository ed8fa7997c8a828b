"""A client with no tasks support (the `mcp` SDK Client on 2026-07-28, no extensions) and the
handle `handle_after_ms` gives it: a long call answers with a result naming its task, the
built-in `task_result` tool picks the outcome up, and a task-only tool's question reaches the
client's elicitation callback through the MRTR loop the SDK runs by itself."""

import anyio
import pytest
from mcp import Client
from mcp_types import ElicitResult

from conftest import HANDLES, configured

pytestmark = pytest.mark.anyio

DEADLINE = 90
RELATED = "io.modelcontextprotocol/related-task"



async def test_a_long_call_gives_a_handle_that_task_result_follows(tmp_path):
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    with anyio.fail_after(DEADLINE), configured(tmp_path, {"kind": "memory"}, HANDLES) as (_, url):
        async with Client(url, elicitation_callback=elicit) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert "task_result" in tools

            first = await client.call_tool("slow_compute", {"seconds": 2, "label": "py"})
            assert not first.is_error
            task_id = first.meta[RELATED]["taskId"]
            assert f"still running as task {task_id}" in first.content[0].text
            assert "task_result" in first.content[0].text

            # Each follow-up waits up to the tool's handle_after_ms on the server; the
            # model would call it the same way, with the id the text names.
            outcome = first
            for _ in range(60):
                outcome = await client.call_tool("task_result", {"taskId": task_id})
                if "still running" not in outcome.content[0].text:
                    break
            assert outcome.content[0].text == "Completed py after 2 seconds"
            assert outcome.meta[RELATED]["taskId"] == task_id

            # An unknown id (or another caller's): a tool error, nothing else.
            unknown = await client.call_tool("task_result", {"taskId": "0" * 32})
            assert unknown.is_error and unknown.content[0].text.startswith("No task")

            # A task-only tool: its question is asked through the client's callback, and
            # the MRTR retry answers the same task.
            deleted = await client.call_tool("confirm_delete", {"filename": "py.txt"})
            assert asked == ["Delete py.txt?"]
            assert deleted.content[0].text == "Deleted py.txt"
            assert RELATED in deleted.meta
