"""Coordinator side. One `charpin-remote run` as two calls: plan it, then run it.

    plan(...)          hosts -> HostSpecs -> BoxTargets; commit -> Snapshot; config; runner zipapp
    run(plan, targets) fan out run_box over the targets -> BoxOutcomes -> drift report -> run folder

`run` returns a RunResult (report, outcomes, folder) and prints nothing: the CLI, the demo and
`verify` call it and decide what to show and which exit code to return.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
from charpin_runner.errors import EXIT_NOT_EVALUATED, ConfigError, UsageError
from charpin_runner.owndir import ensure_folder
from charpin_runner.runid import check_run_id, new_run_id

from charpin_coordinator.config import load_config
from charpin_coordinator.drift import build_report
from charpin_coordinator.evidence import (
    Attempt,
    frozen_section,
    has_frozen_rerun,
    repeats_section,
    with_evidence,
)
from charpin_coordinator.remote import provision, repeats, results, snapshot
from charpin_coordinator.remote.boxrun import BoxOutcome, BoxTarget, Phase, RunPlan, run_box
from charpin_coordinator.remote.builtin import clean_target, local_target, trusted_python
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.hosts import (
    BUILTIN_BOXES,
    HostExtras,
    HostSpec,
    decode_host_extras,
    resolve_hosts,
)
from charpin_coordinator.remote.orchestrate import Job, run_all
from charpin_coordinator.remote.provision import Disposals
from charpin_coordinator.report import DriftReport, map_strings
from charpin_coordinator.reports.common import encode_json
from charpin_coordinator.reports.html_report import RunPage, render_html
from charpin_coordinator.reports.markdown import render_markdown
from charpin_coordinator.temporal import Against, resolve_against, since, with_since

DEFAULT_TIMEOUT = 1800.0
INTERRUPTED_BIT = "4 interrupted (Ctrl-C) before the run was complete"
# Needed only once the boxes are done: imported meanwhile, off the critical path.
_AFTER_THE_RUN = (
    "charpin_coordinator.receipts",
    "charpin_coordinator.drift",
    "charpin_coordinator.reports.text",
    "charpin_coordinator.reports.markdown",
    "charpin_coordinator.reports.junit",
    "charpin_coordinator.remote.output",
)


@dataclass(frozen=True)
class Options:
    """What the user chose for one run (the CLI's flags, the demo's fixed choices)."""

    repo: Path
    hosts: Sequence[str]
    commit: str = "HEAD"
    ssh_config: Path | None = None
    run_id: str | None = None
    out_dir: Path | None = None  # default <repo>/.charpin/runs
    timeout: float | None = None  # beats the config's timeout, which beats DEFAULT_TIMEOUT
    keep: bool = False
    accept_new: bool = False
    sandbox: str = "auto"
    baseline: str | None = None
    jobs: int = 4
    # `verify`: [tool.charpin] is read at this commit (the base), whatever commit runs.
    config_rev: str | None = None
    patch_sha256: str = ""
    confine: bool = False
    # `--against REF`: each box also against its own earlier receipt (temporal.py); with
    # gate_against, a box that changed since then sets exit bit 2.
    against: str | None = None
    gate_against: bool = False
    # `--repeat N`: each box runs N times in a row; repeat 1 is the receipt of record, the
    # others are evidence only (remote/repeats.py).
    repeat: int = 1
    # `--include-frozen`: the ledger's frozen tests also run on the side, outside every gate.
    include_frozen: bool = False
    # `verify`: pytest arguments after the configuration's own (the patch's own test files).
    pytest_args_extra: tuple[str, ...] = ()
    # `verify` (#19): files whose executed lines the probe records, functions whose calls it
    # captures, and the differential job (calls to replay on base and patched, JSON).
    cover: tuple[str, ...] = ()
    capture: tuple[str, ...] = ()
    # Production paths whose entry calls (from the tests into the API) the base run captures.
    entries: tuple[str, ...] = ()
    entries_skip: tuple[str, ...] = ()
    differential: bytes = b""


@dataclass(frozen=True)
class Planned:
    """A run ready to go: the shared plan, one target per box, where the run folder goes."""

    plan: RunPlan
    targets: list[BoxTarget]
    out_dir: Path
    baseline: str | None
    jobs: int
    disposals: Disposals = field(default_factory=Disposals)
    against: Against | None = None
    repeat: int = 1


@dataclass(frozen=True)
class RunResult:
    """What one run produced; the run folder is already written."""

    report: DriftReport
    outcomes: list[BoxOutcome]
    folder: Path
    interrupted: bool
    disposals: Disposals = field(default_factory=Disposals)
    # How this run masks its secrets: for what is rendered later from the receipts (--junit).
    redact: Callable[[str], str] = str

    @property
    def exit_code(self) -> int:
        """The report's bitmask; Ctrl-C always adds bit 4 (a box was not evaluated)."""
        return self.report.exit_code | (EXIT_NOT_EVALUATED if self.interrupted else 0)


