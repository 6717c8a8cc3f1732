"""Coordinator side; stdlib and charpin_runner only. Opening the history database safely.

One SQLite file in WAL mode, no server. Every connection goes through `opened()`:

* a lock file next to it (`<db>.lock`): every reader and writer holds it shared, `history
  rebuild` exclusive while it swaps a new file in, so no connection ever sees the swap;
* `busy_timeout`, and writers start with BEGIN IMMEDIATE (`write()`), so two nightly jobs that
  record at once wait for each other instead of failing or corrupting anything;
* the file must be ours: SQLite's header, our application id, a schema version this code knows
  (older ones are migrated) and exactly the tables and indexes that version defines. Anything else
  is refused with one line naming the fix, `charpin-remote history rebuild`; nothing is ever
  emptied or recreated silently. A missing database is created when writing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from charpin_runner.errors import CharpinError, IntegrityError, UsageError

from charpin_coordinator.history import schema

BUSY_SECONDS = 60.0
_HEADER = b"SQLite format 3\x00"
REBUILD_HINT = (
    "recreate it from the run folders with `charpin-remote history rebuild` "
    "(default .charpin/runs and .charpin/verify)"
)


class HistoryBusyError(CharpinError):
    """Another process held the history database (or its lock) for longer than we wait."""

    exit_code = IntegrityError.exit_code


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def side_files(path: Path) -> list[Path]:
    """The files SQLite keeps next to a database (WAL, shared memory, rollback journal)."""
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


@contextlib.contextmanager
def opened(path: Path, *, create: bool = False) -> Iterator[sqlite3.Connection]:
    """A checked connection to the history at path (migrated to the latest schema).

    create=False and no file: UsageError. A file that is not our database: IntegrityError
    with the rebuild hint."""
    path = Path(path)
    if not has_content(path) and not create:
        raise UsageError(
            f"no history database at {path}; it is made by the first `charpin-remote run` (or "
            "`compare --record`, `verify`), or by `charpin-remote history rebuild`"
        )
    if create:
        _make_parent(path)
    with locked(path, exclusive=False):
        with mapped(path):
            _check_header(path)
            conn = connect(path)
            try:
                _prepare(conn, path)
                yield conn
            finally:
                conn.close()


def connect(path: Path) -> sqlite3.Connection:
    """A raw connection: autocommit (transactions are explicit), busy timeout, WAL."""
    conn = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


@contextlib.contextmanager
def write(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, BEGIN IMMEDIATE: the write lock is taken first (waiting up to the
    busy timeout), so two writers never deadlock upgrading a read; rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # SQLite may have rolled back already (a full disk, say)
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def mapped(path: Path) -> Iterator[None]:
    """Turn sqlite3 errors met inside into one-line CharpinErrors naming path and the fix."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translate(path, exc) from exc


def translate(path: Path, exc: sqlite3.Error) -> CharpinError:
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return HistoryBusyError(
            f"history database {path} stayed locked by another process for "
            f"{BUSY_SECONDS:.0f} s ({exc}); try again when the other job has finished"
        )
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_FULL")):
        return UsageError(
            f"cannot write the history database {path} ({exc}); pass --history PATH to a "
            "writable file or fix the folder's permissions"
        )
    if name.startswith("SQLITE_IOERR"):
        return IntegrityError(f"history database {path}: I/O error ({exc}); check the disk")
    return IntegrityError(f"history database {path} is unreadable ({exc}); {REBUILD_HINT}")


