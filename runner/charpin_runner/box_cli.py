"""CLI glue for `charpin box ...`: the box side of charpin-remote. Stdlib only; may print.

`charpin box serve --home H` is the agent the coordinator talks to over one channel (see
box/agent.py; its stdin and stdout carry frames, not text). `charpin box verify-checkout DIR
TREE` exits 0 when DIR's files make git tree TREE, 8 with one line when they do not.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from charpin_runner import checkout
from charpin_runner.errors import EXIT_CLEAN


def add_parsers(sub: Any) -> None:
    """Register `charpin box`."""
    box = sub.add_parser(
        "box",
        exit_codes=(
            "0 served or verified; a failed step is the agent's reply, not an exit code; 64 "
            "usage or configuration error, 130 interrupted"
        ),
        help="the box side of charpin-remote",
    )
    steps = box.add_subparsers(dest="box_step", metavar="STEP", parser_class=type(box))
    serve = steps.add_parser(
        "serve",
        exit_codes=(
            "0 served; a failed step is the agent's reply, not an exit code; 64 usage or "
            "configuration error, 130 interrupted"
        ),
        help="answer charpin-remote's framed requests on stdin/stdout (not for humans)",
    )
    serve.add_argument(
        "--home", default="", metavar="DIR", help="the folder holding .cache/charpin (default ~)"
    )
    serve.set_defaults(handler=_serve)
    verify = steps.add_parser(
        "verify-checkout",
        exit_codes=(
            "0 the checkout matches, 8 it does not, 64 usage or configuration error, 130 "
            "interrupted"
        ),
        help="check that a checkout's files make the expected git tree",
    )
    verify.add_argument("dir", metavar="DIR")
    verify.add_argument("tree", metavar="TREE")
    verify.set_defaults(handler=_verify_checkout)


def _serve(args: argparse.Namespace) -> int:
    from charpin_runner.box.agent import serve

    return serve(args.home)


def _verify_checkout(args: argparse.Namespace) -> int:
    checkout.verify(Path(args.dir), args.tree)
    return EXIT_CLEAN