def plan(options: Options) -> Planned:
    """Resolve the commit, the configuration and the hosts; UsageError for anything wrong."""
    names = list(options.hosts)
    if options.baseline is not None and options.baseline not in names:
        raise UsageError(f"--baseline {options.baseline!r} is not one of --hosts {','.join(names)}")
    # paramiko and fabric take a few tenths of a second to import: do it while git works.
    ssh_import = None
    if any(name not in BUILTIN_BOXES for name in names):
        ssh_import = threading.Thread(target=_import, args=(_SSH,), daemon=True)
        ssh_import.start()
    repo = options.repo
    snap = snapshot.resolve(repo, options.commit)
    loaded = load_config(repo, rev=options.config_rev or snap.commit)
    run_id = check_run_id(options.run_id) if options.run_id else new_run_id()
    repeats.check_ids(run_id, repeats.check_count(options.repeat))
    out_dir = (options.out_dir or repo / ".charpin" / "runs").absolute()
    if (out_dir / run_id).exists():
        raise UsageError(f"{out_dir / run_id} already exists; pick another --run-id")
    table = dict(loaded.table)
    if options.pytest_args_extra:
        table["pytest_args"] = [*loaded.charpin.pytest_args, *options.pytest_args_extra]
    shared = RunPlan(
        run_id=run_id,
        snap=snap,
        config_table=table,
        setup=list(loaded.charpin.setup),
        prepare=list(loaded.charpin.prepare),
        timeout=options.timeout or loaded.charpin.timeout or DEFAULT_TIMEOUT,
        keep=options.keep,
        runner=runner_bundle(),
        repo_key=snapshot.repo_key(repo),
        sandbox=options.sandbox,
        patch_sha256=options.patch_sha256,
        confine=options.confine,
        include_frozen=options.include_frozen,
        cover=options.cover,
        capture=options.capture,
        entries=options.entries,
        entries_skip=options.entries_skip,
        differential=options.differential,
    )
    if ssh_import is not None:
        ssh_import.join()
    extras = _with_local_provisioning(repo, decode_host_extras(loaded.hosts))
    specs = resolve_hosts(names, ssh_config=options.ssh_config, extras=extras)
    disposals = Disposals()
    targets = [_target(spec, repo, options, disposals) for spec in specs]
    against = None
    if options.against is not None:
        against = resolve_against(
            options.against, repo=repo, out_dir=out_dir, gating=options.gate_against
        )
    return Planned(
        shared,
        targets,
        out_dir,
        options.baseline,
        options.jobs,
        disposals,
        against,
        options.repeat,
    )


