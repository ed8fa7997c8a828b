"""The `mcp` SDK Client (no extensions) against the fixture server: tools, resources, prompts
and completion on 2026-07-28."""

import json

import anyio
import pytest
from mcp import Client
from mcp_types import ElicitResult, PromptReference, TextContent

from conftest import computes_at_once

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
            await computes_at_once(client, 0, "quick")
            await computes_at_once(client, 1, "inline")


async def test_resources_prompts_and_completion_from_a_component(server_url):
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return ElicitResult(action="accept", content={"context": "python"})

    with anyio.fail_after(DEADLINE):
        async with Client(server_url, elicitation_callback=elicit) as client:
            resources = (await client.list_resources()).resources
            assert "test://static-text" in {str(r.uri) for r in resources}
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["test://template/{id}/data"]
            read = await client.read_resource("test://template/7/data")
            assert json.loads(read.contents[0].text) == {"id": "7", "templateTest": True, "data": "Data for ID: 7"}

            prompts = {p.name for p in (await client.list_prompts()).prompts}
            assert {"test_simple_prompt", "test_prompt_with_arguments"} <= prompts
            rendered = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
            assert rendered.messages[0].content.text == "Prompt with arguments: arg1='a', arg2='b'"
            # A prompt that asks: the client's MRTR loop answers through the callback.
            answered = await client.get_prompt("test_input_required_result_prompt")
            assert asked == ["What context should the prompt use?"]
            assert answered.messages[0].content.text == "Prompt with context: python"

            done = await client.complete(
                PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
                {"name": "arg1", "value": "pa"},
            )
            assert done.completion.values == ["paris", "park", "party"]
