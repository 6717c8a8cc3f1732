"""Coordinator side; may import msgspec. Decodes receipts strictly: they are untrusted input.

A receipt is refused (IntegrityError, one line with the `$.path`) when it is not JSON, is too
large, names a schema version this coordinator does not know, has fields its version does not
define, lacks required sets, has a wrong type, repeats a key in any JSON object, repeats an item
of a set, or names a path that escapes the repository. Set-valued fields are then put in one
canonical order (sorted), because their order is not evidence and drift compares them as sets.
Nothing is ever extracted or executed from a receipt.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import MAX_RECEIPT_BYTES, SCHEMA_VERSION, Receipt

from charpin_coordinator.schema import strict_struct


class _Header(msgspec.Struct):
    schema_version: int


_HEADER = msgspec.json.Decoder(_Header)
_STRICT = msgspec.json.Decoder(strict_struct(Receipt))
# Substrings that may make a path unsafe; a list containing none of them needs no per-item walk.
# Backslashes and colons are legal in POSIX names (the runner writes non-UTF-8 bytes as \xNN).
_BAD_PIECES = ("\x00", "\n/", "\n\n", "\n::", "..")


def read_receipt_file(path: Path, *, max_bytes: int = MAX_RECEIPT_BYTES) -> Receipt:
    """Read and decode a receipt file, refusing special files and oversized input."""
    try:
        if not path.is_file():
            raise IntegrityError(f"{path}: not a regular file; pass a receipt .json file")
        size = path.stat().st_size
        if size > max_bytes:
            raise IntegrityError(f"{path}: {size} bytes is over the {max_bytes}-byte receipt cap")
        raw = path.read_bytes()
    except OSError as exc:
        raise IntegrityError(f"{path}: cannot read receipt: {exc.strerror}") from exc
    return load_receipt(raw, source=str(path), max_bytes=max_bytes)


def load_receipt(raw: bytes, *, source: str, max_bytes: int = MAX_RECEIPT_BYTES) -> Receipt:
    """Decode and validate one receipt; raise IntegrityError naming source and `$.path`.

    The receipt returned has its set-valued fields in canonical (sorted) order.
    """
    if len(raw) > max_bytes:
        raise IntegrityError(f"{source}: {len(raw)} bytes is over the {max_bytes}-byte receipt cap")
    try:
        # One strict pass validates everything; its result has exactly Receipt's fields, so it
        # stands in for the dataclass (decoding twice would double the cost on big receipts).
        receipt = typing.cast(Receipt, _STRICT.decode(raw))
    except (msgspec.DecodeError, RecursionError) as exc:
        _check_header(raw, source)
        raise IntegrityError(f"{source}: receipt refused: {_reason(exc)}") from exc
    _check_version(receipt.schema_version, source)
    problem = _duplicate_key(raw, receipt) or _first_problem(receipt)
    if problem is not None:
        raise IntegrityError(f"{source}: receipt refused: {problem}")
    _canonicalise(receipt)
    return receipt


def _check_header(raw: bytes, source: str) -> None:
    """Explain a refusal by the version or the JSON itself when that is the real cause."""
    try:
        header = _HEADER.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        # Skipping an unknown field recurses in msgspec: deep nesting must not escape as a crash.
        raise IntegrityError(f"{source}: not a charpin receipt: {_reason(exc)}") from exc
    _check_version(header.schema_version, source)


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply; a receipt nests a few levels at most"
    return str(exc)


def _check_version(version: int, source: str) -> None:
    if version != SCHEMA_VERSION:
        raise IntegrityError(
            f"{source}: unknown receipt schema version {version} - at `$.schema_version`; "
            f"this charpin-remote reads v{SCHEMA_VERSION}, upgrade it"
        )


# -- repeated keys ---------------------------------------------------------------------------------


def _duplicate_key(raw: bytes, decoded: Receipt) -> str | None:
    """Why raw repeats a key in some JSON object, or None.

    msgspec keeps the last of two equal keys while other readers keep the first, so a repeated
    key would let one receipt say two things. A receipt as the runner writes it re-encodes to
    the same tokens, and then it cannot hold a repeat (the re-encoding has none); only other
    receipts pay for the exact walk.
    """
    if msgspec.json.format(raw, indent=-1) == msgspec.json.encode(decoded, order="sorted"):
        return None
    return _find_duplicate_key(raw)


class _Repeat:
    """Stands in for the JSON object that repeats a key, carrying the way back to the root."""

    __slots__ = ("key", "steps")

    def __init__(self, key: str) -> None:
        self.key = key
        self.steps: list[str] = []


def _find_duplicate_key(raw: bytes) -> str | None:
    first: list[_Repeat] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> _Repeat | None:
        # Clean objects become None, so the walk keeps no copy of the receipt in memory.
        if first:
            for key, value in pairs:
                found = _repeat_in(value)
                if found is not None:
                    found.steps.append(_step(key))
                    return found
            return None
        if len({key for key, _ in pairs}) == len(pairs):
            return None
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                first.append(_Repeat(key))
                return first[0]
            seen.add(key)
        return None  # pragma: no cover - the length check above found a repeat

    try:
        json.loads(raw.decode("utf-8"), object_pairs_hook=pairs_hook)
    except (ValueError, RecursionError) as exc:
        # msgspec accepted these bytes; a reader that does not is a reason to refuse, not guess.
        return f"the JSON does not parse the same way in every reader: {exc}"
    if not first:
        return None
    where = "$" + "".join(reversed(first[0].steps))
    return f"repeated key {first[0].key!r} - at `{where}`; each key may appear once per object"


def _repeat_in(value: Any) -> _Repeat | None:
    if isinstance(value, _Repeat):
        return value
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _repeat_in(item)
            if found is not None:
                found.steps.append(f"[{index}]")
                return found
    return None


def _step(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{key!r}]"


# -- sets ------------------------------------------------------------------------------------------

# Every list the receipt defines as a set, as (`$.path`, getter). Their order carries no meaning;
# a repeated item is refused, then each is sorted so that equal sets compare and hash equal.
_StringSet = tuple[str, Callable[[Receipt], list[str]]]


def _sets(*fields: str) -> tuple[_StringSet, ...]:
    """(`$.path`, getter) for each dotted field name of a Receipt."""
    return tuple((f"$.{field}", attrgetter(field)) for field in fields)


_PATH_SETS = _sets(
    "tree.dirty_before",
    "tree.dirty_after",
    "tree.written",
    "tree.flagged_before",
    "tree.flagged_after",
    "tree.prepared",
    "fixtures.roots",
    "fixtures.added",
    "fixtures.removed",
    "fixtures.changed",
    "fixtures.type_changed",
    "fixtures.mode_changed",
    "fixtures.escaping_symlinks",
    "fixtures.missing_roots",
)
_NODEID_SETS = _sets(
    "collection.collected",
    "collection.selected",
    "collection.executed",
    "collection.filtered",
    "collection.dropped",
    "quarantine.frozen",
    "quarantine.leaked",
)
# Sets whose items are neither paths nor node ids, with what an item is called in a refusal.
_OTHER_SETS: tuple[tuple[str, str, Callable[[Receipt], list[str]]], ...] = tuple(
    (f"$.{field}", what, attrgetter(field))
    for field, what in (
        ("tree.outputs", "output glob"),
        ("quarantine.stale", "ledger entry"),
        ("quarantine.expired", "ledger entry"),
        ("environment.plugins", "plugin"),
    )
)


def _keyed_sets(r: Receipt) -> Iterator[tuple[str, str, list[Any], Callable[[Any], str]]]:
    """Lists of records that are sets keyed by one field: (`$.path` of the key, what, list, key).

    Deselected ids and fixture paths are checked for repeats with the other node ids and paths.
    """
    yield "$.collection.deselected[*].nodeid", "", r.collection.deselected, attrgetter("nodeid")
    yield "$.fixtures.before[*].path", "", r.fixtures.before, attrgetter("path")
    yield "$.fixtures.after[*].path", "", r.fixtures.after, attrgetter("path")
    widening = r.quarantine.widening
    yield "$.quarantine.widening[*].entry", "ledger entry", widening, attrgetter("entry")
    yield "$.pins.results[*].id", "pin id", r.pins.results, attrgetter("id")


def _canonicalise(r: Receipt) -> None:
    """Sort every set in place (timsort is linear on the already sorted lists the runner writes)."""
    for _, get in (*_PATH_SETS, *_NODEID_SETS):
        get(r).sort()
    for _, _, get in _OTHER_SETS:
        get(r).sort()
    for _, _, records, key in _keyed_sets(r):
        records.sort(key=key)
    for widening in r.quarantine.widening:
        widening.matches.sort()
    if r.frozen_rerun is not None:
        r.frozen_rerun.requested.sort()
        r.frozen_rerun.fixtures_changed.sort()


# -- per-item checks -------------------------------------------------------------------------------


def _first_problem(receipt: Receipt) -> str | None:
    for message in _problems(receipt):
        return message
    return None


def _problems(r: Receipt) -> Iterator[str]:
    for where, get in _PATH_SETS:
        yield from _paths(get(r), where, unique=True)
    c = r.collection
    id_lists: list[tuple[str, list[str], bool]] = [
        (where, get(r), True) for where, get in _NODEID_SETS
    ]
    id_lists.append(("$.collection.order", c.order, False))
    id_lists.append(("$.collection.deselected[*].nodeid", [d.nodeid for d in c.deselected], True))
    id_lists.append(("$.outcomes", list(r.outcomes), False))
    for index, widening in enumerate(r.quarantine.widening):
        id_lists.append((f"$.quarantine.widening[{index}].matches", widening.matches, True))
    # The same ids recur in every set: a list equal to `collected` needs no second screen.
    screened = c.collected
    for where, ids, unique in id_lists:
        if ids is not screened and ids == screened:
            continue
        yield from _nodeids(ids, where, unique=unique)
    for side in ("before", "after"):
        states = getattr(r.fixtures, side)
        yield from _paths([s.path for s in states], f"$.fixtures.{side}[*].path", unique=True)
    for where, what, get in _OTHER_SETS:
        yield from _repeats(get(r), where, what)
    for where, what, records, key in _keyed_sets(r):
        if what:
            yield from _repeats([key(record) for record in records], where, what)
    if r.quarantine.ledger_path is not None:
        yield from _paths([r.quarantine.ledger_path], "$.quarantine.ledger_path")
    yield from _paths(list(r.environment.conftest_sha256), "$.environment.conftest_sha256")
    for index, pin in enumerate(r.pins.results):
        yield from _paths(list(pin.files), f"$.pins.results[{index}].files")
    rerun = r.frozen_rerun
    if rerun is not None:
        # The side run's ids and paths are shown and recorded like the run's own: same screen.
        yield from _nodeids(rerun.requested, "$.frozen_rerun.requested", unique=True)
        yield from _nodeids(list(rerun.outcomes), "$.frozen_rerun.outcomes", unique=False)
        yield from _paths(rerun.fixtures_changed, "$.frozen_rerun.fixtures_changed", unique=True)


def _at(where: str, index: int) -> str:
    return where.replace("[*]", f"[{index}]") if "[*]" in where else f"{where}[{index}]"


def _repeats(items: list[str], where: str, what: str) -> Iterator[str]:
    if len(set(items)) == len(items):
        return
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item in seen:
            yield f"duplicate {what} {item!r} - at `{_at(where, index)}`"
        seen.add(item)


def _suspicious(items: list[str], unique: bool) -> bool:
    """Cheap whole-list screen so 100,000 clean ids cost a few substring scans, not a loop."""
    if unique and len(set(items)) != len(items):
        return True
    if not items:
        return False
    joined = "\n" + "\n".join(items) + "\n"
    return any(piece in joined for piece in _BAD_PIECES)


def _paths(paths: Iterable[str], where: str, *, unique: bool = False) -> Iterator[str]:
    paths = list(paths)
    if not _suspicious(paths, unique):
        return
    seen: set[str] = set()
    for index, path in enumerate(paths):
        at = _at(where, index)
        reason = _path_problem(path)
        if reason is not None:
            yield f"path {path!r} {reason} - at `{at}`"
        if unique:
            if path in seen:
                yield f"duplicate path {path!r} - at `{at}`"
            seen.add(path)


def _nodeids(ids: list[str], where: str, *, unique: bool = True) -> Iterator[str]:
    if not _suspicious(ids, unique):
        return
    seen: set[str] = set()
    for index, nodeid in enumerate(ids):
        keyed = where in ("$.outcomes", "$.frozen_rerun.outcomes")
        at = f"{where}[{nodeid!r}]" if keyed else _at(where, index)
        file_part = nodeid.split("::", 1)[0]
        reason = _path_problem(file_part) if file_part else "is empty"
        if reason is not None:
            yield f"node id {nodeid!r} {reason} - at `{at}`"
        if unique:
            if nodeid in seen:
                yield f"duplicate node id {nodeid!r} - at `{at}`"
            seen.add(nodeid)


def _path_problem(path: str) -> str | None:
    """Return why path is not a safe repository-relative POSIX path, or None."""
    if not path:
        return "is empty"
    if "\x00" in path:
        return "contains a NUL byte"
    if path.startswith("/"):
        return "is absolute: it escapes the repository"
    if ".." in path.split("/"):
        return "escapes the repository"
    return None
