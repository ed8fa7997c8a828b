"""Snodo tools in Python: decorated functions, built into a WebAssembly component with
componentize-py against Snodo's WIT (`snodo:tasks@0.5.0`, world `executor`).

    from snodo_guest import Context, Form, tool
    from snodo_guest.exports import *  # the component's exports, for componentize-py

    @tool(description="Says hello")
    def greet(cx: Context, name: str) -> str:
        return f"Hello, {name}!"

The input schema comes from the parameters' type hints and the output schema from the
return hint (`schema.py`); a tool returns a string (one text block), an object (structured
content, also shown as text), a `ToolResult`, or raises `RpcError` (the task fails with it)
or `Retry` (the attempt is retried under the task's retry policy). The context gives what
the Rust SDK's does: cancellation, sleeping, status, progress, logs, questions to the user
(`elicit`, with the same keys across replays), the caller, the attempt and the idempotency
key. Resources and prompts are declared with `@resource` and `@prompt` (`catalog.py`).
"""

import inspect
import json
import math
import typing

from .catalog import PROMPTS, RESOURCES, TEMPLATES, Message, prompt, resource
from .schema import SchemaError, coerce, input_schema, missing_optionals, schema_of
from .schema import output_schema as _output_schema

__all__ = [
    "Answer", "Call", "Context", "Form", "InputError", "Message", "ModeChoice", "Retry",
    "RpcError", "SchemaError", "ToolResult", "prompt", "resource", "schema_of", "tool",
    "PROMPTS", "RESOURCES", "TEMPLATES", "TOOLS",
]

#: The tools declared so far, by name, in declaration order.
TOOLS = {}

#: The host's imports (`context`, `caller`, `types` of the WIT world), set by
#: `snodo_guest.exports` when the component is built: componentize-py snapshots the
#: modules imported while the app loads, so nothing may be imported later.
_host = None


def _wit():
    if _host is None:
        raise RuntimeError("snodo_guest.exports is not imported: `from snodo_guest.exports import *`")
    return _host


_MODES = ("sync", "optional", "required")


class RpcError(Exception):
    """A JSON-RPC error: raised by a tool, the task fails with it (and shows
    `status_message`, when given, as its status)."""

    def __init__(self, code, message, data=None, status_message=None):
        super().__init__(message)
        self.code, self.message, self.data = int(code), str(message), data
        self.status_message = None if status_message is None else str(status_message)

    @classmethod
    def invalid_params(cls, message):
        return cls(-32602, message)

    @classmethod
    def internal(cls, message):
        return cls(-32603, message)


class Retry(Exception):
    """Raised by a tool: try again later under the task's retry policy (or fail with
    `error`, an `RpcError` or a message for an internal error, once the policy is used
    up), showing `status_message` (default: the error's message) meanwhile."""

    def __init__(self, error, status_message=None):
        if not isinstance(error, RpcError):
            error = RpcError.internal(str(error))
        status_message = error.message if status_message is None else str(status_message)
        super().__init__(status_message)
        self.error, self.status_message = error, status_message


class ToolResult:
    """A tool's result: content blocks, structured content and an error flag.

    `text` is one text block. `content` takes MCP's content blocks as dicts:
    `{"type": "text", "text": ...}`, `{"type": "image" | "audio", "data": <base64>,
    "mimeType": ...}`, `{"type": "resource", "resource": {"uri", "mimeType", "text" |
    "blob"}}` and `{"type": "resource_link", "uri", "name", "mimeType", "description"}`.
    """

    def __init__(self, text=None, structured=None, is_error=False, content=None):
        self.content = list(content or [])
        if text is not None:
            self.content.insert(0, {"type": "text", "text": text})
        self.structured, self.is_error = structured, is_error

    @classmethod
    def error(cls, text):
        return cls(text=text, is_error=True)


class Form:
    """An elicitation form: a message and flat fields (MCP's restricted schema)."""

    def __init__(self, message):
        self.message = message
        self.properties = {}
        self.required = []

    def field(self, name, schema):
        self.properties[name] = schema
        return self

    def string(self, name, title, **extra):
        return self.field(name, {"type": "string", "title": title, **extra})

    def number(self, name, title, **extra):
        return self.field(name, {"type": "number", "title": title, **extra})

    def integer(self, name, title, **extra):
        return self.field(name, {"type": "integer", "title": title, **extra})

    def boolean(self, name, title, **extra):
        return self.field(name, {"type": "boolean", "title": title, **extra})

    def choice(self, name, title, options, **extra):
        return self.field(name, {"type": "string", "title": title, "enum": list(options), **extra})

    def require(self, *names):
        self.required.extend(n for n in names if n not in self.required)
        return self

    def schema(self):
        s = {"type": "object", "properties": self.properties}
        if self.required:
            s["required"] = list(self.required)
        return s