def run(planned: Planned, *, phase: Phase | None = None, history: Path | None = None) -> RunResult:
    """Run every box (at most planned.jobs at once), report the drift, write the run folder.
    With a history database, drift.html also shows each box's trend and the flaky tests."""
    shared = planned.plan
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    clock = _PhaseClock(phase or _quiet)
    jobs = [
        Job(target.label, _Bound(target, shared, clock, planned.repeat))
        for target in planned.targets
    ]
    threading.Thread(target=_import, args=(_AFTER_THE_RUN,), daemon=True).start()
    fan = run_all(jobs, max_workers=planned.jobs, phase=clock)

    for outcome in fan.outcomes:
        for one in (outcome, *outcome.repeats):
            one.phases = clock.seconds.get((outcome.label, one.repeat), {})
    receipts = [(o.label, o.receipt) for o in fan.outcomes if o.receipt is not None]
    missing = [o.not_evaluated for o in fan.outcomes if o.not_evaluated is not None]
    baseline = planned.baseline
    if baseline is not None and baseline not in {label for label, _ in receipts}:
        baseline = None  # the requested baseline was not evaluated; its NOT EVALUATED row says so
    report = build_report(
        receipts, baseline=baseline, not_evaluated=missing, expected_commit=shared.snap.commit
    )
    if planned.against is not None:
        found = since(receipts, planned.against, out_dir=planned.out_dir, run_id=shared.run_id)
        report = with_since(report, found)
    report = _with_evidence(report, fan.outcomes, shared, planned.repeat)
    if fan.interrupted and not report.exit_code & EXIT_NOT_EVALUATED:
        # Ctrl-C after every record was in (during repeats, say): the run exits with bit 4, so
        # the report it leaves (drift.md, what --notify gets) says so too.
        report = msgspec.structs.replace(
            report,
            exit_code=report.exit_code | EXIT_NOT_EVALUATED,
            exit_bits=[*report.exit_bits, INTERRUPTED_BIT],
        )
    # Box output was masked as it arrived; labels and reasons built from it here are masked too,
    # value by value, before any encoding escapes a secret out of recognition.
    report = map_strings(report, shared.redactor.text)
    ensure_folder(shared.snap.repo, planned.out_dir)
    folder = results.write_run(
        planned.out_dir,
        shared.run_id,
        fan.outcomes,
        results.ReportFiles(
            drift_json=encode_json(report),
            drift_md=render_markdown(report).encode(),
            drift_html=_drift_html(
                report,
                history,
                RunPage(
                    shared.run_id,
                    started,
                    results.safe_folders(o.label for o in fan.outcomes),
                    pins_actual={o.label: results.pins_actual_folders(o) for o in fan.outcomes},
                ),
            ),
        ),
    )
    return RunResult(
        report, fan.outcomes, folder, fan.interrupted, planned.disposals, shared.redactor.text
    )


def _with_evidence(
    report: DriftReport, outcomes: Sequence[BoxOutcome], shared: RunPlan, count: int
) -> DriftReport:
    """The Repeats and frozen re-run sections, when asked for (or, for the latter, when a
    receipt carries a side run); evidence only, so the rest of the report is left as it is."""
    boxes = [
        (
            outcome.label,
            [
                Attempt(
                    one.repeat,
                    repeats.repeat_run_id(shared.run_id, one.repeat),
                    one.receipt,
                    one.not_evaluated,
                )
                for one in (outcome, *outcome.repeats)
            ],
        )
        for outcome in outcomes
    ]
    section = repeats_section(count, boxes) if count > 1 else None
    wanted = shared.include_frozen or has_frozen_rerun(boxes)
    return with_evidence(report, repeats=section, frozen=frozen_section(boxes) if wanted else None)


def _drift_html(report: DriftReport, history: Path | None, page: RunPage) -> bytes:
    from charpin_coordinator.reports.html_history import history_sections

    trend, flaky = history_sections(history, report, page.run_id)
    return render_html(report, trend=trend, flaky=flaky, run=page).encode()


def _with_local_provisioning(repo: Path, extras: dict[str, HostExtras]) -> dict[str, HostExtras]:
    """Provision and dispose commands run on this machine, so a host has them only when this
    machine's pyproject.toml (the working tree) and the configuration's commit say the same.
    Either alone is not enough: a test run on `local` can rewrite the working tree, and the
    commit under review (or an agent's branch) is not this machine's choice."""
    local: dict[str, HostExtras] = {}
    if (repo / "pyproject.toml").is_file():
        try:
            local = decode_host_extras(load_config(repo).hosts)
        except ConfigError:
            local = {}
    out = dict(extras)
    for name in set(extras) | set(local):
        mine, theirs = local.get(name, HostExtras()), extras.get(name, HostExtras())
        wanted = (mine.provision, mine.dispose)
        if wanted != (theirs.provision, theirs.dispose) and (mine.provision or theirs.provision):
            raise UsageError(
                f"host {name}: provision/dispose commands differ between this machine's "
                "pyproject.toml and the commit whose configuration is used; they run here, so "
                "commit them (or remove them from both)"
            )
    return out


