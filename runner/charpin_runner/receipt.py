"""The receipt, schema v1: what one box observed about one run. Runs on boxes; stdlib only.

This module is the single definition of the receipt. The runner builds these dataclasses and
writes them as JSON; the coordinator decodes the same dataclasses with a reused msgspec decoder.

Evolution rules (msgspec's schema-evolution guide): a field added later gets a default; an
existing field never changes type or meaning; SCHEMA_VERSION moves only for breaking changes,
together with a golden file under tests/data/receipts/ and a "Receipt schema" CHANGELOG entry.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Optional

SCHEMA_VERSION = 1
# The one size limit on a receipt, wherever one is read: a box's reply, a file given to compare.
MAX_RECEIPT_BYTES = 256 * 1024 * 1024
# What stands for the repository's absolute path inside a node id (tests parametrized over
# files), so that a test has one id in every checkout; environment.id_root says what it was.
REPO_IN_IDS = "{repo}"
# A failing pin's detail in the receipt: enough for a one-cent diff, never a whole output.
DETAIL_LINES = 40
# A failing pin's actual outputs in the receipt: at most this many bytes per pin (stdout first,
# then stderr, then the output files), for at most ACTUAL_PINS failing pins of a run.
ACTUAL_BYTES = 64 * 1024
ACTUAL_PINS = 50

Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed"]
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")

# How the parent reads the test command's end (design §4, "exit").
Interpretation = Literal[
    "ok",
    "failed",
    "interrupted",
    "usage",
    "no-tests",
    "incomplete",
    "timed-out",
    "internal-error",
    "collection-error",
]
FileKind = Literal["file", "symlink", "other"]
PinStatus = Literal["passed", "failed", "error"]


@dataclass(frozen=True)
class Identity:
    """Commit and tree hash, read by the parent process before and after the run.

    A value git could not resolve (a test broke .git) is the string "unresolved".
    """

    head_before: str
    head_after: str
    tree_before: str
    tree_after: str
    expected_commit: Optional[str]
    patch_sha256: Optional[str]
    snapshot_sha256: Optional[str]


@dataclass(frozen=True)
class Tree:
    """Working-tree state: dirty paths and content digests before and after the run.

    Paths are compared with HEAD's tree by content, whatever the index says; untracked files
    are listed with the ignore rules in force before the run. The digest is sha256 over
    `git diff --binary HEAD` plus (path, sha256) of each untracked file; "unresolved" when git
    could not answer. `.charpin/` is never counted. flagged_before/after are the paths the
    repository's index marked skip-worktree or assume-unchanged; a path flagged during the run
    is also in written.
    """

    dirty_before: list[str]
    dirty_after: list[str]
    dirty_digest_before: str
    dirty_digest_after: str
    written: list[str]
    outputs: list[str]
    flagged_before: list[str] = field(default_factory=list)
    flagged_after: list[str] = field(default_factory=list)
    # Paths the `prepare` commands wrote into a checkout verified equal to the commit just
    # before (a box run); they are not in dirty_before, which is the user's dirt (added in 0.2).
    prepared: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Deselected:
    """A node id the flake ledger took out of the run, with the entry that matched it."""

    nodeid: str
    entry: str


@dataclass(frozen=True)
class Collection:
    """The four sets (sorted), plus what pytest's own options filtered and collection order."""

    collected: list[str]
    deselected: list[Deselected]
    selected: list[str]
    executed: list[str]
    order: list[str]
    filtered: list[str]
    dropped: list[str]
    probe_started: bool
    session_finished: bool


@dataclass(frozen=True)
class FileState:
    """One entry under a watched root. Symlinks are recorded, never followed."""

    path: str
    kind: FileKind
    mode: int
    sha256: Optional[str]
    target: Optional[str]


@dataclass(frozen=True)
class Fixtures:
    """Watched roots hashed before and after the run, and what moved between the two."""

    roots: list[str]
    before: list[FileState]
    after: list[FileState]
    added: list[str]
    removed: list[str]
    changed: list[str]
    type_changed: list[str]
    mode_changed: list[str]
    escaping_symlinks: list[str]
    missing_roots: list[str]


@dataclass(frozen=True)
class Widening:
    """A ledger entry that resolved to more than one node id."""

    entry: str
    matches: list[str]


@dataclass(frozen=True)
class Quarantine:
    """The flake ledger as it applied to this run."""

    ledger_path: Optional[str]
    ledger_sha256: Optional[str]
    entries: int
    frozen: list[str]
    stale: list[str]
    widening: list[Widening]
    expired: list[str]
    leaked: list[str]


