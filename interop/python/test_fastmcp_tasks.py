"""The FastMCP Client with the tasks extension (fastmcp-tasks) against the fixture server:
tasks polled to their result, and a task's elicitation answered through the client's
elicitation handler."""

import anyio
import pytest
from fastmcp import Client
from fastmcp.client.elicitation import ElicitResult
from fastmcp_tasks import ToolTask, call_tool_task

from conftest import computes_at_once

pytestmark = pytest.mark.anyio

# Every test finishes well within this; a server that stops answering fails it instead
# of hanging the run.
DEADLINE = 60


async def test_slow_compute_runs_as_a_task_to_its_result(server_url):
    with anyio.fail_after(DEADLINE):
        async with Client(server_url) as client:
            task = await call_tool_task(client, "slow_compute", {"seconds": 1, "label": "interop"})
            assert isinstance(task, ToolTask)
            assert task.task_id
            assert task.create_result.result_type == "task"
            assert task.create_result.status == "working"

            result = await task.result()
            assert not result.is_error
            assert [c.text for c in result.content] == ["Completed interop after 1 seconds"]

            final = await task.status()
            assert final.task_id == task.task_id
            assert final.status == "completed"
            assert final.result["content"][0]["text"] == "Completed interop after 1 seconds"


async def test_slow_compute_task_is_transparent_to_call_tool(server_url):
    with anyio.fail_after(DEADLINE):
        async with Client(server_url) as client:
            await computes_at_once(client, 1, "transparent")


def recording_handler(answer):
    calls = []

    async def handler(message, response_type, params, context):
        calls.append((message, params))
        return answer

    return handler, calls


async def test_confirm_delete_accepted_through_the_elicitation_handler(server_url):
    with anyio.fail_after(DEADLINE):
        handler, calls = recording_handler({"confirm": True})
        async with Client(server_url, elicitation_handler=handler) as client:
            result = await client.call_tool("confirm_delete", {"filename": "report.txt"})
        assert len(calls) == 1
        message, params = calls[0]
        assert message == "Delete report.txt?"
        assert params.requested_schema["properties"]["confirm"]["type"] == "boolean"
        assert params.requested_schema["required"] == ["confirm"]
        assert not result.is_error
        assert result.content[0].text == "Deleted report.txt"


async def test_confirm_delete_declined_through_the_elicitation_handler(server_url):
    with anyio.fail_after(DEADLINE):
        handler, calls = recording_handler(ElicitResult(action="decline"))
        async with Client(server_url, elicitation_handler=handler) as client:
            result = await client.call_tool("confirm_delete", {"filename": "notes.md"})
        assert len(calls) == 1
        assert calls[0][0] == "Delete notes.md?"
        assert not result.is_error
        assert result.content[0].text == "Kept notes.md: deletion was not confirmed"


async def test_confirm_delete_parks_until_the_handle_answers(server_url):
    # The explicit handle: the task waits in input_required until result() answers it.
    with anyio.fail_after(DEADLINE):
        handler, calls = recording_handler({"confirm": True})
        async with Client(server_url, elicitation_handler=handler) as client:
            task = await call_tool_task(client, "confirm_delete", {"filename": "draft.txt"})
            parked = await task.wait(state="input_required", timeout=30)
            assert calls == []
            assert list(parked.input_requests) == ["confirm"]
            request = parked.input_requests["confirm"]
            assert request["method"] == "elicitation/create"
            assert request["params"]["message"] == "Delete draft.txt?"

            result = await task.result()
            assert len(calls) == 1
            assert result.content[0].text == "Deleted draft.txt"
            assert (await task.status()).status == "completed"
