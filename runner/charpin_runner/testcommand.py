"""The test command of one receipt: its argv, its environment, and how the receipt records it.
Runs on boxes; stdlib only.

The configured command plus the probe's options; probehost.rewrite() then starts it through the
boot script (rule 1: the probe loads before anything of the checkout).

The environment is an allow-list (childenv.py: the tests never get this machine's secrets),
with byte code read and written only in a fresh folder of this run (PYTHONPYCACHEPREFIX), so
no `__pycache__` a commit's code planted (in the checkout, an ignored folder, a venv) runs in a
later run. Nothing of charpin is put on PYTHONPATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from charpin_runner import childenv
from charpin_runner.config import CharpinConfig
from charpin_runner.errors import RunError


def build(
    config: CharpinConfig,
    repo: Path,
    record: str,
    ledger: Optional[str],
    today: str,
    extra: list[str],
    *,
    frozen_only: bool = False,
    cover: list[str] | None = None,
    capture: list[str] | None = None,
    entries: tuple[list[str], list[str]] = ([], []),
) -> list[str]:
    """The full test command line: the configured command plus the probe plugin's options.
    record is the probe's --charpin-receipt value (a path, or `fd:N` for the parent's pipe)."""
    argv = list(config.test_command or [sys.executable, "-m", "pytest"])
    # One token per option (`--opt=value`): pytest-xdist's workers find their rootdir from the
    # arguments, and a separate value (the probe's path in a temporary folder) counts there as
    # a test path, moving the workers' rootdir, and every node id, to a common parent.
    # `-p` too: xdist's workers load the probe by name (the boot registers it in the controller).
    argv += ["-p", "charpin_runner.plugin", f"--charpin-receipt={record}"]
    argv += [f"--charpin-root={repo}"]
    if ledger is not None:
        argv += [f"--charpin-ledger={repo / ledger}"]
        if frozen_only:
            argv.append("--charpin-frozen-only")
    day = today or datetime.now(timezone.utc).date().isoformat()
    argv += [f"--charpin-today={day}", "-p", "no:cacheprovider"]
    argv += [f"--charpin-cover={path}" for path in cover or []]
    argv += [f"--charpin-capture={target}" for target in capture or []]
    argv += [f"--charpin-entries={path}" for path in entries[0]]
    argv += [f"--charpin-entries-skip={path}" for path in entries[1]]
    return argv + list(config.pytest_args) + list(extra)


def environment(
    config: CharpinConfig, scratch: Optional[str] = None, passed: Sequence[str] = ()
) -> dict[str, str]:
    """The tests' environment: the allow-listed part of this process's, plus charpin's own.

    scratch: a folder of this run only, where the byte-code cache goes (none: byte code is
    neither read from nor written to any `__pycache__`)."""
    return childenv.for_tests(os.environ, config.env_allow, passed, scratch)


def check_startable(program: str, repo: Path, env: dict[str, str]) -> None:
    """A missing program is one line naming test_command (under bwrap it would otherwise be
    bwrap's own failure, exit 1, like a failing test run)."""
    if os.sep in program:
        found = program if os.path.isabs(program) else os.path.join(str(repo), program)
        ok = os.path.isfile(found) and os.access(found, os.X_OK)
    else:
        ok = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if not ok:
        raise RunError(
            f"cannot start the test command {program!r}: No such file or directory; "
            "fix test_command in [tool.charpin]"
        )


def recorded(argv: list[str], repo: Path) -> list[str]:
    """argv as the receipt keeps it: the per-run record channel and the repository's path
    replaced, so two boxes' commands compare equal."""

    def swap(arg: str) -> str:
        name, eq, value = arg.partition("=")
        if eq and name == "--charpin-receipt":
            return f"{name}={{probe}}"
        if eq and name.startswith("--charpin-"):
            return f"{name}={swap(value)}"
        if arg == str(repo):
            return "{repo}"
        return arg.replace(str(repo) + os.sep, "{repo}" + os.sep)

    return [swap(arg) for arg in argv]