@dataclass(frozen=True)
class ActualOutput:
    """One of a failing pin's actual outputs as the box saw it, bounded (ACTUAL_BYTES per pin):
    `stdout`, `stderr` or `out/<path>`. text is the bytes as UTF-8; exact is False when they
    were not UTF-8 (invalid bytes shown as \\xNN) or were cut at the cap (size is the whole)."""

    name: str
    text: str
    size: int
    exact: bool


@dataclass(frozen=True)
class PinResult:
    """One pin replayed on this box."""

    id: str
    status: PinStatus
    exit_code: Optional[int]
    stdout_sha256: str
    stderr_sha256: str
    files: dict[str, str]
    failure_class: Optional[str]
    # For a pin that did not pass: what moved, golden against actual (exit code, unified diffs
    # of the streams and text files, file set), capped at DETAIL_LINES lines.
    detail: list[str] = field(default_factory=list)
    # For a pin that did not pass: its actual outputs, bounded, so a reviewer can see them
    # after the box's run folder is gone (added in 0.4; the first ACTUAL_PINS failing pins).
    actual: list[ActualOutput] = field(default_factory=list)


@dataclass(frozen=True)
class Pins:
    """Pin replay results; replayed is False when the repository declares no pins."""

    source: Optional[str]
    replayed: bool
    results: list[PinResult]


@dataclass(frozen=True)
class Subtests:
    """The subtests one test ran (unittest's subTest, pytest's `subtests` fixture).

    failing holds the first failing ones as pytest shows them, `[msg] (key=value)`; the counts
    are complete. A failing subtest makes its test `failed` in outcomes.
    """

    passed: int
    failed: int
    skipped: int
    failing: list[str]


@dataclass(frozen=True)
class Exit:
    """The test command's status as the parent measured it, and what it means.

    status is the process return code: a negative number means killed by that signal.
    """

    status: int
    interpretation: Interpretation
    reasons: list[str]
    pytest_status: Optional[int]


@dataclass(frozen=True)
class Environment:
    """Allow-listed facts about the box. Informational: explains drift, never gates.

    conftest_sha256 values are hex digests, or "missing" / "outside-repository".
    """

    python: str
    implementation: str
    platform: str
    machine: str
    locale: str
    tz: str
    cpu_count: int
    variables: dict[str, str]
    omitted_variables: int
    conftest_sha256: dict[str, str]
    plugins: list[str]
    pytest_version: Optional[str]
    host_key_fingerprint: Optional[str]
    host_key_accepted_new: bool
    # "bwrap" when the test command ran under bubblewrap with the protected paths read-only,
    # "bwrap-confined" when it also had no network and only its checkout writable (verify),
    # "none" otherwise (added in 0.2; older receipts decode as "none").
    sandbox: str = "none"
    # The repository path that `{repo}` stands for in this receipt's node ids (tests
    # parametrized over absolute file paths), None when no id held it (added in 0.2).
    id_root: Optional[str] = None


@dataclass(frozen=True)
class Imported:
    """Marks a receipt that `charpin import evidence` converted from another harness's record
    instead of one charpin measured (added in 0.2).

    lacks names the receipt fields (dotted, e.g. "identity.tree_before", "collection.executed",
    "pins") that the record did not hold: their values are placeholders, not observations, and
    a gate that needs one of them is INCOMPLETE, never PASS (gates.py).
    """

    source: str
    format: str
    lacks: list[str]


@dataclass(frozen=True)
class FrozenRerun:
    """The ledger's frozen tests, run on the side after every measurement of the run
    (`charpin receipt --include-frozen`), to gather evidence for unfreezing them (added in 0.3).

    Outside every gate: nothing here changes the receipt's other fields, which were measured
    before this side run started. clean is True when the side run ended `ok`, every frozen test
    it was asked for passed, and it changed no watched fixture.
    """

    requested: list[str]
    outcomes: dict[str, Outcome]
    interpretation: Interpretation
    status: int
    fixtures_changed: list[str]
    wall_seconds: float
    clean: bool
    reasons: list[str] = field(default_factory=list)
    # Of the reasons, those that make this side run no evidence about any frozen test (it moved
    # HEAD, changed the working tree or a protected path, or ran on a checkout the measured run
    # had changed): `ledger review` counts no entry clean from it.
    tainted: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CapturedCall:
    """One call into a function a patch changes, as the tests made it (`verify`, added in 0.4):
    its arguments pickled at the moment of the call, base64. Data for the replay only: the
    coordinator never unpickles it."""

    id: str  # function#n, stable within the receipt
    function: str  # path::qualname
    test: str  # the test during which it was made
    args: str
    # A call into production code made from outside it (a test calling the API), captured
    # whatever the patch changed (added in 0.4 with `--entries`); else a changed function's.
    entry: bool = False