class Answer:
    """The user's answer to a form: `accepted`, and the content's fields."""

    def __init__(self, raw):
        self.raw = raw
        self.action = raw.get("action") if isinstance(raw, dict) else None
        self.content = (raw.get("content") if isinstance(raw, dict) else None) or {}

    @property
    def accepted(self):
        return self.action == "accept"

    def get(self, name, default=None):
        return self.content.get(name, default)

    def __repr__(self):
        return f"Answer({self.raw!r})"


class InputError(Exception):
    """A question could not be asked or answered: `kind` is `cancelled`, `unsupported`,
    `key-conflict` (the key was used for another question) or `invalid`."""

    def __init__(self, kind, detail=None):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind, self.detail = kind, detail


class Call:
    """One call a mode rule decides: the tool, its arguments, who makes it and what its
    client declared."""

    def __init__(self, tool, arguments, caller=None, client_capabilities=None):
        self.tool, self.arguments = tool, arguments
        self.caller = caller or {}
        self.client_capabilities = client_capabilities or {}


class ModeChoice:
    """A mode rule's decision: the mode, and optionally the task's TTL and poll interval
    (within the bounds the host's configuration sets)."""

    def __init__(self, mode, ttl_ms=None, poll_interval_ms=None):
        if mode not in _MODES:
            raise ValueError(f"mode is one of {', '.join(_MODES)}")
        self.mode = mode
        self.ttl_ms = None if ttl_ms is None else max(0, int(ttl_ms))
        self.poll_interval_ms = None if poll_interval_ms is None else max(0, int(poll_interval_ms))


class Context:
    """What an execution may ask of the host. In a `prepare` hook there is no task yet:
    `task_id`, `attempt` and `idempotency_key` are `None`."""

    def __init__(self, work=None):
        self._work = work

    @property
    def attempt(self):
        """This execution's attempt number, from 1."""
        return None if self._work is None else self._work.attempt

    @property
    def task_id(self):
        """The task's id, for an execution of a task."""
        return None if self._work is None else self._work.task_id

    @property
    def idempotency_key(self):
        """The key a remote side can deduplicate this task's effects by."""
        return None if self._work is None else self._work.idempotency_key

    def is_cancelled(self):
        return _wit().context.is_cancelled()

    def sleep(self, seconds):
        """Sleeps `seconds`, waking early when the task is cancelled. Returns `False` when
        it was (the tool should stop), `True` otherwise.

        The host keeps the time. In a task, a sleep at least as long as the host's threshold
        (`runner.sleep_park_after_ms`, 1 s by default) parks the task: this guest stops here
        for good, the task holds no execution slot meanwhile, and when the time comes a
        fresh guest runs the tool again from the start (journaled requests and answers are
        handed back) and this call returns at once. What the tool does before a long sleep
        must be safe to do again. Shorter sleeps, and those of synchronous calls, wait in
        place."""
        ms = max(0, math.ceil(float(seconds) * 1000))
        return self._host_sleep(lambda timers: timers.sleep_for(ms))

    def sleep_until(self, when):
        """Sleeps until `when` (an aware `datetime`, or seconds since the epoch; the host's
        clock), as `sleep` does; a time already past returns at once."""
        at = when.timestamp() if hasattr(when, "timestamp") else float(when)
        ms = max(0, math.floor(at * 1000))
        return self._host_sleep(lambda timers: timers.sleep_until(ms))

    @staticmethod
    def _host_sleep(sleep):
        w = _wit()
        try:
            sleep(w.timers)
            return True
        except w.Err:
            return False

    def set_status(self, message):
        _wit().context.set_status(message)

    def progress(self, progress, total=None, message=None):
        _wit().context.progress(float(progress), None if total is None else float(total), message)

    def log(self, message, level="info"):
        context, types = _wit().context, _wit().types
        levels = {"debug": types.LogLevel.DEBUG, "info": types.LogLevel.INFO,
                  "notice": types.LogLevel.NOTICE, "warning": types.LogLevel.WARNING,
                  "error": types.LogLevel.ERROR}
        context.log(levels.get(level, types.LogLevel.INFO), message)

    def elicit(self, key, form):
        """Asks the user `form` under `key` and waits for the answer. The same key and form
        asked again (a replayed execution) returns the stored answer at once."""
        return Answer(self.ask(key, form))

    def elicit_all(self, questions):
        """Asks several forms at once, `[(key, form), ...]` (the client sees them together),
        and waits for every answer; the answers come back in the order asked."""
        return [Answer(a) for a in self.ask_all(questions)]

    def elicit_url(self, key, message, url, elicitation_id):
        """Sends the user to `url` (an out-of-band flow) and waits until they are back."""
        return Answer(self.ask(key, ("url", message, url, elicitation_id)))

    def sample(self, key, params):
        """Asks the client's model (`sampling/createMessage` with `params`); the result."""
        return self.ask(key, ("sampling", params))

    def roots(self, key):
        """Asks the client for its roots (`roots/list`); the result."""
        return self.ask(key, ("roots",))

    def ask(self, key, request):
        """Asks one question (a `Form`, or a tuple as the helpers above build) and returns
        the client's answer as JSON."""
        w = _wit()
        try:
            return json.loads(w.context.await_input(key, _request(request)))
        except w.Err as e:
            raise _input_error(e.value) from None

    def ask_all(self, questions):
        w = _wit()
        try:
            answers = w.context.await_inputs([(k, _request(r)) for k, r in questions])
        except w.Err as e:
            raise _input_error(e.value) from None
        return [json.loads(a) for a in answers]

    def caller(self):
        """Who called: tenant, subject, granted scopes (`None`: every scope) and claims."""
        p = _wit().caller.current()
        return _principal(p)

    def client_capabilities(self):
        """The capabilities the calling client declared."""
        return json.loads(_wit().caller.client_capabilities() or "{}")


