"""Test helper: build valid receipts in memory and change one thing at a time."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from charpin_runner.receipt import (
    Collection,
    Environment,
    Exit,
    FileState,
    Fixtures,
    FrozenRerun,
    Identity,
    Interpretation,
    Outcome,
    Pins,
    Quarantine,
    Receipt,
    Tree,
)

HEAD = "1" * 40
TREE = "2" * 40
IDS = ["tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_b.py::test_three"]
FIXTURE = FileState(
    path="tests/fixtures/rates.json", kind="file", mode=0o644, sha256="a" * 64, target=None
)


def make_receipt(label: str = "a", **parts: Any) -> Receipt:
    """A clean, passing receipt for three tests; `parts` replace whole sub-records or fields."""
    receipt = Receipt(
        schema_version=1,
        run_id=f"20261130T000000Z-{label}",
        label=label,
        charpin_version="0.1.0",
        command=["python", "-m", "pytest"],
        started_at="2026-11-30T00:00:00Z",
        wall_seconds=1.0,
        identity=Identity(HEAD, HEAD, TREE, TREE, None, None, None),
        tree=Tree([], [], "0" * 64, "0" * 64, [], []),
        collection=Collection(
            collected=list(IDS),
            deselected=[],
            selected=list(IDS),
            executed=list(IDS),
            order=list(IDS),
            filtered=[],
            dropped=[],
            probe_started=True,
            session_finished=True,
        ),
        outcomes=dict.fromkeys(IDS, "passed"),
        durations=dict.fromkeys(IDS, 0.01),
        fixtures=Fixtures(
            roots=["tests/fixtures"],
            before=[FIXTURE],
            after=[FIXTURE],
            added=[],
            removed=[],
            changed=[],
            type_changed=[],
            mode_changed=[],
            escaping_symlinks=[],
            missing_roots=[],
        ),
        quarantine=Quarantine(None, None, 0, [], [], [], [], []),
        pins=Pins(None, False, []),
        exit=Exit(0, "ok", [], 0),
        environment=Environment(
            python="3.11.7",
            implementation="CPython",
            platform="Linux",
            machine="x86_64",
            locale="C.UTF-8",
            tz="UTC",
            cpu_count=2,
            variables={},
            omitted_variables=3,
            conftest_sha256={},
            plugins=[],
            pytest_version="8.0",
            host_key_fingerprint=None,
            host_key_accepted_new=False,
        ),
    )
    return change(receipt, **parts)


def change(obj: Any, **parts: Any) -> Any:
    """dataclasses.replace with dotted keys: change(r, **{"exit.status": 1})."""
    direct = {k: v for k, v in parts.items() if "." not in k}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in parts.items():
        if "." in key:
            head, rest = key.split(".", 1)
            nested.setdefault(head, {})[rest] = value
    for head, sub in nested.items():
        direct[head] = change(direct.get(head, getattr(obj, head)), **sub)
    return dataclasses.replace(obj, **direct)


def stale_local(label: str = "local") -> Receipt:
    """A box whose working tree holds an uncommitted edit to the watched fixture."""
    stale = FileState(FIXTURE.path, "file", 0o644, "b" * 64, None)
    return make_receipt(
        label,
        **{
            "fixtures.before": [stale],
            "fixtures.after": [stale],
            "tree.dirty_before": [FIXTURE.path],
            "tree.dirty_after": [FIXTURE.path],
        },
    )


def frozen_rerun(
    outcomes: dict[str, str],
    *,
    requested: list[str] | None = None,
    interpretation: str | None = None,
    fixtures_changed: list[str] | None = None,
    tainted: list[str] | None = None,
) -> FrozenRerun:
    """A frozen side run (`--include-frozen`) asked for `requested` (default: the outcomes'
    ids), clean exactly when the runner would call it clean."""
    asked = sorted(requested if requested is not None else outcomes)
    moved = list(fixtures_changed or [])
    passed = all(outcomes.get(n) == "passed" for n in asked)
    ended = interpretation or ("ok" if passed else "failed")
    return FrozenRerun(
        requested=asked,
        outcomes=cast(dict[str, Outcome], dict(sorted(outcomes.items()))),
        interpretation=cast(Interpretation, ended),
        status=0 if ended == "ok" else 1,
        fixtures_changed=moved,
        wall_seconds=0.5,
        clean=ended == "ok" and passed and not moved and not tainted,
        reasons=([] if passed else ["a frozen test did not pass"]) + list(tainted or []),
        tainted=list(tainted or []),
    )
