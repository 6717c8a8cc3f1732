"""The `charpin-remote` command. Coordinator side: the only module family that prints and exits.

Command groups live in their own `*cli.py` modules with `add_parsers(subparsers)`; handlers return
an exit code (the bitmask of design §6) or raise CharpinError, printed as one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from charpin_runner import __version__
from charpin_runner.errors import EXIT_INTERRUPTED, EXIT_USAGE, CharpinError

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a process killed by it

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors get exit 64 like the rest."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CharpinError(f"{message} (see {self.prog} --help)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Return the `charpin-remote` parser; with `command`, only what that command needs.

    `compare` is often run on big receipts in CI: it should not pay for importing the SSH
    pipeline's modules just to build sub-parsers it will never use.
    """
    from charpin_coordinator import compare_cli

    parser = _Parser(
        prog="charpin-remote", description="One snapshot, many boxes, one drift report."
    )
    parser.add_argument("--version", action="version", version=f"charpin-remote {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    compare_cli.add_parsers(sub)
    if command != "compare":
        from charpin_coordinator.remote import cli as remote_cli

        remote_cli.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run `charpin-remote`; return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(args_list[0] if args_list else None)
        args = parser.parse_args(args_list)
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return handler(args)
    except CharpinError as exc:
        print(f"charpin-remote: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("charpin-remote: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (`... | head`): stop quietly, as a killed-by-SIGPIPE process would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