@dataclass(frozen=True)
class Tracing:
    """What the tests' code did in the files a patch changes (`verify`, added in 0.4): the
    lines that ran per file, the captured calls, and per function the calls not kept
    ("budget": over the budget of calls or bytes; "uncopyable": arguments that cannot be
    copied). unavailable says why nothing was traced (another tracer held sys.settrace)."""

    lines: dict[str, list[int]] = field(default_factory=dict)
    calls: list[CapturedCall] = field(default_factory=list)
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    unavailable: str = ""


@dataclass(frozen=True)
class Replayed:
    """One captured call replayed on both versions, or one function's generated inputs (the
    first that differs, shrunk, or how many answered the same), or why it was not compared."""

    id: str
    function: str
    test: str
    # "same", "differs", or "not compared"; why says what differed or why it was not compared.
    verdict: str
    why: str = ""
    base: str = ""  # what the base version did: its result, exception, output (one line each)
    patched: str = ""
    perturbation: str = ""  # the conditions it differed under ("" the plain replay)
    call: str = ""  # the call as the base's replay shows it: `discount(150)`, reprs cut short
    # Generated inputs (ids `gen:PATH::QUALNAME`, added in 0.4): the input as a value tree
    # (JSON, differ/strategies.py; what `verify --replay` runs again) and how many generated
    # inputs the two versions were compared on.
    input: str = ""
    examples: int = 0


@dataclass(frozen=True)
class Differential:
    """Base and patched run side by side on the same inputs (`verify`, added in 0.4): the
    captured calls replayed, generated inputs, and the pins under perturbations."""

    replayed: list[Replayed] = field(default_factory=list)
    generated: list[Replayed] = field(default_factory=list)
    # Functions whose calls could not be compared at all, with why (no call captured, none
    # copyable, the function is gone).
    not_compared: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    # Lines of the changed files the patched version ran on generated inputs that both versions
    # answered alike: change coverage by evidence, as the tests' own lines are (added in 0.4).
    reached: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Receipt:
    """One box, one run. Outcomes are as reported by the test process; the rest is measured.

    command is the test argv with `{probe}` and `{repo}` standing for the per-run paths, so the
    commands of two boxes compare equal.
    """

    schema_version: int
    run_id: str
    label: str
    charpin_version: str
    command: list[str]
    started_at: str
    wall_seconds: float
    identity: Identity
    tree: Tree
    collection: Collection
    outcomes: dict[str, Outcome]
    durations: dict[str, float]
    fixtures: Fixtures
    quarantine: Quarantine
    pins: Pins
    exit: Exit
    environment: Environment
    # Per test id that ran subtests (added in 0.2; older receipts decode as none).
    subtests: dict[str, Subtests] = field(default_factory=dict)
    # Set only on a receipt imported from another harness's record (added in 0.2).
    imported: Optional[Imported] = None
    # The frozen tests' side run, when asked for with --include-frozen (added in 0.3).
    frozen_rerun: Optional[FrozenRerun] = None
    # verify's tracing of the changed files and its differential replay (added in 0.4).
    tracing: Optional[Tracing] = None
    differential: Optional[Differential] = None
    # Per failing test id: why it failed, bounded (its `E` lines and where; added in 0.4). The
    # coordinator masks its secrets in it as in every receipt it fetches.
    failure_excerpt: dict[str, str] = field(default_factory=dict)


def to_dict(receipt: Receipt) -> dict[str, Any]:
    """Return the receipt as plain JSON-ready data (what dataclasses.asdict gives, without its
    deep copy of every value: a 1,000-test receipt is converted in a few milliseconds)."""
    plain = _plain(receipt)
    assert isinstance(plain, dict)
    return plain


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return value
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    if kind is dict:
        return {key: _plain(item) for key, item in value.items()}
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in fields(value))
    return {name: _plain(getattr(value, name)) for name in names}


def dumps(receipt: Receipt) -> bytes:
    """Serialise canonically: sorted keys, UTF-8, one trailing newline."""
    text = json.dumps(to_dict(receipt), sort_keys=True, indent=1, ensure_ascii=False)
    return text.encode("utf-8") + b"\n"


def write_atomic(path: Path, data: bytes, *, overwrite: bool = False) -> None:
    """Write data to path via a temp file and rename; refuse to replace a file unless told."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            # link() fails if path exists, so an old receipt is never overwritten.
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
