"""The SDK's declarations in plain Python (no component needed): output schemas and typed
arguments from hints, mode rules and prepare hooks, resources, prompts and results."""

import dataclasses
import sys
import typing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snodo_guest import (  # noqa: E402
    PROMPTS, RESOURCES, TEMPLATES, TOOLS, Context, Message, ModeChoice, Retry, RpcError, ToolResult, _arguments,
    prompt, resource, tool,
)
from snodo_guest.catalog import messages_of  # noqa: E402
from snodo_guest.schema import plain  # noqa: E402
from shapes import Box, Size  # noqa: E402


@dataclasses.dataclass
class Packed:
    boxes: int
    sizes: list[Size]


def test_output_schema_and_typed_arguments_come_from_hints():
    @tool(mode="optional", mode_rule=lambda args, call: ModeChoice("required", ttl_ms=5000),
          prepare=lambda cx, args: args)
    def pack(cx: Context, boxes: list[Box]) -> Packed:
        return Packed(len(boxes), [b.size for b in boxes])

    spec = TOOLS["pack"]
    assert spec["output_schema"] == {
        "type": "object",
        "properties": {"boxes": {"type": "integer"}, "sizes": {"type": "array", "items": {"enum": ["s", "l"]}}},
        "required": ["boxes", "sizes"],
    }
    args = _arguments(spec, {"boxes": [{"size": "l"}, {"size": "s", "label": "tiny"}]})
    assert args == {"boxes": [Box(Size.LARGE), Box(Size.SMALL, "tiny")]}
    out = spec["fn"](Context(), **args)
    assert plain(out) == {"boxes": 2, "sizes": ["l", "s"]}
    choice = spec["mode_rule"]({}, None)
    assert (choice.mode, choice.ttl_ms, choice.poll_interval_ms) == ("required", 5000, None)
    with pytest.raises(ValueError):
        ModeChoice("later")


def test_text_results_have_no_output_schema():
    @tool()
    def hello(cx: Context, name: str) -> str:
        return name

    @tool()
    def built(cx: Context) -> ToolResult:
        return ToolResult("x", content=[{"type": "image", "data": "AA==", "mimeType": "image/png"}])

    assert TOOLS["hello"]["output_schema"] is None
    assert TOOLS["built"]["output_schema"] is None
    assert [c["type"] for c in built(Context()).content] == ["text", "image"]


def test_resources_templates_and_prompts_are_declared():
    @resource("memo://today", mime_type="text/plain")
    def today() -> str:
        return "sunny"

    @resource("memo://day/{day}", complete={"day": lambda v, c: ["mon", "tue"]})
    def day(day: str) -> dict:
        return {"day": day}

    @prompt(description="Summarises")
    def summarise(text: typing.Annotated[str, "what to summarise"], tone: str = "plain"):
        return ("A summary", [f"Summarise ({tone}): {text}", Message("assistant", text="Sure.")])

    assert RESOURCES["memo://today"]["name"] == "today"
    assert "memo://day/{day}" in TEMPLATES and "memo://day/{day}" not in RESOURCES
    args = PROMPTS["summarise"]["arguments"]
    assert args == [{"name": "text", "description": "what to summarise", "required": True},
                    {"name": "tone", "description": None, "required": False}]
    description, messages = messages_of(summarise("hi"))
    assert description == "A summary"
    assert [(m.role, m.content["text"]) for m in messages] == [("user", "Summarise (plain): hi"),
                                                              ("assistant", "Sure.")]
    with pytest.raises(ValueError):
        @resource("memo://today")
        def again() -> str:
            return ""
    with pytest.raises(ValueError):
        Message("system", text="no")


def test_a_prepare_context_has_no_task():
    cx = Context()
    assert (cx.task_id, cx.attempt, cx.idempotency_key) == (None, None, None)
    with pytest.raises(RuntimeError):
        cx.is_cancelled()  # the host's imports exist only inside a component


@dataclasses.dataclass
class Settings:
    size: Size = Size.SMALL
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str | None = None


def test_defaults_optionals_and_bare_decorators():
    @tool
    def configure(cx: Context, settings: Settings, comment: str | None, level: int = 1) -> str:
        return f"{settings.size.value} {settings.tags} {comment} {level}"

    spec = TOOLS["configure"]
    s = spec["input_schema"]
    # An Optional parameter is not required, and null is a value it accepts.
    assert s["required"] == ["settings"]
    assert s["properties"]["comment"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    nested = s["properties"]["settings"]
    assert nested["properties"]["size"] == {"enum": ["s", "l"], "default": "s"}
    assert "required" not in nested, "defaults and default factories make fields optional"
    args = _arguments(spec, {"settings": {"tags": ["a"]}})
    assert args == {"settings": Settings(Size.SMALL, ["a"], None), "comment": None}
    assert configure(Context(), **args) == "s ['a'] None 1"


def test_retries_and_mode_choices_are_normalised():
    r = Retry("upstream busy")
    assert (r.error.code, r.error.message, r.status_message) == (-32603, "upstream busy", "upstream busy")
    r = Retry(RpcError(-32000, "later"), "waiting for the upstream")
    assert (r.error.code, r.status_message) == (-32000, "waiting for the upstream")
    c = ModeChoice("optional", ttl_ms=1500.7, poll_interval_ms=250)
    assert (c.ttl_ms, c.poll_interval_ms) == (1500, 250)


def test_a_denial_is_told_apart_from_other_failures_and_keeps_the_hosts_explanation():
    from snodo_guest import http

    # The shapes componentize-py gives the host's error codes: a class per case, named
    # after the variant, its payload in `value`.
    class ErrorCode_InternalError:  # noqa: N801
        def __init__(self, value):
            self.value = value

    class ErrorCode_ConnectionTimeout:  # noqa: N801
        pass

    why = ('HttpRequestDenied: GET http://x.test/ (tool `t`): add "http://x.test" to '
           'tools.t.allowed_outbound_hosts')
    denied = http._failed(ErrorCode_InternalError(why))
    assert (denied.kind, denied.detail) == ("denied", why)
    assert "tools.t.allowed_outbound_hosts" in str(denied)
    other = http._failed(ErrorCode_InternalError("the journal cannot be read"))
    assert other.kind == "request"
    timeout = http._failed(ErrorCode_ConnectionTimeout())
    assert (timeout.kind, timeout.detail) == ("request", "ConnectionTimeout")
