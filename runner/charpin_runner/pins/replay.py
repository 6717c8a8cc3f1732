"""Replay pins in parallel and turn the results into verdicts and receipt rows. Stdlib only."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Callable, Optional

from charpin_runner.config import CharpinConfig, PinsConfig
from charpin_runner.errors import CharpinError
from charpin_runner.pins import compare as cmp
from charpin_runner.pins import repoguard
from charpin_runner.pins.crash import compared
from charpin_runner.pins.detail import describe_pin
from charpin_runner.pins.execute import Run, Session, reaping, run_case
from charpin_runner.pins.model import Observation, Pin
from charpin_runner.pins.store import load_pins
from charpin_runner.receipt import (
    ACTUAL_BYTES,
    ACTUAL_PINS,
    DETAIL_LINES,
    ActualOutput,
    PinResult,
    Pins,
    PinStatus,
)


@dataclass(frozen=True)
class Outcome:
    """One pin replayed against its golden."""

    pin: Pin
    run: Run
    classes: list[str] = field(default_factory=list)

    @property
    def failure_class(self) -> Optional[str]:
        return cmp.primary(self.classes)

    @property
    def status(self) -> PinStatus:
        if not self.classes:
            return "passed"
        return "error" if self.failure_class == cmp.ERROR else "failed"


def jobs_for(config: PinsConfig, jobs: Optional[int]) -> int:
    """Worker count: the flag, else the config, else one per CPU."""
    chosen = jobs if jobs is not None else config.jobs
    return max(1, chosen or os.cpu_count() or 1)


def judge(pin: Pin, run: Run, comparator: cmp.Comparator = cmp.compare) -> Outcome:
    """Classify a replay against the pin's golden (the run's own failures come first)."""
    # A run that could not start or was killed (timeout, output limit) has no outputs worth
    # comparing: its env reads, streams and files are partial, so any other class is noise.
    if run.error is not None:
        return Outcome(pin, run, [cmp.ERROR])
    if run.timed_out:
        return Outcome(pin, run, [cmp.TIMEOUT])
    if run.limit is not None:
        return Outcome(pin, run, [cmp.OUTPUT_LIMIT])
    classes: list[str] = []
    if run.outside_writes:
        classes.append(cmp.WRITE_OUTSIDE)
    if pin.golden is None:
        classes.append(cmp.ERROR)
    else:
        # A pin that expects a crash: what the caller sees, not the traceback's frames.
        classes.extend(comparator(compared(pin, pin.golden), compared(pin, run.observation)))
    ordered = [name for name in cmp.PRIORITY if name in classes]
    return Outcome(pin, run, ordered)


def replay(
    session: Session,
    pins: list[Pin],
    jobs: int,
    comparator: cmp.Comparator = cmp.compare,
    on_done: Optional[Callable[[Outcome], None]] = None,
    notes: Optional[list[str]] = None,
) -> list[Outcome]:
    """Replay every pin (in parallel) and judge it; results keep the pins' order.

    The repository is snapshotted before and after the whole batch; pins that wrote into it
    fail with write-outside-output (on_done has already seen them, judged without that).
    Repository changes no pin repeats are appended to notes, when given, as warnings.
    """
    before = repoguard.snapshot(session.repo)
    outcomes = _replay_all(session, pins, jobs, comparator, on_done)
    paths = repoguard.changed(before, repoguard.snapshot(session.repo))
    if not paths:
        return outcomes
    found = repoguard.attribute(session, [p.case for p in pins], paths, before)
    if found.unexplained and notes is not None:
        notes.append(unexplained_note(found.unexplained))
    return [_blame(o, found.by_pin.get(o.pin.case.id), comparator) for o in outcomes]


def unexplained_note(paths: list[str]) -> str:
    """The warning for repository changes that no pin made again when replayed alone."""
    return (
        f"the repository changed during the replay ({repoguard.describe(paths)}) but no pin "
        "wrote there when replayed alone; another program may have written it, check and rerun"
    )


def _blame(outcome: Outcome, written: Optional[list[str]], comparator: cmp.Comparator) -> Outcome:
    if not written:
        return outcome
    extra = [f"$REPO/{path}" for path in written]
    run = dc_replace(outcome.run, outside_writes=[*outcome.run.outside_writes, *extra])
    return judge(outcome.pin, run, comparator)


def _replay_all(
    session: Session,
    pins: list[Pin],
    jobs: int,
    comparator: cmp.Comparator,
    on_done: Optional[Callable[[Outcome], None]],
) -> list[Outcome]:

    def one(pin: Pin) -> Outcome:
        try:
            run = run_case(session, pin.case)
        except CharpinError as exc:
            empty = Observation(exit_code=-1, stdout=b"", stderr=b"")
            run = Run(empty, {}, [], error=str(exc))
        outcome = judge(pin, run, comparator)
        if on_done is not None:
            on_done(outcome)
        return outcome

    if jobs <= 1 or len(pins) <= 1:
        return [one(pin) for pin in pins]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, pins))


def write_actual(root: Path, outcome: Outcome) -> Path:
    """Keep a failing pin's actual outputs under root/<id>/ for external diff tools."""
    folder = root / outcome.pin.case.id
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "files").mkdir(parents=True)
    obs = outcome.run.observation
    (folder / "stdout").write_bytes(obs.stdout)
    (folder / "stderr").write_bytes(obs.stderr)
    (folder / "exit_code").write_text(f"{obs.exit_code}\n", encoding="utf-8")
    for rel, data in outcome.run.file_bytes.items():
        target = folder / "files" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    summary = {
        "id": outcome.pin.case.id,
        "argv": list(outcome.pin.case.argv),
        "failure_class": outcome.failure_class,
        "classes": outcome.classes,
        "env_read": obs.env_read,
        "norm_counts": obs.norm_counts,
        "outside_writes": outcome.run.outside_writes,
        "error": outcome.run.error,
        "output_limit": outcome.run.limit,
    }
    text = json.dumps(summary, indent=1, sort_keys=True) + "\n"
    (folder / "result.json").write_text(text, encoding="utf-8")
    return folder