def _target(spec: HostSpec, repo: Path, options: Options, disposals: Disposals) -> BoxTarget:
    extras = spec.extras
    # --timeout on the command line beats a host's configured timeout, which beats the plan's.
    timeout = options.timeout or extras.timeout
    # Allow-listed names (checked not to look like secrets) that are set here.
    env = {name: os.environ[name] for name in extras.env if name in os.environ}
    if spec.builtin and spec.name == "local":
        return local_target(spec.name, repo, timeout=timeout)
    if spec.builtin:
        target = clean_target(
            spec.name,
            keep=options.keep,
            python=trusted_python(extras.python, repo, spec.name),
            setup=extras.setup,
            timeout=timeout,
            env=env,
        )
        return replace(target, cache_cap=extras.cache_cap())
    if extras.provision:
        connect = provision.connector(spec, repo=repo, disposals=disposals)
    else:
        from charpin_coordinator.remote.ssh import connector

        connect = connector(spec, accept_new=options.accept_new)
    return BoxTarget(
        label=spec.name,
        connect=connect,
        python=extras.python or "python3",
        setup=extras.setup,
        timeout=timeout,
        env=env,
        cache_cap=extras.cache_cap(),
    )


class _PhaseClock:
    """Seconds each box spent in each phase (kept in box.json), passed on to a display; with
    --repeat, per repeat, so the record's box.json counts only its own run."""

    _ENDS = ("done", "not evaluated")

    def __init__(self, show: Phase):
        self._show = show
        self._lock = threading.Lock()
        self._current: dict[str, tuple[int, str, float]] = {}
        self.seconds: dict[tuple[str, int], dict[str, float]] = {}

    def __call__(self, label: str, name: str) -> None:
        self._tick(label, 1, name, name)

    def repeat(self, repeat: int, count: int) -> Phase:
        """The phase callback of repeat `repeat` (2..count): shown as `repeat k/N: phase`."""

        def phase(label: str, name: str) -> None:
            self._tick(label, repeat, name, f"repeat {repeat}/{count}: {name}")

        return phase

    def _tick(self, label: str, repeat: int, name: str, shown: str) -> None:
        now = time.monotonic()
        with self._lock:
            old = self._current.get(label)
            if old is not None and old[1] not in self._ENDS:
                spent = self.seconds.setdefault((label, old[0]), {})
                spent[old[1]] = round(spent.get(old[1], 0.0) + now - old[2], 3)
            self._current[label] = (repeat, name, now)
        self._show(label, shown)


class _Bound:
    """run_box for one target and plan, as the fan-out calls it; with --repeat, then the
    repeats, one after the other, carried by the record's outcome."""

    def __init__(self, target: BoxTarget, shared: RunPlan, clock: _PhaseClock, count: int = 1):
        self.target, self.shared, self.clock, self.count = target, shared, clock, count

    def __call__(self, phase: Phase, stop: threading.Event) -> BoxOutcome:
        first = run_box(self.target, self.shared, phase, stop)
        if self.count > 1:
            first.repeats = repeats.run_repeats(
                first,
                self.target,
                self.shared,
                self.count,
                lambda k: self.clock.repeat(k, self.count),
                stop,
            )
            # The display ends on the record's state, as it does without repeats.
            phase(self.target.label, "done" if first.not_evaluated is None else "not evaluated")
        return first


_SSH = ("charpin_coordinator.remote.ssh",)


def _import(modules: Sequence[str]) -> None:
    for name in modules:
        importlib.import_module(name)


def _quiet(label: str, phase: str) -> None:
    """No progress display."""
