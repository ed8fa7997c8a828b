"""Resources and prompts: `@resource` and `@prompt` declare what `resources/list`,
`resources/read`, `prompts/list`, `prompts/get` and `completion/complete` serve.

    @resource("config://app", mime_type="application/json")
    def app_config():
        return {"theme": "dark"}

    @resource("logs://{day}", description="One day's log")
    def day_log(day: str) -> str:
        return f"nothing happened on {day}"

    @prompt(description="Reviews code")
    def review(code: Annotated[str, "the code"], style: str = "terse"):
        return f"Review this ({style}):\\n{code}"

A resource returns a string (text), bytes (a blob) or anything JSON can hold (shown as
JSON). A URI with `{variables}` is a template: the function receives the variables as
keyword arguments. A prompt's arguments are its parameters (strings; required unless they
have a default) and it returns a string (one user message), a list of strings and
`Message`s, or `(description, messages)`. `complete={"argument": fn(value, context)}`
offers completions for an argument of a prompt or a template.
"""

import inspect
import typing

#: Fixed resources by URI, templates by URI template, prompts by name, in declaration order.
RESOURCES, TEMPLATES, PROMPTS = {}, {}, {}


class Message:
    """One prompt message: `role` is `user` or `assistant`; `text`, or a content block
    (as in `ToolResult`)."""

    def __init__(self, role, text=None, content=None):
        if role not in ("user", "assistant"):
            raise ValueError("a message's role is user or assistant")
        if (text is None) == (content is None):
            raise ValueError("a message has text or a content block")
        self.role = role
        self.content = content if content is not None else {"type": "text", "text": text}


def resource(uri, *, name=None, title=None, description=None, mime_type=None, complete=None):
    """Declares `fn` as the reader of `uri` (a template when it holds `{variables}`)."""

    def declare(fn):
        entry = {
            "fn": fn,
            "uri": uri,
            "name": name or fn.__name__,
            "title": title,
            "description": description or (fn.__doc__ or "").strip() or None,
            "mime_type": mime_type,
            "complete": dict(complete or {}),
        }
        table = TEMPLATES if "{" in uri else RESOURCES
        if uri in table:
            raise ValueError(f"two resources have the URI {uri!r}")
        table[uri] = entry
        return fn

    return declare


def prompt(name=None, *, title=None, description=None, complete=None):
    """Declares `fn(**arguments)` as a prompt named `name` (default: the function's)."""

    def declare(fn):
        prompt_name = name or fn.__name__
        if prompt_name in PROMPTS:
            raise ValueError(f"two prompts are named {prompt_name!r}")
        hints = typing.get_type_hints(fn, include_extras=True)
        arguments = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{prompt_name}: a prompt's arguments are named")
            hint, about = hints.get(p.name), None
            if typing.get_origin(hint) is typing.Annotated:
                about = next((a for a in typing.get_args(hint)[1:] if isinstance(a, str)), None)
            arguments.append({"name": p.name, "description": about,
                              "required": p.default is inspect.Parameter.empty})
        PROMPTS[prompt_name] = {
            "fn": fn,
            "title": title,
            "description": description or (fn.__doc__ or "").strip() or None,
            "arguments": arguments,
            "complete": dict(complete or {}),
        }
        return fn

    return declare


def messages_of(value):
    """A prompt function's return value as `(description, [Message])`."""
    description = None
    if isinstance(value, tuple) and len(value) == 2:
        description, value = value
    if isinstance(value, (str, Message)):
        value = [value]
    return description, [m if isinstance(m, Message) else Message("user", text=str(m)) for m in value]
