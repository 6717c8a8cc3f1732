"""Record pins with the current program as the oracle, refusing unstable ones. Stdlib only.

Imports only charpin_runner.errors and sibling pins modules; raises, never prints.
record_pins records a batch in parallel, then drops the pins that wrote into the repository
(repoguard.py); save_recordings writes the survivors to pins.jsonl and the goldens folder.
Each new recording (record_case) is replayed three times before it is accepted:
  1. repeat     - same sandbox path, same everything: catches clocks, randomness, races;
  2. temp-root  - the sandbox under another, deeper temp root (with a space in it);
  3. locale     - TZ, LANG (with LC_ALL), PYTHONHASHSEED and umask changed together; on drift
                  each is tried alone so the message names the one that moved bytes.
File modes are not compared under the umask perturbation (a umask changes modes by design).
What the proof holds constant and compares: every run compares the exit code, stdout, stderr,
the output files, normalisation counts and writes outside the output folder. The env keys read
are compared only between runs in the same environment (repeat, temp-root, umask alone): which
keys a lookup chain reads depends on which keys are set (`os.environ.get("LC_ALL") or
os.environ.get("LANG")` stops early once LC_ALL is set), and replay always runs in the recorded
environment, so the list only has to be stable there. (The standard library's own locale lookups,
gettext's above all, are not recorded at all: see bootstrap.py.)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from charpin_runner.errors import EXIT_DRIFT, CharpinError
from charpin_runner.pins import compare as cmp
from charpin_runner.pins import repoguard
from charpin_runner.pins.crash import (
    CrashError,
    ImportCrashError,
    find_crash,
    find_fatal,
    pythonpath_rels,
)
from charpin_runner.pins.execute import (
    FILES_LIMIT,
    STREAM_LIMIT,
    Perturbation,
    Run,
    Session,
    run_case,
)
from charpin_runner.pins.model import Case, Observation, Pin
from charpin_runner.pins.store import PinSet, save_expect, save_golden, save_jsonl

SINGLE_PERTURBATIONS = (
    Perturbation("TZ", env={"TZ": "Pacific/Chatham"}),
    Perturbation("LANG", env={"LANG": "en_US.UTF-8", "LC_ALL": "en_US.UTF-8"}),
    Perturbation("PYTHONHASHSEED", env={"PYTHONHASHSEED": "12345"}),
    Perturbation("umask", umask=0o077),
)
_MIB = 1024 * 1024


class UnstableError(CharpinError):
    """A pin gave different bytes under a perturbation; it is refused."""

    exit_code = EXIT_DRIFT


@dataclass(frozen=True)
class Recorded:
    """A stable recording."""

    case: Case
    observation: Observation
    # Said with a recording that is kept but looks wrong (none since crashes are refused
    # unless expected: crash.py); the CLI prints it.
    warning: Optional[str] = None


def _moved(base: Run, other: Run, env_read: bool) -> str:
    """Where the first differing bytes are, shown briefly."""
    if other.error or other.timed_out or other.limit:
        return other.error or other.limit or "it timed out"
    if other.outside_writes != base.outside_writes:
        return f"writes outside the output folder {other.outside_writes[:3]}"
    return _moved_bytes(base.observation, other.observation, env_read)


def _moved_bytes(golden: Observation, other: Observation, env_read: bool) -> str:
    for label, a, b in (
        ("stdout", golden.stdout, other.stdout),
        ("stderr", golden.stderr, other.stderr),
    ):
        if a != b:
            index = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            start = max(0, index - 20)
            return (
                f"{label} byte {index}: {a[start : index + 30]!r} became {b[start : index + 30]!r}"
            )
    if golden.exit_code != other.exit_code:
        return f"exit code {golden.exit_code} became {other.exit_code}"
    for path in sorted(set(golden.files) | set(other.files)):
        want, got = golden.files.get(path), other.files.get(path)
        if want is None or got is None:
            return f"output file {path} {'appeared' if want is None else 'disappeared'}"
        if want.sha256 != got.sha256:
            return f"output file {path} content changed"
    if golden.norm_counts != other.norm_counts:
        return f"normalisation counts {golden.norm_counts} became {other.norm_counts}"
    if env_read and golden.env_read != other.env_read:
        return f"env keys read {golden.env_read} became {other.env_read}"
    for path in sorted(set(golden.files) & set(other.files)):
        if golden.files[path].mode != other.files[path].mode:
            return f"mode of output file {path} changed"
    return "the observation changed"


def _drift(base: Run, other: Run, modes: bool = True, env_read: bool = True) -> bool:
    if other.error or other.timed_out or other.limit or other.outside_writes != base.outside_writes:
        return True
    found = cmp.compare(base.observation, other.observation, modes=modes)
    if not env_read and cmp.ENV_READ in found:
        found.remove(cmp.ENV_READ)
    # Recording asks more than replay: the same keys on every run, not only no new ones.
    if env_read and base.observation.env_read != other.observation.env_read:
        return True
    return bool(found)


def _refuse(case: Case, what: str, base: Run, other: Run, env_read: bool = True) -> UnstableError:
    moved = _moved(base, other, env_read)
    # No normalisation rule changes which keys a program reads.
    fix = (
        "make the program read the same env keys on every run"
        if moved.startswith("env keys read")
        else "make the program deterministic or add a normalisation rule"
    )
    return UnstableError(
        f"pin {case.id} is unstable under {what}: {moved}; {fix}, then record again"
    )


def record_case(session: Session, case: Case, check_stability: bool = True) -> Recorded:
    """Run case as the oracle, prove it stable, and return the observation to store."""
    _refuse_empty_folders(session.repo, case)
    sandbox = session.dir / f"record-{hashlib.sha256(case.id.encode()).hexdigest()[:12]}"
    base = run_case(session, case, sandbox=sandbox)
    if base.error is not None:
        raise CharpinError(f"pin {case.id}: {base.error}; fix argv or the environment")
    if base.timed_out:
        raise UnstableError(
            f"pin {case.id} timed out while recording; raise [tool.charpin.pins] timeout"
        )
    if base.limit is not None:
        raise CharpinError(
            f"pin {case.id}: {base.limit}; make it write less (stdout and stderr are limited to "
            f"{STREAM_LIMIT // _MIB} MiB each, the output files to {FILES_LIMIT // _MIB} MiB)"
        )
    if base.outside_writes:
        raise UnstableError(
            f"pin {case.id} writes outside the output folder ({', '.join(base.outside_writes[:3])}); "
            "write under the declared output folder or change [tool.charpin.pins] output"
        )
    _refuse_crash(session, case, base.observation)
    if check_stability:
        _prove_stable(session, case, base, sandbox)
    return Recorded(case, base.observation)


def empty_folders(root: Path) -> list[str]:
    """Folders under root (root-relative, sorted) that hold nothing: git keeps no empty folder,
    so a clean checkout of the repository does not have them."""
    found = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(current, d)))
        if current != str(root) and not dirs and not files:
            found.append(Path(current).relative_to(root).as_posix())
    return found


def _refuse_empty_folders(repo: Path, case: Case) -> None:
    """A work folder holding an empty folder records green here and fails from a clean
    checkout, where git left it out: refused, with the fix, before anything runs."""
    if case.fixtures is None:
        return
    empty = empty_folders(repo / case.fixtures)
    if empty:
        listed = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
        keep = f"{case.fixtures}/{empty[0]}/.gitkeep"
        raise UnstableError(
            f"pin {case.id}: its work folder {case.fixtures} holds empty folder(s) {listed}, "
            "which git does not keep, so the pin would fail from a clean checkout; put a file "
            f"in each (e.g. {keep}) or have the program create it, then record again"
        )


def _refuse_crash(session: Session, case: Case, obs: Observation) -> None:
    """A crash is never recorded silently (crash.py): refuse one the pin does not expect, an
    expected one that did not happen, and always the repository's own code failing to import."""
    crash = find_crash(session.repo, obs)
    fatal = find_fatal(obs)
    if crash is not None:
        message = crash.message(case.id, pythonpath_rels(session.repo, session.pythonpath))
        # `No module named 'pkg'` for the repository's own pkg pins nothing, expected or not.
        if crash.root is not None:
            raise ImportCrashError(f"{message}, then record again")
        if not case.expect_crash:
            raise CrashError(
                f"{message}; or, if that crash is the behaviour to pin, record it with "
                "--expect-crash (expect_crash: true)"
            )
        return
    if fatal is not None and not case.expect_crash:
        raise CrashError(fatal.message(case.id))
    if fatal is None and case.expect_crash:
        raise CrashError(
            f"pin {case.id} expects a crash (expect_crash) but exited {obs.exit_code} without "
            "an uncaught exception or a signal; record it with --no-expect-crash (or drop "
            "expect_crash) if it no longer crashes"
        )


