"""Produce one receipt: measure, run the tests in their own process group, measure again.

Runs on boxes; stdlib only. Everything except the outcomes is measured by this (parent) process:
git state, fixture hashes and exit status. The test command runs in a new session; when it ends
the whole group is SIGKILLed before the after-measurements, so a process a test left behind
cannot edit a fixture after the last hash. A daemon that calls setsid() leaves the group; on
Linux the CLI is a child subreaper, so such a daemon is re-parented to it and killed too. A
process started through something else (systemd-run, ssh, a container runtime) is out of reach.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import charpin_runner
from charpin_runner import envinfo, fixtures, frozen_side, gitstate, owndir, probehost, testcommand
from charpin_runner import sandbox as sandbox_mod
from charpin_runner.config import BASE_ENV_ALLOW, DEFAULT_LEDGER, DEFAULT_WATCH, CharpinConfig
from charpin_runner.errors import CharpinError, ConfigError, UsageError
from charpin_runner.interpret import Ending, interpret

# Imported now, before any test runs: code read after the tests could be code they rewrote.
from charpin_runner.pins.replay import replay_for_receipt
from charpin_runner.probe import ProbeData
from charpin_runner.procgroup import StopFlag, kill_adopted
from charpin_runner.receipt import (
    OUTCOMES,
    REPO_IN_IDS,
    SCHEMA_VERSION,
    CapturedCall,
    Collection,
    Differential,
    Environment,
    Exit,
    FrozenRerun,
    Identity,
    Outcome,
    PinResult,
    Pins,
    Quarantine,
    Receipt,
    Tracing,
    Tree,
)
from charpin_runner.testrun import run_tests


@dataclass(frozen=True)
class Request:
    """Everything one `charpin receipt` run needs; built by receipt_cli."""

    repo: Path
    config: CharpinConfig
    run_id: str
    label: str = "local"
    today: str = ""  # ledger expiry date, YYYY-MM-DD; empty means today (UTC)
    timeout: float | None = None
    expected_commit: str | None = None
    snapshot_sha256: str | None = None
    patch_sha256: str | None = None
    host_key_fingerprint: str | None = None
    host_key_accepted_new: bool = False
    replay_pins: bool = True
    # The box agent verified the checkout before `prepare` wrote into it (see Tree.prepared).
    prepared: bool = False
    # False when [tool.charpin] has no `watch` key, i.e. the default root is in force.
    watch_given: bool = True
    extra: list[str] = field(default_factory=list)
    # Kill every child this process has after the run: only for a process that became a
    # subreaper and runs nothing else (the CLI), never for a library caller.
    kill_adopted: bool = False
    # What the test command must not be able to write (see sandbox.py); off for library callers.
    sandbox: sandbox_mod.Plan = field(default_factory=lambda: sandbox_mod.Plan(mode="off"))
    # Run the ledger's frozen tests on the side once everything else is measured (FrozenRerun).
    include_frozen: bool = False
    # verify: repository files whose executed lines are recorded, and functions (PATH::QUALNAME)
    # whose calls are captured (Tracing).
    cover: list[str] = field(default_factory=list)
    capture: list[str] = field(default_factory=list)
    # verify's judged run: the calls to replay on the base and patched versions (a job file).
    differential: Path | None = None


def produce(request: Request, stop: StopFlag) -> Receipt:
    """Measure, run the test command, measure again; return the receipt (not yet written)."""
    repo, config = request.repo, request.config
    roots = watched_roots(repo, config, request.watch_given)
    ledger = ledger_path(repo, config)
    ledger_sha = fixtures.hash_file(str(repo / ledger)) if ledger else None
    started_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    began = time.monotonic()
    git_before = gitstate.read_state(repo)
    if git_before.head == gitstate.UNRESOLVED:
        raise UsageError(f"{repo} has no commit checked out (HEAD does not resolve); commit first")
    fx_before = fixtures.snapshot(repo, roots)
    guard = sandbox_mod.begin(request.sandbox)
    run = run_tests(request, ledger, stop, guard)
    # An interrupted run winds down: the receipt is written, pins are not replayed. Pins run
    # before the after-measurements, so whatever a pin target leaves behind is measured too.
    pin_lines: dict[str, set[int]] = {}
    pins, reasons = _replay_pins(request, guard, skip=stop.requested, lines=pin_lines)
    if request.kill_adopted:
        # A pin target's double-forked daemon was re-parented to us: it dies before we measure.
        kill_adopted()
    # Everything below is measured after every process the run started is gone; fixtures
    # first, before git (the one other program we run) gets a chance to do anything.
    fx_after = fixtures.snapshot(repo, roots)
    git_after, after_reasons = frozen_side.state_after(repo, git_before)
    # The measured run's own ending and sandbox findings, taken before any side run: a Ctrl-C
    # or a write during the side run is the side run's, never the record's.
    interrupted = stop.requested
    reasons = run.findings + sandbox_mod.finish(guard) + after_reasons + reasons
    side: FrozenRerun | None = None
    side_notes: list[str] = []
    if request.include_frozen and not interrupted and not run.ending.timed_out:
        # After every measurement above, so nothing a frozen test does can reach them.
        written = gitstate.written_paths(git_before, git_after)
        moved = frozen_side.moved_by_run(written, fx_before, fx_after)
        side, side_notes = frozen_side.frozen_rerun(
            request,
            ledger,
            stop,
            sandbox_mod.again(guard),
            frozen_side.Measured(run.probe, fx_after, git_after, moved),
            began,
        )
    compared = None
    if request.differential is not None and not interrupted and not run.ending.timed_out:
        # After every measurement above, like the side run: the replays are evidence of their
        # own, and nothing they do can reach what was measured.
        compared = _differential(request, guard)
    if ledger_sha and run.probe.ledger.sha256 and run.probe.ledger.sha256 != ledger_sha:
        reasons.append("the ledger the probe read differs from the one charpin hashed before")
    ending = Ending(run.ending.status, run.ending.timed_out, interrupted, request.timeout)
    receipt = Receipt(
        schema_version=SCHEMA_VERSION,
        run_id=request.run_id,
        label=request.label,
        charpin_version=charpin_runner.__version__,
        command=run.command,
        started_at=started_at,
        wall_seconds=run.wall,
        identity=_identity(request, git_before, git_after),
        tree=_tree(config, git_before, git_after, request.prepared),
        collection=_collection(run.probe),
        outcomes={k: cast(Outcome, v) for k, v in run.probe.outcomes.items() if v in OUTCOMES},
        durations=dict(run.probe.durations),
        fixtures=fixtures.diff(fx_before, fx_after),
        quarantine=_quarantine(run.probe, ledger, ledger_sha),
        pins=pins,
        exit=_with_notes(
            interpret(ending, run.probe, tuple(reasons)),
            gitstate.setup_notes(git_before) + side_notes,
        ),
        environment=replace(
            _environment(request, run.probe),
            sandbox=_sandbox_name(guard),
            id_root=_id_root(request.repo, run.probe),
        ),
        subtests={k: v for k, v in sorted(run.probe.subtests.items()) if k in run.probe.outcomes},
        frozen_rerun=side,
        tracing=_tracing(request, run.probe, pin_lines),
        differential=compared,
    )
    # Test ids, conftest paths and notes come from the child and may carry undecodable bytes
    # from file names; the receipt must be valid UTF-8 JSON, so they get the paths' escape.
    return cast(Receipt, utf8_safe(receipt))


def _differential(request: Request, guard: sandbox_mod.Guard) -> Differential:
    """Replay the job's captured calls on the base and the patched version (differ/)."""
    from charpin_runner.differ import replay

    assert request.differential is not None
    job = replay.load_job(request.differential)
    env = testcommand.environment()
    first = (request.config.test_command or [sys.executable])[0]
    python = probehost.interpreter_of(first, request.repo, env.get("PATH", os.defpath))
    return replay.run(request.repo, job, sandbox_mod.again(guard), python, env)


