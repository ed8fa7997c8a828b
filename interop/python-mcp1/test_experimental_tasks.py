"""The Python `mcp` 1.30.0 SDK's 2025-11-25 experimental tasks (`session.experimental`,
SEP-1686) against the fixture server: each method, a question answered during
`tasks/result`, a reconnect that is asked again, cancel, and a failing tool."""

import contextlib

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

pytestmark = [
    pytest.mark.anyio,
    # The 1.x line warns that 2.x drops these tasks; the clients in use still run them.
    pytest.mark.filterwarnings("ignore:The experimental tasks API is deprecated:DeprecationWarning"),
]

RELATED_TASK = "io.modelcontextprotocol/related-task"


async def accept(_context, _params):
    return types.ElicitResult(action="accept", content={"confirm": True})


@contextlib.asynccontextmanager
async def session(url, elicit=accept):
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write, elicitation_callback=elicit) as s:
            init = await s.initialize()
            assert init.protocolVersion == "2025-11-25"
            yield s


async def until(s, task_id, statuses):
    async for status in s.experimental.poll_task(task_id):
        if status.status in statuses:
            return status
    return await s.experimental.get_task(task_id)


def text(result):
    return "".join(c.text for c in result.content if c.type == "text")


async def test_each_method_follows_one_task(server_url):
    async with session(server_url) as s:
        caps = s.get_server_capabilities()
        assert caps.tasks is not None and caps.tasks.requests.tools.call is not None
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert tools["slow_compute"].execution.taskSupport == "optional"
        assert tools["failing_job"].execution.taskSupport == "required"
        created = await s.experimental.call_tool_as_task("slow_compute", {"seconds": 1, "label": "py"})
        task_id = created.task.taskId
        assert created.task.status == "working"
        done = await until(s, task_id, {"completed", "failed", "cancelled"})
        assert done.status == "completed"
        result = await s.experimental.get_task_result(task_id, types.CallToolResult)
        assert text(result) == "Completed py after 1 seconds"
        assert result.meta[RELATED_TASK]["taskId"] == task_id
        listed = await s.experimental.list_tasks()
        assert task_id in [t.taskId for t in listed.tasks]


async def test_a_question_is_answered_during_tasks_result(server_url):
    asked = []

    async def elicit(context, params):
        asked.append(params)
        return await accept(context, params)

    async with session(server_url, elicit) as s:
        created = await s.experimental.call_tool_as_task("confirm_delete", {"filename": "p.txt"})
        task_id = created.task.taskId
        waiting = await until(s, task_id, {"input_required", "completed", "failed"})
        assert waiting.status == "input_required"
        result = await s.experimental.get_task_result(task_id, types.CallToolResult)
        assert text(result) == "Deleted p.txt"
        assert len(asked) == 1
        assert (await s.experimental.get_task(task_id)).status == "completed"


async def test_a_client_that_reconnects_is_asked_again(server_url):
    heard = anyio.Event()

    async def never(_context, _params):
        heard.set()
        await anyio.sleep_forever()

    async with session(server_url, never) as first:
        created = await first.experimental.call_tool_as_task("confirm_delete", {"filename": "q.txt"})
        task_id = created.task.taskId
        async with anyio.create_task_group() as tg:
            tg.start_soon(first.experimental.get_task_result, task_id, types.CallToolResult)
            with anyio.fail_after(30):
                await heard.wait()
            tg.cancel_scope.cancel()
    async with session(server_url) as second:
        result = await second.experimental.get_task_result(task_id, types.CallToolResult)
        assert text(result) == "Deleted q.txt"


async def test_cancel_and_a_failing_tool(server_url):
    async with session(server_url) as s:
        created = await s.experimental.call_tool_as_task("slow_compute", {"seconds": 60, "label": "c"})
        cancelled = await s.experimental.cancel_task(created.task.taskId)
        assert cancelled.status == "cancelled"
        with pytest.raises(McpError) as finished:
            await s.experimental.cancel_task(created.task.taskId)
        assert finished.value.error.code == -32602
        failing = await s.experimental.call_tool_as_task("failing_job", {})
        done = await until(s, failing.task.taskId, {"completed", "failed", "cancelled"})
        assert done.status == "failed"
        result = await s.experimental.get_task_result(failing.task.taskId, types.CallToolResult)
        assert result.isError
        assert "The job failed" in text(result)
