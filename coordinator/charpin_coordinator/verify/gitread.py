"""Coordinator side; stdlib and gitcmd only. The two commits of a verify read as git objects: what
differs between them, blob contents, a tree's files. Every call goes through the one git helper
(objects only, never the repository's opinion of them)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import RunError, UsageError

from charpin_coordinator.gitcmd import git_run

REGULAR = ("100644", "100755")  # other modes are links (120000) or submodules (160000)
LINK = "120000"


@dataclass(frozen=True)
class Change:
    """One line of `git diff --raw`: paths ("" where absent) and regular-file blobs ("" if none)."""

    old_path: str
    new_path: str
    old_blob: str
    new_blob: str

    @property
    def path(self) -> str:
        return self.new_path or self.old_path

    @property
    def paths(self) -> list[str]:
        return [p for p in (self.old_path, self.new_path) if p]

    @property
    def old_py(self) -> str:
        return self.old_blob if self.old_path.endswith(".py") else ""

    @property
    def new_py(self) -> str:
        return self.new_blob if self.new_path.endswith(".py") else ""


def run(repo: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return git_run(repo, *args, input=input)
    except subprocess.TimeoutExpired as exc:
        raise RunError(
            f"git {args[0]} did not finish within {exc.timeout:.0f} s in {repo}; check the "
            "repository (a hung mount, a huge tree)"
        ) from exc
    except OSError as exc:
        raise RunError(f"cannot run git ({exc}); install git") from exc


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    done = run(repo, *args, input=input)
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"]
        raise RunError(f"git {args[0]} failed in {repo}: {lines[0]}; check it with git fsck")
    return done.stdout


def commits(repo: Path, base: str, patched: str) -> tuple[str, str]:
    """Both revisions as commit ids; one that names no commit is a UsageError."""
    found = []
    for rev in (base, patched):
        # A leading dash would be read as an option (older git has no --end-of-options here).
        done = (
            None
            if rev.startswith("-")
            else run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        )
        if done is None or done.returncode != 0:
            raise UsageError(f"{rev!r} is not a commit in {repo}; pass a commit id or branch")
        found.append(done.stdout.decode().strip())
    return found[0], found[1]


def changes(repo: Path, base: str, patched: str) -> list[Change]:
    """What differs between the two commits; renames (git's -M) are one change with both paths."""
    raw = git(repo, "diff", "--raw", "-z", "-M", "--no-abbrev", base, patched, "--")
    parts = raw.split(b"\0")
    out = []
    index = 0
    while index + 1 < len(parts) and parts[index].startswith(b":"):
        old_mode, new_mode, old_sha, new_sha, status = parts[index][1:].decode().split()
        paths = [p.decode("utf-8", "surrogateescape") for p in parts[index + 1 : index + 3]]
        two = status[0] in "RC"
        old_path = paths[0] if status != "A" else ""
        new_path = (paths[1] if two else paths[0]) if status != "D" else ""
        out.append(
            Change(
                old_path,
                new_path,
                old_sha if old_mode in REGULAR else "",
                new_sha if new_mode in REGULAR else "",
            )
        )
        index += 3 if two else 2
    return out


def blobs(repo: Path, shas: Iterable[str]) -> dict[str, bytes]:
    """The contents of these blobs, through one `git cat-file --batch` (no filters applied)."""
    wanted = sorted(set(shas))
    if not wanted:
        return {}
    raw = git(repo, "cat-file", "--batch", input="".join(f"{s}\n" for s in wanted).encode())
    out: dict[str, bytes] = {}
    at = 0
    for sha in wanted:
        end = raw.index(b"\n", at)
        header = raw[at:end].split()
        at = end + 1
        if len(header) != 3 or header[1] != b"blob":
            raise RunError(f"git cat-file has no blob {sha} in {repo}; check it with git fsck")
        size = int(header[2])
        out[sha] = raw[at : at + size]
        at += size + 1  # the content is followed by a newline
    return out




def tree_files(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, object id) of every file and link in commit's tree (submodules left out)."""
    raw = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    out = {}
    for record in raw.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind == "blob":
            out[name.decode("utf-8", "surrogateescape")] = (mode, sha)
    return out
