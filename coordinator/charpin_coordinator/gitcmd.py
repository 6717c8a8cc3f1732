"""Coordinator side; stdlib and charpin_runner.gitcmd only. The one way the coordinator runs git
on the user's repository.

Every call gets git's argv as a list and an environment without GIT_* variables: a
`charpin-remote run` started from a git hook (GIT_DIR, GIT_INDEX_FILE set) or a shell with
GIT_WORK_TREE exported must still read the repository it was pointed at, not another.

Rule 4 of the threat model: git here reads objects, never the repository's opinion of them.
A test run on `local` can write the repository's `.git/`, so every call runs with replace refs
and grafts off (`refs/replace/<blob of pyproject.toml>` would otherwise hand every later run the
attacker's [tool.charpin]), the commit-graph and multi-pack index unread, no lazy fetch, and the
runner's hardening (gitcmd.HARDENING): no hooks, fsmonitor, external diff, signing program,
pager or editor from the repository's config. Blobs are read with `cat-file`, never `show`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from charpin_runner.gitcmd import HARDENING, program

GIT_SECONDS = 300.0


# What git must not take from a repository: its replacements of objects, its grafts, a fetch.
_OBJECTS_ONLY = {
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_GRAFT_FILE": os.devnull,
    "GIT_NO_LAZY_FETCH": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def git_env() -> dict[str, str]:
    """This process's environment minus every GIT_* variable, plus the objects-only rules."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_OBJECTS_ONLY)
    return env


def git_run(
    repo: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`git -C repo ARGS`, hardened, output captured, status not checked. env: variables set on
    purpose (GIT_INDEX_FILE of a private index, an author for commit-tree), over git_env()."""
    hardening = [item for pair in HARDENING for item in ("-c", pair)]
    return subprocess.run(
        [program(), "--no-pager", *hardening, "-C", str(repo), *args],
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


def repo_root(repo: Path | None) -> Path:
    """The repository a command works on: the top of the git working tree holding repo (or the
    current folder); UsageError naming --repo outside one."""
    from charpin_runner.errors import UsageError
    from charpin_runner.gitcmd import refusal

    where = (repo or Path.cwd()).absolute()
    try:
        done = git_run(where, "rev-parse", "--show-toplevel")
    except OSError as exc:
        raise UsageError(f"cannot run git ({exc.strerror}); install git") from exc
    if done.returncode == 0:
        return Path(done.stdout.decode("utf-8", "replace").strip())
    # A repository git will not open (another owner) is not "no repository": say what git said.
    refused = refusal(done.stderr, where)
    if refused is not None:
        raise UsageError(refused)
    raise UsageError(f"{where} is not inside a git repository; pass --repo DIR")
