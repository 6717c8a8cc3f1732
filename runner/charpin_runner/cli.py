"""The `charpin` command (also `python3 charpin-runner.pyz`). Runs on any box; stdlib only.

The only runner module that reads argv, prints and picks exit codes. Each command group lives in
its own `*/cli.py` with an `add_parsers(subparsers)` function; handlers return an exit code or
raise CharpinError, which becomes one line on stderr and its documented exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from charpin_runner import __version__
from charpin_runner.errors import EXIT_INTERRUPTED, EXIT_USAGE, CharpinError

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a process killed by it

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors get exit 64 like the rest."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CharpinError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """Return the full `charpin` parser."""
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and its command parsers by name."""
    from charpin_runner import box_cli, receipt_cli
    from charpin_runner.guard import cli as guard_cli
    from charpin_runner.inventory import cli as inventory_cli
    from charpin_runner.pins import cli as pins_cli

    parser = _Parser(prog="charpin", description="Receipts and pins for messy code.")
    parser.add_argument("--version", action="version", version=f"charpin {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    receipt_cli.add_parsers(sub)
    pins_cli.add_parsers(sub)
    inventory_cli.add_parsers(sub)
    guard_cli.add_parsers(sub)
    box_cli.add_parsers(sub)
    return parser, dict(sub.choices)


def _parse(args_list: list[str]) -> argparse.Namespace:
    """Parse strictly. For a command that passes arguments on (accepts_extra), only what follows
    the first `--` is passed on: a typo like `--lable x` before it is a usage error, never a
    pytest argument."""
    parser, commands = _build()
    command = next((a for a in args_list if not a.startswith("-")), None)
    chosen = commands.get(command) if command is not None else None
    if chosen is not None and chosen.get_default("accepts_extra") and "--" in args_list:
        cut = args_list.index("--")
        args = parser.parse_args(args_list[:cut])
        args.extra = args_list[cut + 1 :]
    else:
        args = parser.parse_args(args_list)
        args.extra = []
    return args


def main(argv: list[str] | None = None) -> int:
    """Run `charpin`; return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parse(args_list)
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            build_parser().print_help(sys.stderr)
            return EXIT_USAGE
        return handler(args)
    except CharpinError as exc:
        print(f"charpin: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("charpin: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (`... | head`): stop quietly, as a killed-by-SIGPIPE process would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
