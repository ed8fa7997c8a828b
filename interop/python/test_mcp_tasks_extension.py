"""The `mcp` SDK Client given `TasksClientExtension` (fastmcp-tasks): task-required tools
are called with plain `call_tool`, and the extension polls each task to its result."""

import anyio
import pytest
from fastmcp_tasks.client import TasksClientExtension
from mcp import Client
from mcp_types import ElicitResult, TextContent

pytestmark = pytest.mark.anyio

# Every test finishes well within this; a server that stops answering fails it instead
# of hanging the run.
DEADLINE = 60


def elicitation(answer):
    calls = []

    async def callback(context, params):
        calls.append(params)
        return answer

    return callback, calls


async def test_required_task_tool_is_resolved_transparently(server_url):
    with anyio.fail_after(DEADLINE):
        callback, calls = elicitation(ElicitResult(action="accept", content={"confirm": True}))
        # The callback goes to the Client too: that is what declares the elicitation
        # capability; the extension uses it to answer the task's input requests.
        client = Client(server_url, elicitation_callback=callback, extensions=[TasksClientExtension(callback)])
        async with client:
            assert client.protocol_version == "2026-07-28"
            result = await client.call_tool("confirm_delete", {"filename": "old.log"})
        assert len(calls) == 1
        assert calls[0].message == "Delete old.log?"
        assert not result.is_error
        assert isinstance(result.content[0], TextContent)
        assert result.content[0].text == "Deleted old.log"


async def test_task_input_needs_the_declared_elicitation_capability(server_url):
    # Given only to the extension, the callback declares nothing: the server must not ask
    # a client that cannot answer, so the task completes with a tool error instead.
    with anyio.fail_after(DEADLINE):
        callback, calls = elicitation(ElicitResult(action="accept", content={"confirm": True}))
        async with Client(server_url, extensions=[TasksClientExtension(callback)]) as client:
            result = await client.call_tool("confirm_delete", {"filename": "old.log"})
        assert calls == []
        assert result.is_error
        assert "elicitation" in result.content[0].text


async def test_required_task_tool_failing_in_its_domain(server_url):
    with anyio.fail_after(DEADLINE):
        async with Client(server_url, extensions=[TasksClientExtension()]) as client:
            result = await client.call_tool("failing_job", {})
        assert result.is_error
        assert result.content[0].text == "The job failed: the input data was rejected"


async def test_input_before_the_task_then_the_task(server_url):
    # test_tool_with_task asks for a name in an input_required round of tools/call
    # (answered by the client's elicitation callback), then runs as a task (resolved by
    # the extension).
    with anyio.fail_after(DEADLINE):
        callback, calls = elicitation(ElicitResult(action="accept", content={"name": "Grace"}))
        async with Client(server_url, elicitation_callback=callback, extensions=[TasksClientExtension()]) as client:
            result = await client.call_tool("test_tool_with_task", {})
        assert len(calls) == 1
        assert calls[0].message == "What is your name?"
        assert not result.is_error
        assert result.content[0].text == "Hello, Grace! (async)"
