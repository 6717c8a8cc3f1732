"""Coordinator side. One commit as a git bundle, incremental against a box's cache repo; stdlib only.

The bundle is written by hand (v2 header + a thin pack from `git pack-objects`) rather than with
`git bundle create`, because `git bundle` needs a ref naming the commit and we never touch the
refs of the user's repository. On the box the bundle's sha256 is checked before `git fetch` reads
it, the commit lands in a bare cache repository under `refs/charpin/<sha>`, and every run gets a
fresh `git clone --shared` checked out at the commit. The box reports HEAD and its tree itself.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import IntegrityError, UsageError

from charpin_coordinator.remote.transport import Transport

BUNDLE_REF = "refs/charpin/snapshot"
# How many of the box's most recent cached commits are offered as "haves"; older ones rarely help.
MAX_HAVES = 32
_GIT_TIMEOUT = 300.0
_BOX_TIMEOUT = 300.0


@dataclass(frozen=True)
class Snapshot:
    """The commit under review and its tree, as read on this machine."""

    repo: Path
    commit: str
    tree: str


@dataclass(frozen=True)
class Bundle:
    """Bytes that bring one box's cache repository up to the snapshot commit."""

    data: bytes
    sha256: str
    prerequisites: tuple[str, ...]


@dataclass(frozen=True)
class CheckedOut:
    """What the box says it checked out."""

    head: str
    tree: str


def resolve(repo: Path, rev: str) -> Snapshot:
    """Resolve rev to a commit of repo; a bad rev is a usage error naming it."""
    try:
        commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
        tree = _git(repo, "rev-parse", "--verify", f"{commit}^{{tree}}").strip()
    except subprocess.CalledProcessError:
        raise UsageError(
            f"--commit {rev!r} is not a commit of {repo}; pass a branch, tag or sha (default HEAD)"
        ) from None
    return Snapshot(repo=repo, commit=commit, tree=tree)


def build_bundle(snap: Snapshot, haves: Sequence[str] = ()) -> Bundle:
    """Return a bundle of snap.commit that needs only `haves` (commits the box already holds)."""
    known = _known_commits(snap.repo, haves)
    header = ["# v2 git bundle"]
    header += [f"-{sha} cached on the box" for sha in known]
    header += [f"{snap.commit} {BUNDLE_REF}", ""]
    revs = "".join([f"{snap.commit}\n", *(f"^{sha}\n" for sha in known)])
    pack = subprocess.run(
        [
            "git",
            "-C",
            str(snap.repo),
            "pack-objects",
            "--stdout",
            "--thin",
            "--revs",
            "--delta-base-offset",
            "-q",
        ],
        input=revs.encode(),
        capture_output=True,
        check=True,
        timeout=_GIT_TIMEOUT,
    ).stdout
    data = ("\n".join(header) + "\n").encode() + pack
    return Bundle(data=data, sha256=hashlib.sha256(data).hexdigest(), prerequisites=tuple(known))


def box_haves(box: Transport, python: str, cache_repo: str, commit: str) -> tuple[bool, list[str]]:
    """Ask the box whether its cache repo holds commit, and which commits it holds."""
    done = box.run(
        [python, "-I", "-c", _BOX_HAVES, cache_repo, commit, str(MAX_HAVES)], timeout=_BOX_TIMEOUT
    )
    if done.returncode != 0:
        raise IntegrityError(f"{box.name}: listing the cache repo failed: {_tail(done.stderr)}")
    answer = json.loads(done.stdout)
    return bool(answer["has"]), [str(sha) for sha in answer["haves"]]


def install(
    box: Transport,
    python: str,
    *,
    cache_repo: str,
    bundle_path: str | None,
    bundle_sha256: str | None,
    commit: str,
    dest: str,
    tree: str,
    runner: str,
) -> CheckedOut:
    """On the box: verify and fetch the bundle (if one was sent), check commit out at dest, and
    verify the checked-out files against tree (computed here, from the trusted repository)."""
    argv = [python, "-I", runner, "box", "install", cache_repo, bundle_path or ""]
    argv += [bundle_sha256 or "", commit, dest, BUNDLE_REF, tree]
    done = box.run(argv, timeout=_BOX_TIMEOUT)
    if done.returncode != 0:
        raise IntegrityError(f"{box.name}: snapshot refused on the box: {_tail(done.stderr)}")
    answer = json.loads(done.stdout)
    return CheckedOut(head=str(answer["head"]), tree=str(answer["tree"]))


def check_identity(snap: Snapshot, got: CheckedOut, box: str) -> None:
    """Refuse a checkout whose HEAD or tree is not what was sent."""
    if (got.head, got.tree) != (snap.commit, snap.tree):
        raise IntegrityError(
            f"{box}: checked out {got.head}/{got.tree}, expected {snap.commit}/{snap.tree}; "
            "the box's cache repo may be corrupt: remove ~/.cache/charpin/repos on it"
        )


def repo_key(repo: Path) -> str:
    """A stable name for repo's cache on a box: its root commit(s), so clones share one cache."""
    try:
        roots = _git(repo, "rev-list", "--max-parents=0", "HEAD").split()
    except subprocess.CalledProcessError:
        roots = [str(repo.resolve())]
    return hashlib.sha256("\n".join(sorted(roots)).encode()).hexdigest()[:16]


def _known_commits(repo: Path, haves: Sequence[str]) -> list[str]:
    """Keep the haves this repository also has (others cannot be bundle prerequisites)."""
    wanted = [sha for sha in haves if _is_hex(sha)]
    if not wanted:
        return []
    query = "".join(f"{sha}^{{commit}}\n" for sha in wanted)
    out = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch-check=%(objectname) %(objecttype)"],
        input=query.encode(),
        capture_output=True,
        check=True,
        timeout=_GIT_TIMEOUT,
    ).stdout.decode()
    found = {line.split()[0] for line in out.splitlines() if line.endswith(" commit")}
    return sorted(sha for sha in wanted if sha in found)


def _is_hex(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=_GIT_TIMEOUT,
    ).stdout


def _tail(data: bytes, lines: int = 5) -> str:
    text = data.decode("utf-8", "replace").strip().splitlines()
    return " | ".join(text[-lines:]) or "(no output)"


# Box-side scripts: stdlib only, Python >= 3.9, every value arrives as argv (never in the source).
# Box-side helper, also pasted into the box pipeline's preflight script (one round trip less).
BOX_HAVES_DEF = r"""
def box_haves(cache, commit, limit):
    import os, subprocess
    if not os.path.isdir(cache):
        return False, []
    # A test of an earlier run could have written the cache's config: read none of it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    git = ["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=" + os.devnull, "-C", cache]
    has = subprocess.run(git + ["cat-file", "-e", commit + "^{commit}"], env=env,
                         stderr=subprocess.DEVNULL).returncode == 0
    out = subprocess.run(git + ["for-each-ref", "--sort=-committerdate", "--count=%d" % limit,
                                "--format=%(objectname)", "refs/charpin/"],
                         capture_output=True, text=True, check=True, env=env).stdout
    return has, out.split()
"""

_BOX_HAVES = (
    BOX_HAVES_DEF
    + r"""
import json, sys
has, haves = box_haves(sys.argv[1], sys.argv[2], int(sys.argv[3]))
print(json.dumps({"has": has, "haves": haves}))
"""
)
