"""The SDK's input schemas, from type hints, in plain Python (no component needed)."""

import sys
import typing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snodo_guest import TOOLS, Context, SchemaError, tool  # noqa: E402
from snodo_guest.schema import schema_of  # noqa: E402
from shapes import Box, Size  # noqa: E402


def test_parameters_become_an_object_schema():
    @tool(description="Exports", mode="required")
    def export_rows(
        cx: Context,
        table: typing.Annotated[str, "the table to export"],
        limit: int = 100,
        ratio: float | None = None,
        sizes: list[Size] = (),
        kind: typing.Literal["csv", "json"] = "csv",
        to: Box | None = None,
    ) -> str:
        return table

    spec = TOOLS["export_rows"]
    assert spec["mode"] == "required"
    assert spec["description"] == "Exports"
    s = spec["input_schema"]
    assert s["required"] == ["table"]
    p = s["properties"]
    assert p["table"] == {"type": "string", "description": "the table to export"}
    assert p["limit"] == {"type": "integer", "default": 100}
    assert p["ratio"] == {"anyOf": [{"type": "number"}, {"type": "null"}]}
    assert p["sizes"]["items"] == {"enum": ["s", "l"]}
    assert p["kind"] == {"enum": ["csv", "json"], "default": "csv"}
    assert p["to"] == {"anyOf": [{"type": "object", "properties": {"size": {"enum": ["s", "l"]},
                       "label": {"type": "string", "default": "box"}}, "required": ["size"]}, {"type": "null"}]}


def test_what_has_no_schema_is_refused_when_declared():
    with pytest.raises(SchemaError):
        @tool()
        def untyped(cx, x):
            return x
    with pytest.raises(SchemaError):
        schema_of(dict[int, str])
    with pytest.raises(ValueError):
        @tool(mode="sometimes")
        def bad_mode(cx: Context) -> str:
            return ""
    assert "untyped" not in TOOLS


def test_a_name_is_declared_once():
    @tool("twice")
    def first(cx: Context) -> str:
        return "1"

    with pytest.raises(ValueError):
        @tool("twice")
        def second(cx: Context) -> str:
            return "2"
