"""Seed 003's flake ledger and evidence manifests, read as its conftest writes them. Stdlib only.

The ledger, `{"frozen": ["node id", ...], "rule": "..."}`, becomes charpin's flake ledger: one
entry per frozen id, its reason the ledger's rule (or --reason), with the owner and expiry the
seed never had (--owner and --expires, required). The result is read back with charpin's own
ledger loader before the import reports success.

An evidence manifest, `.evidence/run-<stamp>.json` (`json.dumps(..., indent=2, sort_keys=True)`
of head, dirty, collected, frozen_leak, fixtures_before, fixtures_after, mutated, exitstatus),
becomes a receipt that `charpin-remote compare` reads. A receipt claims only what was observed,
so every field the manifest does not hold is a placeholder listed in `imported.lacks`, and the
gates that need one are INCOMPLETE, never PASS (coordinator gates.py). `mutated` must be what
fixtures_before and fixtures_after say it is; anything else means the file was edited.
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Optional

from charpin_runner import __version__
from charpin_runner.errors import ConfigError, IntegrityError, UsageError
from charpin_runner.ledger import Ledger, parse_ledger
from charpin_runner.receipt import (
    SCHEMA_VERSION,
    Collection,
    Environment,
    Exit,
    FileState,
    Fixtures,
    Identity,
    Imported,
    Interpretation,
    Pins,
    Quarantine,
    Receipt,
    Tree,
    dumps,
)
from charpin_runner.schema import convert

LEDGER_FORMAT = "seed-003 flake ledger"
EVIDENCE_FORMAT = "seed-003 evidence manifest"
_DATE = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")
_STAMP = re.compile(r"\Arun-([0-9]{8}T[0-9]{6}Z)\Z")
_HEX = re.compile(r"\A[0-9a-f]{40}([0-9a-f]{24})?\Z")

LEDGER_KEPT = ["every frozen node id, one entry each; the rule, as each entry's reason"]
LEDGER_LOST = [
    "pytest's --deselect (how the seed applies its ledger) matches by prefix: "
    "tests/a.py::test_x also took tests/a.py::test_x_other; charpin's ledger matches exact "
    "ids, so a test the old entry took out by prefix now runs (and an id that matches nothing "
    "is reported stale)",
]


# -- the ledger ----------------------------------------------------------------------------------


@dataclass
class _SeedLedger:
    frozen: list[str]
    rule: str


def read_seed_ledger(path: Path, label: str) -> _SeedLedger:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{label}: cannot read JSON ({exc}); restore the file") from None
    if isinstance(data, dict) and "version" in data and "entries" in data:
        raise UsageError(f"{label} is already a charpin flake ledger; nothing to import")
    try:
        ledger: _SeedLedger = convert(data, _SeedLedger, "$")
    except ConfigError as exc:
        raise IntegrityError(f"{label}: {exc}; this is not a seed-003 ledger") from None
    return ledger


def convert_ledger(
    source: Path, label: str, owner: str, expires: str, reason: Optional[str]
) -> tuple[bytes, Ledger]:
    """charpin's ledger bytes for a seed-003 ledger, validated by charpin's own loader."""
    if not owner.strip():
        raise UsageError("--owner is empty; name who will unfreeze these tests")
    if not _DATE.match(expires):
        raise UsageError(f"--expires {expires!r} is not a date; write YYYY-MM-DD")
    seed = read_seed_ledger(source, label)
    why = reason if reason is not None else seed.rule
    if not why.strip():
        raise UsageError(f"{label} has an empty rule; give each entry a reason with --reason")
    entries = [{"id": i, "reason": why, "owner": owner, "expires": expires} for i in seed.frozen]
    text = json.dumps({"version": 1, "entries": entries}, indent=2, ensure_ascii=False) + "\n"
    data = text.encode("utf-8")
    try:
        ledger = parse_ledger(data, label)
    except ConfigError as exc:
        raise IntegrityError(f"{label} cannot become a charpin ledger: {exc}") from None
    return data, ledger


# -- evidence manifests --------------------------------------------------------------------------


@dataclass
class _Evidence:
    head: str
    dirty: list[str]
    collected: list[str]
    frozen_leak: list[str]
    fixtures_before: dict[str, str]
    fixtures_after: dict[str, str]
    mutated: list[str]
    exitstatus: int


# Fields of a receipt the manifest does not hold. Their values in the imported receipt are
# placeholders; gates.py reads this list.
LACKS = [
    "identity.head_before",
    "identity.tree_before",
    "identity.tree_after",
    "tree.dirty_before",
    "tree.dirty_digest_before",
    "tree.dirty_digest_after",
    "tree.written",
    "tree.outputs",
    "collection.deselected",
    "collection.selected",
    "collection.executed",
    "collection.order",
    "collection.filtered",
    "collection.dropped",
    "outcomes",
    "durations",
    "fixtures.roots",
    "fixtures.type_changed",
    "fixtures.mode_changed",
    "fixtures.escaping_symlinks",
    "quarantine.ledger_path",
    "quarantine.ledger_sha256",
    "quarantine.leaked",
    "quarantine.stale",
    "quarantine.widening",
    "quarantine.expired",
    "pins",
    "environment",
]

EVIDENCE_KEPT = [
    "head (as identity.head_after), dirty (tree.dirty_after), collected, fixtures_before and "
    "fixtures_after (sha256 per path; added, removed and changed recomputed from them), "
    "frozen_leak (as quarantine.frozen: see below), exitstatus (exit.status, interpreted as "
    "pytest's exit codes)",
]
EVIDENCE_LOST = [
    "everything the manifest never recorded: HEAD before the run and the tree hashes, paths "
    "written during the run, the selected and executed sets, outcomes, fixture modes and file "
    "types (the seed hashes through symlinks), the ledger's digest, pins, the environment; "
    "listed in the receipt's imported.lacks, and the gates that need them are INCOMPLETE",
    "frozen_leak is computed in a conftest collection hook, which pytest runs before its own "
    "--deselect: it lists the frozen tests that were collected, whether or not they ran, so it "
    "is carried as quarantine.frozen, and whether a frozen test ran (a leak) is unknown",
]


def read_evidence(path: Path, label: str) -> _Evidence:
    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise IntegrityError(f"{label}: cannot read JSON ({exc}); restore the file") from None
    try:
        evidence: _Evidence = convert(data, _Evidence, "$")
    except ConfigError as exc:
        raise IntegrityError(f"{label}: {exc}; this is not a seed-003 evidence manifest") from None
    mutated = sorted(
        k for k, v in evidence.fixtures_after.items() if evidence.fixtures_before.get(k) != v
    )
    if sorted(evidence.mutated) != mutated:
        raise IntegrityError(
            f"{label}: mutated {sorted(evidence.mutated)[:3]} is not what fixtures_before and "
            f"fixtures_after say ({mutated[:3]}): the file was edited after the run; restore it"
        )
    if not set(evidence.frozen_leak) <= set(evidence.collected):
        raise IntegrityError(
            f"{label}: frozen_leak names ids that were not collected; the file was edited"
        )
    if evidence.head and not _HEX.match(evidence.head):
        raise IntegrityError(f"{label}: head {evidence.head!r} is not a commit id - at `$.head`")
    for where, paths in (
        ("$.dirty", evidence.dirty),
        ("$.fixtures_before", list(evidence.fixtures_before)),
        ("$.fixtures_after", list(evidence.fixtures_after)),
    ):
        for item in paths:
            pure = PurePosixPath(item)
            if pure.is_absolute() or ".." in pure.parts or "\0" in item:
                raise IntegrityError(f"{label}: path {item!r} leaves the repository - at `{where}`")
    return evidence


_INTERPRETATION: dict[int, Interpretation] = {
    0: "ok",
    1: "failed",
    2: "interrupted",
    3: "internal-error",
    4: "usage",
    5: "no-tests",
}


def _roots(paths: list[str]) -> list[str]:
    """The folders the hashed files share, as the watched roots (inferred: see LACKS)."""
    parents = sorted({PurePosixPath(p).parent.as_posix() for p in paths})
    roots: list[str] = []
    for parent in parents:
        if not any(parent == r or parent.startswith(r + "/") for r in roots):
            roots.append(parent)
    return roots


def _state(path: str, sha: str) -> FileState:
    return FileState(path=path, kind="file", mode=0, sha256=sha, target=None)


def evidence_receipt(path: Path, label: str, box: Optional[str]) -> Receipt:
    """A receipt that says what the manifest held and lists what it lacks."""
    evidence = read_evidence(path, label)
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    stamp = _STAMP.match(stem)
    started = ""
    if stamp:
        moment = datetime.datetime.strptime(stamp.group(1), "%Y%m%dT%H%M%SZ")
        started = moment.replace(tzinfo=datetime.timezone.utc).isoformat()
    before, after = evidence.fixtures_before, evidence.fixtures_after
    status = evidence.exitstatus
    return Receipt(
        schema_version=SCHEMA_VERSION,
        run_id=f"imported-{stem}",
        label=box or stem,
        charpin_version=__version__,
        command=[],
        started_at=started,
        wall_seconds=0.0,
        identity=Identity(
            # A placeholder (listed in LACKS): the only HEAD the manifest read, at session end.
            head_before=evidence.head,
            head_after=evidence.head,
            tree_before="",
            tree_after="",
            expected_commit=None,
            patch_sha256=None,
            snapshot_sha256=None,
        ),
        tree=Tree(
            dirty_before=[],
            dirty_after=sorted(set(evidence.dirty)),
            dirty_digest_before="",
            dirty_digest_after="",
            written=[],
            outputs=[],
        ),
        collection=Collection(
            collected=sorted(set(evidence.collected)),
            deselected=[],
            selected=[],
            executed=[],
            order=[],
            filtered=[],
            dropped=[],
            probe_started=False,
            # The manifest is written in pytest_sessionfinish: the session did finish.
            session_finished=True,
        ),
        outcomes={},
        durations={},
        fixtures=Fixtures(
            roots=_roots([*before, *after]),
            before=[_state(p, before[p]) for p in sorted(before)],
            after=[_state(p, after[p]) for p in sorted(after)],
            added=sorted(set(after) - set(before)),
            removed=sorted(set(before) - set(after)),
            changed=sorted(p for p in set(before) & set(after) if before[p] != after[p]),
            type_changed=[],
            mode_changed=[],
            escaping_symlinks=[],
            missing_roots=[],
        ),
        quarantine=Quarantine(
            ledger_path=None,
            ledger_sha256=None,
            entries=0,
            frozen=sorted(set(evidence.frozen_leak)),
            stale=[],
            widening=[],
            expired=[],
            leaked=[],
        ),
        pins=Pins(None, False, []),
        exit=Exit(
            status=status,
            interpretation=_INTERPRETATION.get(status, "internal-error"),
            reasons=[],
            pytest_status=status,
        ),
        environment=Environment(
            python="",
            implementation="",
            platform="",
            machine="",
            locale="",
            tz="",
            cpu_count=0,
            variables={},
            omitted_variables=0,
            conftest_sha256={},
            plugins=[],
            pytest_version=None,
            host_key_fingerprint=None,
            host_key_accepted_new=False,
        ),
        imported=Imported(source=label, format=EVIDENCE_FORMAT, lacks=list(LACKS)),
    )


def receipt_bytes(receipt: Receipt) -> bytes:
    return dumps(receipt)
