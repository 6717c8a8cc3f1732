"""When to colour output and how wide it is: `--color auto|always|never`, NO_COLOR, FORCE_COLOR,
the terminal's width. Runs everywhere; stdlib only. Used by the CLIs of both commands.

The order is pytest's and https://no-color.org's: an explicit --color always/never wins; then
NO_COLOR (set and not empty) turns colour off; then FORCE_COLOR (set and not empty) turns it on;
otherwise colour goes to a terminal whose TERM is not "dumb".
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Mapping
from typing import IO, Any, Optional

CHOICES = ("auto", "always", "never")
DEFAULT_WIDTH = 120  # not a terminal and no COLUMNS: the width the report always had

_CODES = {"red": "31", "green": "32", "yellow": "33", "bold": "1"}


def add_color_option(parser: argparse.ArgumentParser) -> None:
    """The one --color flag every reporting command takes."""
    parser.add_argument(
        "--color",
        choices=CHOICES,
        default="auto",
        help="colour the report: auto (on a terminal; NO_COLOR turns it off, FORCE_COLOR on), "
        "always, never (default auto)",
    )


def wanted(choice: str, stream: IO[Any], environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether to colour what goes to stream under --color choice."""
    env = os.environ if environ is None else environ
    if choice == "always":
        return True
    if choice == "never":
        return False
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or foreign stream
        tty = False
    return tty and env.get("TERM") != "dumb"


def paint(text: str, style: str, on: bool) -> str:
    """text in an ANSI style (red, green, yellow, bold) when on, else text as it is."""
    return f"\x1b[{_CODES[style]}m{text}\x1b[0m" if on else text


def width() -> int:
    """The terminal's width (COLUMNS first, as shutil reads it), else DEFAULT_WIDTH."""
    return max(40, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)
