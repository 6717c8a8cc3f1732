"""git's own files read as data: porcelain status, ignore files, attribute files, content keys
of files and links. Runs on boxes; stdlib only; imports only charpin_runner.errors and
charpin_runner.fixtures. Nothing here runs git."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from charpin_runner.errors import RunError
from charpin_runner.fixtures import hash_many, printable

# An ignore file larger than this is refused rather than read into memory.
MAX_RULES = 8 << 20


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


def flatten_ignore(directory: str, text: bytes) -> list[bytes]:
    """The patterns of `directory/.gitignore` rewritten to mean the same at the top level.

    A pattern without an inner slash matches at any depth below its folder (`D/**/p`); one with
    a slash is anchored to it (`D/p`). Written after the files of parent folders, these keep
    git's precedence: the deepest file's last matching pattern wins.
    """
    if text.startswith(b"\xef\xbb\xbf"):
        text = text[3:]
    prefix = _glob_escape(os.fsencode(directory)) + b"/" if directory else b""
    out: list[bytes] = []
    for line in text.split(b"\n"):
        if not line.strip() or line.startswith(b"#"):
            continue
        if not prefix:
            out.append(line)
            continue
        negate = line.startswith(b"!")
        body = line[1:] if negate else line
        core = body.rstrip(b" \r")
        core = core[:-1] if core.endswith(b"/") else core
        anchored = b"/" in core
        if body.startswith(b"/"):
            body = body[1:]
        out.append((b"!" if negate else b"") + prefix + (b"" if anchored else b"**/") + body)
    return out


def untracked_attributes(repo: Path, tracked: Iterable[str]) -> list[str]:
    """Untracked `.gitattributes` files in folders that hold tracked files, ignored or not:
    their rules change how tracked files compare with HEAD, so they are part of the state."""
    tracked_set = set(tracked)
    folders = {""}
    for path in tracked_set:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folders.add("/".join(parts[:depth]))
    found = []
    for folder in folders:
        path = f"{folder}/.gitattributes" if folder else ".gitattributes"
        if path not in tracked_set and os.path.lexists(repo / path):
            found.append(path)
    return found


def read_rules(path: str, follow: bool) -> bytes | None:
    """Bytes of a regular file (git does not follow in-tree `.gitignore` symlinks), or None."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        size = 0
        while size <= MAX_RULES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    if size > MAX_RULES:
        raise RunError(
            f"the ignore file {printable(path)} is larger than {MAX_RULES >> 20} MiB; "
            "shorten it or remove it"
        )
    return b"".join(chunks)


def content_keys(repo: Path, paths: Sequence[str]) -> list[str]:
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


def _glob_escape(text: bytes) -> bytes:
    out = bytearray()
    for index, byte in enumerate(text):
        char = bytes((byte,))
        if char in (b"\\", b"*", b"?", b"[") or (index == 0 and char in (b"!", b"#")):
            out += b"\\"
        out += char
    return bytes(out)


# A backslash that would read as the start of an escape: before another backslash, `xHH` or
# an undecodable byte (a surrogate escape, which printable spells `\xNN`).
_AMBIGUOUS_BACKSLASH = re.compile("\\\\(?=\\\\|x[0-9a-fA-F]{2}|[\udc80-\udcff])")


def text(path: str) -> str:
    """fixtures.printable (an undecodable byte as `\\xNN`), made to name exactly one path: a
    backslash that would read as an escape is doubled, so a name spelt `a\\xff` and one ending
    in byte 0xff differ. Every other name is spelt as printable spells it."""
    return printable(_AMBIGUOUS_BACKSLASH.sub(lambda _: "\\\\", path))