def _tracing(
    request: Request, probe: ProbeData, pin_lines: dict[str, set[int]]
) -> Tracing | None:
    """What the probe traced of the files verify asked about, calls numbered per function,
    with the lines the pins ran."""
    if not request.cover and not request.capture:
        return None
    numbered: dict[str, int] = {}
    calls = []
    for function, test, args in probe.calls:
        numbered[function] = numbered.get(function, 0) + 1
        calls.append(CapturedCall(f"{function}#{numbered[function]}", function, test, args))
    untraced = probe.untraced or ("" if probe.started else "the probe did not start")
    every = set(request.cover) | set(probe.lines) | set(pin_lines)
    return Tracing(
        lines={p: sorted(set(probe.lines.get(p, [])) | pin_lines.get(p, set())) for p in sorted(every)},
        calls=calls,
        dropped=probe.not_kept,
        unavailable=untraced,
    )


def _sandbox_name(guard: sandbox_mod.Guard) -> str:
    if not guard.used:
        return "none"
    return "bwrap-confined" if guard.plan.confine else "bwrap"


def utf8_safe(value: Any) -> Any:
    """value (dataclasses, lists, dicts, strings) with every string made encodable as UTF-8:
    an undecodable file-name byte (a surrogate escape) becomes `\\xNN`, as fixtures.printable
    does for paths; any other lone surrogate becomes `\\udNNN`. Clean strings are unchanged."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            try:
                return fixtures.printable(value)
            except UnicodeEncodeError:
                return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, list):
        return [utf8_safe(item) for item in value]
    if isinstance(value, dict):
        return {utf8_safe(k): utf8_safe(v) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: utf8_safe(getattr(value, f.name)) for f in fields(value)})
    return value


def _environment(request: Request, probe: ProbeData) -> Environment:
    return envinfo.collect(
        repo=request.repo,
        allow=list(BASE_ENV_ALLOW) + list(request.config.env_allow),
        conftests=probe.conftests,
        plugins=probe.plugins,
        pytest_version=probe.pytest_version,
        host_key_fingerprint=request.host_key_fingerprint,
        host_key_accepted_new=request.host_key_accepted_new,
    )


def _id_root(repo: Path, probe: ProbeData) -> str | None:
    """The path `{repo}` stands for in this receipt's node ids, when any id holds it."""
    if any(REPO_IN_IDS in nodeid for nodeid in probe.collected) or any(
        REPO_IN_IDS in nodeid for nodeid in probe.outcomes
    ):
        return os.path.realpath(repo)
    return None