@contextlib.contextmanager
def locked(path: Path, *, exclusive: bool, wait: float = BUSY_SECONDS) -> Iterator[None]:
    """Hold `<db>.lock` shared (every connection) or exclusive (`history rebuild`)."""
    lock = lock_path(path)
    try:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError:  # a reader of a database in a folder it may not write
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(
            f"cannot open {lock} ({exc.strerror}); pass --history PATH in a writable folder"
        ) from exc
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HistoryBusyError(
                        f"history database {path} is being rebuilt (or used) by another process "
                        f"for over {wait:.0f} s ({lock}); try again when it has finished"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def replace(path: Path, build: Callable[[sqlite3.Connection], None]) -> None:
    """Build a new database with `build` next to path, then swap it in under the exclusive lock.

    The old file (corrupt or not) stays untouched until the new one is complete; its WAL and
    shared-memory files are removed before the rename, so they are never applied to the new one.
    """
    _make_parent(path)
    with locked(path, exclusive=True):
        fresh = path.with_name(f".{path.name}.rebuild-{secrets.token_hex(4)}")
        try:
            with mapped(fresh):
                conn = connect(fresh)
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                    with write(conn):
                        schema.migrate(conn)
                    build(conn)
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    conn.close()
            for side in side_files(path):
                with contextlib.suppress(FileNotFoundError):
                    side.unlink()
            os.replace(fresh, path)
        finally:
            for leftover in [fresh, *side_files(fresh)]:
                with contextlib.suppress(FileNotFoundError):
                    leftover.unlink()


def has_content(path: Path) -> bool:
    """A database file is there (an empty file counts as none: SQLite would make it one)."""
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UsageError(f"cannot read {path} ({exc.strerror}); pass --history PATH") from exc


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create {path.parent} ({exc.strerror}); pass --history PATH in a writable "
            "folder"
        ) from exc


def _check_header(path: Path) -> None:
    """A non-empty file must start like a SQLite database; SQLite itself would say so only at the
    first query, and some of its answers to garbage ("not a database") read like a busy file."""
    if not has_content(path):
        return
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_HEADER))
    except OSError as exc:
        raise UsageError(f"cannot read {path} ({exc.strerror}); pass --history PATH") from exc
    if head != _HEADER:
        raise IntegrityError(
            f"history database {path} is not a SQLite database (corrupt or another file); "
            f"{REBUILD_HINT}"
        )


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Create, migrate or refuse. The decision is re-made inside the write transaction, so two
    processes creating the same new database at once do it once."""
    if _state(conn, path) == "current":
        return
    if schema.version(conn) == 0:
        _to_wal(conn)
    with write(conn):
        if _state(conn, path) != "current":
            schema.migrate(conn)
    if _state(conn, path) != "current":  # pragma: no cover - migrate() always gets there
        raise IntegrityError(f"history database {path} did not migrate; {REBUILD_HINT}")


def _to_wal(conn: sqlite3.Connection) -> None:
    """PRAGMA journal_mode = WAL (persistent; needs no open transaction), waiting as a busy
    handler would: SQLite calls none for a journal mode change, so while another process is
    creating the same new database (inside its write transaction) the change fails at once
    with "database is locked". Once that process commits, the file is WAL and this is a no-op."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            name = getattr(exc, "sqlite_errorname", "") or ""
            if not name.startswith("SQLITE_BUSY") or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _state(conn: sqlite3.Connection, path: Path) -> str:
    """ "current", "old" (migrate it) or "empty"; IntegrityError for anything not ours."""
    found = schema.version(conn)
    app = schema.application_id(conn)
    if found == 0 and app == 0:
        if schema.definitions(conn):
            raise IntegrityError(
                f"{path} is a SQLite database but not a charpin history; pass --history PATH "
                f"to another file, or {REBUILD_HINT}"
            )
        return "empty"
    if app != schema.APPLICATION_ID:
        raise IntegrityError(
            f"{path} is a SQLite database but not a charpin history (application id {app:#x}); "
            "pass --history PATH to another file"
        )
    if found > schema.LATEST:
        raise IntegrityError(
            f"history database {path} has schema v{found}, newer than this charpin-remote "
            f"reads (v{schema.LATEST}); upgrade charpin-remote, or {REBUILD_HINT}"
        )
    if schema.definitions(conn) != schema.expected_definitions(found):
        raise IntegrityError(
            f"history database {path} does not hold the tables and indexes of schema v{found} "
            f"(edited by hand?); {REBUILD_HINT}"
        )
    return "current" if found == schema.LATEST else "old"
