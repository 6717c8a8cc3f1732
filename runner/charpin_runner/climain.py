"""The one `main` behind both commands, `charpin` and `charpin-remote`. Runs everywhere; stdlib only.

Each command brings its parser; this module runs the handler the parser picked and turns every
way out into a documented exit code: the handler's own bitmask, CharpinError as one line on
stderr and its code, Ctrl-C as 130, a reader that left the pipe as 141, no command as 64.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional

from charpin_runner.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CharpinError,
)

Handler = Callable[[argparse.Namespace], int]


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors get exit 64 like the rest.

    exit_codes: the command's exit codes, said once; --help ends with "Exit codes: ..." (every
    command has one: tests/test_cli_conventions.py walks every --help)."""

    def __init__(self, *args: Any, exit_codes: Optional[str] = None, **kwargs: Any) -> None:
        if exit_codes is not None:
            kwargs["epilog"] = f"Exit codes: {exit_codes}."
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CharpinError(f"{message} (see {self.prog} --help)")


def run_main(
    prog: str,
    parse: Callable[[list[str]], tuple[argparse.ArgumentParser, argparse.Namespace]],
    argv: Optional[list[str]],
) -> int:
    """Parse argv (sys.argv[1:] by default) with parse, run the chosen handler, return its code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        parser, args = parse(args_list)
        handler: Optional[Handler] = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return handler(args)
    except CharpinError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader left (`... | head`): stop quietly, as a killed-by-SIGPIPE process would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
