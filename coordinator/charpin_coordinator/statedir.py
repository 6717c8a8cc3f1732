"""Coordinator side; stdlib and charpin_runner.errors only: its private state, outside any repo."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from charpin_runner.errors import IntegrityError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def state_root() -> Path:
    """$XDG_STATE_HOME/charpin, or ~/.local/state/charpin (a relative XDG_STATE_HOME is ignored,
    as the XDG spec says). Nothing is created here.

    What the coordinator keeps between runs and trusts later (verify's reuse records and their
    key). No box and no test may write there: the built-in boxes' tests get it read-only (or
    hidden) under bubblewrap. Folders are 0700, files 0600, read without following links."""
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "charpin"


def ensure_state_root() -> Path:
    """state_root(), created 0700 when missing, and checked private."""
    root = state_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    return private_dir(root)


def private_dir(path: Path) -> Path:
    """Make path (its parent must exist) a folder only this user can enter; return it.

    IntegrityError when it is a link, not a folder, or someone else's."""
    try:
        path.mkdir(mode=PRIVATE_DIR)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise IntegrityError(
            f"{path} is not a folder of this user (a link, a file or another owner); remove it "
            "and run again"
        )
    if stat.S_IMODE(info.st_mode) != PRIVATE_DIR:
        os.chmod(path, PRIVATE_DIR)
    return path


def private_problem(path: Path) -> str | None:
    """Why path is not a private folder of this user (a link, another owner, open to others)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a folder"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to another user"
    if info.st_mode & 0o077:
        return f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def write_private(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write data to path as a 0600 file, atomically (a temporary file renamed into place).
    exclusive: FileExistsError when path already exists (the first writer wins)."""
    part = path.with_name(f".{path.name}.part-{secrets.token_hex(8)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(part, flags, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if exclusive:
            os.link(part, path)  # never replaces: FileExistsError when another writer won
        else:
            os.replace(part, path)
    finally:
        try:
            os.unlink(part)
        except FileNotFoundError:
            pass


def read_private(path: Path, cap: int) -> bytes:
    """The bytes of a regular file of this user, 0600 or stricter, at most cap bytes, read
    without following a link. IntegrityError when it is anything else; OSError when missing."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise IntegrityError(f"{path} is not a regular file of this user")
        if info.st_mode & 0o077:
            raise IntegrityError(
                f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o})"
            )
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise IntegrityError(f"{path} is over {cap} bytes")
    return data


__all__ = [
    "ensure_state_root",
    "private_dir",
    "private_problem",
    "read_private",
    "state_root",
    "write_private",
]
