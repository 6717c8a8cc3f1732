"""Coordinator side; stdlib only. The evidence bundle's tar: written with fixed metadata (the
same evidence gives the same bytes), read without ever extracting to disk, member by member
under caps, refusing links, devices, folders and names that escape."""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from charpin_runner.errors import IntegrityError, UsageError
from charpin_runner.receipt import MAX_RECEIPT_BYTES

MAX_BUNDLE_BYTES = 512 * 1024 * 1024
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"
CAPS = {
    MANIFEST: 4 * 1024 * 1024,
    SIGNATURE: 64 * 1024,  # an SSHSIG armour is a few KiB even for the largest RSA keys
    "patch.diff": 64 * 1024 * 1024,  # verify refuses patches over this size
    "verdict.json": 64 * 1024 * 1024,
}
_MAX_MEMBERS = 4096
_MTIME = 946684800  # 2000-01-01: a fixed time keeps the bytes reproducible
_BLOCK = 512
_KINDS = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.DIRTYPE: "a directory",
}


def line(text: str) -> str:
    """text on one line."""
    return " ".join(text.split())


def padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def write_new(path: Path, members: dict[str, bytes]) -> None:
    """Write a temporary file, then hard-link it into place: link() fails when `path` exists,
    so a bundle (the evidence someone may already hold) is never replaced, even in a race."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        handle = open(tmp, "xb")  # closed by the `with` below, before the link
    except OSError as exc:
        raise UsageError(f"cannot write {tmp}: {exc.strerror}; pass a writable path") from exc
    try:
        with handle:
            tar_into(handle, members)
            handle.flush()
            os.fsync(handle.fileno())
        place(tmp, path)
    except FileExistsError:
        raise UsageError(
            f"{path} already exists; bundles are never overwritten, pick another"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}; pass a writable path") from exc
    finally:
        tmp.unlink(missing_ok=True)


def place(tmp: Path, path: Path) -> None:
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        # Some file systems (FAT, some network mounts) have no hard links: check, then rename.
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        if path.exists():
            raise FileExistsError(path) from None
        os.rename(tmp, path)


def tar_into(handle: IO[bytes], members: dict[str, bytes]) -> None:
    with tarfile.open(fileobj=handle, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, _MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            # BytesIO over bytes shares their buffer: a big receipt is not copied.
            tar.addfile(info, io.BytesIO(data))


# Reading: the archive is untrusted input, read into memory member by member, never extracted.


def read_tar(path: Path) -> dict[str, bytes]:
    try:
        with open(path, "rb") as handle:
            facts = os.fstat(handle.fileno())
            if not stat.S_ISREG(facts.st_mode):
                raise IntegrityError(f"{path}: not a regular file; pass an evidence bundle")
            if facts.st_size > MAX_BUNDLE_BYTES:
                raise IntegrityError(
                    f"{path}: {facts.st_size} bytes is over the {MAX_BUNDLE_BYTES}-byte bundle "
                    "cap; refused"
                )
            return members_read(handle, facts.st_size, str(path))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}; pass an evidence bundle") from exc


def members_read(handle: IO[bytes], size: int, where: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=handle, mode="r:") as tar:
            for member in each(tar, where):
                name = safe_name(member, where)
                if name in out:
                    # tarfile would let the second copy win: a reviewer's tar tool may show the
                    # first. Two readings of one bundle must not exist.
                    raise IntegrityError(f"{where}: member {name!r} appears twice; refused")
                out[name] = read_member(tar, member, name, where)
            end = tar.offset
    except (tarfile.TarError, EOFError) as exc:
        raise IntegrityError(
            f"{where}: not a readable tar archive ({line(str(exc))}), truncated or damaged; "
            "refused"
        ) from None
    check_end(handle, end, size, where)
    return out


def each(tar: tarfile.TarFile, where: str) -> Iterator[tarfile.TarInfo]:
    count = 0
    while (member := tar.next()) is not None:
        count += 1
        if count > _MAX_MEMBERS:
            raise IntegrityError(f"{where}: over {_MAX_MEMBERS} members; refused")
        yield member


def safe_name(member: tarfile.TarInfo, where: str) -> str:
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise IntegrityError(f"{where}: member name {name!r} is unsafe (absolute or ..); refused")
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        kind = _KINDS.get(member.type, f"of tar type {member.type!r}")
        raise IntegrityError(f"{where}: member {name!r} is {kind}, not a regular file; refused")
    return name


def read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, where: str) -> bytes:
    most = cap(name)
    if member.size > most:
        raise IntegrityError(f"{where}: member {name!r} is over its {most}-byte cap; refused")
    handle = tar.extractfile(member)
    data = handle.read() if handle is not None else b""
    if len(data) != member.size:
        raise IntegrityError(f"{where}: member {name!r} is truncated; refused")
    return data


def cap(name: str) -> int:
    if name.startswith("boxes/"):
        return MAX_RECEIPT_BYTES
    return CAPS.get(name, CAPS[SIGNATURE])  # an unknown member is refused later anyway


def check_end(handle: IO[bytes], end: int, size: int, where: str) -> None:
    """A tar ends with two zero blocks. tarfile stops quietly at a header cut short, so a bundle
    cut at a member boundary would read as one with fewer members: the end marker is demanded."""
    handle.seek(end)
    tail = handle.read(size - end)
    if len(tail) < 2 * _BLOCK or tail.strip(b"\0"):
        raise IntegrityError(
            f"{where}: the archive is truncated or has data after its last member; refused"
        )


# Checking: the same checks for writing and reading, so a bundle written always reads back.
