"""The `charpin-remote` command. Coordinator side: the only module family that prints and exits.

Command groups live in their own `*cli.py` modules with `add_parsers(subparsers)`; handlers return
an exit code (the bitmask of design §6) or raise CharpinError; charpin_runner.climain, the `main`
shared with `charpin`, prints that as one line and returns its code.
"""

from __future__ import annotations

import argparse

from charpin_runner import __version__
from charpin_runner.climain import Parser, run_main

# The commands remote/cli.py registers; `compare` is compare_cli's, the verify ones verify/cli's.
_REMOTE = ("run", "hosts", "demo")
_VERIFY = ("verify", "verify-bundle")
_HISTORY = ("history",)
_LEDGER = ("ledger",)  # history/ledger_cli.py: flake evidence from the history
_COMPLETION = ("completion",)  # completion_cli.py: shell completion through shtab
_PR_COMMENT = ("pr-comment",)  # prcomment_cli.py: the sticky pull-request comment


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Return the `charpin-remote` parser; with `command`, only what that command needs.

    `compare` is often run on big receipts in CI and should not pay for importing the SSH
    pipeline; `run` should not pay for the renderers before its boxes have started.
    """
    parser = Parser(
        prog="charpin-remote",
        description="One snapshot, many boxes, one drift report.",
        exit_codes="0 clean; otherwise bits OR-ed: 1 tests failed, 2 drift or a gate blocked "
        "(verify: REJECT), 4 a box not evaluated, 8 snapshot or receipt integrity, 16 vacuous "
        "(verify: INCOMPLETE); 64 usage or configuration error, 130 interrupted; each command's --help says which apply",
    )
    parser.add_argument("--version", action="version", version=f"charpin-remote {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    everything = command not in (
        *_REMOTE,
        *_VERIFY,
        *_HISTORY,
        *_LEDGER,
        *_COMPLETION,
        *_PR_COMMENT,
        "compare",
    )
    if everything or command == "compare":
        from charpin_coordinator import compare_cli

        compare_cli.add_parsers(sub)
    if everything or command in _REMOTE:
        from charpin_coordinator.remote import cli as remote_cli

        remote_cli.add_parsers(sub)
    if everything or command in _VERIFY:
        from charpin_coordinator.verify import cli as verify_cli

        verify_cli.add_parsers(sub)
    if everything or command in _HISTORY:
        # history/cli.py makes the `history` group (queries, prune, rebuild) and adds
        # html_cli's `history html` to it.
        from charpin_coordinator.history import cli as history_cli

        history_cli.add_parsers(sub)
    if everything or command in _LEDGER:
        from charpin_coordinator.history import ledger_cli

        ledger_cli.add_parsers(sub)
    if everything or command in _COMPLETION:
        from charpin_coordinator import completion_cli

        completion_cli.add_parsers(sub)
    if everything or command in _PR_COMMENT:
        from charpin_coordinator import prcomment_cli

        prcomment_cli.add_parsers(sub)
    return parser


def _parse(args_list: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = build_parser(args_list[0] if args_list else None)
    return parser, parser.parse_args(args_list)


def main(argv: list[str] | None = None) -> int:
    """Run `charpin-remote`; return the exit code."""
    return run_main("charpin-remote", _parse, argv)
