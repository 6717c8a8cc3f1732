"""The `charpin` command (also `python3 charpin-runner.pyz`). Runs on any box; stdlib only.

The only runner module that reads argv, prints and picks exit codes. Each command group lives in
its own `*/cli.py` with an `add_parsers(subparsers)` function; handlers return an exit code or
raise CharpinError, which becomes one line on stderr and its documented exit code.
"""

from __future__ import annotations

import argparse
import importlib

from charpin_runner import __version__
from charpin_runner.climain import Parser, run_main

# Command name -> the module that registers it. Only the module of the command being run is
# imported: `charpin receipt` on a box should not pay for compiling the guard and the inventory.
_COMMANDS = {
    "receipt": "charpin_runner.receipt_cli",
    "pins": "charpin_runner.pins.cli",
    "import": "charpin_runner.import_cli",
    "inventory": "charpin_runner.inventory.cli",
    "guard": "charpin_runner.guard.cli",
    "ledger": "charpin_runner.ledger_cli",
    "box": "charpin_runner.box_cli",
}


def build_parser() -> argparse.ArgumentParser:
    """Return the full `charpin` parser."""
    return _build(None)[0]


def _build(
    command: str | None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser (every command, or only `command` when it is one) and its command parsers."""
    parser = Parser(
        prog="charpin",
        description="Receipts and pins for messy code.",
        exit_codes="0 ok; 1 tests failed, 2 drift or refused, 4 could not run, 8 integrity, "
        "16 no tests; 64 usage or configuration error, 130 interrupted; each command's --help says which apply",
    )
    parser.add_argument("--version", action="version", version=f"charpin {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    wanted = [command] if command in _COMMANDS else list(_COMMANDS)
    for name in wanted:
        importlib.import_module(_COMMANDS[str(name)]).add_parsers(sub)
    return parser, dict(sub.choices)


def _parse(args_list: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """Parse strictly. For a command that passes arguments on (accepts_extra), only what follows
    the first `--` is passed on: a typo like `--lable x` before it is a usage error, never a
    pytest argument."""
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser, commands = _build(command)
    chosen = commands.get(command) if command is not None else None
    if chosen is not None and chosen.get_default("accepts_extra") and "--" in args_list:
        cut = args_list.index("--")
        args = parser.parse_args(args_list[:cut])
        args.extra = args_list[cut + 1 :]
    else:
        args = parser.parse_args(args_list)
        args.extra = []
    return parser, args


def main(argv: list[str] | None = None) -> int:
    """Run `charpin`; return the exit code."""
    return run_main("charpin", _parse, argv)
