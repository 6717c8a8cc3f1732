"""Coordinator side; may import msgspec. Decodes receipts strictly: they are untrusted input.

A receipt is refused (IntegrityError, one line with the `$.path`) when it is not JSON, is too
large, names a schema version this coordinator does not know, has fields its version does not
define, lacks required sets, has a wrong type, repeats a node id, or names a path that escapes
the repository. Nothing is ever extracted or executed from a receipt.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import SCHEMA_VERSION, Receipt

from charpin_coordinator.schema import strict_struct

MAX_RECEIPT_BYTES = 256 * 1024 * 1024


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
    """Decode and validate one receipt; raise IntegrityError naming source and `$.path`."""
    if len(raw) > max_bytes:
        raise IntegrityError(f"{source}: {len(raw)} bytes is over the {max_bytes}-byte receipt cap")
    try:
        # One strict pass validates everything; its result has exactly Receipt's fields, so it
        # stands in for the dataclass (decoding twice would double the cost on big receipts).
        receipt = typing.cast(Receipt, _STRICT.decode(raw))
    except msgspec.DecodeError as exc:
        _check_header(raw, source)
        raise IntegrityError(f"{source}: receipt refused: {exc}") from exc
    _check_version(receipt.schema_version, source)
    problem = _first_problem(receipt)
    if problem is not None:
        raise IntegrityError(f"{source}: receipt refused: {problem}")
    return receipt


def _check_header(raw: bytes, source: str) -> None:
    """Explain a refusal by the version or the JSON itself when that is the real cause."""
    try:
        header = _HEADER.decode(raw)
    except msgspec.DecodeError as exc:
        raise IntegrityError(f"{source}: not a charpin receipt: {exc}") from exc
    _check_version(header.schema_version, source)


def _check_version(version: int, source: str) -> None:
    if version != SCHEMA_VERSION:
        raise IntegrityError(
            f"{source}: unknown receipt schema version {version} - at `$.schema_version`; "
            f"this charpin-remote reads v{SCHEMA_VERSION}, upgrade it"
        )


def _first_problem(receipt: Receipt) -> str | None:
    for message in _problems(receipt):
        return message
    return None


def _problems(r: Receipt) -> Iterator[str]:
    yield from _paths(r.tree.dirty_before, "$.tree.dirty_before")
    yield from _paths(r.tree.dirty_after, "$.tree.dirty_after")
    yield from _paths(r.tree.written, "$.tree.written")
    c = r.collection
    id_lists: list[tuple[str, list[str], bool]] = [
        (f"$.collection.{name}", getattr(c, name), name != "order")
        for name in ("collected", "selected", "executed", "order", "filtered", "dropped")
    ]
    id_lists.append(("$.collection.deselected[*].nodeid", [d.nodeid for d in c.deselected], True))
    id_lists.append(("$.outcomes", list(r.outcomes), False))
    # The same ids recur in every set: a list equal to `collected` needs no second screen.
    screened = c.collected
    for where, ids, unique in id_lists:
        if ids is not screened and ids == screened:
            continue
        yield from _nodeids(ids, where, unique=unique)
    yield from _paths(r.fixtures.roots, "$.fixtures.roots")
    for side in ("before", "after"):
        states = getattr(r.fixtures, side)
        yield from _paths([s.path for s in states], f"$.fixtures.{side}[*].path", unique=True)
    for name in ("added", "removed", "changed", "type_changed", "mode_changed"):
        yield from _paths(getattr(r.fixtures, name), f"$.fixtures.{name}")
    yield from _paths(r.fixtures.escaping_symlinks, "$.fixtures.escaping_symlinks")
    yield from _paths(r.fixtures.missing_roots, "$.fixtures.missing_roots")
    if r.quarantine.ledger_path is not None:
        yield from _paths([r.quarantine.ledger_path], "$.quarantine.ledger_path")
    yield from _paths(list(r.environment.conftest_sha256), "$.environment.conftest_sha256")
    for index, pin in enumerate(r.pins.results):
        yield from _paths(list(pin.files), f"$.pins.results[{index}].files")


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
        at = where.replace("[*]", f"[{index}]") if "[*]" in where else f"{where}[{index}]"
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
        at = where.replace("[*]", f"[{index}]") if "[*]" in where else f"{where}[{index}]"
        if where == "$.outcomes":
            at = f"$.outcomes[{nodeid!r}]"
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