def watched_roots(repo: Path, config: CharpinConfig, given: bool) -> list[str]:
    """The fixture roots to hash. The default root is a convention, not a promise: when the
    repository does not have it, nothing is watched (an explicitly named root stays, and a
    missing one is reported as missing)."""
    roots = fixtures.check_roots(config.watch)
    if given or config.watch != DEFAULT_WATCH:
        return roots
    return [root for root in roots if os.path.lexists(repo / root)]


def watch_given(repo: Path, config_json: Path | None) -> bool:
    """Whether the `[tool.charpin]` table names `watch` itself (call after config loading
    succeeded, so the file is known to decode). Unknown counts as given: reports stay strict."""
    try:
        if config_json is not None:
            table = json.loads(config_json.read_text(encoding="utf-8"))
        else:
            table = _pyproject_table(repo)
    except (OSError, ValueError, ImportError):
        return True
    return not isinstance(table, dict) or "watch" in table


def _pyproject_table(repo: Path) -> Any:
    pyproject = repo / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    from charpin_runner import tomlread  # only reached where config.load already read this file

    data = tomlread.loads(pyproject.read_text(encoding="utf-8"))
    tool = data.get("tool", {})
    return tool.get("charpin", {}) if isinstance(tool, dict) else {}


def ensure_receipt_folder(repo: Path, folder: Path) -> None:
    """Create folder; a `.charpin/` in the repository ignores itself (owndir.ensure_folder)."""
    owndir.ensure_folder(repo, folder)


