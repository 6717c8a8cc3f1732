"""What a box run gives back: receipt, seal and logs, read with caps; and its clean-up. Runs on
boxes; stdlib only.

Files written during a run are untrusted (the test command could have replaced any of them), so
each is opened without following symlinks, must be a regular file and is read only up to its
cap. A log over its cap comes back as its last bytes (the end of a failing suite's output says
what went wrong), marked as truncated; a receipt or seal over its cap is not sent at all.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from charpin_runner.box.layout import Layout
from charpin_runner.receipt import MAX_RECEIPT_BYTES
from charpin_runner.seal import MAX_SEAL_BYTES, SEAL_SUFFIX

MAX_LOG_BYTES = 8 * 1024 * 1024


def gather(layout: Layout) -> tuple[list[dict[str, Any]], bytes]:
    """The parts of a finished run, as (descriptions, concatenated bytes) for one reply frame."""
    wanted = (
        ("receipt", layout.receipt, MAX_RECEIPT_BYTES, False),
        ("seal", Path(str(layout.receipt) + SEAL_SUFFIX), MAX_SEAL_BYTES, False),
        ("stdout", layout.stdout, MAX_LOG_BYTES, True),
        ("stderr", layout.stderr, MAX_LOG_BYTES, True),
    )
    parts: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for name, path, cap, keep_tail in wanted:
        data, problem, truncated = read_capped(path, cap, keep_tail=keep_tail)
        parts.append({"name": name, "size": len(data), "problem": problem, "truncated": truncated})
        chunks.append(data)
    return parts, b"".join(chunks)


def read_capped(path: Path, cap: int, *, keep_tail: bool) -> tuple[bytes, Optional[str], bool]:
    """(bytes, problem or None, truncated): a regular file's bytes up to cap, or why not."""
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b"", "missing", False
    except OSError as exc:
        return b"", f"not readable ({exc.strerror})", False
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return b"", "not a regular file", False
        if info.st_size > cap:
            if not keep_tail:
                return b"", f"{info.st_size} bytes, over the {cap}-byte cap", False
            handle.seek(info.st_size - cap)
            return handle.read(cap), None, True
        data = handle.read(cap + 1)
    if len(data) > cap:  # grew while we read it
        return (data[-cap:], None, True) if keep_tail else (b"", "over the cap", False)
    return data, None, False


def remove(layout: Layout, *, keep: bool, discard: Sequence[Path]) -> None:
    """Drop caches an unverified run may have written, and the run folder unless keep."""
    for path in discard:
        shutil.rmtree(path, ignore_errors=True)
    if keep:
        return
    shutil.rmtree(layout.run, ignore_errors=True)
    try:
        layout.run.parent.rmdir()  # runs/<run-id>, once the last box of this run is gone
    except OSError:
        pass
