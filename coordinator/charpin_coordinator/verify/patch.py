"""Coordinator side; stdlib and gitcmd only. An agent's patch made into a commit of the user's
repository, without touching its working tree, index, HEAD or refs.

The patch is applied by git itself (`git apply --cached --binary`) to a private index read from
the base commit, one mail at a time for a `git format-patch` series, and written as a tree and a
commit whose parent is the base (unreferenced: git's garbage collection removes it later). So
renames, mode changes, deletions, binary files and odd file names apply exactly as git applies
them, and a patch that does not apply is refused with git's own words about the first hunk.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import UsageError

from charpin_coordinator.gitcmd import git, git_bytes, git_run

# `git format-patch` starts every mail with this line (the date is fixed by git on purpose).
_MAIL = re.compile(rb"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$", re.MULTILINE)
_BASE_TRAILER = re.compile(rb"^base-commit: ([0-9a-f]{40}(?:[0-9a-f]{24})?)$", re.MULTILINE)
_FAILED = re.compile(r"error: patch failed: (.+):(\d+)")
_AUTHOR = {
    "GIT_AUTHOR_NAME": "charpin verify",
    "GIT_AUTHOR_EMAIL": "verify@charpin.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_NAME": "charpin verify",
    "GIT_COMMITTER_EMAIL": "verify@charpin.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


@dataclass(frozen=True)
class Patched:
    """The base commit, the commit the patch makes of it, and the patch itself."""

    base: str
    patched: str
    patch: bytes
    patch_sha256: str
    changed: tuple[str, ...]  # every path the patch touches, both sides of a rename, sorted


def from_patch(repo: Path, data: bytes, base_rev: str | None) -> Patched:
    """Apply data (a diff, `git diff --binary` or `git format-patch` mails) to the base."""
    if not data.strip():
        raise UsageError("the patch is empty; pass a diff or format-patch file (or - for stdin)")
    trailer = _BASE_TRAILER.search(data)
    base = resolve(repo, base_rev or (trailer.group(1).decode() if trailer else "HEAD"), "--base")
    mails = split_mails(data)
    with tempfile.TemporaryDirectory(prefix="charpin-verify-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "read-tree", base, env=env)
        for number, mail in enumerate(mails, 1):
            path = Path(tmp) / f"{number}.patch"
            path.write_bytes(mail)
            done = git_run(repo, "apply", "--cached", "--binary", str(path), env=env)
            if done.returncode != 0:
                raise UsageError(_not_applied(done.stderr, base, number, len(mails)))
        tree = git(repo, "write-tree", env=env).strip()
    if tree == git(repo, "rev-parse", f"{base}^{{tree}}").strip():
        raise UsageError("the patch changes nothing in the base; pass the agent's actual diff")
    digest = hashlib.sha256(data).hexdigest()
    commit = _commit(repo, tree, base, f"charpin verify: patch {digest[:12]}")
    return Patched(base, commit, data, digest, changed_paths(repo, base, commit))


def from_rev(repo: Path, patched_rev: str, base_rev: str | None) -> Patched:
    """An agent's branch or commit against the base (default HEAD)."""
    base = resolve(repo, base_rev or "HEAD", "--base")
    patched = resolve(repo, patched_rev, "--patched")
    data = git_bytes(repo, "diff", "--binary", "--full-index", base, patched)
    if not data:
        raise UsageError(f"--patched {patched_rev} does not differ from the base {base[:12]}")
    digest = hashlib.sha256(data).hexdigest()
    return Patched(base, patched, data, digest, changed_paths(repo, base, patched))


def restore_from_base(repo: Path, patched: Patched, paths: Sequence[str]) -> str:
    """A commit (parent: base) of patched's tree with every listed path, a file or a folder, as
    it is in base: what the patch added under them removed, what it changed or deleted put back.
    Returns patched.patched itself when none of them was touched."""
    wanted = [p for p in paths if p]
    if not wanted:
        return patched.patched
    with tempfile.TemporaryDirectory(prefix="charpin-verify-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "read-tree", patched.patched, env=env)
        literal = ["--literal-pathspecs"]
        # What the patch put under the paths goes; then base's entries come back.
        present = git_bytes(repo, *literal, "ls-files", "-z", "--", *wanted, env=env)
        if present:
            git(repo, "update-index", "-z", "--force-remove", "--stdin", input=present, env=env)
        listing = git_bytes(repo, *literal, "ls-tree", "-r", "-z", patched.base, "--", *wanted)
        if listing:
            git(repo, "update-index", "-z", "--index-info", input=listing, env=env)
        tree = git(repo, "write-tree", env=env).strip()
    if tree == git(repo, "rev-parse", f"{patched.patched}^{{tree}}").strip():
        return patched.patched
    message = f"charpin verify: patch {patched.patch_sha256[:12]}, protected paths as on base"
    return _commit(repo, tree, patched.base, message)


def resolve(repo: Path, rev: str, flag: str) -> str:
    """The commit rev names; UsageError naming the flag when it names none."""
    done = git_run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0:
        raise UsageError(f"{flag} {rev!r} is not a commit of {repo}; pass a branch, tag or sha")
    return done.stdout.decode().strip()


def split_mails(data: bytes) -> list[bytes]:
    """A format-patch series as one patch per mail; any other patch as itself."""
    starts = [m.start() for m in _MAIL.finditer(data)]
    if not starts:
        return [data]
    if starts[0] != 0:
        starts.insert(0, 0)
    return [
        data[a:b]
        for a, b in zip(starts, [*starts[1:], len(data)], strict=True)
        if data[a:b].strip()
    ]


def changed_paths(repo: Path, base: str, patched: str) -> tuple[str, ...]:
    """Every path that differs between the two commits (a rename as its two sides)."""
    raw = git_bytes(repo, "diff", "--name-only", "-z", "--no-renames", base, patched)
    names = {part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0") if part}
    return tuple(sorted(names))


def _commit(repo: Path, tree: str, parent: str, message: str) -> str:
    return git(repo, "commit-tree", tree, "-p", parent, "-m", message, env=_AUTHOR).strip()


def _not_applied(stderr: bytes, base: str, number: int, count: int) -> str:
    text = stderr.decode("utf-8", "replace")
    mail = f" (mail {number} of {count})" if count > 1 else ""
    failed = _FAILED.search(text)
    if failed:
        where = f"{failed.group(1)}: the hunk at line {failed.group(2)} does not match"
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        where = lines[0].removeprefix("error: ") if lines else "git apply refused it"
        if "No valid patches" in where or "only garbage" in where:
            raise UsageError("the input is not a patch: pass a unified diff or format-patch file")
    return (
        f"the patch does not apply to {base[:12]}{mail}: {where}; rebase it onto --base or pass "
        "the --base it was made for"
    )


__all__ = ["Patched", "from_patch", "from_rev", "restore_from_base"]
