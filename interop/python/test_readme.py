"""The README's Python example, run as written against a server of the example tools: a
durable task whose question the client answers."""

import re

import anyio
import pytest

from conftest import ROOT, memory_server

pytestmark = pytest.mark.anyio

EXAMPLES = ROOT / "target" / "guests" / "wasm32-wasip2" / "release" / "examples.wasm"
MARK = "<!-- readme: python task with a question -->"


def readme_block():
    text = (ROOT / "README.md").read_text()
    found = re.search(re.escape(MARK) + r"\s*```python\n(.*?)```", text, re.S)
    assert found, "the README's Python task example"
    return found.group(1)


@pytest.fixture(scope="module")
def examples_url():
    with memory_server(EXAMPLES) as url:
        yield url


async def test_the_readme_python_example_answers_the_question_and_gets_the_export(examples_url, capsys):
    namespace = {"__name__": "readme"}
    exec(compile(readme_block(), "README.md", "exec"), namespace)
    with anyio.fail_after(60):
        result = await namespace["main"](examples_url)
    assert not result.is_error
    assert result.structured_content["dataset"] == "sales"
    assert result.structured_content["exportId"].startswith("export-")
    assert "the tool asks: Export sales now?" in capsys.readouterr().out
