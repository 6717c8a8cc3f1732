"""Coordinator side; may import msgspec. The drift report: the JSON source of truth, as Structs.

Every renderer (text, Markdown, JUnit) reads a DriftReport; `--json` prints it as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

REPORT_VERSION = 1
MAX_FAILING = 200

GateName = Literal[
    "Identity",
    "Clean tree",
    "Fixture integrity",
    "Collection parity",
    "Quarantine",
    "Completeness",
    "Pin replay",
]
GATES: tuple[GateName, ...] = (
    "Identity",
    "Clean tree",
    "Fixture integrity",
    "Collection parity",
    "Quarantine",
    "Completeness",
    "Pin replay",
)
GateStatus = Literal["PASS", "FAIL", "INCOMPLETE"]
NotEvaluatedKind = Literal[
    "dns",
    "refused",
    "timeout",
    "auth",
    "host-key",
    "setup-failed",
    "runner-failed",
    "receipt-refused",
    "interrupted",
    "snapshot-integrity",
    "unsupported-box",
    "no-sandbox",
    "disconnected",
    "provision-failed",
]


class Base(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=False, kw_only=True):
    """Report records: closed field lists, so a typo in a consumer's fixture is caught."""


class NotEvaluated(Base):
    """A requested box that produced no usable receipt, and why."""

    label: str
    kind: NotEvaluatedKind
    reason: str


class BoxSummary(Base):
    """One evaluated box at a glance."""

    label: str
    run_id: str
    commit: str
    interpretation: str
    exit_status: int
    collected: int
    executed: int
    counts: dict[str, int]
    group: int
    python: str
    platform: str
    # Tests that failed or errored on this box (sorted; at most MAX_FAILING listed). Failing
    # tests are not drift: exit bit 1 carries them, and every report lists them (#10).
    failing: list[str] = msgspec.field(default_factory=list)
    # For those failing tests that ran subtests: the failing subtests, as pytest shows them.
    failing_subtests: dict[str, list[str]] = msgspec.field(default_factory=dict)
    # The checkout path `{repo}` stands for in this box's node ids, when any id held it.
    id_root: str | None = None
    # Subtests over the whole box (passed, failed, skipped), when any test ran some.
    subtests: dict[str, int] = msgspec.field(default_factory=dict)
    # Per failing test with subtests: how many of them failed (the receipt names the first few
    # only, failing_subtests; the count is complete, so a report can say how many it left out).
    failing_subtest_counts: dict[str, int] = msgspec.field(default_factory=dict)
    # Per failing test: a bounded, redacted excerpt of why (assertion message, the end of the
    # test's report) as lines, when the receipt carries one. See drift.failure_excerpts.
    failure_excerpts: dict[str, list[str]] = msgspec.field(default_factory=dict)
    # What the box's working tree held besides the commit at the start: "" when clean, else the
    # digest of the uncommitted changes and untracked files (treestate.py). None: not known.
    tree_state: str | None = None
    # Per pin that did not pass on this box: golden against actual (the receipt's bounded detail).
    pin_details: dict[str, list[str]] = msgspec.field(default_factory=dict)


class GateResult(Base):
    """One gate for one box."""

    gate: GateName
    box: str
    status: GateStatus
    detail: str
    action: str


class MatrixRow(Base):
    """One test (or pin) whose result differs between boxes: box label -> value."""

    item: str
    values: dict[str, str]


class Dimension(Base):
    """Drift along one dimension. gating=False means informational (environment)."""

    name: str
    gating: bool
    summary: str
    boxes: list[str]
    details: list[str]
    diff: str = ""
    matrix: list[MatrixRow] = msgspec.field(default_factory=list)


class SinceBox(Base):
    """One box compared with its own earlier receipt (`run --against`): the drift builder's
    dimensions for the pair (earlier, now), with what both receipts share left out."""

    box: str
    # The earlier run's id; None when this box has no earlier receipt (summary says so).
    reference: str | None
    summary: str
    reference_commit: str | None = None
    changed: bool = False  # a gating dimension moved since the reference
    new_failures: list[str] = msgspec.field(default_factory=list)
    likely_cause: str | None = None  # a Python, pytest or plugin change that coincides
    dimensions: list[Dimension] = msgspec.field(default_factory=list)


