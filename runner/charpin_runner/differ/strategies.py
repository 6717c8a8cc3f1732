"""Generated inputs as data: values for a changed function's parameters, made from its annotations,
from the values its captured calls had, and from the constants its code compares with; and the
shrinking of an input two versions answer differently. Runs on boxes; stdlib only; pure (the
code under test is never imported here: the worker describes it, genworker.py).

A value is a *tree*, JSON the worker builds into an object: None, true/false, an int and a string
stand for themselves; every other value is a one-key object: {"float": "0.1"} (its repr),
{"bytes": HEX}, {"list": [...]}, {"tuple": [...]}, {"set": [...]}, {"frozenset": [...]},
{"dict": [[K, V], ...]}, {"enum": "module:Class", "name": "MEMBER"},
{"dataclass": "module:Class", "fields": {...}}, {"new": "module:Class"} (Class()), and
{"seen": [CALL, POSITION]} (that argument of a captured call, as it was). An input is
{"args": [tree, ...], "kwargs": {name: tree}}; a method's first argument is its instance.

Values stay ordinary on purpose: no NaN, no infinity, no -0.0 and no lone surrogate unless a
captured call had one. Those are where honest rewrites (`max(x, 0)` for `x if x > 0 else 0`)
legitimately part ways, and a finding there would read as a false alarm.
"""

from __future__ import annotations

import json
import math
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

Tree = Any
Input = dict[str, Any]
NOTHING: Any = object()  # no value can be made for this schema
SMALL = 4  # most elements a generated list, set, dict or string of words has
DEPTH = 3
_ALPHABET = string.ascii_letters + string.digits + " -_.,:/@" + "éßЖ"
_SCALARS = ("int", "float", "str", "bytes")


def key(tree: Tree) -> str:
    """The tree's canonical text: equal inputs, equal keys."""
    return json.dumps(tree, sort_keys=True, ensure_ascii=True)


def size(tree: Tree) -> tuple[int, str]:
    """What shrinking makes smaller: shorter text first, then the text's order."""
    text = key(tree)
    return len(text), text


def kind(tree: Tree) -> str:
    if tree is None:
        return "none"
    if isinstance(tree, bool):
        return "bool"
    if isinstance(tree, int):
        return "int"
    if isinstance(tree, str):
        return "str"
    if isinstance(tree, dict):
        for tag in ("float", "bytes", "list", "tuple", "set", "frozenset", "dict", "enum"):
            if tag in tree:
                return tag
        for tag in ("dataclass", "new", "seen"):
            if tag in tree:
                return tag
    return "other"


def _float(value: float) -> Optional[Tree]:
    if not math.isfinite(value) or (value == 0 and math.copysign(1, value) < 0):
        return None
    return {"float": repr(value)}


@dataclass
class Constants:
    """What the function's code compares with (genworker.gather), by kind."""

    ints: list[int] = field(default_factory=list)
    floats: list[float] = field(default_factory=list)
    strs: list[str] = field(default_factory=list)
    bytes_: list[str] = field(default_factory=list)  # hex

    @classmethod
    def read(cls, *said: dict[str, Any]) -> Constants:
        """The union of the constants the describes of both versions found."""
        out = cls()
        for one in said:
            out.ints += [v for v in one.get("int", []) if type(v) is int and v not in out.ints]
            for text in one.get("float", []):
                try:
                    value = float(text)
                except (TypeError, ValueError):
                    continue
                if math.isfinite(value) and value not in out.floats:
                    out.floats.append(value)
            out.strs += [v for v in one.get("str", []) if isinstance(v, str) and v not in out.strs]
            out.bytes_ += [v for v in one.get("bytes", []) if v not in out.bytes_]
        return out

    def near(self, what: str) -> list[Tree]:
        """Each constant of that kind and its neighbours (a boundary and both sides of it)."""
        if what == "int":
            return [v + d for v in self.ints for d in (0, 1, -1)]
        if what == "float":
            found = [_float(v + d) for v in self.floats for d in (0.0, 0.5, -0.5)]
            found += [_float(float(v)) for v in self.ints]
            return [f for f in found if f is not None]
        if what == "str":
            return list(self.strs)
        if what == "bytes":
            return [{"bytes": h} for h in self.bytes_]
        return []


# -- values from a schema ---------------------------------------------------------------------


