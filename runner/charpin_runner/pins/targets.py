"""What a pin's argv[0] names, and the argv that starts it. Runs on boxes; stdlib only.

The first rule that matches argv[0] decides (README, "What a pin runs"):

  -m MODULE        the module, as `python -m MODULE`, by the pins' Python;
  python, python3  the pins' Python with the rest of argv, so `python -m MODULE` is the form
                   above and `python FILE` (a repository file) the one below; any other
                   `python ...` is passed on as it is;
  a repository     `*.py`, or a file with a `/` in its path whose first line is a Python shebang
  file             (`#!/usr/bin/env python3`): a script run by the pins' Python (so `bin/tool`
                   needs no `.py`);
  a console script a name the repository declares ([project.scripts], setup.cfg, setup.py, as
                   `charpin inventory` lists them): its `module:function` called by the pins'
                   Python the way the installed script would, with nothing installed;
  anything else    a command found on PATH (repo-relative when it holds a `/`).

Python targets other than plain `python ...` start through the bootstrap (bootstrap.py), which
records the env keys they read. Every pin runs with the `pythonpath` folders of the repository it
replays from on PYTHONPATH (pythonpath_dirs).

A case's argv0 (a case folder's argv.json[0]) is the program's own name: the script, module or
console script sees it as sys.argv[0] (given to the bootstrap), a command as the argv[0] it is
executed with; `$REPO/` at its start stands for the checkout replayed from. Without one the
program sees what its target gives it: a script's path, a module's file, a console script's name.
Under a prefix (coverage) a script or module sees its path, as coverage gives it. `python ...`
sets sys.argv[0] itself, so an argv0 there must be the interpreter's own word.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from charpin_runner.errors import RunError
from charpin_runner.pins.model import Case

# Bare names that mean "the pins' Python"; versioned names (python3.8) stay commands on PATH.
PYTHON_NAMES = frozenset({"python", "python3"})
# At the start of an argv0: the repository checkout the pin replays from.
REPO_PREFIX = "$REPO/"
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_SHEBANG_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
# Enough for any real shebang line; a longer first line is not one.
_SHEBANG_BYTES = 512


@dataclass(frozen=True)
class Start:
    """How to start one pin: the argv, and whether the bootstrap records env reads."""

    argv: list[str]
    records_env: bool
    kind: str  # "script", "module", "console-script", "python" or "command"
    # The file to execute when argv[0] is the program's own name (a command with an argv0).
    executable: Optional[str] = None


def default_pythonpath(repo: Path) -> list[str]:
    """The repository root, and src/ when the repository has that folder (a src layout)."""
    return [".", "src"] if (repo / "src").is_dir() else ["."]


def pythonpath_dirs(repo: Path, configured: Optional[list[str]]) -> list[str]:
    """Absolute folders for PYTHONPATH, relative to the repository a session replays from."""
    rels = default_pythonpath(repo) if configured is None else configured
    return [os.path.normpath(str(repo / rel)) for rel in rels]


def python_shebang(path: Path) -> bool:
    """True when the file's first line is a `#!` line that starts a Python interpreter."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_SHEBANG_BYTES)
    except OSError:
        return False
    if not head.startswith(b"#!"):
        return False
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace")
    words = line.split()
    if not words:
        return False
    program = os.path.basename(words[0])
    if program == "env":  # `#!/usr/bin/env python3`, `#!/usr/bin/env -S python3 -u`, `VAR=x`
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not rest:
            return False
        program = os.path.basename(rest[0])
    return _SHEBANG_PYTHON.fullmatch(program) is not None


def entry_target(name: str, declared: str) -> str:
    """`module:attr` of a declared console script, extras (`[cli]`) and spaces dropped."""
    target = declared.split("[", 1)[0].replace(" ", "")
    module, sep, attr = target.partition(":")
    if not sep or not _MODULE.fullmatch(module) or not _MODULE.fullmatch(attr):
        raise RunError(
            f"console script {name} is declared as {declared!r}, not `module:function`; "
            "fix the declaration or pin the module with -m"
        )
    return target


