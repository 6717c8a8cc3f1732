"""Verify a fresh checkout by its files, not by git's object database. Runs on boxes; stdlib only.

A box keeps a cache repository between runs, and a test of an earlier run could have rewritten
an object inside it: git does not re-hash objects it reads, so `rev-parse HEAD^{tree}` would
still name the expected tree while the files on disk are the attacker's. This module rebuilds
the tree id from the work tree itself (every file hashed as a git blob, with git's own
attribute conversions; links and modes read from disk; trees built as git builds them) and
the caller compares it with the tree id the coordinator computed from its own repository.

Imports only charpin_runner.errors, charpin_runner.fixtures, charpin_runner.gitcmd (sealed,
hardened git: the cache repository's config is rewritten by install before git reads it) and
charpin_runner.caches (the cache repository is shared by concurrent runs).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from charpin_runner import fixtures, gitcmd
from charpin_runner.caches import journal
from charpin_runner.caches.store import Store, remove_tree, store_of
from charpin_runner.errors import IntegrityError

_HEX40 = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


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


_BARE_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
# No automatic gc or maintenance in a cache repository: a detached `gc --auto` would write into
# it after the fetch's publish lock is gone, where nobody journals it.
_FETCH = ("-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "fetch.writeCommitGraph=false")


def install(
    cache: Path,
    bundle: Path | None,
    bundle_sha256: str,
    commit: str,
    dest: Path,
    ref: str,
    tree: str,
    shallow: Sequence[str] = (),
) -> dict[str, str]:
    """Box side of shipping: verify the bundle's sha256, fetch it into the cache repository,
    check commit out at dest and verify the files against tree. Returns HEAD and tree as the
    checkout reports them.

    The cache repository is shared by concurrent runs (caches/store.py): it is created in the
    staging folder and published by a rename, and every change to it (creation, hardening, the
    fetch) happens under its publish lock and is journaled, so a concurrent run's cache watch
    knows it for ours. It outlives runs of untrusted tests, so its config is rewritten and its
    alternates and attributes dropped before git reads it; one that changed since its last
    journal record is condemned (this run's checkout is still verified by its files). shallow:
    the commits of a shallow source whose parents are not shipped (a depth-1 CI checkout)."""
    store, kind, name = store_of(cache)
    with store.publishing(kind, name):
        if not os.path.lexists(cache):
            _create(store, kind, name)
        trusted = store.current(kind, name)
        before = journal.state(cache)
        try:
            _harden(cache, shallow)
            if bundle is not None:
                _fetch(cache, bundle, bundle_sha256, commit, ref, shallow)
        finally:
            # Whatever this run changed, even when the fetch failed half-way, is its own and
            # journaled; a repository that had changed behind the journal is not used again.
            if trusted:
                store.record(kind, name, before, "fetch")
            else:
                store.condemn(kind, name)
    try:
        _checkout(cache, dest, commit)
        verify(dest, tree)
    except IntegrityError:
        store.condemn(kind, name)  # the next run ships a full bundle into a fresh repository
        raise
    return {
        "head": _git(dest, "rev-parse", "HEAD").strip(),
        "tree": _git(dest, "rev-parse", "HEAD^{tree}").strip(),
    }


def _fetch(
    cache: Path, bundle: Path, bundle_sha256: str, commit: str, ref: str, shallow: Sequence[str]
) -> None:
    got = fixtures.hash_file(str(bundle))
    if got != bundle_sha256:
        bundle.unlink()
        raise IntegrityError(
            f"bundle sha256 {got} does not match the {bundle_sha256} that was sent; "
            "the transfer was corrupted, run again"
        )
    try:
        _git(cache, *_FETCH, "fetch", "-q", str(bundle), f"{ref}:refs/charpin/{commit}")
    except IntegrityError as exc:
        if not shallow:
            raise
        raise IntegrityError(
            f"{exc}; the snapshot comes from a shallow clone: fetch its history "
            "(git fetch --unshallow, or fetch-depth: 0 for actions/checkout) and run again"
        ) from None
    bundle.unlink()


def _create(store: Store, kind: str, name: str) -> None:
    """A new empty cache repository, made in the staging folder and published by a rename
    (caller holds its publish lock)."""
    stage = store.stage(f"{name}.init-{os.getpid()}")
    remove_tree(stage)
    stage.parent.mkdir(parents=True, exist_ok=True)
    try:
        _git(None, "init", "-q", "--bare", str(stage))
        (stage / "config").write_text(_BARE_CONFIG, encoding="utf-8")
        cache = store.entry(kind, name)
        cache.parent.mkdir(parents=True, exist_ok=True)
        os.rename(stage, cache)
        store.record(kind, name, journal.ABSENT, "create")
    finally:
        remove_tree(stage)


def _harden(cache: Path, shallow: Sequence[str]) -> None:
    """The repository's config as charpin writes it, no alternates, no attributes, and the
    shallow boundary of what is shipped; each file written only when it differs (and by a
    rename: a concurrent clone reads these files)."""
    _write_if_changed(cache / "config", _BARE_CONFIG.encode())
    for extra in ("objects/info/alternates", "info/attributes"):
        if os.path.lexists(cache / extra):
            os.unlink(cache / extra)
    if shallow:
        have = set(_lines(cache / "shallow"))
        wanted = sorted(have | {s for s in shallow if _HEX40.fullmatch(s)})
        _write_if_changed(cache / "shallow", "".join(f"{s}\n" for s in wanted).encode())


def _checkout(cache: Path, dest: Path, commit: str) -> None:
    """A fresh repository at dest borrowing the cache's objects, with commit checked out."""
    if not (cache / "shallow").is_file():
        _git(None, "clone", "-q", "--shared", "--no-checkout", str(cache), str(dest))
    else:
        # git clones a shallow repository over its transport (no --shared, and only branches):
        # the same borrowing is set up by hand, with the shallow boundary copied.
        _git(None, "init", "-q", str(dest))
        info = dest / ".git" / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_text(str(cache / "objects") + "\n", encoding="utf-8")
        shutil.copyfile(cache / "shallow", dest / ".git" / "shallow")
    _git(dest, "checkout", "-q", "--detach", commit)


def _write_if_changed(path: Path, data: bytes) -> None:
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="ascii", errors="replace").split()
    except OSError:
        return []


def _git(repo: Path | None, *args: str) -> str:
    """git's stdout; IntegrityError when it fails (the box's copy is then not to be trusted)."""
    done = gitcmd.run(args, cwd=repo)
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip()
        raise IntegrityError(f"git {' '.join(args[:2])} failed on the box: {message[-300:]}")
    return done.stdout.decode("utf-8", "replace")


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
    done = gitcmd.run(
        ["hash-object", "--stdin-paths"],
        cwd=root,
        input=b"".join(os.fsencode(p) + b"\n" for p in paths),
    )
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != len(paths):
        raise IntegrityError(
            f"git hash-object failed in {root}: "
            f"{done.stderr.decode('utf-8', 'replace').strip()[-300:]}; check git on the box"
        )
    return [bytes.fromhex(line.decode("ascii")) for line in lines]


def _gitlinks(root: Path) -> dict[str, bytes]:
    done = gitcmd.run(["ls-files", "-s", "-z"], cwd=root)
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
            children.items(),
            key=lambda item: os.fsencode(item[0]) + (b"/" if item[1][0] == "40000" else b""),
        )
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body).digest()  # noqa: S324 - git's id