def _principal(p):
    scopes = getattr(p.scopes, "value", None)
    return {"tenant": p.tenant, "subject": p.subject, "scopes": scopes,
            "claims": json.loads(p.claims or "{}")}


def _request(request):
    types = _wit().types
    if isinstance(request, Form):
        return types.InputRequest_ElicitForm(
            types.ElicitForm(message=request.message, requested_schema=json.dumps(request.schema())))
    kind = request[0]
    if kind == "url":
        _, message, url, elicitation_id = request
        return types.InputRequest_ElicitUrl(
            types.ElicitUrl(message=message, url=url, elicitation_id=elicitation_id))
    if kind == "sampling":
        return types.InputRequest_Sampling(json.dumps(request[1]))
    if kind == "roots":
        return types.InputRequest_Roots()
    raise ValueError(f"not a question: {request!r}")


def _input_error(e):
    kind = type(e).__name__.removeprefix("InputError_").lower().replace("keyconflict", "key-conflict")
    return InputError(kind, getattr(e, "value", None))


def tool(name=None, *, description=None, title=None, mode="sync", output_schema=None,
         mode_rule=None, prepare=None, required_capabilities=None):
    """Declares `fn(cx: Context, **arguments)` as a tool named `name` (default: the
    function's name).

    - `mode`: `sync` (never a task), `optional` (a task when the client supports tasks) or
      `required` (always a task).
    - `mode_rule(arguments, call: Call)`: decides each call's mode instead (a mode name or
      a `ModeChoice`), for an `optional` tool.
    - `prepare(cx, arguments)`: runs before a task is created and may ask the user
      (`cx.elicit`) synchronously; returns the arguments the task runs with.
    - `output_schema`: derived from the return hint unless given.
    """
    if callable(name):  # `@tool` without parentheses
        return tool()(name)
    if mode not in _MODES:
        raise ValueError(f"mode is one of {', '.join(_MODES)}")

    def declare(fn):
        tool_name = name or fn.__name__
        if tool_name in TOOLS:
            raise ValueError(f"two tools are named {tool_name!r}")
        hints = typing.get_type_hints(fn, include_extras=True)
        params = list(inspect.signature(fn).parameters.values())[1:]
        TOOLS[tool_name] = {
            "fn": fn,
            "title": title,
            "description": description or (fn.__doc__ or "").strip() or None,
            "mode": mode,
            "input_schema": input_schema(fn, skip_first=True),
            "output_schema": output_schema if output_schema is not None else _output_schema(fn),
            "signature": inspect.signature(fn),
            "hints": {p.name: hints.get(p.name) for p in params},
            "defaults": [(p.name, p.default) for p in params],
            "mode_rule": mode_rule,
            "prepare": prepare,
            "required_capabilities": required_capabilities,
        }
        return fn

    return declare



def _arguments(spec, arguments):
    """The decoded arguments as the tool's parameter types; an Optional parameter the
    caller leaves out is `None`."""
    if not isinstance(arguments, dict):
        raise TypeError("the arguments are not an object")
    hints = spec["hints"]
    given = {k: coerce(hints[k], v) if hints.get(k) is not None else v for k, v in arguments.items()}
    return {**missing_optionals(spec["defaults"], hints, given), **given}
