"""CLI glue for `charpin pins`. Runs on any box; stdlib only. May print; library code may not."""

from __future__ import annotations

import argparse
from typing import Any


def add_parsers(sub: Any) -> None:
    """Register the `pins` command group (filled in by the pins work)."""
    parser = sub.add_parser("pins", help="(not built yet)")
    parser.set_defaults(handler=_not_built)


def _not_built(args: argparse.Namespace) -> int:
    from charpin_runner.errors import UsageError  # noqa: PLC0415

    raise UsageError("charpin pins is not built yet")
