"""Hostile corpus, in-process: fuzz the receipt decoder and the drift builder with hypothesis.

A receipt is untrusted bytes. Whatever they hold, load_receipt either returns a receipt or raises
IntegrityError (one line), in bounded time and memory; what it accepts, drift can compare; and
drift between valid receipts is symmetric and silent for identical ones.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any, NamedTuple

import msgspec
import pytest
from charpin_coordinator.drift import build_report
from charpin_coordinator.receipts import load_receipt
from charpin_coordinator.report import MatrixRow
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import (
    OUTCOMES,
    Deselected,
    Exit,
    FileState,
    Identity,
    PinResult,
    Pins,
    Quarantine,
    Receipt,
    Widening,
    dumps,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.receipt_factory import HEAD, TREE, make_receipt

# Small and quick enough for the normal suite; the database would write into the work tree.
FUZZ = settings(
    max_examples=60,
    deadline=2000,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Node ids and paths are legal but awkward: spaces, quotes, `$`, `;`, `::`, params, non-ASCII.
NODEIDS = [
    "tests/test_a.py::test_one",
    "tests/test_a.py::test_two[1-2]",
    "tests/test_b.py::TestX::test_three",
    "tests/test b.py::test_'q'",
    "tests/test_c.py::test_$HOME;x",
    "tests/tëst_d.py::test_ü",
    "tests/test_e.py::test_\\xff",
]
PATHS = ["tests/fixtures/a.json", "tests/fixtures/b c.txt", "tests/fixtures/ü.bin", "x\\y:z"]
SHAS = ["a" * 64, "b" * 64]
INTERPRETATIONS = [
    "ok",
    "failed",
    "interrupted",
    "usage",
    "no-tests",
    "incomplete",
    "timed-out",
    "internal-error",
]


def _subset(items: list[str]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(items), unique=True).map(sorted)


@st.composite
def receipts(draw: st.DrawFn, label: str = "a", expected: str | None = None) -> Receipt:
    """A valid receipt (as the runner writes it), varied along every compared dimension."""
    collected = draw(_subset(NODEIDS))
    selected = draw(_subset(collected)) if collected else []
    executed = draw(_subset(NODEIDS if draw(st.booleans()) else selected)) if selected else []
    outcomes = {n: draw(st.sampled_from(OUTCOMES)) for n in executed}
    head_before = draw(st.sampled_from([HEAD, "0" * 40]))
    head_after = draw(st.sampled_from([head_before, head_before, "9" * 40]))
    before = [FileState(p, "file", 0o644, draw(st.sampled_from(SHAS)), None) for p in PATHS[:2]]
    after = [FileState(p, "file", 0o644, draw(st.sampled_from(SHAS)), None) for p in PATHS[:2]]
    frozen = draw(_subset(collected)) if collected else []
    ledger = draw(st.sampled_from([None, "c" * 64, "d" * 64]))
    pin_ids = draw(_subset(["p1", "p2", "p3"]))
    pins = [
        PinResult(
            i,
            draw(st.sampled_from(["passed", "passed", "failed", "error"])),
            draw(st.sampled_from([0, 1, None])),
            draw(st.sampled_from(SHAS)),
            SHAS[0],
            {PATHS[0]: SHAS[0]} if draw(st.booleans()) else {},
            None,
        )
        for i in pin_ids
    ]
    widening = (
        [Widening("tests/test_a.py::test_two", ["tests/test_a.py::test_two[1-2]"])]
        if draw(st.booleans())
        else []
    )
    status = draw(st.sampled_from([0, 1, 2, 5, -15]))
    return make_receipt(
        label,
        identity=Identity(head_before, head_after, TREE, TREE, expected, None, None),
        outcomes=outcomes,
        durations=dict.fromkeys(executed, 0.5),
        exit=Exit(status, draw(st.sampled_from(INTERPRETATIONS)), [], status),
        pins=Pins("pins.jsonl" if pins else None, bool(pins) or draw(st.booleans()), pins),
        quarantine=Quarantine(
            "flaky.toml" if ledger else None,
            ledger,
            len(frozen),
            frozen,
            draw(_subset(["s1", "s2"])),
            widening,
            draw(_subset(["x1"])),
            draw(_subset(frozen)) if frozen else [],
        ),
        **{
            "collection.collected": collected,
            "collection.selected": selected,
            "collection.executed": executed,
            "collection.order": draw(st.permutations(collected)),
            "collection.deselected": [Deselected(n, n) for n in frozen],
            "collection.session_finished": draw(st.booleans()),
            "tree.dirty_before": draw(_subset(PATHS)),
            "tree.dirty_after": draw(_subset(PATHS)),
            "tree.written": draw(_subset(PATHS)),
            "tree.outputs": draw(_subset(["build/", "*.log"])),
            "fixtures.before": before,
            "fixtures.after": after,
            "fixtures.changed": [b.path for b, a in zip(before, after, strict=True) if b != a],
            "fixtures.missing_roots": draw(_subset(["tests/other"])),
            "environment.tz": draw(st.sampled_from(["UTC", "Asia/Tokyo"])),
            "environment.variables": draw(
                st.dictionaries(st.sampled_from(["LANG", "TZ"]), st.sampled_from(["C", "x"]))
            ),
        },
    )


def _decoded(receipt: Receipt) -> Receipt:
    """Through the bytes and the decoder, as every receipt reaches drift."""
    return load_receipt(dumps(receipt), source=receipt.label)


def _load_or_refuse(raw: bytes) -> Receipt | None:
    """load_receipt, asserting it can only refuse with one line; nothing else may escape."""
    try:
        return load_receipt(raw, source="fuzz")
    except IntegrityError as exc:
        message = str(exc)
        assert message.startswith("fuzz: ")
        assert "\n" not in message
        return None


# -- the decoder ---------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=4096))
def test_random_bytes_are_refused_or_decoded_in_bounded_memory(raw: bytes) -> None:
    tracemalloc.start()
    try:
        _load_or_refuse(raw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000 + 64 * len(raw)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location (a tuple of keys and indexes) inside a decoded JSON value."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_places(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_places(item, (*path, index)))
    return found


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _emit(
    value: Any, repeat_at: tuple[Any, ...] | None, extra: Any, here: tuple[Any, ...] = ()
) -> str:
    """JSON text of value; the object at repeat_at gets its first key a second time."""
    if isinstance(value, dict):
        pairs = [
            f"{json.dumps(k)}: {_emit(v, repeat_at, extra, (*here, k))}" for k, v in value.items()
        ]
        if here == repeat_at and value:
            pairs.append(f"{json.dumps(next(iter(value)))}: {json.dumps(extra)}")
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, list):
        return (
            "["
            + ", ".join(_emit(v, repeat_at, extra, (*here, i)) for i, v in enumerate(value))
            + "]"
        )
    return json.dumps(value)


class Mutation(NamedTuple):
    raw: bytes
    original: bytes
    action: str
    place: tuple[Any, ...]


# Lists whose order means something; every other list in a receipt is a set.
ORDERED = {"command", "order", "reasons"}


@st.composite
def mutated(draw: st.DrawFn) -> Mutation:
    """A valid receipt, changed in one place: a value, a key, an order, a repeat, or raw bytes."""
    original = dumps(draw(receipts()))
    action = draw(st.sampled_from(["replace", "delete", "reverse", "repeat", "bytes"]))
    if action == "bytes":
        data = bytearray(original)
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(data) - 1))
            size = draw(st.integers(0, 16))
            if draw(st.booleans()):
                data[at : at + size] = draw(st.binary(max_size=16))
            else:
                data[at:at] = data[at : at + size]
        return Mutation(bytes(data), original, action, ())
    doc = json.loads(original)
    places = _places(doc)
    if action == "repeat":
        objects = [p for p in places if isinstance(_get(doc, p), dict) and _get(doc, p)]
        place = draw(st.sampled_from(objects))
        return Mutation(_emit(doc, place, draw(JSON_VALUES)).encode(), original, action, place)
    if action == "reverse":
        place = draw(st.sampled_from([p for p in places if isinstance(_get(doc, p), list)]))
        _get(doc, place).reverse()
        return Mutation(json.dumps(doc).encode(), original, action, place)
    place = draw(st.sampled_from(places))
    if not place:
        return Mutation(json.dumps(draw(JSON_VALUES)).encode(), original, action, place)
    parent, last = _get(doc, place[:-1]), place[-1]
    if action == "replace":
        parent[last] = draw(JSON_VALUES)
    else:
        del parent[last]
    return Mutation(json.dumps(doc).encode(), original, action, place)


@FUZZ
@given(mutated())
def test_mutated_receipts_are_refused_or_decoded_and_comparable(change: Mutation) -> None:
    receipt = _load_or_refuse(change.raw)
    if change.action == "repeat":
        # Two values for one key: which one a reader keeps is not evidence, so refuse.
        assert receipt is None, change.place
    if receipt is None:
        return
    if change.action == "reverse" and not ORDERED & set(map(str, change.place)):
        # A set in another order is the same set: the same receipt once decoded.
        assert receipt == load_receipt(change.original, source="original"), change.place
    # What the decoder accepts is canonical: encoding it again decodes to the same receipt...
    assert load_receipt(msgspec.json.encode(receipt), source="again") == receipt
    # ...and drift can compare it with a clean receipt without a traceback, in bounded memory.
    clean = _decoded(make_receipt("clean"))
    tracemalloc.start()
    try:
        report = build_report([("fuzzed", receipt), ("clean", clean)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000 + 256 * len(change.raw), peak
    assert all("-0 +0" not in line for d in report.dimensions for line in d.details)


@FUZZ
@given(receipts())
def test_every_valid_receipt_is_accepted_as_it_was_written(receipt: Receipt) -> None:
    decoded = _decoded(receipt)
    assert msgspec.json.encode(decoded, order="sorted") == msgspec.json.encode(
        receipt, order="sorted"
    )


@pytest.mark.parametrize("depth", [10_000, 1_000_000])
@pytest.mark.parametrize(
    "template",
    [b'{"x": %s1%s}', b'{"schema_version": 1, "run_id": %s1%s}', b"%s1%s"],
)
def test_deep_nesting_is_refused_not_a_recursion_crash(depth: int, template: bytes) -> None:
    for opener, closer in ((b"[", b"]"), (b'{"a":', b"}")):
        raw = template % (opener * depth, closer * depth)
        with pytest.raises(IntegrityError, match=r"^fuzz: "):
            load_receipt(raw, source="fuzz")


# -- the drift builder ---------------------------------------------------------------------------


PAIRWISE = {"collection", "outcomes", "exit", "environment"}


@st.composite
def pairs(draw: st.DrawFn) -> tuple[Receipt, Receipt]:
    # Boxes of one run share the commit the coordinator shipped.
    expected = draw(st.sampled_from([None, HEAD]))
    return _decoded(draw(receipts("a", expected))), _decoded(draw(receipts("b", expected)))


@FUZZ
@given(pairs())
def test_identical_receipts_never_drift(pair: tuple[Receipt, Receipt]) -> None:
    a = pair[0]
    # The decoded receipt is a msgspec Struct standing in for the dataclass.
    relabeled = msgspec.structs.replace(a, label="b", run_id="twin")  # type: ignore[type-var]
    twin = load_receipt(msgspec.json.encode(relabeled), source="twin")
    report = build_report([("a", a), ("b", twin)])
    assert report.groups == [["a", "b"]]
    assert not PAIRWISE & {d.name for d in report.dimensions}
    for d in report.dimensions:  # what remains is about each box on its own, so it names both
        assert set(d.boxes) in ({"a", "b"}, set()) or d.name == "pins", d
    status = {(g.gate, g.box): g.status for g in report.gates}
    assert all(status[(g.gate, "a")] == status[(g.gate, "b")] for g in report.gates)


def _matrix(rows: list[MatrixRow]) -> dict[str, dict[str, str]]:
    return {row.item: row.values for row in rows}


@FUZZ
@given(pairs())
def test_compare_a_b_mirrors_compare_b_a(pair: tuple[Receipt, Receipt]) -> None:
    a, b = pair
    forward = build_report([("a", a), ("b", b)])
    backward = build_report([("b", b), ("a", a)])
    assert forward.exit_code == backward.exit_code
    assert {d.name for d in forward.dimensions} == {d.name for d in backward.dimensions}
    assert {frozenset(g) for g in forward.groups} == {frozenset(g) for g in backward.groups}
    for mine, theirs in zip(forward.dimensions, backward.dimensions, strict=True):
        assert (mine.name, mine.gating) == (theirs.name, theirs.gating)
        assert _matrix(mine.matrix) == _matrix(theirs.matrix)
    if (forward.baseline, backward.baseline) == ("a", "b"):
        mine = {d.name: d for d in forward.dimensions}
        theirs = {d.name: d for d in backward.dimensions}
        if "collection" in mine:
            counts = [line.split(": ")[-1] for line in mine["collection"].details]
            mirrored = [
                "-{1} +{0}".format(*line.split(": ")[-1][1:].split(" +"))
                for line in theirs["collection"].details
            ]
            assert counts == mirrored
