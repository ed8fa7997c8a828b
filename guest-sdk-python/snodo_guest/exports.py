"""The component's exports, for componentize-py: `from snodo_guest.exports import *` in the
module given to `componentize-py componentize` makes it serve every `@tool`, `@resource`
and `@prompt` declared.

The classes implement the `executor` world of `snodo:tasks@0.5.0`: `tools` (describe,
mode rule, prepare, execute), `execution` (execute with the tool's own failure status),
`modes` (the mode each call runs in) and `catalog` (resources, prompts, completions).
"""

import base64
import json
import traceback
import types as _types

import wit_world
from componentize_py_types import Err
from wit_world.exports import modes as wit_modes
from wit_world.imports import caller, catalog_types, context, outcomes, timers

import snodo_guest as _sdk

from . import http as _http
from . import TOOLS, Call, Context, ModeChoice, Retry, RpcError, ToolResult, _arguments, _principal
from .catalog import PROMPTS, RESOURCES, TEMPLATES, messages_of
from .schema import plain

# Built against the world that also imports wasi:http, the bindings name the two `types`
# interfaces by package; against `executor` alone, Snodo's is plain `types`.
try:
    from wit_world.imports import types
except ImportError:
    from wit_world.imports import snodo_tasks_types as types
try:
    from wit_world.imports import outgoing_handler, wasi_http_types
except ImportError:
    pass
else:
    _http._wasi = _types.SimpleNamespace(types=wasi_http_types, handler=outgoing_handler, Err=Err)

_sdk._host = _types.SimpleNamespace(context=context, caller=caller, timers=timers, types=types, Err=Err)

__all__ = ["Catalog", "Execution", "Modes", "Tools"]

_MODE = {"sync": types.TaskMode.SYNC, "optional": types.TaskMode.OPTIONAL,
         "required": types.TaskMode.REQUIRED}


def _rpc_error(e):
    data = None if e.data is None else json.dumps(e.data)
    return types.RpcError(code=e.code, message=e.message, data=data)


def _block(c):
    """An MCP content block (a dict) as the WIT's."""
    kind = c.get("type")
    if kind == "text":
        return types.ContentBlock_Text(c["text"])
    if kind == "image":
        return types.ContentBlock_Image(types.Media(data=c["data"], mime_type=c["mimeType"]))
    if kind == "audio":
        return types.ContentBlock_Audio(types.Media(data=c["data"], mime_type=c["mimeType"]))
    if kind == "resource":
        r = c["resource"]
        return types.ContentBlock_EmbeddedResource(types.EmbeddedResource(
            uri=r["uri"], mime_type=r.get("mimeType"), text=r.get("text"), blob=r.get("blob")))
    if kind == "resource_link":
        return types.ContentBlock_ResourceLink(types.ResourceLink(
            uri=c["uri"], name=c["name"], mime_type=c.get("mimeType"), description=c.get("description")))
    raise ValueError(f"not a content block: {c!r}")


def _result(value):
    if isinstance(value, ToolResult):
        content = [_block(c) for c in value.content]
        structured = None if value.structured is None else json.dumps(plain(value.structured))
        if not content and structured is not None:
            content = [types.ContentBlock_Text(structured)]
        return types.ToolResult(content=content, structured_content=structured, is_error=value.is_error)
    if isinstance(value, str):
        return types.ToolResult(content=[types.ContentBlock_Text(value)], structured_content=None,
                                is_error=False)
    if value is None:
        return types.ToolResult(content=[], structured_content=None, is_error=False)
    value = plain(value)
    text = json.dumps(value)
    structured = text if isinstance(value, dict) else None
    return types.ToolResult(content=[types.ContentBlock_Text(text)], structured_content=structured,
                            is_error=False)


def _guarded(run):
    """`run()`, with a tool's own failures turned into what the host expects: `RpcError`
    and `Retry` as raised, and any other exception as an internal error naming it (a bug
    fails its task, it does not trap)."""
    try:
        return run()
    except (RpcError, Retry) as e:
        return e
    except Exception as e:
        traceback.print_exc()
        return RpcError.internal(f"{type(e).__name__}: {e}")


def _run(work):
    """Runs the tool `work` names: its result, or the `RpcError` / `Retry` it raised."""
    spec = TOOLS.get(work.tool)
    if spec is None:
        return RpcError(-32602, f"Unknown tool: {work.tool}")
    fn = spec["fn"]
    try:
        # Arguments the function cannot take are the caller's mistake (-32602); a
        # TypeError raised inside the tool is the tool's own (-32603).
        bound = spec["signature"].bind(Context(work), **_arguments(spec, json.loads(work.arguments or "{}")))
    except (TypeError, ValueError) as e:
        return RpcError.invalid_params(f"{work.tool}: {e}")
    return _guarded(lambda: _result(fn(*bound.args, **bound.kwargs)))


def _choice(spec, call):
    """The mode rule's decision, or the tool's declared mode when it has none, raises, or
    answers something that is not a mode."""
    rule = spec["mode_rule"]
    if rule is not None:
        try:
            out = rule(call.arguments, call)
            return out if isinstance(out, ModeChoice) else ModeChoice(out)
        except Exception:
            traceback.print_exc()
    return ModeChoice(spec["mode"])