def _prove_stable(session: Session, case: Case, base: Run, sandbox: Path) -> None:
    repeat = run_case(session, case, sandbox=sandbox)
    if _drift(base, repeat):
        raise _refuse(case, "repeat (a plain rerun: clock, randomness or ordering)", base, repeat)
    other_root = session.dir / "perturbed root" / "deeper" / "still"
    moved = run_case(session, case, Perturbation("temp-root", root=other_root))
    if _drift(base, moved):
        raise _refuse(case, "temp-root (another temporary folder)", base, moved)
    combined = Perturbation(
        "TZ+LANG+PYTHONHASHSEED+umask",
        env={k: v for p in SINGLE_PERTURBATIONS for k, v in p.env.items()},
        umask=0o077,
    )
    mixed = run_case(session, case, combined)
    # The env keys read are compared only where the environment is the recorded one (see above).
    if not _drift(base, mixed, modes=False, env_read=False):
        return
    for single in SINGLE_PERTURBATIONS:
        alone = run_case(session, case, single)
        same_env = not single.env
        if _drift(base, alone, modes=single.umask is None, env_read=same_env):
            raise _refuse(case, single.name, base, alone, env_read=same_env)
    raise _refuse(case, combined.name, base, mixed, env_read=False)


def changes(old: Observation, new: Observation) -> list[str]:
    """What an update changed, by category (exit code, stdout, stderr, file set, file content...)."""
    names = {
        cmp.EXIT_CODE: "exit code",
        cmp.STDOUT: "stdout",
        cmp.STDERR: "stderr",
        cmp.WHITESPACE: "whitespace only",
        cmp.FILE_SET: "file set",
        cmp.FILE_CONTENT: "file content",
        cmp.FILE_MODE: "file mode",
        cmp.ENV_READ: "env keys read",
        cmp.NORMALISATION_COUNT: "normalisation counts",
    }
    found = cmp.compare(old, new)
    labels = [names[c] for c in found]
    # "stderr only" is the category reviewers ask for: say so when it is the whole change.
    if found == [cmp.STDERR]:
        labels = ["stderr only"]
    return labels


