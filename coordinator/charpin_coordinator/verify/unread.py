"""Coordinator side; stdlib, verify.gitread and verify.scope only. The files of a patch that
charpin cannot read as source or data it understands: deny by default (class D of attack
report 1: a compiled `shop/_fast.so` plus one import line read ACCEPT with an empty Scope).

Every file the patch adds or changes outside the test side is read; each of these is a Protected
paths finding naming it, never silently left out of the judgement:

* compiled or native code anywhere: a shared library or extension module (`.so`, `.pyd`,
  `.dylib`, `.dll`), objects and archives, byte code, wheels, eggs, zips and jars;
* binary content anywhere (a NUL byte, or bytes that are not UTF-8): a program charpin cannot
  read, whatever its name says;
* a submodule (a gitlink): its code is not in this repository's objects at all;
* inside a production package's folder, any file that is neither Python (`*.py`, `*.pyi`, a
  script with a Python shebang) nor a text format of data, templates or documentation
  (`.json`, `.toml`, `.csv`, `.html`, ...): a `.pyx`, `.c` or `.rs` file builds into native code
  that no gate reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from charpin_coordinator.verify import gitread
from charpin_coordinator.verify.scope import python_shebang

GITLINK = "160000"
_NATIVE = frozenset(
    {".so", ".pyd", ".dylib", ".dll", ".o", ".a", ".lib", ".obj", ".pyc", ".pyo", ".whl",
     ".egg", ".zip", ".jar", ".exe", ".bin", ".wasm"}
)
# Text a production package may carry that is data to Python, not code charpin leaves unread.
_TEXT = frozenset(
    {".py", ".pyi", ".json", ".toml", ".yaml", ".yml", ".csv", ".tsv", ".txt", ".md", ".rst",
     ".cfg", ".ini", ".html", ".htm", ".xml", ".xsd", ".css", ".svg", ".jinja", ".jinja2",
     ".j2", ".tmpl", ".po", ".pot", ".properties", ".sql", ".typed"}
)
_TEXT_NAMES = frozenset({"py.typed", "LICENSE", "README", "NOTICE", "AUTHORS", "COPYING"})
_SNIFF = 1 << 16


def findings(
    repo: Path,
    tree: dict[str, tuple[str, str]],
    paths: Iterable[str],
    production_dirs: Iterable[str],
) -> list[str]:
    """`path (why)` for each of paths (the patch's added or changed files outside the test side,
    as they are in the patched tree) that charpin cannot read."""
    dirs = [d for d in production_dirs if d]
    present = [p for p in paths if p in tree]
    blobs = gitread.blobs(repo, [tree[p][1] for p in present if tree[p][0] in gitread.REGULAR])
    out: list[str] = []
    for path in sorted(present):
        mode, sha = tree[path]
        why = _why(path, mode, blobs.get(sha, b"")[:_SNIFF], dirs)
        if why:
            out.append(f"{path} ({why})")
    return out


def _why(path: str, mode: str, head: bytes, dirs: list[str]) -> str:
    pure = PurePosixPath(path)
    suffixes = {s.lower() for s in pure.suffixes}
    if mode == GITLINK:
        return "a submodule: its code is not in this repository, and nothing judges it"
    if mode not in gitread.REGULAR:
        return ""  # a link: Scope and the tests read what it points at
    if suffixes & _NATIVE:
        return "compiled or native code: charpin cannot read what it does"
    if b"\0" in head or not _utf8(head):
        return "binary content: charpin cannot read what it does"
    inside = any(path.startswith(d + "/") for d in dirs)
    if not inside or pure.suffix.lower() in _TEXT or pure.name in _TEXT_NAMES:
        return ""
    if not pure.suffix and (python_shebang(head) or not head.strip()):
        return ""
    return "not a format charpin reads as source or data, inside a production package"


def _utf8(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the sniff's end is still text.
        return exc.start >= len(head) - 3 and len(head) == _SNIFF
    return True
