"""Goldens that are a crash, not the program's behaviour. Stdlib only.

Import crashes: a target that exits non-zero with `No module named 'pkg'` on stderr did not run
the program. When `pkg` is in the repository, the pins' Python could not import the repository's
own code (a `pythonpath` problem) and such a recording is always refused; when it is not, the
pins' Python lacks a dependency. `check` warns about such goldens recorded earlier, and
`check --prove` fails on those of repository packages (they stay green after any edit).

Fatal crashes (find_fatal): an uncaught Python exception (a `Traceback (most recent call last):`
line on stderr and exit 1) or death by a signal (a negative exit code). `record` refuses both,
and a dependency's import crash, unless the pin expects a crash (Case.expect_crash: pins.jsonl's
`expect_crash`, a case folder's expect.json, `record --expect-crash`); a pin that expects one and
does not crash is refused too. `check` warns about crash goldens recorded without the
expectation (before record refused them) and `check --prove` fails on them.

A pin that expects a crash is replayed against what the caller sees (caller_view): each
traceback keeps its header and its exception lines (type and message, chained ones too), and
its frames (`  File "x.py", line 12, in f`, the source lines, the carets) are left out of the
comparison, so a refactor that only moves lines stays green; the exit code and everything else
the program printed are compared as ever. `crash_frames` (pins.jsonl), `"frames": true`
(expect.json) or `record --crash-frames` compares the frames too.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from charpin_runner.errors import EXIT_DRIFT, CharpinError, UsageError
from charpin_runner.pins.model import Observation, Pin

# The last line of an uncaught ModuleNotFoundError/ImportError, or `python -m`'s own
# "python: No module named pkg". Only the last line of stderr counts: a program that reports
# import problems of something else (a linter, a test runner) goes on to print more.
_MISSING = re.compile(
    rb"(?:ModuleNotFoundError|ImportError|\S*python[\d.]*): "
    rb"No module named '?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)'?"
)
# Folders never searched for the repository's packages (tool caches, environments, VCS).
_SKIP = frozenset(
    {"node_modules", "__pycache__", "site-packages", "dist-packages", "build", "dist", "venv"}
)
# Import roots are shallow (., src, lib, python/...): deeper folders are not searched.
_DEPTH = 2


# `python -m pkg` where pkg has no __main__.py (seen pinning more-itertools).
_NO_MAIN = re.compile(rb"is a package and cannot be directly executed$")
# The line an uncaught exception's traceback starts with (also each chained one's).
_TRACEBACK = b"Traceback (most recent call last):"


def caller_view(data: bytes) -> bytes:
    """data with each traceback's frames left out: what follows a `Traceback (most recent call
    last):` line up to the exception line is indented (frames, source lines, carets)."""
    if _TRACEBACK not in data:
        return data
    out = []
    in_frames = False
    for line in data.splitlines(keepends=True):
        if line.rstrip() == _TRACEBACK:
            in_frames = True
        elif in_frames and line[:1] in (b" ", b"\t") and line.strip():
            continue
        else:
            in_frames = False
        out.append(line)
    return b"".join(out)


def compared(pin: Pin, obs: Observation) -> Observation:
    """obs as replay compares it for pin: a pin that expects a crash without crash_frames is
    compared on what the caller sees (caller_view of its streams)."""
    if not pin.case.expect_crash or pin.case.crash_frames:
        return obs
    return replace(obs, stdout=caller_view(obs.stdout), stderr=caller_view(obs.stderr))


class CrashError(CharpinError):
    """A recording of a crash the pin does not expect (or no crash where it expects one)."""

    exit_code = EXIT_DRIFT


class ImportCrashError(CrashError):
    """A recording of the repository's own code failing to import; it is refused."""


@dataclass(frozen=True)
class Fatal:
    """A run that died: an uncaught Python exception or a signal."""

    exit_code: int
    # The exception's line (`ValueError: bad row`), or `killed by SIGSEGV`.
    line: str

    @property
    def what(self) -> str:
        if self.exit_code < 0:
            return f"was {self.line} (exit {self.exit_code})"
        return f"crashed with an uncaught exception (exit {self.exit_code}): {self.line!r}"

    def message(self, pin_id: str) -> str:
        """One line: what happened, then the fix."""
        return (
            f"pin {pin_id} {self.what}, so its golden would pin the crash, not the program; fix "
            "the program, its argv or environment, or if that crash is the behaviour to pin, "
            "record it with --expect-crash (expect_crash: true)"
        )


def find_fatal(obs: Observation) -> Optional[Fatal]:
    """The fatal crash obs records: a signal, or exit 1 with a traceback on stderr."""
    if obs.exit_code < 0:
        try:
            name = signal.Signals(-obs.exit_code).name
        except ValueError:
            name = f"signal {-obs.exit_code}"
        return Fatal(obs.exit_code, f"killed by {name}")
    if obs.exit_code != 1:
        return None
    lines = obs.stderr.splitlines()
    if lines and _NO_MAIN.search(lines[-1]):
        # `-m pkg` of a package without __main__.py: nothing of the program ran.
        return Fatal(obs.exit_code, lines[-1].decode("utf-8", "replace").strip())
    starts = [i for i, line in enumerate(lines) if line.rstrip() == _TRACEBACK]
    if not starts:
        return None
    # The traceback's last line: the exception, the first line after the last header that is
    # not a frame (`  File ...`, the source line, the carets: all indented).
    after = lines[starts[-1] + 1 :]
    found = next((x for x in after if x.strip() and not x[:1].isspace()), None)
    line = "(no exception line)" if found is None else found.decode("utf-8", "replace").strip()
    return Fatal(obs.exit_code, line)


@dataclass(frozen=True)
class ImportCrash:
    """A recorded run that ended in `No module named ...`."""

    module: str
    line: str
    # The repository folder (repo-relative, "." for the root) holding the module; None when the
    # module is not in the repository.
    root: Optional[str]

    def message(self, pin_id: str, pythonpath: list[str]) -> str:
        """One line: what happened, then the fix."""
        head = f"pin {pin_id} records a crash, not the program: {self.line!r}"
        if self.root is None:
            return (
                f"{head}; {self.module} is not in the repository, so the pins' Python lacks "
                "it: point [tool.charpin.pins] python at the project's environment or install "
                "it there"
            )
        where = f"{self.module} is in the repository under {self.root}"
        if self.root not in pythonpath:
            wanted = [*pythonpath, self.root]
            return (
                f"{head}; {where}, which is not on the pins' pythonpath {pythonpath}: set "
                f"[tool.charpin.pins] pythonpath = {_toml_list(wanted)}"
            )
        return (
            f"{head}; {where}, which is on the pins' PYTHONPATH, so the target drops it "
            f"(python -I or -E, or a cleared environment): pin it as -m {self.module} or as "
            "its script instead"
        )


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def find_crash(repo: Path, obs: Observation) -> Optional[ImportCrash]:
    """The import crash obs records, if it ended non-zero with `No module named ...`."""
    if obs.exit_code == 0:
        return None
    lines = obs.stderr.rstrip().splitlines()
    last = _MISSING.fullmatch(lines[-1].strip()) if lines else None
    if last is None:
        return None
    module = last.group(1).decode("ascii")
    line = last.group(0).decode("utf-8", "replace")
    return ImportCrash(module, line, locate(repo, module))


def locate(repo: Path, module: str) -> Optional[str]:
    """The shallowest repository folder from which `module` would import, if any."""
    rel = Path(*module.split("."))
    for root in _roots(repo):
        base = repo / root
        package = base / rel
        if (base / rel.with_suffix(".py")).is_file() or (package / "__init__.py").is_file():
            return root
        if package.is_dir() and any(p.suffix == ".py" for p in package.iterdir()):
            return root  # a namespace package
    return None


def _roots(repo: Path) -> list[str]:
    """Repo-relative folders up to _DEPTH deep, shallowest first ("." is the root)."""
    roots = ["."]
    level = [repo]
    for _ in range(_DEPTH):
        deeper: list[Path] = []
        for folder in level:
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or entry.name in _SKIP:
                    continue
                if entry.name.endswith(".egg-info") or not entry.is_dir(follow_symlinks=False):
                    continue
                path = Path(entry.path)
                deeper.append(path)
                roots.append(path.relative_to(repo).as_posix())
        level = deeper
    return roots


def pythonpath_rels(repo: Path, dirs: list[str]) -> list[str]:
    """A session's PYTHONPATH folders as repo-relative paths ("." for the root)."""
    out = []
    for folder in dirs:
        rel = os.path.relpath(folder, repo)
        out.append(rel.replace(os.sep, "/"))
    return out


def unexpected_crashes(repo: Path, pins: list[Pin]) -> list[tuple[Pin, Fatal]]:
    """Pins whose golden is a fatal crash the pin does not expect (recorded before `record`
    refused them), in pin order; import crashes are crashed_goldens' to report."""
    found = []
    for pin in pins:
        if pin.golden is None or pin.case.expect_crash:
            continue
        fatal = find_fatal(pin.golden)
        if fatal is not None and find_crash(repo, pin.golden) is None:
            found.append((pin, fatal))
    return found


def crashed_goldens(repo: Path, pins: list[Pin]) -> list[tuple[Pin, ImportCrash]]:
    """Pins whose golden is an import crash, in pin order."""
    found = []
    for pin in pins:
        if pin.golden is not None:
            crash = find_crash(repo, pin.golden)
            # A missing dependency can be the behaviour to pin; the repository's own code
            # failing to import never is (that golden stays green whatever the code does).
            if crash is not None and not (pin.case.expect_crash and crash.root is None):
                found.append((pin, crash))
    return found


def with_crash_flags(
    pins: list[Pin], named: set[str], expect: Optional[bool], frames: Optional[bool]
) -> list[Pin]:
    """pins with `record --[no-]expect-crash` / `--[no-]crash-frames` applied to those named
    (None: the flag was not given); crash_frames without expect_crash is a usage error."""
    out = []
    for pin in pins:
        case = pin.case
        if case.id in named:
            crash = case.expect_crash if expect is None else expect
            keep = case.crash_frames if frames is None else frames
            if keep and not crash:
                raise UsageError(
                    f"--crash-frames is for a pin that expects a crash; add --expect-crash "
                    f"(pin {case.id})"
                )
            case = replace(case, expect_crash=crash, crash_frames=keep and crash)
        out.append(Pin(case, pin.golden))
    return out
