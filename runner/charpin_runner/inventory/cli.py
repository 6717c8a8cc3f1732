"""CLI glue for `charpin inventory`. Runs on any box; stdlib only. May print; library code may not."""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    """Register the `inventory` command group (filled in by the inventory work)."""
    parser = sub.add_parser("inventory", help="(not built yet)")
    parser.set_defaults(handler=_not_built)


def _not_built(args: argparse.Namespace) -> int:
    from charpin_runner.errors import UsageError  # noqa: PLC0415

    raise UsageError("charpin inventory is not built yet")
