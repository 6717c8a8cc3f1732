"""Run ids: one format for a runner's receipt and a coordinator's run. Runs everywhere; stdlib only."""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone

from charpin_runner.errors import UsageError

# Safe as a folder name, a git-free file name and one argv element on any box.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def new_run_id(now: datetime | None = None) -> str:
    """`YYYYmmddTHHMMSSZ-<6 hex>`: sortable by time, unique enough for one machine."""
    moment = now or datetime.now(timezone.utc)
    return f"{moment.strftime('%Y%m%dT%H%M%SZ')}-{os.urandom(3).hex()}"


def check_run_id(run_id: str) -> str:
    """Return run_id, or UsageError when it could not be a folder name or an argument."""
    if not RUN_ID.fullmatch(run_id):
        raise UsageError(f"--run-id {run_id!r} is not valid; use letters, digits, '.', '_', '-'")
    return run_id
