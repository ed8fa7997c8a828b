"""Snodo tools in Python: decorated functions, built into a WebAssembly component with
componentize-py against Snodo's WIT (`snodo:tasks@0.4.0`, world `executor`).

    from snodo_guest import Context, Form, tool
    from snodo_guest.exports import *  # the component's exports, for componentize-py

    @tool(description="Says hello")
    def greet(cx: Context, name: str) -> str:
        return f"Hello, {name}!"

The input schema comes from the parameters' type hints (`schema.py`); a tool returns a
string (one text block), a dict (structured content, also shown as text), a `ToolResult`,
or raises `RpcError` (the task fails with it) or `Retry` (the attempt is retried under the
task's retry policy). The context gives what the Rust SDK's does: cancellation, status,
progress, logs, questions to the user (`elicit`, with the same keys across replays), the
caller, the attempt and the idempotency key.
"""

import json

from .schema import SchemaError, input_schema, schema_of

__all__ = [
    "Answer", "Context", "Form", "Retry", "RpcError", "SchemaError", "ToolResult", "tool",
    "schema_of",
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
    """A JSON-RPC error: raised by a tool, the task fails with it."""

    def __init__(self, code, message, data=None, status_message=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data
        self.status_message = status_message

    @classmethod
    def invalid_params(cls, message):
        return cls(-32602, message)

    @classmethod
    def internal(cls, message):
        return cls(-32603, message)


class Retry(Exception):
    """Raised by a tool: try again later under the task's retry policy (or fail with
    `error` once the policy is used up), showing `status_message` meanwhile."""

    def __init__(self, error, status_message):
        super().__init__(status_message)
        self.error, self.status_message = error, status_message


class ToolResult:
    """A tool's result: content blocks (text only here), structured content, an error flag."""

    def __init__(self, text=None, structured=None, is_error=False):
        self.text, self.structured, self.is_error = text, structured, is_error

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
        self.action = raw.get("action")
        self.content = raw.get("content") or {}

    @property
    def accepted(self):
        return self.action == "accept"

    def get(self, name, default=None):
        return self.content.get(name, default)


class InputError(Exception):
    """A question could not be asked or answered (cancelled, unsupported, a key reused for
    another question, an invalid answer)."""


class Context:
    """What an execution may ask of the host."""

    def __init__(self, work):
        self._work = work

    @property
    def attempt(self):
        """This execution's attempt number, from 1."""
        return self._work.attempt

    @property
    def task_id(self):
        """The task's id, for an execution of a task."""
        return self._work.task_id

    @property
    def idempotency_key(self):
        """The key a remote side can deduplicate this task's effects by."""
        return self._work.idempotency_key

    def is_cancelled(self):
        return _wit().context.is_cancelled()

    def set_status(self, message):
        _wit().context.set_status(message)

    def progress(self, progress, total=None, message=None):
        _wit().context.progress(float(progress), None if total is None else float(total), message)

    def log(self, message, level="info"):
        context, types = _wit().context, _wit().types
        levels = {"debug": types.LogLevel.DEBUG, "info": types.LogLevel.INFO,
                  "warning": types.LogLevel.WARNING, "error": types.LogLevel.ERROR}
        context.log(levels.get(level, types.LogLevel.INFO), message)

    def elicit(self, key, form):
        """Asks the user `form` under `key` and waits for the answer. The same key and form
        asked again (a replayed execution) returns the stored answer at once."""
        w = _wit()
        context, types, Err = w.context, w.types, w.Err
        request = types.InputRequest_ElicitForm(
            types.ElicitForm(message=form.message, requested_schema=json.dumps(form.schema())))
        try:
            return Answer(json.loads(context.await_input(key, request)))
        except Err as e:
            raise InputError(_input_error(e.value)) from None

    def caller(self):
        """Who called: tenant, subject, granted scopes (`None`: every scope) and claims."""
        p = _wit().caller.current()
        scopes = getattr(p.scopes, "value", None)
        return {"tenant": p.tenant, "subject": p.subject, "scopes": scopes,
                "claims": json.loads(p.claims or "{}")}


def _input_error(e):
    kind = type(e).__name__.removeprefix("InputError_").lower()
    detail = getattr(e, "value", None)
    return f"{kind}: {detail}" if detail else kind


def tool(name=None, *, description=None, title=None, mode="sync", output_schema=None):
    """Declares `fn(cx: Context, **arguments)` as a tool named `name` (default: the
    function's name). `mode`: `sync` (never a task), `optional` (the client decides) or
    `required` (always a task)."""
    if mode not in _MODES:
        raise ValueError(f"mode is one of {', '.join(_MODES)}")

    def declare(fn):
        tool_name = name or fn.__name__
        if tool_name in TOOLS:
            raise ValueError(f"two tools are named {tool_name!r}")
        TOOLS[tool_name] = {
            "fn": fn,
            "title": title,
            "description": description or (fn.__doc__ or "").strip() or None,
            "mode": mode,
            "input_schema": input_schema(fn, skip_first=True),
            "output_schema": output_schema,
        }
        return fn

    return declare