def replay_for_receipt(
    repo: Path,
    config: CharpinConfig,
    adopt: bool = False,
    wrap: Optional[Callable[[list[str], str], list[str]]] = None,
    cover: Sequence[str] = (),
    lines: Optional[dict[str, set[int]]] = None,
) -> Pins:
    """Replay a repository's pins for `charpin receipt`; Pins(None, False, []) when it has none.

    adopt=True only for a CLI process that runs nothing else: see execute.reaping(). wrap:
    how each pin's supervisor is started (the tests' sandbox). cover: repository files whose
    executed lines the Python pins record, merged into lines (verify's change coverage)."""
    pins_config = config.pins
    pin_set = load_pins(repo, pins_config)
    if not pin_set.all:
        return Pins(None, False, [])
    source = pins_config.file if pin_set.jsonl_path.is_file() else pins_config.cases
    with ExitStack() as stack:
        if adopt:
            stack.enter_context(reaping())
        session = stack.enter_context(Session(repo, pins_config))
        session.wrap = wrap
        if cover:
            session.trace(list(cover))
        outcomes = replay(session, pin_set.all, jobs_for(pins_config, None))
        if lines is not None:
            for path, numbers in session.lines.items():
                lines.setdefault(path, set()).update(numbers)
    results = []
    kept = 0  # failing pins whose actual outputs the receipt carries
    for outcome in outcomes:
        obs = outcome.run.observation
        actual = actual_outputs(outcome) if kept < ACTUAL_PINS else []
        kept += bool(actual)
        results.append(
            PinResult(
                id=outcome.pin.case.id,
                status=outcome.status,
                exit_code=None if outcome.run.error else obs.exit_code,
                stdout_sha256=hashlib.sha256(obs.stdout).hexdigest(),
                stderr_sha256=hashlib.sha256(obs.stderr).hexdigest(),
                files={path: entry.sha256 for path, entry in sorted(obs.files.items())},
                failure_class=outcome.failure_class,
                detail=_detail(outcome, pins_config.diff_lines),
                actual=actual,
            )
        )
    return Pins(source, True, results)


def actual_outputs(outcome: Outcome, cap: int = ACTUAL_BYTES) -> list[ActualOutput]:
    """A pin that did not pass: its actual stdout, stderr and output files, at most cap bytes
    in all (in that order), so the receipt brings back what a remote box's run folder loses."""
    if outcome.status == "passed" or outcome.run.error is not None:
        return []
    obs = outcome.run.observation
    parts = [("stdout", obs.stdout), ("stderr", obs.stderr)]
    parts += [(f"out/{rel}", data) for rel, data in sorted(outcome.run.file_bytes.items())]
    found = []
    left = cap
    for name, data in parts:
        kept = data[: max(left, 0)]
        left -= len(kept)
        try:
            text, exact = kept.decode("utf-8"), len(kept) == len(data)
        except UnicodeDecodeError:
            text, exact = kept.decode("utf-8", "backslashreplace"), False
        found.append(ActualOutput(name=name, text=text, size=len(data), exact=exact))
    return found


def _detail(outcome: Outcome, cap: int) -> list[str]:
    """Golden against actual for a pin that did not pass, at most DETAIL_LINES lines."""
    if outcome.status == "passed":
        return []
    golden = outcome.pin.golden
    if outcome.run.error or golden is None:
        return [f"error: {outcome.run.error or 'no golden recorded'}"]
    seen = describe_pin(outcome.pin, golden, outcome.run.observation, min(cap, DETAIL_LINES))
    return seen[:DETAIL_LINES]
