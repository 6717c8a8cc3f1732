"""The part every pin importer shares. Stdlib only; raises, never prints.

An importer reads its format exactly and proposes Drafts: a Case plus a settle function that,
given one verification run of that case against the unchanged program, returns the golden to
keep (or the problems that stop the import, or why the case is not imported). run_import then:

  1. runs every draft once, hermetically, as a pin runs (the verification run);
  2. settles each: the source's expectation must hold on that run under the source tool's own
     rules; what the source does not hold (env keys read, normalisation counts, file modes, a
     stream it never checked) is taken from the run, and the notes say so;
  3. writes the pins with the store's API (pins.jsonl), keeping what was there;
  4. loads them back from disk and replays them: the import succeeds only when that replay is
     green; otherwise the pins file is restored byte for byte and the drift is reported.

Nothing is written when any draft is refused: an import is whole or not at all, unless the
plan is `partial` (cram: one pin per file, files independent of each other), where each refused
or red file is reported and the others are imported (Result.refused; the CLI exits 2).

A plan with `raw_normalise` also runs each draft with only those normalisation rules (cram: none)
and asks the draft's `check_raw` first: the source's own patterns are matched against what the
program printed, before charpin's normalisation rewrote it; the golden is the normalised run's.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from charpin_runner.config import NormRule, PinsConfig
from charpin_runner.errors import EXIT_DRIFT, CharpinError, UsageError
from charpin_runner.pins.detail import describe_pin
from charpin_runner.pins.execute import Run, Session, run_case
from charpin_runner.pins.model import Case, Observation, OutFile, Pin
from charpin_runner.pins.replay import replay
from charpin_runner.pins.store import PinSet, load_pins, save_jsonl

# Detail lines shown per refused or drifting pin.
DETAIL_CAP = 40
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


class ImportRefusedError(CharpinError):
    """The import cannot be carried over green; nothing was written (or it was rolled back).

    str() is the one-line summary; lines holds the details, each naming the source."""

    exit_code = EXIT_DRIFT

    def __init__(self, message: str, lines: Optional[list[str]] = None) -> None:
        super().__init__(message)
        self.lines = list(lines or [])


@dataclass(frozen=True)
class Settled:
    """What a verification run made of one draft."""

    golden: Optional[Observation] = None
    # Non-empty: the draft cannot be imported as it is (the import stops).
    problems: list[str] = field(default_factory=list)
    # What was widened or lost for this pin, shown after the import.
    notes: list[str] = field(default_factory=list)
    # Set: the source itself skips this case (cram's exit 80, trycmd's `skipped`); not imported.
    skip: Optional[str] = None


@dataclass(frozen=True)
class Draft:
    """One pin an importer proposes."""

    case: Case
    source: str
    settle: Callable[[Run], Settled]
    # With Plan.raw_normalise: judged first on the run made with those rules only; a Settled
    # with problems or a skip decides, None goes on to settle(the normalised run).
    check_raw: Optional[Callable[[Run], Optional[Settled]]] = None


@dataclass
class Plan:
    """Everything one import proposes, and what its format keeps and loses."""

    fmt: str
    drafts: list[Draft]
    kept: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    # The pins file is the source itself (a seed-000 pins.jsonl converted in place).
    replace: bool = False
    # Folders the importer made for the pins (a work folder); removed when the import fails.
    cleanup: list[Path] = field(default_factory=list)
    # Drafts are independent (one per source file): a refused or red one does not stop the rest.
    partial: bool = False
    # The rules the drafts' check_raw runs are made with (None: no such run).
    raw_normalise: Optional[list[NormRule]] = None


@dataclass(frozen=True)
class Result:
    """A green import."""

    fmt: str
    imported: list[str]
    destination: str
    kept: list[str]
    lost: list[str]
    notes: list[str]
    skipped: list[str]
    warnings: list[str]
    # A partial plan's drafts that were not imported: the problem lines, each naming its source.
    refused: list[str] = field(default_factory=list)


def pin_id(prefix: str, text: str) -> str:
    """A pin id made from a path or a name: unsafe characters become '-'."""
    cleaned = _UNSAFE_ID.sub("-", text).strip("-.") or "case"
    return (prefix + cleaned)[:128]


def repo_relative(repo: Path, path: Path, what: str) -> str:
    """path relative to the repository, refusing a file outside it."""
    try:
        return path.resolve().relative_to(repo).as_posix()
    except ValueError:
        raise UsageError(
            f"{what} {path} is outside the repository {repo}; imported pins must replay from "
            "any checkout, so keep the file in the repository"
        ) from None


def observed(run: Run, **fields: object) -> Observation:
    """The run's observation with the source's own fields put in."""
    return dataclasses.replace(run.observation, **fields)  # type: ignore[arg-type]


def files_with_modes(
    want: dict[str, str], texts: dict[str, Optional[str]], run: Run
) -> dict[str, OutFile]:
    """Output files as the source holds them (path -> sha256), with the mode of the same file in
    the verification run (the source kept none); a file the run lacks gets mode 0o644."""
    got = run.observation.files
    return {
        path: OutFile(sha, got[path].mode if path in got else 0o644, texts.get(path))
        for path, sha in sorted(want.items())
    }


def run_import(repo: Path, config: PinsConfig, plan: Plan, jobs: int) -> Result:
    """Verify, write, replay from disk; see the module docstring."""
    try:
        return _run_import(repo, config, plan, jobs)
    except BaseException:
        for made in plan.cleanup:
            shutil.rmtree(made, ignore_errors=True)
        raise


def _run_import(repo: Path, config: PinsConfig, plan: Plan, jobs: int) -> Result:
    path = repo / config.file
    existing = _existing(repo, config, plan.replace)
    taken = {p.case.id: p.case.origin for p in existing.all}
    seen: set[str] = set()
    for draft in plan.drafts:
        pin = draft.case.id
        if pin in taken:
            raise UsageError(
                f"{draft.source}: pin id {pin!r} is already used by {taken[pin]}; pass "
                "--prefix to import under other ids, or remove the old pin first"
            )
        if pin in seen:
            raise UsageError(f"{draft.source}: pin id {pin!r} comes twice in this import")
        seen.add(pin)
    warnings: list[str] = []
    refused: list[str] = []
    with ExitStack() as stack:
        session = stack.enter_context(Session(repo, config))
        raw = None
        if plan.raw_normalise is not None:
            raw_config = dataclasses.replace(config, normalise=list(plan.raw_normalise))
            raw = stack.enter_context(Session(repo, raw_config))
        settled = _verify(session, raw, plan, jobs)
        problems = [line for _, s in settled for line in s.problems]
        if problems and not plan.partial:
            raise ImportRefusedError(
                f"{plan.fmt}: {sum(1 for _, s in settled if s.problems)} case(s) cannot be "
                "carried over as they are; nothing was written",
                problems,
            )
        refused += problems
        kept = [(d, s) for d, s in settled if s.skip is None and s.golden is not None]
        skipped = [*plan.skipped, *(f"{d.source}: {s.skip}" for d, s in settled if s.skip)]
        if not kept:
            if refused:
                raise ImportRefusedError(
                    f"{plan.fmt}: no case can be carried over as it is; nothing was written",
                    [*refused, *skipped],
                )
            raise ImportRefusedError(f"{plan.fmt}: no case to import; nothing was written", skipped)
        backup = path.read_bytes() if path.is_file() else None
        # A partial plan drops the pins that replay red and tries the rest again (each round
        # can only shrink the set; a red pin in a whole plan stops the import).
        for _round in range(3):
            new = [Pin(d.case, s.golden) for d, s in kept]
            save_jsonl(path, [*existing.jsonl, *new])
            try:
                drift = _replay_written(
                    repo, config, session, {p.case.id for p in new}, jobs, warnings
                )
            except BaseException:
                _restore(path, backup)
                raise
            if not drift:
                break
            if not plan.partial:
                _restore(path, backup)
                raise ImportRefusedError(
                    f"{plan.fmt}: the imported pins do not replay green against the unchanged "
                    f"program ({len(drift)} drifted); {config.file} is as it was",
                    [line for lines in drift.values() for line in lines],
                )
            for d, _s in kept:
                if d.case.id in drift:
                    refused.append(
                        f"{d.source}: imported, but the pin does not replay green against the "
                        "unchanged program (a value that changes between runs?); not written:"
                    )
                    refused += [f"  {line}" for line in drift[d.case.id]]
            kept = [(d, s) for d, s in kept if d.case.id not in drift]
            if not kept:
                _restore(path, backup)
                raise ImportRefusedError(
                    f"{plan.fmt}: no imported pin replays green against the unchanged program; "
                    f"{config.file} is as it was",
                    refused,
                )
        else:
            _restore(path, backup)
            raise ImportRefusedError(
                f"{plan.fmt}: the imported pins do not replay the same way twice; {config.file} "
                "is as it was",
                refused,
            )
    return Result(
        fmt=plan.fmt,
        imported=[p.case.id for p in new],
        destination=config.file,
        kept=plan.kept,
        lost=plan.lost,
        notes=[note for d, s in kept for note in s.notes],
        skipped=skipped,
        warnings=warnings,
        refused=refused,
    )


def _existing(repo: Path, config: PinsConfig, replace: bool) -> PinSet:
    if replace:
        # The pins file is the source being converted: only the case folders are kept.
        folders_only = dataclasses.replace(config, file=f"{config.file}.~charpin-import-none")
        return load_pins(repo, folders_only)
    return load_pins(repo, config)


def _verify(
    session: Session, raw: Optional[Session], plan: Plan, jobs: int
) -> list[tuple[Draft, Settled]]:
    def one(draft: Draft) -> tuple[Draft, Settled]:
        if raw is not None and draft.check_raw is not None:
            run, problem = _verification_run(raw, draft)
            if problem is not None:
                return draft, problem
            assert run is not None
            first = draft.check_raw(run)
            if first is not None:
                return draft, first
        run, problem = _verification_run(session, draft)
        if problem is not None:
            return draft, problem
        assert run is not None
        return draft, draft.settle(run)

    if jobs <= 1 or len(plan.drafts) <= 1:
        return [one(d) for d in plan.drafts]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, plan.drafts))


def _verification_run(session: Session, draft: Draft) -> tuple[Optional[Run], Optional[Settled]]:
    """(the run, None), or (None, why it cannot settle anything)."""
    try:
        run = run_case(session, draft.case)
    except CharpinError as exc:
        return None, Settled(problems=[f"{draft.source}: {exc}"])
    if run.error is not None or run.timed_out or run.limit is not None:
        why = run.error or run.limit or f"timed out after {session.config.timeout}s"
        return None, Settled(problems=[f"{draft.source}: the verification run failed: {why}"])
    if run.outside_writes:
        shown = ", ".join(run.outside_writes[:5])
        return None, Settled(
            problems=[
                f"{draft.source}: the program wrote outside the output folder "
                f"{session.config.output}/ ({shown}); a pin keeps only files under it, so "
                "this case cannot replay green: make the program write there"
            ]
        )
    return run, None


def _replay_written(
    repo: Path,
    config: PinsConfig,
    session: Session,
    ids: set[str],
    jobs: int,
    warnings: list[str],
) -> dict[str, list[str]]:
    """Replay the imported pins as read back from disk; pin id -> drift lines for each red one."""
    written = [p for p in load_pins(repo, config).all if p.case.id in ids]
    outcomes = replay(session, written, jobs, notes=warnings)
    drift: dict[str, list[str]] = {}
    for outcome in outcomes:
        if not outcome.classes:
            continue
        head = f"{outcome.pin.case.id} [{outcome.failure_class}]"
        lines = [head]
        if outcome.run.error:
            lines.append(f"  error: {outcome.run.error}")
        elif outcome.pin.golden is not None:
            detail = describe_pin(
                outcome.pin, outcome.pin.golden, outcome.run.observation, DETAIL_CAP
            )
            lines.extend(f"  {line}" for line in detail)
        drift[outcome.pin.case.id] = lines
    return drift


def _restore(path: Path, backup: Optional[bytes]) -> None:
    if backup is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(backup)


def summary_lines(result: Result) -> Iterable[str]:
    """What the CLI prints after a green import."""
    for pin in result.imported:
        yield f"imported {pin}"
    for line in result.kept:
        yield f"kept: {line}"
    for line in result.lost:
        yield f"not carried over: {line}"
    for line in result.notes:
        yield f"note: {line}"
    for line in result.skipped:
        yield f"not imported: {line}"
    yield (
        f"{result.fmt}: {len(result.imported)} pin(s) written to {result.destination} and "
        "replayed green against the unchanged program"
    )
