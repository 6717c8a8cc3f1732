"""`charpin-remote completion SHELL`: a shell completion script for charpin-remote or charpin.
Coordinator side; prints. shtab (the `completion` extra) is imported only here, when the script
is made: completion costs nothing at start-up, and the runner on boxes stays stdlib only.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from charpin_runner.errors import EXIT_CLEAN, UsageError

SHELLS = ("bash", "zsh", "tcsh")
PROGRAMS = ("charpin-remote", "charpin")


def add_parsers(sub: Any) -> None:
    """Register `completion`."""
    parser = sub.add_parser(
        "completion",
        exit_codes="0 printed, 64 usage (shtab is not installed: the completion extra)",
        help="print a shell completion script for charpin-remote or charpin",
        description="Print a completion script made from the real parsers by shtab, e.g. "
        "`charpin-remote completion bash > ~/.local/share/bash-completion/completions/"
        "charpin-remote`, or `charpin-remote completion zsh --program charpin > "
        "~/.zfunc/_charpin`. Needs `pip install 'charpin-remote[completion]'`.",
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    parser.add_argument(
        "--program",
        choices=PROGRAMS,
        default="charpin-remote",
        help="the command to complete (default charpin-remote)",
    )
    parser.set_defaults(handler=run_completion)


def run_completion(args: argparse.Namespace) -> int:
    """Print the script for args.program in args.shell."""
    try:
        import shtab
    except ImportError:
        raise UsageError(
            "shell completion needs shtab: pip install 'charpin-remote[completion]' "
            "(or pip install shtab), then run this again"
        ) from None
    if args.program == "charpin":
        from charpin_runner.cli import build_parser as runner_parser

        parser = runner_parser()
    else:
        from charpin_coordinator.cli import build_parser

        parser = build_parser()
    script: str = shtab.complete(parser, shell=args.shell)
    sys.stdout.write(script if script.endswith("\n") else script + "\n")
    return EXIT_CLEAN