class Since(Base):
    """Drift over time: each box against its own earlier receipt (`run --against REF`)."""

    against: str  # as asked: last, a run id or a commit
    gating: bool  # --gate-against-last: a box changed since its reference sets exit bit 2
    boxes: list[SinceBox]


class RepeatRow(Base):
    """One test whose outcome differed between a box's repeats: its outcome in each, repeat 1
    first (`absent`: that repeat ran without it; `-`: that repeat was not evaluated)."""

    item: str
    outcomes: list[str]


class RepeatMiss(Base):
    """A repeat of a box that gave no receipt (or was not run), and why."""

    repeat: int
    kind: NotEvaluatedKind
    reason: str


class RepeatBox(Base):
    """One box's repeats: the receipt id of each (repeat 1, the receipt of record, first)."""

    box: str
    run_ids: list[str]
    evaluated: int  # repeats that gave a receipt
    differing: list[RepeatRow]
    not_evaluated: list[RepeatMiss]


class Repeats(Base):
    """`run --repeat N`: every box ran N times in a row. Evidence only, never gating: gates,
    drift and the exit code are repeat 1's (the receipt of record)."""

    count: int
    boxes: list[RepeatBox]


class FrozenRerunBox(Base):
    """The frozen tests' side run in one box's receipt (one per repeat with --repeat)."""

    box: str
    repeat: int
    run_id: str
    clean: bool  # the side run ended ok, every frozen test asked for passed, no fixture moved
    interpretation: str
    outcomes: dict[str, str]  # each frozen test asked for -> its outcome, or "not run"
    fixtures_changed: list[str]
    reasons: list[str]
    wall_seconds: float


class FrozenReruns(Base):
    """`run --include-frozen`: the ledger's frozen tests re-run on the side, after everything
    gated was measured. Outside every gate: never changes a gate or the exit code."""

    boxes: list[FrozenRerunBox]
    # Evaluated boxes whose receipt holds no side run, each as "label: why".
    absent: list[str]


class DriftReport(Base):
    """Everything `compare` and `run` conclude from a set of receipts."""

    baseline: str | None
    expected_commit: str | None
    boxes: list[BoxSummary]
    not_evaluated: list[NotEvaluated]
    groups: list[list[str]]
    dimensions: list[Dimension]
    gates: list[GateResult]
    vacuous: bool
    vacuous_reasons: list[str]
    exit_code: int
    exit_bits: list[str]
    version: int = REPORT_VERSION
    # `run --against`: each box since its own earlier receipt (absent without the flag).
    since: Since | None = None
    # `run --repeat N` and frozen side runs: evidence only. Left out of the JSON entirely when
    # not asked for (UNSET), so a run without them writes exactly the report it wrote before.
    repeats: Repeats | msgspec.UnsetType = msgspec.UNSET
    frozen_reruns: FrozenReruns | msgspec.UnsetType = msgspec.UNSET


def map_strings(report: DriftReport, change: Callable[[str], str]) -> DriftReport:
    """A copy of report with `change` applied to every string in it, dictionary keys included
    (secret masking before encoding, control-character escaping before display). Fields typed
    as a Literal hold this program's own words, never receipt text, and are left alone."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return change(value)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        if isinstance(value, msgspec.Struct):
            fixed = _FIXED.get(type(value), ())
            changed = {
                name: walk(getattr(value, name))
                for name in value.__struct_fields__
                if name not in fixed
            }
            return msgspec.structs.replace(value, **changed)
        return value

    result: DriftReport = walk(report)
    return result


_FIXED: dict[type, tuple[str, ...]] = {
    GateResult: ("gate", "status"),
    NotEvaluated: ("kind",),
    RepeatMiss: ("kind",),
}
