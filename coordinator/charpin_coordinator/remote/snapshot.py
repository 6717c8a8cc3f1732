"""Coordinator side. One commit as a git bundle, incremental against a box's cache repo.

The bundle is written by hand (v2 header + a thin pack from `git pack-objects`) rather than with
`git bundle create`, because `git bundle` needs a ref naming the commit and we never touch the
refs of the user's repository. On the box the bundle's sha256 is checked before `git fetch` reads
it, the commit lands in a bare cache repository under `refs/charpin/<sha>`, and every run gets a
fresh `git clone --shared` checked out at the commit. The box reports HEAD and its tree itself.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import UsageError

from charpin_coordinator.gitcmd import git, git_bytes, git_run
from charpin_coordinator.remote.errors import BoxError

BUNDLE_REF = "refs/charpin/snapshot"


@dataclass(frozen=True)
class Snapshot:
    """The commit under review and its tree, as read on this machine. shallow: in a shallow
    repository (CI's depth-1 checkout), the commits of the commit's history whose parents this
    repository does not have; the box records them so that the bundle needs no more."""

    repo: Path
    commit: str
    tree: str
    shallow: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bundle:
    """Bytes that bring one box's cache repository up to the snapshot commit."""

    data: bytes
    sha256: str
    prerequisites: tuple[str, ...]


def resolve(repo: Path, rev: str) -> Snapshot:
    """Resolve rev to a commit of repo; a bad rev is a usage error naming it."""
    try:
        commit = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
        tree = git(repo, "rev-parse", "--verify", f"{commit}^{{tree}}").strip()
    except subprocess.CalledProcessError:
        raise UsageError(
            f"--commit {rev!r} is not a commit of {repo}; pass a branch, tag or sha (default HEAD)"
        ) from None
    return Snapshot(repo=repo, commit=commit, tree=tree, shallow=shallow_boundary(repo, commit))


def shallow_boundary(repo: Path, commit: str) -> tuple[str, ...]:
    """The shallow commits (`git rev-parse --git-path shallow`) that commit's history reaches:
    empty for a full clone. A shallow clone ships as it is: the box's cache repository records
    the same boundary, so its checkout has exactly the history this clone has."""
    if git(repo, "rev-parse", "--is-shallow-repository").strip() != "true":
        return ()
    path = Path(git(repo, "rev-parse", "--git-path", "shallow").strip())
    path = path if path.is_absolute() else repo / path  # relative to repo before git 2.31
    try:
        listed = path.read_text(encoding="ascii", errors="replace").split()
    except OSError:
        return ()
    found = []
    for sha in listed:
        done = git_run(repo, "merge-base", "--is-ancestor", sha, commit)
        if done.returncode == 0:
            found.append(sha)
        elif done.returncode != 1:
            raise UsageError(
                f"{repo} is a shallow clone whose boundary commit {sha[:12]} git cannot read: "
                "fetch more history (git fetch --unshallow) and run again"
            )
    return tuple(sorted(found))


def build_bundle(snap: Snapshot, haves: Sequence[str] = ()) -> Bundle:
    """Return a bundle of snap.commit that needs only `haves` (commits the box already holds)."""
    known = _known_commits(snap.repo, haves)
    header = ["# v2 git bundle"]
    header += [f"-{sha} cached on the box" for sha in known]
    header += [f"{snap.commit} {BUNDLE_REF}", ""]
    revs = "".join([f"{snap.commit}\n", *(f"^{sha}\n" for sha in known)])
    pack = git_bytes(
        snap.repo,
        "pack-objects",
        "--stdout",
        "--thin",
        "--revs",
        "--delta-base-offset",
        "-q",
        input=revs.encode(),
    )
    data = ("\n".join(header) + "\n").encode() + pack
    return Bundle(data=data, sha256=hashlib.sha256(data).hexdigest(), prerequisites=tuple(known))


def check_identity(snap: Snapshot, head: str, tree: str, box: str) -> None:
    """Refuse a checkout whose HEAD or tree (as the box reports them) is not what was sent."""
    if (head, tree) != (snap.commit, snap.tree):
        raise BoxError(
            box,
            "snapshot-integrity",
            f"checked out {head}/{tree}, expected {snap.commit}/{snap.tree}; the box's cache "
            "repo may be corrupt: remove ~/.cache/charpin/repos on it",
        )


def repo_key(repo: Path) -> str:
    """A stable name for repo's cache on a box: its root commit(s), so clones share one cache."""
    try:
        roots = git(repo, "rev-list", "--max-parents=0", "HEAD").split()
    except subprocess.CalledProcessError:
        roots = [str(repo.resolve())]
    return hashlib.sha256("\n".join(sorted(roots)).encode()).hexdigest()[:16]


def _known_commits(repo: Path, haves: Sequence[str]) -> list[str]:
    """Keep the haves this repository also has (others cannot be bundle prerequisites)."""
    wanted = [sha for sha in haves if _is_hex(sha)]
    if not wanted:
        return []
    query = "".join(f"{sha}^{{commit}}\n" for sha in wanted)
    out = git(repo, "cat-file", "--batch-check=%(objectname) %(objecttype)", input=query.encode())
    found = {line.split()[0] for line in out.splitlines() if line.endswith(" commit")}
    return sorted(sha for sha in wanted if sha in found)


def _is_hex(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)
