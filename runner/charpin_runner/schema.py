"""Strict conversion of plain JSON/TOML data into the runner's dataclasses. Runs on boxes; stdlib.

The coordinator validates the same dataclasses with msgspec; this is the stdlib twin so that a
box (or `charpin` on a laptop) refuses bad input with the same one-line, `$.path` message:
``Expected `array`, got `str` - at `$.tool.charpin.watch` ``.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any, TypeVar, Union

from charpin_runner.errors import ConfigError

T = TypeVar("T")

# `X | Y` annotations (PEP 604) evaluate to types.UnionType on Python >= 3.10 only.
_UnionType = getattr(types, "UnionType", None)

_JSON_NAMES = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    list: "array",
    dict: "object",
    type(None): "null",
}


def _name_of(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _hints(cls: type) -> dict[str, Any]:
    module = sys.modules[cls.__module__]
    return typing.get_type_hints(cls, vars(module))


def convert(data: Any, cls: type[T], path: str = "$", error: type[ConfigError] = ConfigError) -> T:
    """Convert data into dataclass cls, refusing unknown keys and wrong types with a `$.path`."""
    return typing.cast(T, _convert(data, cls, path, error))


def _fail(error: type[ConfigError], message: str, path: str) -> Exception:
    exc: Exception = error(f"{message} - at `{path}`")
    return exc


def _convert(value: Any, tp: Any, path: str, error: type[ConfigError]) -> Any:
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _convert_dataclass(value, tp, path, error)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Union or (_UnionType is not None and origin is _UnionType):
        return _convert_union(value, args, path, error)
    if origin is typing.Literal:
        if value not in args:
            allowed = ", ".join(repr(a) for a in args)
            raise _fail(error, f"Invalid value {value!r}, expected one of {allowed}", path)
        return value
    if origin in (list, tuple) or tp in (list, tuple):
        return _convert_list(value, args, path, error)
    if origin is dict or tp is dict:
        return _convert_dict(value, args, path, error)
    return _convert_scalar(value, tp, path, error)


def _convert_dataclass(value: Any, cls: type, path: str, error: type[ConfigError]) -> Any:
    if not isinstance(value, dict):
        raise _fail(error, f"Expected `object`, got `{_name_of(value)}`", path)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in value:
        if key not in fields:
            raise _fail(error, f"Object contains unknown field `{key}`", path)
    kwargs = {}
    for name, field in fields.items():
        if name in value:
            kwargs[name] = _convert(value[name], hints[name], f"{path}.{name}", error)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise _fail(error, f"Object missing required field `{name}`", path)
    try:
        return cls(**kwargs)
    except ValueError as exc:  # __post_init__ checks values the types cannot express
        raise _fail(error, str(exc), path) from exc


def _convert_union(value: Any, args: tuple[Any, ...], path: str, error: type[ConfigError]) -> Any:
    if value is None and type(None) in args:
        return None
    others = [a for a in args if a is not type(None)]
    last: Exception = _fail(error, f"Expected `{_name_of(value)}` to be valid", path)
    for arg in others:
        try:
            return _convert(value, arg, path, error)
        except error as exc:
            last = exc
    raise last


def _convert_list(value: Any, args: tuple[Any, ...], path: str, error: type[ConfigError]) -> Any:
    if not isinstance(value, list):
        raise _fail(error, f"Expected `array`, got `{_name_of(value)}`", path)
    item = args[0] if args else Any
    return [_convert(v, item, f"{path}[{i}]", error) for i, v in enumerate(value)]


def _convert_dict(value: Any, args: tuple[Any, ...], path: str, error: type[ConfigError]) -> Any:
    if not isinstance(value, dict):
        raise _fail(error, f"Expected `object`, got `{_name_of(value)}`", path)
    item = args[1] if len(args) == 2 else Any
    out = {}
    for key, val in value.items():
        if not isinstance(key, str):
            raise _fail(error, f"Expected `str` key, got `{_name_of(key)}`", path)
        out[key] = _convert(val, item, f"{path}[{key!r}]", error)
    return out


def _convert_scalar(value: Any, tp: Any, path: str, error: type[ConfigError]) -> Any:
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float) and isinstance(value, bool):
        raise _fail(error, f"Expected `{_JSON_NAMES[tp]}`, got `bool`", path)
    if not isinstance(value, tp):
        raise _fail(error, f"Expected `{_JSON_NAMES.get(tp, tp)}`, got `{_name_of(value)}`", path)
    return value
