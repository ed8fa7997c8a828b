"""The component's exports, for componentize-py: `from snodo_guest.exports import *` in the
module given to `componentize-py componentize` makes it serve every `@tool` declared.

The classes implement the `executor` world of `snodo:tasks@0.4.0`: `tools` (describe,
mode rule, prepare, execute), `execution` (execute with the tool's own failure status),
`modes` (the mode each call runs in) and an empty `catalog`.
"""

import json
import traceback

import types as _types

import wit_world
from componentize_py_types import Err
from wit_world.exports import modes as wit_modes
from wit_world.imports import caller, catalog_types, context, outcomes, types

import snodo_guest as _sdk

from . import TOOLS, Context, Retry, RpcError, ToolResult

_sdk._host = _types.SimpleNamespace(context=context, caller=caller, types=types, Err=Err)

__all__ = ["Catalog", "Execution", "Modes", "Tools"]

_MODE = {"sync": types.TaskMode.SYNC, "optional": types.TaskMode.OPTIONAL,
         "required": types.TaskMode.REQUIRED}


def _rpc_error(e):
    data = None if e.data is None else json.dumps(e.data)
    return types.RpcError(code=e.code, message=e.message, data=data)


def _result(value):
    if isinstance(value, ToolResult):
        text = value.text
        if text is None and value.structured is not None:
            text = json.dumps(value.structured)
        structured = None if value.structured is None else json.dumps(value.structured)
        return types.ToolResult(content=[types.ContentBlock_Text(text or "")],
                                structured_content=structured, is_error=value.is_error)
    if isinstance(value, str):
        return types.ToolResult(content=[types.ContentBlock_Text(value)], structured_content=None,
                                is_error=False)
    if value is None:
        return types.ToolResult(content=[], structured_content=None, is_error=False)
    text = json.dumps(value)
    structured = text if isinstance(value, dict) else None
    return types.ToolResult(content=[types.ContentBlock_Text(text)], structured_content=structured,
                            is_error=False)


def _run(work):
    """Runs the tool `work` names: its result, or the `RpcError` / `Retry` it raised."""
    spec = TOOLS.get(work.tool)
    if spec is None:
        return RpcError(-32602, f"Unknown tool: {work.tool}")
    try:
        arguments = json.loads(work.arguments or "{}")
        return _result(spec["fn"](Context(work), **arguments))
    except (RpcError, Retry) as e:
        return e
    except TypeError as e:
        return RpcError.invalid_params(str(e))
    except Exception as e:  # a tool's bug fails its task with the reason, not a trap
        traceback.print_exc()
        return RpcError.internal(f"{type(e).__name__}: {e}")


class Tools(wit_world.exports.Tools):
    def describe(self):
        return [
            types.Tool(
                name=name, title=s["title"], description=s["description"],
                input_schema=json.dumps(s["input_schema"]),
                output_schema=None if s["output_schema"] is None else json.dumps(s["output_schema"]),
                mode=_MODE[s["mode"]], required_capabilities=None, has_prepare=False,
                has_mode_rule=False,
            )
            for name, s in TOOLS.items()
        ]

    def choose_mode(self, tool, arguments):
        return _MODE[TOOLS[tool]["mode"]] if tool in TOOLS else types.TaskMode.SYNC

    def prepare(self, tool, arguments):
        return arguments

    def execute(self, work):
        out = _run(work)
        if isinstance(out, RpcError):
            return types.Outcome_Failed(_rpc_error(out))
        if isinstance(out, Retry):
            return types.Outcome_Retry(types.RetryRequest(_rpc_error(out.error), out.status_message))
        return types.Outcome_Completed(out)


class Execution(wit_world.exports.Execution):
    def execute(self, work):
        out = _run(work)
        if isinstance(out, RpcError):
            return outcomes.Outcome_Failed(outcomes.Failure(_rpc_error(out), out.status_message))
        if isinstance(out, Retry):
            return outcomes.Outcome_Retry(types.RetryRequest(_rpc_error(out.error), out.status_message))
        return outcomes.Outcome_Completed(out)


class Modes(wit_world.exports.Modes):
    def choose(self, call):
        mode = _MODE[TOOLS[call.tool]["mode"]] if call.tool in TOOLS else types.TaskMode.SYNC
        return wit_modes.Choice(mode=mode, ttl_ms=None, poll_interval_ms=None)


class Catalog(wit_world.exports.Catalog):
    def describe_catalog(self):
        return catalog_types.Catalog(resources=[], resource_templates=[], prompts=[],
                                     completions=False)

    def read_resource(self, request):
        raise Err(types.RpcError(-32002, "no such resource", None))

    def get_prompt(self, name, arguments):
        raise Err(types.RpcError(-32602, f"no such prompt: {name}", None))

    def complete(self, target, argument, value, context):
        raise Err(types.RpcError(-32602, "nothing to complete", None))