def ledger_path(repo: Path, config: CharpinConfig) -> str | None:
    """The ledger's repo-relative path when the file exists; a missing explicit one is an error."""
    rel = fixtures.check_roots([config.ledger], key="ledger")[0]
    if (repo / rel).is_file():
        return rel
    if config.ledger != DEFAULT_LEDGER:
        raise ConfigError(
            f"the flake ledger {rel} named in [tool.charpin] ledger does not exist in {repo}; "
            "create it or remove the `ledger` key"
        )
    return None


def _with_notes(ended: Exit, notes: list[str]) -> Exit:
    """Informational lines after the findings: they explain, they do not demote the run."""
    return replace(ended, reasons=list(ended.reasons) + notes) if notes else ended


def _replay_pins(
    request: Request, guard: sandbox_mod.Guard, skip: bool, lines: dict[str, set[int]]
) -> tuple[Pins, list[str]]:
    """The pins replayed in the tests' sandbox; lines gets the lines of request.cover that
    the Python pins ran (the pins are evidence of change coverage too)."""
    none = Pins(source=None, replayed=False, results=[])
    if skip or not request.replay_pins:
        return none, []

    pins_python = request.config.pins.python or sys.executable

    def wrap(argv: list[str], folder: str) -> list[str]:
        # Pin targets are the code under test too: in the tests' sandbox view, and every
        # process they start gone with the namespace. The folder holding the pins' copies is
        # writable; each pin sets its own HOME and TMPDIR in it.
        return sandbox_mod.wrap(
            guard, argv, folder, pythons=(pins_python,), private_home=False
        )

    try:
        pins = replay_for_receipt(
            request.repo,
            request.config,
            adopt=request.kill_adopted,
            wrap=wrap,
            cover=request.cover,
            lines=lines,
        )
        return pins, []
    except CharpinError as exc:
        # Recorded as one errored pin, so the Pin replay gate fails instead of seeing no pins.
        pins_file = request.config.pins.file
        source = pins_file if (request.repo / pins_file).is_file() else None
        broken = PinResult(
            id="<pins>",
            status="error",
            exit_code=None,
            stdout_sha256="",
            stderr_sha256="",
            files={},
            failure_class="error",
            detail=[f"error: {exc}"],
        )
        return Pins(source=source, replayed=True, results=[broken]), [
            f"pins were not replayed: {exc}"
        ]


def _identity(request: Request, before: gitstate.GitState, after: gitstate.GitState) -> Identity:
    return Identity(
        head_before=before.head,
        head_after=after.head,
        tree_before=before.tree,
        tree_after=after.tree,
        expected_commit=request.expected_commit,
        patch_sha256=request.patch_sha256,
        snapshot_sha256=request.snapshot_sha256,
    )


def _tree(
    config: CharpinConfig,
    before: gitstate.GitState,
    after: gitstate.GitState,
    prepared: bool = False,
) -> Tree:
    return Tree(
        # After `prepare` in a verified checkout, everything uncommitted is prepare's.
        dirty_before=[] if prepared else before.dirty,
        prepared=before.dirty if prepared else [],
        dirty_after=after.dirty,
        dirty_digest_before=before.digest,
        dirty_digest_after=after.digest,
        written=gitstate.written_paths(before, after),
        flagged_before=before.flagged,
        flagged_after=after.flagged,
        outputs=sorted(config.outputs),
    )


def _collection(probe: ProbeData) -> Collection:
    return Collection(
        collected=sorted(probe.collected),
        deselected=sorted(probe.ledger.deselected, key=lambda d: (d.nodeid, d.entry)),
        selected=sorted(probe.selected),
        executed=sorted(probe.executed),
        order=list(probe.order),
        filtered=sorted(probe.filtered),
        dropped=sorted(probe.dropped),
        probe_started=probe.started,
        session_finished=probe.session_finished,
    )


def _quarantine(probe: ProbeData, ledger: str | None, ledger_sha: str | None) -> Quarantine:
    report = probe.ledger
    return Quarantine(
        ledger_path=ledger,
        ledger_sha256=ledger_sha or report.sha256,
        entries=report.entries,
        frozen=sorted(report.frozen),
        stale=sorted(report.stale),
        widening=sorted(report.widening, key=lambda w: w.entry),
        expired=sorted(report.expired),
        leaked=sorted(report.leaked),
    )
