"""The few git questions the guard asks. Runs on any box; stdlib only (git from PATH).

Imports only charpin_runner.errors and charpin_runner.gitcmd. Every call passes an argv list
(no shell) and `-z` output where paths appear, so names with spaces, quotes or newlines arrive
intact.

The guard runs in CI on branches nobody has reviewed yet, after steps that may have run their code
and written `.git/config`. Reading commits needs no configuration, so git runs sealed and
hardened (gitcmd): no system or global config, nothing in the repository's config that could run
a program (hooks, fsmonitor, gpg.program through log.showSignature), and none of the caller's
GIT_* variables, so a GIT_DIR left in the environment cannot point the guard at another
repository. The index the staged change is read from is a parameter (index_file): in the
pre-commit hook of `git commit -a` or `git commit PATH` it is a temporary index that git names
in GIT_INDEX_FILE, and the CLI passes it on. Only hooks_dir, which must find where git itself
will look for the hook, reads the user's config.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

from charpin_runner import gitcmd
from charpin_runner.errors import UsageError

INDEX = ":"  # pseudo revision: the staged version of a file (`git show :path`)
_TIMEOUT = 120.0


def _git(
    repo: Path,
    *args: str,
    check: bool = True,
    stdin: Optional[bytes] = None,
    index_file: Optional[str] = None,
    user_config: bool = False,
) -> subprocess.CompletedProcess[bytes]:
    """git in repo; UsageError when check and git fails (RunError when git cannot run)."""
    if user_config:
        done = gitcmd.run(args, cwd=repo, env=gitcmd.USER, hardened=False, timeout=_TIMEOUT)
    else:
        done = gitcmd.run(args, cwd=repo, index_file=index_file, input=stdin, timeout=_TIMEOUT)
    if check and done.returncode != 0:
        first = done.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = first[0] if first else f"exit {done.returncode}"
        raise UsageError(f"git {' '.join(args[:2])} failed in {repo}: {reason}")
    return done


def toplevel(path: Path) -> Path:
    """The work tree root containing path; a clear error outside a repository."""
    done = _git(path, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        refused = gitcmd.refusal(done.stderr, path)
        if refused is not None:
            raise UsageError(refused)
        raise UsageError(f"{path} is not inside a git work tree; run charpin guard in a repository")
    return Path(done.stdout.decode("utf-8").strip())


def has_head(repo: Path) -> bool:
    """False on an unborn branch (before the first commit)."""
    return _git(repo, "rev-parse", "--verify", "-q", "HEAD", check=False).returncode == 0


def staged_paths(repo: Path, index_file: Optional[str] = None) -> list[str]:
    """Paths the index (index_file, or the repository's own) changes against HEAD; a rename
    contributes both names."""
    args = ("diff", "--cached", "--name-status", "-z", "-M", "--no-ext-diff")
    out = _git(repo, *args, index_file=index_file).stdout
    return _parse_name_status(out)


def commit_paths(repo: Path, commit: str, parent: str | None) -> list[str]:
    """Paths a commit changes against one parent (or against nothing for a root commit)."""
    if parent is None:
        args = ["diff-tree", "--root", "-r", "-z", "-M", "--name-status", "--no-commit-id", commit]
    else:
        args = ["diff-tree", "-r", "-z", "-M", "--name-status", "--no-commit-id", parent, commit]
    return _parse_name_status(_git(repo, *args).stdout)


def _parse_name_status(out: bytes) -> list[str]:
    """`-z --name-status`: STATUS NUL path NUL, with a second path for renames and copies."""
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    paths: list[str] = []
    index = 0
    while index < len(fields) and fields[index]:
        status = fields[index]
        width = 2 if status[:1] in ("R", "C") else 1
        paths.extend(fields[index + 1 : index + 1 + width])
        index += 1 + width
    return sorted(set(paths))


def rev_list(repo: Path, spec: str) -> list[str]:
    """Commits in REV..REV, oldest first."""
    if spec.startswith("-") or ".." not in spec:
        raise UsageError(f"--range {spec!r}: expected REV..REV, e.g. origin/main..HEAD")
    out = _git(repo, "rev-list", "--reverse", spec, "--").stdout.decode("utf-8")
    return out.split()


def parents(repo: Path, commit: str) -> list[str]:
    """The commit's parents, first parent first."""
    out = _git(repo, "rev-list", "--parents", "-n", "1", commit, "--").stdout.decode("utf-8")
    return out.split()[1:]


def subject(repo: Path, commit: str) -> str:
    """The first line of a commit message."""
    out = _git(repo, "log", "-1", "--format=%s", commit, "--").stdout
    return out.decode("utf-8", "replace").strip()


def show(repo: Path, rev: str, path: str, index_file: Optional[str] = None) -> bytes | None:
    """A file's bytes at rev (INDEX for the staged copy, from index_file when given); None when
    it does not exist there."""
    spec = f":{path}" if rev == INDEX else f"{rev}:{path}"
    done = _git(repo, "show", spec, check=False, index_file=index_file)
    return done.stdout if done.returncode == 0 else None


_SYMLINK_MODE = "120000"


def symlinks(repo: Path, rev: str, index_file: Optional[str] = None) -> dict[str, str]:
    """Every symlink in rev's tree (INDEX: the staged tree, from index_file when given) -> its
    stored target."""
    if rev == INDEX:
        out = _git(
            repo, "ls-files", "-s", "-z", index_file=index_file
        ).stdout  # MODE OID STAGE TAB PATH
    else:
        out = _git(repo, "ls-tree", "-r", "-z", "--full-tree", rev).stdout  # MODE TYPE OID TAB PATH
    oids: dict[str, str] = {}
    for entry in out.decode("utf-8", "surrogateescape").split("\0"):
        meta, tab, path = entry.partition("\t")
        fields = meta.split()
        if tab and fields and fields[0] == _SYMLINK_MODE:
            oids[path] = fields[1] if rev == INDEX else fields[2]
    if not oids:
        return {}
    blobs = _blobs(repo, sorted(set(oids.values())))
    return {path: blobs[oid].decode("utf-8", "surrogateescape") for path, oid in oids.items()}


def _blobs(repo: Path, oids: list[str]) -> dict[str, bytes]:
    """Contents of blobs in one `cat-file --batch` (no filters, so nothing the repo set runs)."""
    out = _git(repo, "cat-file", "--batch", stdin="".join(o + "\n" for o in oids).encode()).stdout
    found: dict[str, bytes] = {}
    pos = 0
    for oid in oids:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode("ascii", "replace").split()
        if len(header) != 3 or header[1] != "blob":
            raise UsageError(f"git cat-file could not read symlink blob {oid} in {repo}")
        size = int(header[2])
        found[oid] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return found


def hooks_dir(repo: Path) -> Path:
    """Where git looks for hooks, honouring core.hooksPath (the user's config: see module doc)."""
    done = _git(repo, "rev-parse", "--git-path", "hooks", user_config=True)
    out = done.stdout.decode("utf-8").strip()
    path = Path(out)
    return path if path.is_absolute() else repo / path