class Tools(wit_world.exports.Tools):
    def describe(self):
        return [
            types.Tool(
                name=name, title=s["title"], description=s["description"],
                input_schema=json.dumps(s["input_schema"]),
                output_schema=None if s["output_schema"] is None else json.dumps(s["output_schema"]),
                mode=_MODE[s["mode"]],
                required_capabilities=None if s["required_capabilities"] is None
                else json.dumps(s["required_capabilities"]),
                has_prepare=s["prepare"] is not None,
                has_mode_rule=s["mode_rule"] is not None,
            )
            for name, s in TOOLS.items()
        ]

    def choose_mode(self, tool, arguments):
        spec = TOOLS.get(tool)
        if spec is None:
            return types.TaskMode.SYNC
        return _MODE[_choice(spec, Call(tool, json.loads(arguments or "{}"))).mode]

    def prepare(self, tool, arguments):
        spec = TOOLS.get(tool)
        if spec is None or spec["prepare"] is None:
            return arguments
        out = _guarded(lambda: spec["prepare"](Context(), json.loads(arguments or "{}")))
        if isinstance(out, Retry):
            out = out.error
        if not isinstance(out, (dict, RpcError)):
            out = RpcError.internal(f"{tool}: prepare returned {type(out).__name__}, not the arguments (a dict)")
        if isinstance(out, RpcError):
            raise Err(_rpc_error(out))
        return json.dumps(plain(out))

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
        spec = TOOLS.get(call.tool)
        if spec is None:
            return wit_modes.Choice(mode=types.TaskMode.SYNC, ttl_ms=None, poll_interval_ms=None)
        c = _choice(spec, Call(call.tool, json.loads(call.arguments or "{}"), _principal(call.caller),
                               json.loads(call.client_capabilities or "{}")))
        return wit_modes.Choice(mode=_MODE[c.mode], ttl_ms=c.ttl_ms, poll_interval_ms=c.poll_interval_ms)


def _contents(uri, mime_type, value):
    if isinstance(value, bytes):
        return [catalog_types.ResourceContents(uri=uri, mime_type=mime_type,
                                               text=None, blob=base64.b64encode(value).decode())]
    if not isinstance(value, str):
        value, mime_type = json.dumps(plain(value)), mime_type or "application/json"
    return [catalog_types.ResourceContents(uri=uri, mime_type=mime_type, text=value, blob=None)]


def _failing(out):
    if isinstance(out, Retry):
        out = out.error
    if isinstance(out, RpcError):
        raise Err(_rpc_error(out))
    return out


class Catalog(wit_world.exports.Catalog):
    def describe_catalog(self):
        completes = any(e["complete"] for e in (*TEMPLATES.values(), *PROMPTS.values()))
        return catalog_types.Catalog(
            resources=[catalog_types.Resource(uri=u, name=e["name"], title=e["title"],
                                              description=e["description"], mime_type=e["mime_type"])
                       for u, e in RESOURCES.items()],
            resource_templates=[catalog_types.ResourceTemplate(
                uri_template=u, name=e["name"], title=e["title"], description=e["description"],
                mime_type=e["mime_type"]) for u, e in TEMPLATES.items()],
            prompts=[catalog_types.Prompt(
                name=n, title=e["title"], description=e["description"],
                arguments=[catalog_types.PromptArgument(name=a["name"], description=a["description"],
                                                        required=a["required"])
                           for a in e["arguments"]]) for n, e in PROMPTS.items()],
            completions=completes,
        )

    def read_resource(self, request):
        if request.template is not None and request.template in TEMPLATES:
            e = TEMPLATES[request.template]
            out = _guarded(lambda: e["fn"](**dict(request.variables)))
        elif request.uri in RESOURCES:
            e = RESOURCES[request.uri]
            out = _guarded(e["fn"])
        else:
            raise Err(types.RpcError(-32002, f"Resource not found: {request.uri}", json.dumps({"uri": request.uri})))
        return _contents(request.uri, e["mime_type"], _failing(out))

    def get_prompt(self, name, arguments):
        e = PROMPTS.get(name)
        if e is None:
            raise Err(types.RpcError(-32602, f"Unknown prompt: {name}", None))
        args = json.loads(arguments or "{}")
        description, messages = messages_of(_failing(_guarded(lambda: e["fn"](**args))))
        role = {"user": catalog_types.Role.USER, "assistant": catalog_types.Role.ASSISTANT}
        return catalog_types.PromptResult(
            description=description or e["description"],
            messages=[catalog_types.PromptMessage(role=role[m.role], content=_block(m.content))
                      for m in messages])

    def complete(self, target, argument, value, context):
        table = PROMPTS if isinstance(target, catalog_types.CompletionRef_Prompt) else TEMPLATES
        e = table.get(target.value)
        fn = None if e is None else e["complete"].get(argument)
        values = [] if fn is None else list(_failing(_guarded(lambda: fn(value, json.loads(context or "{}")))))
        return catalog_types.Completion(values=values[:100], total=len(values), has_more=len(values) > 100)
