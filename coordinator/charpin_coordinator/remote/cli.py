"""CLI glue for `charpin-remote run`, `hosts check` and `demo`. Coordinator side; may print."""

from __future__ import annotations

import argparse
from typing import Any

from charpin_runner.errors import UsageError


def add_parsers(sub: Any) -> None:
    """Register `run`, `hosts` and `demo` (filled in by the remote work)."""
    for name in ("run", "hosts", "demo"):
        parser = sub.add_parser(name, help="(not built yet)")
        parser.set_defaults(handler=_not_built)


def _not_built(args: argparse.Namespace) -> int:
    raise UsageError(f"charpin-remote {args.command} is not built yet")
