"""The one place the runner builds git's argv and environment. Runs on boxes and in git hooks;
stdlib only; imports only charpin_runner.errors.

No GIT_* variable of the caller reaches git. A GIT_DIR, GIT_WORK_TREE or GIT_INDEX_FILE left in
the environment (git sets them for hooks; aliases and CI steps leak them) would make git answer
about another repository or index than the one the caller names, and GIT_CONFIG_PARAMETERS could
switch hooks or fsmonitor back on. A variable a caller genuinely needs is a parameter of run()
(index_file, object_dir), so every use of one is visible at the call site. The one exception is
GIT_TEST_ASSUME_DIFFERENT_OWNER, git's own test switch: it can only make git refuse a repository
(as owned by someone else), and it is how ownership handling is tested without root.

Two environments:
- SEALED (the default): no system or global config, no system attributes, no replace objects,
  no lazy fetch (git 2.44+), no prompts; HOME and XDG_CONFIG_HOME name no folder, for gits older
  than GIT_CONFIG_GLOBAL (2.32). Nothing of the user's setup changes what git reports.
- USER: the user's own config stays (where it lives, and how far discovery may walk), for the
  questions that must be answered as the user's own git would: where the repository is, where
  its hooks and the global excludes file are, which folders the user trusts.
HARDENING's `-c` settings switch off what a repository's config could run or hide (hooks,
fsmonitor, attributes and excludes files, external diff, replace refs, signatures); callers that
list config or ask where git looks for hooks pass hardened=False, as the settings would show up
in the answer. The user's safe.directory entries are always passed as `-c` (protected config,
like --global), so a checkout owned by another user (CI containers) stays readable where the
user said it may be.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Optional

from charpin_runner.errors import RunError

SEALED: Literal["sealed"] = "sealed"
USER: Literal["user"] = "user"
Environment = Literal["sealed", "user"]

# Seconds a git call may take unless the caller sets its own deadline.
TIMEOUT = 900.0
# What stands between a repository's config and code run in the caller. Several only matter to
# some callers (measurement compares content, so stat and CRLF settings must not differ).
HARDENING = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.untrackedCache=false",
    "core.splitIndex=false",
    "core.sparseCheckout=false",
    "core.sparseCheckoutCone=false",
    "core.ignoreStat=false",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.checkStat=default",
    "core.trustctime=true",
    "core.fileMode=true",
    "core.ignoreCase=false",
    "core.useReplaceRefs=false",
    # What git reads instead of the objects themselves: a planted commit-graph or multi-pack
    # index maps an object id to other bytes (git does not re-hash what it reads).
    "core.commitGraph=false",
    "core.multiPackIndex=false",
    "core.quotepath=false",
    "index.sparse=false",
    "feature.manyFiles=false",
    "diff.external=",
    "submodule.recurse=false",
    # gpg.program would run through log's signature check, or a signed commit-tree.
    "log.showSignature=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.sshCommand=",
    "core.pager=cat",
    "core.editor=false",
)
# The user's own variables that say where their config lives and how far discovery may walk.
_USER_KEEPS = (
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
)
_ALWAYS_KEPT = ("GIT_TEST_ASSUME_DIFFERENT_OWNER",)


def run(
    args: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: Environment = SEALED,
    hardened: bool = True,
    index_file: Optional[str] = None,
    object_dir: Optional[str] = None,
    input: Optional[bytes] = None,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[bytes]:
    """Run `git [-c ...] [-C cwd] ARGS` with stdout and stderr captured; the exit status is
    not checked. stdin is empty unless input is given. index_file and object_dir become
    GIT_INDEX_FILE and GIT_OBJECT_DIRECTORY. RunError when git is missing or does not finish
    within timeout seconds."""
    pairs = [
        *(HARDENING if hardened else ()),
        *(f"safe.directory={d}" for d in user_safe_directories()),
    ]
    front = [item for pair in pairs for item in ("-c", pair)]
    if cwd is not None:
        front += ["-C", str(cwd)]
    variables = environment(env)
    if index_file is not None:
        variables["GIT_INDEX_FILE"] = index_file
    if object_dir is not None:
        variables["GIT_OBJECT_DIRECTORY"] = object_dir
    return _spawn([*front, *args], variables, input, timeout)


@functools.lru_cache(maxsize=1)
def user_safe_directories() -> tuple[str, ...]:
    """The user's own safe.directory entries (system, global), never a repository's: sealed git
    reads no global config, yet the folders the user trusts must stay readable."""
    try:
        # /dev/null as the git directory: no repository's config is read.
        done = _spawn(
            ["--git-dir", os.devnull, "config", "--get-all", "safe.directory"],
            environment(USER),
            None,
            60.0,
        )
    except RunError:
        return ()
    return tuple(done.stdout.decode("utf-8", "surrogateescape").splitlines())


def environment(kind: Environment = SEALED) -> dict[str, str]:
    """The process environment git runs with: the caller's, minus every GIT_* variable, plus the
    settings of kind (see the module docstring)."""
    keep = _ALWAYS_KEPT + (_USER_KEEPS if kind == USER else ())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in keep}
    # Rule 4: objects only, never the repository's opinion of them (replace refs, grafts).
    env.update(GIT_NO_REPLACE_OBJECTS="1", GIT_GRAFT_FILE=os.devnull, GIT_OPTIONAL_LOCKS="0")
    if kind == SEALED:
        env.update(
            GIT_CONFIG_NOSYSTEM="1",
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_ATTR_NOSYSTEM="1",
            GIT_NO_LAZY_FETCH="1",
            GIT_TERMINAL_PROMPT="0",
            HOME=os.devnull,
            XDG_CONFIG_HOME=os.devnull,
        )
    return env


def program(name: str = "git") -> str:
    """The absolute path of a program on PATH, found only through PATH entries that are
    absolute: a relative entry (`.`, `bin`, an empty one) would resolve inside whatever folder
    charpin happens to run in, which may be the checkout under test."""
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(p)
    )
    return shutil.which(name, path=path) or name


def _spawn(
    args: Sequence[str], env: dict[str, str], input: Optional[bytes], timeout: float
) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            [program(), "--no-pager", *args],
            capture_output=True,
            env=env,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RunError(
            f"git {_verb(args)} did not finish within {exc.timeout:.0f} s; something in the "
            "repository's .git (a FIFO, a hung mount) blocks it"
        ) from exc
    except OSError as exc:
        raise RunError(f"cannot run git ({exc}); install git on this box") from exc


def refusal(stderr: bytes, where: Path | str) -> Optional[str]:
    """One line for a repository git found but will not open (its owner is not the user, and
    no safe.directory entry trusts it): git's own first line and its fix, the path quoted for a
    shell (where, when git names none). None when stderr says something else (no repository at
    all, a broken one)."""
    text = stderr.decode("utf-8", "replace")
    if "safe.directory" not in text:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0].removeprefix("fatal: ") if lines else "git will not open it"
    marker = "safe.directory "
    fixes = [line for line in lines if line.startswith("git config") and marker in line]
    trusted = fixes[0].split(marker, 1)[1] if fixes else str(where)
    return (
        f"git refuses to open the repository: {first}; if you trust it, run: "
        f"git config --global --add safe.directory {shlex.quote(trusted)}"
    )


def _verb(args: Sequence[str]) -> str:
    """The subcommand in args, for messages: the first word that is neither option nor path."""
    words = iter(args)
    for word in words:
        if word in ("-c", "-C", "--git-dir", "--work-tree"):
            next(words, None)
        elif not word.startswith("-") and "/" not in word:
            return word
    return ""
