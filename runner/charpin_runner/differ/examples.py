"""The order in which generated inputs are tried for one function, from what the worker said of it
(genworker.describe_function). Runs on boxes; stdlib only; pure.

1. The captured calls, one argument at a time moved to a neighbour (same shape, other values:
   strategies.neighbours), breadth first across calls and arguments, so every argument is
   varied before any is varied twice.
2. Each parameter in turn at the edges its annotation or its seen values have (0, 1, -1, "",
   [], each Enum member and Literal value, None for an Optional) and at the constants the code
   compares with, the others as in the first captured call.
3. Random inputs from then on: a parameter's value from its annotation, or from the type its
   captured values had, or one of those values moved a step or two.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from charpin_runner.differ.strategies import (
    NOTHING,
    Constants,
    Input,
    Tree,
    infer,
    kind,
    neighbours,
    random_tree,
)

SEEN_CALLS = 5  # captured calls the first phase varies
_UNKNOWN = ("any", "opaque")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # pos, kw, var, varkw
    keyword: bool  # a positional parameter that may be passed by name
    default: bool
    schema: dict[str, Any]


class Plan:
    """The inputs to try for one function; why_not says why there are none, when so."""

    def __init__(self, described: dict[str, Any], consts: Constants, rng: random.Random):
        self.method = described.get("kind") == "method"
        self.params = [
            Param(
                str(p["name"]),
                str(p["kind"]),
                bool(p.get("keyword")),
                bool(p.get("default")),
                dict(p.get("schema") or {"t": "any"}),
            )
            for p in described.get("params", [])
        ]
        self.itself: Optional[Tree] = described.get("self")
        self.seen: list[Input] = [
            {"args": list(c.get("args", [])), "kwargs": dict(c.get("kwargs", {}))}
            for c in described.get("seen", [])
        ]
        self.enums: dict[str, list[str]] = dict(described.get("enums", {}))
        self.consts = consts
        self.rng = rng
        self.why_not = ""
        self._offset = 1 if self.method else 0

    def inputs(self) -> Iterator[Input]:
        """Inputs, the first two phases in order, then random ones without end (the caller
        stops at its budget and drops repeats). Ends early only when nothing can be made."""
        yield from self._varied_seen()
        yield from self._edges()
        failures = 0
        while failures < 50:
            made = self._random()
            if made is None:
                failures += 1
                continue
            failures = 0
            yield made

    # -- phase 1 ---------------------------------------------------------------------------------

    def _varied_seen(self) -> Iterator[Input]:
        pools: list[tuple[Input, str, Any, list[Tree]]] = []
        for call in self.seen[:SEEN_CALLS]:
            for i in range(self._offset, len(call["args"])):
                pools.append((call, "a", i, neighbours(call["args"][i], self.consts, self.enums)))
            for name in sorted(call["kwargs"]):
                options = neighbours(call["kwargs"][name], self.consts, self.enums)
                pools.append((call, "k", name, options))
        longest = max((len(p[3]) for p in pools), default=0)
        for depth in range(longest):
            for call, where, at, options in pools:
                if depth < len(options):
                    yield _with(call, where, at, options[depth])

    # -- phase 2 ---------------------------------------------------------------------------------

    def _edges(self) -> Iterator[Input]:
        base = self.seen[0] if self.seen else self._random()
        if base is None:
            return
        for j, param in enumerate(self._named()):
            where, at = self._slot(j, param)
            if where == "a" and at >= len(base["args"]):
                continue  # left to its default there
            values = _edges_of(param.schema, self.consts, self.enums)
            for tree in self._seen_at(where, at):
                values += _edges_of(infer(tree), self.consts, self.enums)
            for value in values:
                yield _with(base, where, at, value)

    # -- phase 3 ---------------------------------------------------------------------------------

    def _random(self) -> Optional[Input]:
        args: list[Tree] = []
        kwargs: dict[str, Tree] = {}
        if self.method:
            selves = [c["args"][0] for c in self.seen if c["args"]]
            itself = self.itself if self.itself is not None else (selves[0] if selves else None)
            if itself is None:
                self.why_not = (
                    "it is a method of a class that needs constructor arguments, and no "
                    "captured call brings an instance"
                )
                return None
            if selves and self.itself is not None and self.rng.random() < 0.5:
                itself = self.rng.choice(selves)
            args.append(itself)
        skipping = False
        for j, param in enumerate(self._named()):
            value = self._value(j, param)
            if value is NOTHING or (param.default and self.rng.random() < 0.2):
                if not param.default:
                    self.why_not = (
                        f"parameter {param.name!r} has no annotation charpin can fill and no "
                        "captured call shows what it takes"
                    )
                    return None
                skipping = skipping or param.kind == "pos"
                continue
            if param.kind == "pos" and not skipping:
                args.append(value)
            elif param.kind == "kw" or param.keyword:
                kwargs[param.name] = value
        return {"args": args, "kwargs": kwargs}

    def _value(self, j: int, param: Param) -> Tree:
        rng = self.rng
        here = self._seen_at(*self._slot(j, param))
        plain = [t for t in here if kind(t) != "seen"]
        known = param.schema.get("t") not in _UNKNOWN
        if known and (not plain or rng.random() < 0.5):
            value = random_tree(param.schema, rng, self.consts)
            if value is not NOTHING:
                return value
        if plain:
            value = rng.choice(plain)
            if rng.random() < 0.5:
                fresh = random_tree(infer(value), rng, self.consts)
                value = value if fresh is NOTHING else fresh
            for _ in range(rng.randint(0, 2)):
                near = neighbours(value, self.consts, self.enums)
                value = rng.choice(near) if near else value
            return value
        return rng.choice(here) if here else NOTHING

    # -- where a parameter sits -------------------------------------------------------------------

    def _named(self) -> list[Param]:
        return [p for p in self.params if p.kind in ("pos", "kw")]

    def _slot(self, j: int, param: Param) -> tuple[str, Any]:
        if param.kind == "kw":
            return "k", param.name
        positional = [p for p in self._named() if p.kind == "pos"]
        return "a", positional.index(param) + self._offset

    def _seen_at(self, where: str, at: Any) -> list[Tree]:
        found = []
        for call in self.seen:
            if where == "a" and at < len(call["args"]):
                found.append(call["args"][at])
            elif where == "k" and at in call["kwargs"]:
                found.append(call["kwargs"][at])
        return found


def _with(call: Input, where: str, at: Any, value: Tree) -> Input:
    if where == "a":
        args = list(call["args"])
        args[at] = value
        return {"args": args, "kwargs": dict(call["kwargs"])}
    return {"args": list(call["args"]), "kwargs": {**call["kwargs"], at: value}}


def _edges_of(schema: dict[str, Any], consts: Constants, enums: dict[str, list[str]]) -> list[Tree]:
    """The values at the edges of a schema: where code most often changes its mind."""
    t = schema.get("t")
    if t == "int":
        return [0, 1, -1, *consts.near("int")]
    if t == "float":
        return [{"float": "0.0"}, {"float": "1.0"}, {"float": "-1.0"}, *consts.near("float")]
    if t == "str":
        return ["", "a", " ", *consts.near("str")]
    if t == "bytes":
        return [{"bytes": ""}, *consts.near("bytes")]
    if t == "bool":
        return [False, True]
    if t == "none":
        return [None]
    if t in ("list", "set", "frozenset"):
        return [{t: []}, *({t: [e]} for e in _edges_of(schema["of"], consts, enums)[:3])]
    if t == "tuple" and "items" in schema:
        firsts = [_edges_of(s, consts, enums)[:1] for s in schema["items"]]
        return [{"tuple": [f[0] for f in firsts]}] if all(firsts) else []
    if t == "tuple":
        return [{"tuple": []}]
    if t == "dict":
        return [{"dict": []}]
    if t == "union":
        return [v for option in schema["of"] for v in _edges_of(option, consts, enums)]
    if t == "literal":
        return list(schema["values"])
    if t == "enum":
        return [{"enum": schema["cls"], "name": m} for m in schema["members"]]
    return []
