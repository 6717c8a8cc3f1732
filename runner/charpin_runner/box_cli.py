"""CLI glue for `charpin box ...`: the box-side steps charpin-remote runs. Stdlib only; may print.

`charpin box install CACHE BUNDLE SHA256 COMMIT DEST REF TREE` installs a shipped snapshot and
prints `{"head": ..., "tree": ...}`; `charpin box verify-checkout DIR TREE` exits 0 when DIR's
files make git tree TREE. Either exits 8 with one line when a check fails (see checkout.py).
"""

from __future__ import annotations

import argparse
import json
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
    install = steps.add_parser("install", help="fetch a shipped bundle and check the commit out")
    for name in ("cache", "bundle", "sha256", "commit", "dest", "ref", "tree"):
        install.add_argument(name)
    install.set_defaults(handler=_install)


def _install(args: argparse.Namespace) -> int:
    got = checkout.install(
        Path(args.cache),
        Path(args.bundle) if args.bundle else None,
        args.sha256,
        args.commit,
        Path(args.dest),
        args.ref,
        args.tree,
    )
    print(json.dumps(got))
    return 0


def _verify_checkout(args: argparse.Namespace) -> int:
    checkout.verify(Path(args.dir), args.tree)
    return 0
