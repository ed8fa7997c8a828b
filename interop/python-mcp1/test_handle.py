"""A 2025-11-25 client that declared no tasks (a plain `mcp` 1.30.0 `ClientSession`) and the
handle `handle_after_ms` gives it: a long call answers with a result naming its task, the
built-in `task_result` tool picks the outcome up, and a task-only tool's question comes as
`elicitation/create` on the call's own stream."""

import contextlib

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import HANDLES, configured

pytestmark = pytest.mark.anyio

DEADLINE = 90
RELATED = "io.modelcontextprotocol/related-task"



def text(result):
    return "".join(c.text for c in result.content if c.type == "text")


@contextlib.asynccontextmanager
async def session(url, elicit):
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write, elicitation_callback=elicit) as s:
            init = await s.initialize()
            assert init.protocolVersion == "2025-11-25"
            yield s


async def test_a_client_without_tasks_gets_a_handle_and_is_asked_on_its_call(tmp_path):
    asked = []

    async def elicit(_context, params):
        meta = params.meta.model_dump(by_alias=True) if params.meta else {}
        asked.append((params.message, meta.get(RELATED)))
        return types.ElicitResult(action="accept", content={"confirm": True})

    with anyio.fail_after(DEADLINE), configured(tmp_path, {"kind": "memory"}, HANDLES) as (_, url):
        async with session(url, elicit) as s:
            tools = {t.name for t in (await s.list_tools()).tools}
            assert "task_result" in tools

            first = await s.call_tool("slow_compute", {"seconds": 2, "label": "one"})
            assert not first.isError
            task_id = first.meta[RELATED]["taskId"]
            assert f"still running as task {task_id}" in text(first)

            outcome = first
            for _ in range(60):
                outcome = await s.call_tool("task_result", {"taskId": task_id})
                if "still running" not in text(outcome):
                    break
            assert text(outcome) == "Completed one after 2 seconds"

            deleted = await s.call_tool("confirm_delete", {"filename": "one.txt"})
            assert text(deleted) == "Deleted one.txt"
            related = deleted.meta[RELATED]["taskId"]
            assert asked == [("Delete one.txt?", {"taskId": related})]