def random_tree(
    schema: dict[str, Any], rng: random.Random, consts: Constants, depth: int = 0
) -> Tree:
    """A value of the schema (genworker.schema), or NOTHING."""
    t = schema.get("t")
    if t == "any":
        # Nothing known: only inside a container, where an element of some kind will do.
        return _any_scalar(rng, consts) if depth else NOTHING
    if t == "none":
        return None
    if t == "bool":
        return rng.random() < 0.5
    if t in _SCALARS:
        return _scalar(t, rng, consts)
    if depth >= DEPTH:
        return NOTHING
    if t in ("list", "set", "frozenset"):
        items = [
            random_tree(schema["of"], rng, consts, depth + 1) for _ in range(rng.randint(0, SMALL))
        ]
        items = [i for i in items if i is not NOTHING]
        if t != "list":
            items = list(
                {key(i): i for i in items if kind(i) not in ("list", "dict", "set")}.values()
            )
        return {t: items}
    if t == "tuple":
        if "items" in schema:
            items = [random_tree(s, rng, consts, depth + 1) for s in schema["items"]]
            return NOTHING if any(i is NOTHING for i in items) else {"tuple": items}
        items = [
            random_tree(schema["of"], rng, consts, depth + 1) for _ in range(rng.randint(0, 3))
        ]
        return {"tuple": [i for i in items if i is not NOTHING]}
    if t == "dict":
        pairs: dict[str, list[Tree]] = {}
        for _ in range(rng.randint(0, SMALL)):
            k = random_tree(schema["k"], rng, consts, depth + 1)
            v = random_tree(schema["v"], rng, consts, depth + 1)
            if k is not NOTHING and v is not NOTHING and kind(k) not in ("list", "dict", "set"):
                pairs[key(k)] = [k, v]
        return {"dict": list(pairs.values())}
    if t == "union":
        options = list(schema["of"])
        rng.shuffle(options)
        for option in options:
            value = random_tree(option, rng, consts, depth)
            if value is not NOTHING:
                return value
        return NOTHING
    if t == "literal":
        return rng.choice(schema["values"]) if schema["values"] else NOTHING
    if t == "enum":
        return {"enum": schema["cls"], "name": rng.choice(schema["members"])}
    if t == "dataclass":
        fields: dict[str, Tree] = {}
        for name, inner, has_default in schema["fields"]:
            value = random_tree(inner, rng, consts, depth + 1)
            if value is NOTHING and not has_default:
                return NOTHING
            if value is not NOTHING:
                fields[name] = value
        return {"dataclass": schema["cls"], "fields": fields}
    return NOTHING


def _any_scalar(rng: random.Random, consts: Constants) -> Tree:
    return _scalar(rng.choice(("int", "str")), rng, consts)


def _scalar(t: str, rng: random.Random, consts: Constants) -> Tree:
    near = consts.near(t)
    if near and rng.random() < 0.25:
        return rng.choice(near)
    roll = rng.random()
    if t == "int":
        if roll < 0.4:
            return rng.randint(-10, 10)
        if roll < 0.7:
            return rng.randint(-1000, 1000)
        big = rng.getrandbits(rng.randint(1, 64))
        return -big if rng.random() < 0.5 else big
    if t == "float":
        if roll < 0.3:
            return {"float": repr(float(rng.randint(-100, 100)))}
        if roll < 0.6:
            return {"float": repr(rng.choice((0.1, 0.25, 0.5, 1.5, 2.5, 0.01, 99.99)))}
        value = round(rng.uniform(-1000, 1000), rng.choice((0, 1, 2, 3)))
        return _float(value) or {"float": "0.0"}
    if t == "str":
        if near and roll < 0.2:
            return rng.choice(near) + rng.choice(("", " ", "x", "0"))
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.choice((0, 1, 1, 2, 3, 5, 8, 12))))
    data = bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 1, 2, 4, 8))))
    return {"bytes": data.hex()}


def infer(tree: Tree) -> dict[str, Any]:
    """The schema of a seen value (the types the captured calls had)."""
    k = kind(tree)
    if k in ("none", "bool", *_SCALARS):
        return {"t": k}
    if k in ("list", "set", "frozenset") or (k == "tuple" and not tree["tuple"]):
        items = tree[k]
        return {"t": k, "of": _union([infer(i) for i in items])}
    if k == "tuple":
        return {"t": "tuple", "items": [infer(i) for i in tree["tuple"]]}
    if k == "dict":
        pairs = tree["dict"]
        return {
            "t": "dict",
            "k": _union([infer(p[0]) for p in pairs]),
            "v": _union([infer(p[1]) for p in pairs]),
        }
    return {"t": "opaque"}


