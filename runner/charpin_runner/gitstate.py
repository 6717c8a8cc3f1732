"""Read a work tree's git state (HEAD, tree, dirty paths, digests). Runs on boxes; stdlib only.

The parent process calls this before and after the test command, so a test that rewrites
`.git/HEAD` or edits tracked files shows up as a difference. A test can also write `.git/config`,
so git runs with options that keep repository configuration from executing code in the parent
while it measures: no fsmonitor hook, external diff or textconv, the clean/smudge filters defined
in the repository's own config switched off, and submodule work trees not entered. With
GIT_OPTIONAL_LOCKS=0 reading never rewrites the index.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import RunError, UsageError
from charpin_runner.fixtures import hash_many, printable

# Our own output folder is never part of the state we measure.
_OWN_PREFIX = ".charpin/"
# Variables that would point git at another repository or index than the one we were given.
_GIT_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_EXTERNAL_DIFF",
    "GIT_DIFF_OPTS",
)
_SAFE_CONFIG = ("-c", "core.fsmonitor=false", "-c", "core.quotepath=false", "-c", "diff.external=")
# Dirty submodule work trees are not entered: their own config is out of our reach.
_NO_SUBMODULES = "--ignore-submodules=dirty"
UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class GitState:
    """HEAD, its tree, the dirty paths and a content key per dirty path."""

    head: str
    tree: str
    dirty: list[str]
    digest: str
    contents: dict[str, str]


def find_toplevel(folder: Path) -> Path:
    """Return the work tree root containing folder; UsageError when it is not in a git repo."""
    result = _git(folder, "rev-parse", "--show-toplevel", check=False)
    if result.returncode != 0:
        raise UsageError(
            f"{folder} is not inside a git repository; run from a repository or pass --repo DIR"
        )
    return Path(os.fsdecode(result.stdout.rstrip(b"\n")))


def read_state(repo: Path) -> GitState:
    """Measure the git state of repo now. A HEAD that cannot be resolved reads `unresolved`."""
    head = _rev(repo, "HEAD")
    tree = _rev(repo, "HEAD^{tree}")
    safe = _filter_overrides(repo)
    raw = _git(
        repo, *safe, "status", "--porcelain=v2", "-z", "--untracked-files=all", _NO_SUBMODULES
    ).stdout
    entries = parse_porcelain(raw)
    status: dict[str, str] = {}
    for code, path in entries:
        if not path.startswith(_OWN_PREFIX):
            status.setdefault(path, code)
    paths = sorted(status)
    digests = dict(zip(paths, _content_keys(repo, paths)))
    contents = {printable(p): f"{status[p]}:{digests[p]}" for p in paths}
    untracked = [(p, digests[p]) for p in paths if status[p] == "?"]
    return GitState(
        head=head,
        tree=tree,
        dirty=[printable(p) for p in paths],
        digest=_dirty_digest(repo, untracked, safe) if paths else _EMPTY_DIGEST,
        contents=contents,
    )


def unreadable() -> GitState:
    """The state recorded when git cannot read the repository any more (e.g. a broken HEAD)."""
    return GitState(head=UNRESOLVED, tree=UNRESOLVED, dirty=[], digest=UNRESOLVED, contents={})


def written_paths(before: GitState, after: GitState) -> list[str]:
    """Paths whose git status or content differs between two states."""
    keys = set(before.contents) | set(after.contents)
    return sorted(k for k in keys if before.contents.get(k) != after.contents.get(k))


def parse_porcelain(raw: bytes) -> list[tuple[str, str]]:
    """Parse `git status --porcelain=v2 -z` into (XY or '?', path); a rename yields both paths."""
    out: list[tuple[str, str]] = []
    records = raw.split(b"\0")
    index = 0
    while index < len(records):
        record = records[index]
        index += 1
        if not record or record.startswith((b"#", b"!")):
            continue
        kind = record[:1]
        if kind == b"?":
            out.append(("?", os.fsdecode(record[2:])))
        elif kind == b"1":
            fields = record.split(b" ", 8)
            out.append((fields[1].decode("ascii"), os.fsdecode(fields[8])))
        elif kind == b"2":
            fields = record.split(b" ", 9)
            code = fields[1].decode("ascii")
            out.append((code, os.fsdecode(fields[9])))
            # The original path of a rename or copy follows as its own NUL-terminated record.
            out.append((code, os.fsdecode(records[index])))
            index += 1
        elif kind == b"u":
            fields = record.split(b" ", 10)
            out.append((fields[1].decode("ascii"), os.fsdecode(fields[10])))
    return out


_EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()


def _dirty_digest(repo: Path, untracked: Sequence[tuple[str, str]], safe: Sequence[str]) -> str:
    """sha256 over `git diff --binary HEAD`, then `path NUL sha256 NUL` per untracked file."""
    digest = hashlib.sha256()
    diff = _git(
        repo,
        *safe,
        "diff",
        "--binary",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        _NO_SUBMODULES,
        "HEAD",
        "--",
        ".",
        ":(exclude).charpin",
        check=False,
    )
    digest.update(diff.stdout)
    for path, content in untracked:
        digest.update(os.fsencode(path) + b"\0" + content.encode("ascii") + b"\0")
    return digest.hexdigest()


def _content_keys(repo: Path, paths: Sequence[str]) -> list[str]:
    """A key per path: sha256 of a file, `link:` + target of a symlink, or `absent`."""
    fulls = [os.path.join(str(repo), p) for p in paths]
    hashed = hash_many(fulls)
    keys: list[str] = []
    for full, value in zip(fulls, hashed):
        if value is not None:
            keys.append(value)
        elif os.path.islink(full):
            keys.append("link:" + hashlib.sha256(os.fsencode(os.readlink(full))).hexdigest())
        else:
            keys.append("absent" if not os.path.lexists(full) else "other")
    return keys


def _rev(repo: Path, rev: str) -> str:
    result = _git(repo, "rev-parse", "--verify", "-q", rev, check=False)
    text = result.stdout.decode("ascii", "replace").strip()
    return text if result.returncode == 0 and text else UNRESOLVED


def _filter_overrides(repo: Path) -> tuple[str, ...]:
    """`-c` options that switch off every filter driver the repository's own config defines.

    Reading config runs nothing. Filters from the user's global config (git-lfs) keep working.
    """
    listed = _git(repo, "config", "--local", "--null", "--get-regexp", r"^filter\.", check=False)
    names = set()
    for item in listed.stdout.split(b"\0"):
        key = os.fsdecode(item.split(b"\n", 1)[0])
        if key.count(".") >= 2:
            names.add(key[len("filter.") :].rsplit(".", 1)[0])
    overrides: list[str] = []
    for name in sorted(names):
        if "=" in name or "\n" in name:
            raise RunError(
                f"refusing to read {repo}: its git config defines a filter named {name!r}; "
                "remove that [filter] section from .git/config"
            )
        for key, value in (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")):
            overrides += ["-c", f"filter.{name}.{key}={value}"]
    return tuple(overrides)


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items() if k not in _GIT_REDIRECTS}
    clean["GIT_OPTIONAL_LOCKS"] = "0"
    try:
        result = subprocess.run(
            ["git", "-C", str(repo), *_SAFE_CONFIG, *args],
            capture_output=True,
            env=clean,
            check=False,
        )
    except OSError as exc:
        raise RunError(f"cannot run git ({exc}); install git on this box") from exc
    if check and result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        verb = next((a for a in args if not a.startswith("-") and "=" not in a), "")
        raise RunError(
            f"git {verb} failed in {repo}: {message[-1] if message else 'no message'}; "
            "check the repository is readable"
        )
    return result
