"""Coordinator side; may import msgspec. The verify report: the JSON source of truth, as Structs.

`charpin-remote verify --json` prints a VerifyReport as it is; the text, Markdown and JUnit
renderers (verify/render.py) and the evidence bundle read it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from charpin_coordinator.report import Base, DriftReport, GateStatus, NotEvaluated

VERIFY_REPORT_VERSION = 2

Verdict = Literal["ACCEPT", "REJECT", "INCOMPLETE"]
VerifyGateName = Literal[
    "Base health",
    "Protected paths",
    "Behaviour",
    "Tests",
    "Quarantine",
    "Entry points",
    "Dependencies",
    "Scope",
    "Harness awareness",
]
VERIFY_GATES: tuple[VerifyGateName, ...] = (
    "Base health",
    "Protected paths",
    "Behaviour",
    "Tests",
    "Quarantine",
    "Entry points",
    "Dependencies",
    "Scope",
    "Harness awareness",
)
# Gates judged from the two commits on this machine, once for every box.
WHOLE_PATCH = "all boxes"


class Observation(Base):
    """One thing that moved, with the one-line action the seeds' decision table prescribes."""

    gate: VerifyGateName
    box: str
    item: str
    what: str
    action: str
    detail: list[str]


class VerifyGate(Base):
    """One verify gate for one box (or WHOLE_PATCH)."""

    gate: VerifyGateName
    box: str
    status: GateStatus
    detail: str
    action: str


class BoxVerdict(Base):
    """One evaluated box: both of its runs and its verdict."""

    label: str
    verdict: Verdict
    base: str  # the base run's interpretation (ok, failed, ...)
    patched: str
    # The patched run's sandbox (`bwrap-confined`, `bwrap` or `none`): part of the verdict.
    sandbox: str = ""
    # The run of the patch's own new or edited tests ("" when the patch brings none).
    own: str = ""


class TestSideSummary(Base):
    """What the patched code was judged with: the base's test side (verify/testside.py)."""

    roots: list[str]
    config_file: str
    harness: list[str]  # the base's conftests and pytest configuration files
    test_only: list[str]  # modules only the tests import
    files: int
    edited: list[str]  # base test-side files the patch edits (run as the base has them)
    deleted: list[str]
    added: list[str]  # test files the patch adds (run on their own, in the own-tests run)


class Evidence(Base):
    """Behaviour beyond the asserts on one box (#19): the patched code's changed lines that the
    judged run reached, the base's captured calls replayed on both versions, and the inputs
    generated for the changed public functions."""

    box: str
    compared: int  # calls replayed and compared (same or differs)
    same: int
    differs: int
    # Calls and functions that could not be compared, with why (never counted as the same).
    not_compared: dict[str, str]
    unreached: list[str]  # changed statements no test ran: `file:function lines 3-4`
    untraced: str  # why the judged run could not trace, or ""
    seed: int  # the hash seed of the "hash seed" perturbation (verify --replay repeats it)
    seconds: float  # the replays' wall time on the box
    # Generated inputs (the changed public functions; the seed above seeds them too): inputs
    # compared on both versions, functions with a differing one, functions not compared (why).
    generated: int = 0
    generated_differs: int = 0
    generated_not_compared: dict[str, str] = msgspec.field(default_factory=dict)


class VerifyReport(Base):
    """What `verify` found: the verdict first, then the evidence behind it."""

    version: int
    verdict: Verdict
    base: str
    patched: str  # the commit the patch makes of the base
    ran: str  # the commit the patched runs ran: patched, with every protected path as on base
    patch_sha256: str
    changed: list[str]
    boxes: list[BoxVerdict]
    not_evaluated: list[NotEvaluated]
    gates: list[VerifyGate]
    observations: list[Observation]
    scope: list[str]  # the functions the patch changed, file:qualname
    helpers: list[str]  # new functions called only from changed ones (an extract)
    drift: DriftReport  # the patched runs compared across boxes
    base_from: str  # the earlier verify whose base receipts were reused (--reuse-base), or ""
    exit_code: int
    exit_bits: list[str]
    test_side: TestSideSummary | None = None
    # The commit the patch's own tests ran in (patched, protected paths as on base), or "".
    own_ran: str = ""
    # Per box: what the differential evidence reached and compared (empty when the patch
    # changes no production Python).
    evidence: list[Evidence] = msgspec.field(default_factory=list)
