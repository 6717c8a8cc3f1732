"""The flake ledger: frozen tests with a reason, an owner and an expiry. Runs on boxes; stdlib.

A ledger entry names exactly one test (or one parametrized family). Unlike pytest's `--deselect`,
which is a prefix match (so `test_x` would also take `test_x_other`), resolution here is exact,
and the ledger reports what did not resolve cleanly instead of hiding it:

* stale     an entry that matched no collected id;
* widening  an entry that matched several ids (a parametrized family); they are deselected;
* expired   an entry past its date: NOT deselected, so the test rejoins the run (fails closed).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import ConfigError
from charpin_runner.receipt import Deselected, Widening
from charpin_runner.schema import convert

LEDGER_VERSION = 1
_DATE = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")
_FIX = "see 'Flake ledger' in the README for the format"


@dataclass(frozen=True)
class LedgerEntry:
    """One frozen test: the node id (relative to the repository root) and why it is frozen."""

    id: str
    reason: str
    owner: str
    expires: str


@dataclass(frozen=True)
class LedgerFile:
    """The ledger file as written by people: `{"version": 1, "entries": [...]}`."""

    version: int
    entries: list[LedgerEntry]


@dataclass(frozen=True)
class Ledger:
    """A validated ledger and the sha256 of the exact bytes it was read from."""

    path: str
    sha256: str
    entries: list[LedgerEntry]


@dataclass(frozen=True)
class Resolution:
    """How a ledger applies to one collection. Lists are sorted; entries keep file order."""

    deselected: list[Deselected]
    frozen: list[str]
    stale: list[str]
    widening: list[Widening]
    expired: list[str]


def load_ledger(path: Path) -> Ledger:
    """Read and validate a ledger file; raise ConfigError with one line naming the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"flake ledger {path} not found; create it (an empty one is "
            f'{{"version": 1, "entries": []}}) or point --charpin-ledger at the right file'
        ) from None
    except OSError as exc:
        message = f"flake ledger {path} cannot be read ({exc.strerror}); fix its permissions"
        raise ConfigError(message) from None
    return parse_ledger(raw, str(path))


def parse_ledger(raw: bytes, name: str) -> Ledger:
    """Validate ledger bytes; name is the file shown in error messages."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"flake ledger {name}: not UTF-8 text; save it as UTF-8") from None
    except ValueError as exc:
        raise ConfigError(f"flake ledger {name}: not valid JSON ({exc}); fix the syntax") from None
    try:
        parsed = convert(data, LedgerFile, "$")
    except ConfigError as exc:
        raise ConfigError(f"flake ledger {name}: {exc}; {_FIX}") from None
    _check(parsed, name)
    return Ledger(name, hashlib.sha256(raw).hexdigest(), list(parsed.entries))


def _check(parsed: LedgerFile, name: str) -> None:
    if parsed.version != LEDGER_VERSION:
        _refuse(name, f"Unsupported version {parsed.version!r}, expected 1", "$.version")
    first_seen: dict[str, int] = {}
    for index, entry in enumerate(parsed.entries):
        at = f"$.entries[{index}]"
        _check_entry(entry, name, at)
        # Compare NFC forms so two spellings of one id cannot both sit in the ledger.
        key = unicodedata.normalize("NFC", entry.id)
        if key in first_seen:
            where = f"$.entries[{first_seen[key]}]"
            _refuse(name, f"Duplicate id {entry.id!r} (first at `{where}`); keep one", f"{at}.id")
        first_seen[key] = index


def _check_entry(entry: LedgerEntry, name: str, at: str) -> None:
    if "::" not in entry.id:
        message = f"Id {entry.id!r} names no single test (needs '::'); freeze tests, not files"
        _refuse(name, message, f"{at}.id")
    if not entry.reason.strip():
        _refuse(name, "Empty `reason`; say why the test is frozen", f"{at}.reason")
    if not entry.owner.strip():
        _refuse(name, "Empty `owner`; name who will unfreeze it", f"{at}.owner")
    if not _is_date(entry.expires):
        _refuse(name, f"Invalid date {entry.expires!r}, expected YYYY-MM-DD", f"{at}.expires")


def _is_date(text: str) -> bool:
    # Python 3.11 also accepts "20261231" and week dates; the ledger wants one spelling only.
    if not _DATE.match(text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _refuse(name: str, message: str, at: str) -> None:
    raise ConfigError(f"flake ledger {name}: {message} - at `{at}`; {_FIX}")


def family_of(nodeid: str) -> str:
    """Return the id without its parameter part: `a.py::t[1-2]` -> `a.py::t`."""
    # Function and class names cannot hold "[", so the first one after the path is the params.
    names = nodeid.find("::")
    bracket = nodeid.find("[", names) if names >= 0 else -1
    return nodeid if bracket < 0 else nodeid[:bracket]


def resolve(ledger: Ledger, collected_ids: Iterable[str], today: datetime.date) -> Resolution:
    """Resolve every entry to exact collected ids; expired entries are reported, not applied."""
    exact: set[str] = set()
    families: dict[str, list[str]] = {}
    for nodeid in collected_ids:
        exact.add(nodeid)
        base = family_of(nodeid)
        if base != nodeid:
            families.setdefault(base, []).append(nodeid)
    deselected: dict[str, str] = {}
    stale: list[str] = []
    widening: list[Widening] = []
    expired: list[str] = []
    for entry in ledger.entries:
        matches = _matches(entry.id, exact, families)
        if not matches:
            stale.append(entry.id)
        elif len(matches) > 1:
            widening.append(Widening(entry.id, matches))
        if datetime.date.fromisoformat(entry.expires) < today:
            expired.append(entry.id)
            continue
        for nodeid in matches:
            deselected.setdefault(nodeid, entry.id)
    return Resolution(
        deselected=[Deselected(n, e) for n, e in sorted(deselected.items())],
        frozen=sorted(deselected),
        stale=stale,
        widening=widening,
        expired=expired,
    )


def _matches(entry: str, exact: set[str], families: dict[str, list[str]]) -> list[str]:
    found = [entry] if entry in exact else []
    if "[" not in entry:
        found.extend(families.get(entry, ()))
    return sorted(found)