def _union(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    unique = list({key(s): s for s in schemas}.values())
    if not unique:
        return {"t": "any"}
    return unique[0] if len(unique) == 1 else {"t": "union", "of": unique}


# -- same shape, other values -----------------------------------------------------------------


def neighbours(tree: Tree, consts: Constants, enums: dict[str, list[str]]) -> list[Tree]:
    """Values of the same shape near tree: ints one either side and the boundaries 0, 1, -1;
    strings and lists empty, cut and longer; each element of a container varied in turn."""
    k = kind(tree)
    out: list[Tree] = []
    if k == "bool":
        out = [not tree]
    elif k == "int":
        v = int(tree)
        out = [v - 1, v + 1, 0, 1, -1, -v, v * 2, v // 2, v * 10 + 1, *consts.near("int")]
    elif k == "float":
        x = float(tree["float"])
        found = [x - 1, x + 1, 0.0, -x, x * 2, x / 2, x + 0.5, float(round(x)), x * 10]
        out = [f for f in (_float(v) for v in found) if f is not None] + consts.near("float")
    elif k == "str":
        s = str(tree)
        out = ["", s[:1], s[:-1], s[1:], s + s, s + "x", s.upper(), s.lower(), " " + s + " "]
        out += [s.title(), s[::-1], *consts.near("str")]
    elif k == "bytes":
        b = bytes.fromhex(tree["bytes"])
        out = [{"bytes": v.hex()} for v in (b"", b[:1], b[:-1], b + b, b + b"x", b.upper())]
    elif k in ("list", "set", "frozenset", "tuple"):
        items = list(tree[k])
        if k != "tuple":
            out = [{k: []}, {k: items[:1]}, {k: items[1:]}, {k: list(reversed(items))}]
            if k == "list" and items:
                out.append({k: items + items[:1]})
        for i, item in enumerate(items[:3]):
            for other in neighbours(item, consts, enums)[:6]:
                out.append({k: [*items[:i], other, *items[i + 1 :]]})
    elif k == "dict":
        pairs = list(tree["dict"])
        out = [{"dict": []}, {"dict": pairs[1:]}]
        for i, (name, value) in enumerate(pairs[:3]):
            for other in neighbours(value, consts, enums)[:6]:
                out.append({"dict": [*pairs[:i], [name, other], *pairs[i + 1 :]]})
    elif k == "enum":
        out = [{"enum": tree["enum"], "name": m} for m in enums.get(tree["enum"], [])]
    elif k == "dataclass":
        fields = dict(tree["fields"])
        for name, value in list(fields.items())[:6]:
            for other in neighbours(value, consts, enums)[:6]:
                out.append({"dataclass": tree["dataclass"], "fields": {**fields, name: other}})
    mine = key(tree)
    unique = {key(t): t for t in out if key(t) != mine}
    return list(unique.values())


# -- shrinking --------------------------------------------------------------------------------


def shrinks(tree: Tree, consts: Constants) -> Iterator[Tree]:
    """Smaller versions of tree, simplest first: ints toward 0 (halving the way, then the
    code's constants on the way), floats toward 0.0 and whole numbers, strings, bytes and
    containers shorter, then their elements smaller. Only what size() orders before tree."""
    mine = size(tree)
    for other in _smaller(tree, consts):
        if size(other) < mine:
            yield other


def _smaller(tree: Tree, consts: Constants) -> Iterator[Tree]:
    k = kind(tree)
    if k == "bool":
        if tree:
            yield False
    elif k == "int":
        v = int(tree)
        yield 0
        step = v
        while step:
            yield v - step
            step = int(step / 2)
        for c in consts.ints:
            for d in (-1, 0, 1):
                if abs(c + d) < abs(v):
                    yield c + d
    elif k == "float":
        x = float(tree["float"])
        for y in (0.0, float(math.trunc(x)), x / 2, round(x, 1), round(x, 2)):
            f = _float(y)
            if f is not None:
                yield f
    elif k == "str":
        text = str(tree)
        yield from (text[:0], text[: len(text) // 2], text[1:], text[:-1])
    elif k == "bytes":
        data = bytes.fromhex(tree["bytes"])
        for cut in (data[:0], data[: len(data) // 2], data[1:], data[:-1]):
            yield {"bytes": cut.hex()}
    elif k in ("list", "set", "frozenset", "tuple", "dict"):
        items = list(tree[k])
        if k != "tuple":
            yield {k: []}
            yield {k: items[: len(items) // 2]}
            for i in range(min(len(items), 8)):
                yield {k: items[:i] + items[i + 1 :]}
        for i, item in enumerate(items[:8]):
            if k == "dict":
                for other in shrinks(item[1], consts):
                    yield {k: [*items[:i], [item[0], other], *items[i + 1 :]]}
            else:
                for other in shrinks(item, consts):
                    yield {k: [*items[:i], other, *items[i + 1 :]]}
    elif k == "dataclass":
        fields = dict(tree["fields"])
        for name, value in fields.items():
            for other in shrinks(value, consts):
                yield {"dataclass": tree["dataclass"], "fields": {**fields, name: other}}


def shrink_input(given: Input, consts: Constants) -> Iterator[Input]:
    """given with one argument made smaller, each way shrinks() knows, argument by argument."""
    args, kwargs = list(given["args"]), dict(given["kwargs"])
    for i, tree in enumerate(args):
        for other in shrinks(tree, consts):
            yield {"args": [*args[:i], other, *args[i + 1 :]], "kwargs": kwargs}
    for name, tree in kwargs.items():
        for other in shrinks(tree, consts):
            yield {"args": args, "kwargs": {**kwargs, name: other}}
