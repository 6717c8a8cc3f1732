"""Coordinator side; may import msgspec. Strict msgspec mirrors of the runner's dataclasses.

The receipt and the `[tool.charpin]` table are defined once, as stdlib dataclasses in
charpin_runner (they must load on a bare box). msgspec decodes dataclasses but ignores unknown
fields, and evidence must not carry fields its schema version does not define. So each dataclass
gets a generated Struct twin with `forbid_unknown_fields=True`; decoding through the twin validates
everything with msgspec's `$.path` messages, then the typed decoder builds the dataclasses.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from functools import cache
from typing import Any

import msgspec


@cache
def strict_struct(cls: type) -> type[msgspec.Struct]:
    """Return a Struct type with the same fields as dataclass cls and no room for unknown keys."""
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    fields: list[tuple[str, Any, Any]] = []
    for field in dataclasses.fields(cls):
        tp = _mirror(hints[field.name])
        if field.default is not dataclasses.MISSING:
            fields.append((field.name, tp, field.default))
        elif field.default_factory is not dataclasses.MISSING:
            fields.append((field.name, tp, msgspec.field(default_factory=field.default_factory)))
        else:
            fields.append((field.name, tp, msgspec.NODEFAULT))
    spec = [(n, t) if d is msgspec.NODEFAULT else (n, t, d) for n, t, d in fields]
    return msgspec.defstruct(
        f"Strict{cls.__name__}", spec, forbid_unknown_fields=True, module=__name__
    )


def _mirror(tp: Any) -> Any:
    """Replace dataclasses inside a type annotation by their strict Struct twins."""
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return strict_struct(tp)
    origin = typing.get_origin(tp)
    if origin is None:
        return tp
    args = tuple(_mirror(a) for a in typing.get_args(tp))
    if origin is typing.Union:
        return typing.Union[args]  # noqa: UP007 - built at runtime from a tuple
    if origin is typing.Literal:
        return tp
    if origin is list:
        return list[args[0]]  # type: ignore[valid-type]
    if origin is dict:
        return dict[args[0], args[1]]  # type: ignore[valid-type]
    if origin is tuple:
        return tuple[args]  # type: ignore[valid-type]
    return tp
