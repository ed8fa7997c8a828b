"""JSON Schemas from Python type hints: a tool's input schema is its parameters'.

Supported: str, int, float, bool, None, list[T], dict[str, T], Optional[T] / T | None,
Literal[...] (an enum), Enum subclasses, dataclasses and TypedDicts (objects), and
`Annotated[T, "description"]` for a field's description. A parameter with a default is not
required and carries the default. Anything else is refused when the tool is declared, so a
tool never describes a schema it cannot check.
"""

import dataclasses
import enum
import inspect
import types
import typing


class SchemaError(TypeError):
    """A type hint this SDK cannot turn into a JSON Schema."""


def _is_optional(hint):
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if type(None) in args:
            rest = [a for a in args if a is not type(None)]
            return True, rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    return False, hint


def schema_of(hint, where="a value"):
    """The JSON Schema of `hint`; `where` names it in errors."""
    if hint is inspect.Parameter.empty or hint is typing.Any:
        raise SchemaError(f"{where} needs a type hint")
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = schema_of(args[0], where)
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
        return schema
    optional, inner = _is_optional(hint)
    if optional:
        return {"anyOf": [schema_of(inner, where), {"type": "null"}]}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [schema_of(a, where) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, typing.List):
        return {"type": "array", "items": schema_of(args[0], where) if args else {}}
    if origin in (dict, typing.Dict):
        if args and args[0] is not str:
            raise SchemaError(f"{where}: object keys are strings")
        return {"type": "object", "additionalProperties": schema_of(args[1], where) if args else {}}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if dataclasses.is_dataclass(hint):
        return _object_of([(f.name, f.type, _field_default(f)) for f in dataclasses.fields(hint)],
                          where, typing.get_type_hints(hint, include_extras=True))
    if isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__"):
        hints = typing.get_type_hints(hint, include_extras=True)
        required = getattr(hint, "__required_keys__", set(hints))
        return _object_of([(k, v, inspect.Parameter.empty if k in required else None) for k, v in hints.items()],
                          where, hints)
    raise SchemaError(f"{where}: no JSON Schema for {hint!r}")


#: A field whose default is computed (`default_factory`): not required, and no default in
#: the schema.
_COMPUTED = object()


def _field_default(f):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return _COMPUTED
    return inspect.Parameter.empty


def _object_of(fields, where, hints):
    props, required = {}, []
    for name, hint, default in fields:
        hint = hints.get(name, hint)
        s = schema_of(hint, f"{where}.{name}")
        optional, _ = _is_optional(hint)
        if default is inspect.Parameter.empty and not optional:
            required.append(name)
        elif default not in (inspect.Parameter.empty, None, _COMPUTED):
            s["default"] = plain(default)
        props[name] = s
    out = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def input_schema(fn, skip_first):
    """The input schema of `fn`'s parameters (after the context, when `skip_first`)."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise SchemaError(f"{fn.__name__}: *args and **kwargs have no schema")
    return _object_of([(p.name, hints.get(p.name, p.annotation), p.default) for p in params],
                      fn.__name__, hints)


def output_schema(fn):
    """The output schema of `fn`'s return hint, when it returns an object (a dataclass, a
    TypedDict or `dict[str, T]`); `None` for text, `None` and results built by hand."""
    hint = typing.get_type_hints(fn, include_extras=True).get("return", inspect.Parameter.empty)
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if hint is inspect.Parameter.empty or hint in (str, type(None), None, typing.Any):
        return None
    if not (dataclasses.is_dataclass(hint) or typing.get_origin(hint) in (dict, typing.Dict)
            or (isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__"))):
        return None
    return schema_of(hint, f"{fn.__name__} -> result")


def coerce(hint, value):
    """`value` (decoded JSON, already checked against `schema_of(hint)` by the host) as the
    Python type `hint` names: enums by value, dataclasses from objects, recursively."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return coerce(args[0], value)
    optional, inner = _is_optional(hint)
    if optional:
        return coerce(inner, value)
    if origin in (list, typing.List) and args and isinstance(value, list):
        return [coerce(args[0], v) for v in value]
    if origin in (dict, typing.Dict) and len(args) == 2 and isinstance(value, dict):
        return {k: coerce(args[1], v) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        hints = typing.get_type_hints(hint, include_extras=True)
        names = {f.name for f in dataclasses.fields(hint)}
        fields = {k: coerce(hints.get(k), v) for k, v in value.items() if k in names}
        absent = missing_optionals([(f.name, _field_default(f)) for f in dataclasses.fields(hint)], hints, fields)
        return hint(**absent, **fields)
    return value


def missing_optionals(names_defaults, hints, given):
    """`None` for every `(name, default)` whose hint is Optional, that has no default and is
    not in `given`: an Optional value the caller leaves out is `None`."""
    return {name: None for name, default in names_defaults
            if name not in given and default is inspect.Parameter.empty and _is_optional(hints.get(name))[0]}


def plain(value):
    """`value` as JSON-ready data: dataclasses as dicts, enums as their values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
