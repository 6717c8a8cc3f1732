"""Verify a fresh checkout by its files, not by git's object database. Runs on boxes; stdlib only.

A box keeps a cache repository between runs, and a test of an earlier run could have rewritten
an object inside it: git does not re-hash objects it reads, so `rev-parse HEAD^{tree}` would
still name the expected tree while the files on disk are the attacker's. This module rebuilds
the tree id from the work tree itself (every file hashed as a git blob, with git's own
attribute conversions; links and modes read from disk; trees built as git builds them) and
the caller compares it with the tree id the coordinator computed from its own repository.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from charpin_runner.errors import IntegrityError

# Git with nothing of the repository's or the user's configuration that could run code.
SAFE_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0",
}
SAFE_GIT_CONFIG = (
    "-c", "core.hooksPath=" + os.devnull,
    "-c", "core.fsmonitor=false",
    "-c", "core.attributesFile=" + os.devnull,
    "-c", "core.autocrlf=false",
)


def safe_env() -> dict[str, str]:
    """os.environ without GIT_* redirections, plus SAFE_GIT_ENV."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(SAFE_GIT_ENV)
    return env


def worktree_tree(root: Path) -> str:
    """The git tree id of root's files (`.git` left out; gitlinks taken from the index)."""
    files: list[str] = []
    entries: dict[str, tuple[str, bytes]] = {}  # path -> (mode, 20-byte id)
    for folder, dirs, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = sorted(d for d in dirs if not (rel == "." and d == ".git"))
        for name in list(dirs):
            full = os.path.join(folder, name)
            if os.path.islink(full):
                dirs.remove(name)  # a link to a folder is a blob, walked as a file below
                names.append(name)
        for name in names:
            full = os.path.join(folder, name)
            path = name if rel == "." else f"{rel}/{name}"
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                entries[path] = ("120000", _blob(os.fsencode(os.readlink(full))))
            elif stat.S_ISREG(st.st_mode):
                mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
                entries[path] = (mode, b"")
                files.append(path)
    for path, sha in zip(files, _hash_objects(root, files)):
        entries[path] = (entries[path][0], sha)
    for path, sha in _gitlinks(root).items():
        entries[path] = ("160000", sha)
    return _build(entries).hex()


def verify(root: Path, expected_tree: str) -> None:
    """IntegrityError unless root's files make exactly expected_tree."""
    got = worktree_tree(root)
    if got != expected_tree:
        raise IntegrityError(
            f"the checkout's files make tree {got}, not the {expected_tree} that was sent: the "
            "box's cache repository was tampered with; it is removed, run again"
        )


def _blob(data: bytes) -> bytes:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).digest()  # noqa: S324 - git's id


def _hash_objects(root: Path, paths: list[str]) -> list[bytes]:
    """git's blob ids of paths, with the work tree's attributes applied as checkout did."""
    if not paths:
        return []
    done = subprocess.run(
        ["git", "-C", str(root), *SAFE_GIT_CONFIG, "hash-object", "--stdin-paths"],
        input=b"".join(os.fsencode(p) + b"\n" for p in paths),
        capture_output=True,
        env=safe_env(),
        check=False,
    )
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != len(paths):
        raise IntegrityError(
            f"git hash-object failed in {root}: "
            f"{done.stderr.decode('utf-8', 'replace').strip()[-300:]}; check git on the box"
        )
    return [bytes.fromhex(line.decode("ascii")) for line in lines]


def _gitlinks(root: Path) -> dict[str, bytes]:
    done = subprocess.run(
        ["git", "-C", str(root), *SAFE_GIT_CONFIG, "ls-files", "-s", "-z"],
        capture_output=True,
        env=safe_env(),
        check=False,
    )
    links: dict[str, bytes] = {}
    for record in done.stdout.split(b"\0"):
        if record.startswith(b"160000 "):
            meta, path = record.split(b"\t", 1)
            links[os.fsdecode(path)] = bytes.fromhex(meta.split()[1].decode("ascii"))
    return links


def _build(entries: dict[str, tuple[str, bytes]]) -> bytes:
    """The id of the tree holding entries (paths with `/`), built bottom-up like git."""
    children: dict[str, tuple[str, bytes]] = {}
    folders: dict[str, dict[str, tuple[str, bytes]]] = {}
    for path, value in entries.items():
        head, sep, rest = path.partition("/")
        if sep:
            folders.setdefault(head, {})[rest] = value
        else:
            children[head] = value
    for name, inner in folders.items():
        children[name] = ("40000", _build(inner))
    # Git sorts entries by name, a folder's name compared as if it ended in "/".
    body = b"".join(
        mode.encode() + b" " + os.fsencode(name) + b"\0" + sha
        for name, (mode, sha) in sorted(
            children.items(), key=lambda item: os.fsencode(item[0]) + (b"/" if item[1][0] == "40000" else b"")
        )
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body).digest()  # noqa: S324 - git's id
