"""The `mcp` Client (with the tasks client extension) against the fixture tools written in
Python and in JavaScript (scripts/guests builds them): the same calls, tasks, questions,
resources, prompts and completions as against the Rust fixtures."""

import json
import shutil
import tempfile

import anyio
import pytest
from fastmcp_tasks.client import TasksClientExtension
from mcp import Client
from mcp_types import ElicitResult, ResourceTemplateReference, TextContent

from conftest import ROOT, free_port, serving

pytestmark = pytest.mark.anyio
DEADLINE = 60
COMPONENTS = {
    "python": ROOT / "target" / "guests" / "python" / "fixtures.wasm",
    "js": ROOT / "target" / "guests" / "js" / "fixtures.wasm",
}


@pytest.fixture(scope="module", params=sorted(COMPONENTS))
def polyglot_url(request):
    component = COMPONENTS[request.param]
    if not component.exists():
        pytest.fail(f"{component} is missing: build it with scripts/guests")
    data = tempfile.mkdtemp(prefix=f"snodo-interop-{request.param}-")
    try:
        with serving(["--store", "memory", "--data", data, "--component", str(component)], free_port(), data) as url:
            yield url
    finally:
        shutil.rmtree(data, ignore_errors=True)


async def test_sync_call_and_lists(polyglot_url):
    with anyio.fail_after(DEADLINE):
        async with Client(polyglot_url) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"greet", "slow_compute", "failing_job", "protocol_error_job", "confirm_delete",
                    "multi_input", "test_tool_with_task"} <= set(tools)
            assert tools["confirm_delete"].input_schema["required"] == ["filename"]
            result = await client.call_tool("greet", {"name": "Ada"})
            assert result.content[0].text == "Hello, Ada!"
            # Without the tasks extension an optional tool answers on the call.
            slow = await client.call_tool("slow_compute", {"seconds": 1, "label": "sync"})
            assert slow.content[0].text == "Completed sync after 1 seconds"


async def test_a_task_asks_and_completes(polyglot_url):
    with anyio.fail_after(DEADLINE):
        calls = []

        async def callback(context, params):
            calls.append(params)
            return ElicitResult(action="accept", content={"confirm": True})

        client = Client(polyglot_url, elicitation_callback=callback, extensions=[TasksClientExtension(callback)])
        async with client:
            result = await client.call_tool("confirm_delete", {"filename": "old.log"})
        assert [c.message for c in calls] == ["Delete old.log?"]
        assert isinstance(result.content[0], TextContent) and result.content[0].text == "Deleted old.log"


async def test_input_before_the_task_and_a_failing_task(polyglot_url):
    with anyio.fail_after(DEADLINE):
        async def callback(context, params):
            return ElicitResult(action="accept", content={"name": "Grace"})

        async with Client(polyglot_url, elicitation_callback=callback, extensions=[TasksClientExtension()]) as client:
            result = await client.call_tool("test_tool_with_task", {})
            assert result.content[0].text == "Hello, Grace! (async)"
            failed = await client.call_tool("failing_job", {})
            assert failed.is_error and failed.content[0].text == "The job failed: the input data was rejected"


async def test_resources_prompts_and_completion(polyglot_url):
    with anyio.fail_after(DEADLINE):
        async with Client(polyglot_url) as client:
            listed = (await client.list_resources()).resources
            assert [r.name for r in listed] == ["static-text"]
            text = (await client.read_resource("test://static-text")).contents[0]
            assert text.text == "This is the content of the static text resource."
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["test://template/{id}/data"]
            data = (await client.read_resource("test://template/beta/data")).contents[0]
            assert data.mime_type == "application/json"
            assert json.loads(data.text) == {"id": "beta", "templateTest": True, "data": "Data for ID: beta"}
            done = await client.complete(
                ResourceTemplateReference(type="ref/resource", uri="test://template/{id}/data"),
                {"name": "id", "value": "g"},
            )
            assert done.completion.values == ["gamma"]
            prompt = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
            assert prompt.messages[0].content.text == "Prompt with arguments: arg1='a', arg2='b'"


async def test_a_long_sleep_parks_and_a_fresh_guest_wakes_after_it(polyglot_url):
    # 1.5 s is past runner.sleep_park_after_ms (1 s by default): the SDK's sleep parks the
    # task, and the guest that finishes it is attempt 2, which found the sleep journaled.
    with anyio.fail_after(DEADLINE):
        async with Client(polyglot_url, extensions=[TasksClientExtension()]) as client:
            result = await client.call_tool("test_sleep", {"ms": 1500})
            assert result.content[0].text == "woke on attempt 2"
