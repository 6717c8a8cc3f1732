"""CLI glue for `charpin box ...`: the box-side steps charpin-remote runs. Stdlib only; may print.

`charpin box verify-checkout DIR TREE` exits 0 when DIR's files make git tree TREE, else 8 with
one line saying so (see checkout.py for why the files, not git's objects, are checked).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from charpin_runner import checkout


def add_parsers(sub: Any) -> None:
    """Register `charpin box`."""
    box = sub.add_parser("box", help="box-side steps that charpin-remote runs")
    steps = box.add_subparsers(dest="box_step", metavar="STEP", parser_class=type(box))
    verify = steps.add_parser(
        "verify-checkout", help="check that a checkout's files make the expected git tree"
    )
    verify.add_argument("dir", metavar="DIR")
    verify.add_argument("tree", metavar="TREE")
    verify.set_defaults(handler=_verify_checkout)


def _verify_checkout(args: argparse.Namespace) -> int:
    checkout.verify(Path(args.dir), args.tree)
    return 0