def start(
    case: Case,
    repo: Path,
    python: str,
    bootstrap: Path,
    scripts: Callable[[], Mapping[str, str]],
    prefix: Optional[list[str]] = None,
) -> Start:
    """The argv for case. scripts() maps console-script names to their declared targets
    (read only for a bare name).

    With prefix (e.g. `-m coverage run ...`) a Python target runs as `python PREFIX ...` and
    its env reads are not recorded."""
    first, args = case.argv[0], list(case.argv[1:])
    name = program_argv0(case, repo)
    if first == "-m":
        return _module(case, python, bootstrap, args, prefix, name)
    if first in PYTHON_NAMES:
        if name is not None and name != first:
            raise RunError(
                f"pin {case.id}: `{first} ...` sets sys.argv[0] itself, so the program's name "
                f"cannot be {case.argv0!r}; name the script or `-m MODULE` as the target instead"
            )
        if args[:1] == ["-m"]:
            return _module(case, python, bootstrap, args[1:], prefix, None)
        if args and not args[0].startswith("-") and _in_repo(repo, args[0]):
            return _script(case, repo, python, bootstrap, args[0], args[1:], prefix, None)
        return Start([python, *args], False, "python")
    if first.endswith(".py") or ("/" in first and _is_script(repo, first)):
        return _script(case, repo, python, bootstrap, first, args, prefix, name)
    declared = scripts() if "/" not in first else {}
    if first in declared:
        target = entry_target(first, declared[first])
        call = [str(bootstrap), "--entry", target, name or first, *args]
        if prefix is not None:
            return Start([python, *prefix, *call], False, "console-script")
        return Start([python, *call], True, "console-script")
    if "/" in first and not os.path.isabs(first):
        first = str(repo / first)
    if name is not None and name != first:
        return Start([name, *args], False, "command", executable=first)
    return Start([first, *args], False, "command")


def program_argv0(case: Case, repo: Path) -> Optional[str]:
    """case.argv0 with a leading `$REPO/` made the checkout's path; None when the case has none."""
    name = case.argv0
    if name is not None and name.startswith(REPO_PREFIX):
        return str(repo / name[len(REPO_PREFIX) :])
    return name


def _named(name: Optional[str]) -> list[str]:
    """The bootstrap's option that gives the target its sys.argv[0]."""
    return [] if name is None else ["--argv0", name]


def _in_repo(repo: Path, rel: str) -> bool:
    return not os.path.isabs(rel) and (repo / rel).is_file()


def _is_script(repo: Path, rel: str) -> bool:
    return _in_repo(repo, rel) and (rel.endswith(".py") or python_shebang(repo / rel))


def _script(
    case: Case,
    repo: Path,
    python: str,
    bootstrap: Path,
    rel: str,
    args: list[str],
    prefix: Optional[list[str]],
    name: Optional[str],
) -> Start:
    script = repo / rel
    if not script.is_file():
        raise RunError(f"pin {case.id}: script {rel} not found in the repository; fix argv[0]")
    if prefix is not None:
        return Start([python, *prefix, str(script), *args], False, "script")
    return Start([python, str(bootstrap), *_named(name), str(script), *args], True, "script")


def _module(
    case: Case,
    python: str,
    bootstrap: Path,
    args: list[str],
    prefix: Optional[list[str]],
    name: Optional[str],
) -> Start:
    if not args or not _MODULE.fullmatch(args[0]):
        got = repr(args[0]) if args else "nothing"
        raise RunError(
            f"pin {case.id}: -m must be followed by a module name, not {got}; "
            'write argv as ["-m", "package.module", ...]'
        )
    if prefix is not None:
        return Start([python, *prefix, "-m", *args], False, "module")
    return Start([python, str(bootstrap), *_named(name), "-m", *args], True, "module")
