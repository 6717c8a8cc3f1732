"""Coordinator side; stdlib only. The one way the coordinator runs git on the user's repository.

Every call gets git's argv as a list and an environment without GIT_* variables: a
`charpin-remote run` started from a git hook (GIT_DIR, GIT_INDEX_FILE set) or a shell with
GIT_WORK_TREE exported must still read the repository it was pointed at, not another.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

GIT_SECONDS = 300.0


def git_env() -> dict[str, str]:
    """This process's environment minus every GIT_* variable."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def git_run(
    repo: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`git -C repo ARGS`, output captured, status not checked. env: variables set on purpose
    (GIT_INDEX_FILE of a private index, an author for commit-tree), over git_env()."""
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        input=input,
        capture_output=True,
        check=False,
        env={**git_env(), **(env or {})},
        timeout=GIT_SECONDS,
    )


def git_bytes(
    repo: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> bytes:
    """stdout of `git -C repo ARGS`; CalledProcessError when git fails."""
    done = git_run(repo, *args, input=input, env=env)
    done.check_returncode()
    return done.stdout


def git(
    repo: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> str:
    """stdout of `git -C repo ARGS` as text; CalledProcessError when git fails."""
    return git_bytes(repo, *args, input=input, env=env).decode("utf-8", "replace")


def toplevel(where: Path) -> Path | None:
    """The top folder of the git working tree holding where, or None outside one."""
    try:
        return Path(git(where, "rev-parse", "--show-toplevel").strip())
    except (subprocess.CalledProcessError, OSError):
        return None


def repo_root(repo: Path | None) -> Path:
    """The repository a command works on: the top of the git working tree holding repo (or the
    current folder); UsageError naming --repo outside one."""
    from charpin_runner.errors import UsageError

    where = (repo or Path.cwd()).absolute()
    top = toplevel(where)
    if top is None:
        raise UsageError(f"{where} is not inside a git repository; pass --repo DIR")
    return top