@dataclass
class Batch:
    """What recording a set of pins gave."""

    # Stable recordings by pin id; only these are saved.
    recorded: dict[str, Recorded] = field(default_factory=dict)
    # One reason per refused pin (unstable, failed to run, or wrote into the repository).
    refused: list[str] = field(default_factory=list)
    # Repository paths that changed during the batch although no pin wrote them again.
    unexplained: list[str] = field(default_factory=list)


def record_pins(
    session: Session,
    wanted: list[Pin],
    jobs: int,
    on_recorded: Optional[Callable[[Pin, Recorded], None]] = None,
) -> Batch:
    """Record wanted pins jobs at a time, then refuse those that wrote into the repository.

    on_recorded is called in the caller's thread, in the order of wanted, as each pin's
    recording is accepted (a later repository check can still refuse it)."""
    batch = Batch()
    before = repoguard.snapshot(session.repo)

    def one(pin: Pin) -> tuple[Pin, Optional[Recorded], Optional[str]]:
        try:
            return pin, record_case(session, pin.case), None
        except CharpinError as exc:
            return pin, None, str(exc)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for pin, recorded, problem in pool.map(one, wanted):
            if recorded is None:
                batch.refused.append(str(problem))
                continue
            batch.recorded[pin.case.id] = recorded
            if on_recorded is not None:
                on_recorded(pin, recorded)
    _refuse_repo_writers(session, wanted, before, batch)
    return batch


def _refuse_repo_writers(
    session: Session, wanted: list[Pin], before: repoguard.Snapshot, batch: Batch
) -> None:
    """Drop recordings of pins that wrote into the repository; the files are left for the user."""
    paths = repoguard.changed(before, repoguard.snapshot(session.repo))
    if not paths:
        return
    found = repoguard.attribute(session, [p.case for p in wanted], paths, before)
    batch.unexplained = found.unexplained
    for pin_id, written in sorted(found.by_pin.items()):
        batch.recorded.pop(pin_id, None)
        batch.refused.append(
            f"pin {pin_id} writes into the repository ({repoguard.describe(written)}; "
            "left in place, remove them); write under the declared output folder instead"
        )


def save_recordings(pin_set: PinSet, new: Optional[Case], recorded: dict[str, Recorded]) -> None:
    """Store recordings where their pins live: pins.jsonl (new is appended there) or goldens."""
    jsonl = list(pin_set.jsonl)
    if new is not None and new.id in recorded and new.id not in {p.case.id for p in jsonl}:
        jsonl.append(Pin(new, None))
    changed = False
    merged = []
    for pin in jsonl:
        got = recorded.get(pin.case.id)
        if got is not None:
            merged.append(Pin(got.case, got.observation))
            changed = True
        else:
            merged.append(pin)
    if changed:
        save_jsonl(pin_set.jsonl_path, merged)
    for pin in pin_set.folders:
        got = recorded.get(pin.case.id)
        if got is not None:
            save_golden(pin_set.goldens_dir, pin.case.id, got.observation)
            save_expect(pin_set.cases_dir / pin.case.id, got.case.expect_crash, got.case.crash_frames)
