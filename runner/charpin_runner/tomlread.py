"""TOML for the runner: tomllib on Python 3.11+, else tomli when installed. Runs on boxes.

The runner is stdlib only, and below 3.11 the stdlib reads no TOML; the charpin-runner
distribution depends on tomli there (runner/pyproject.toml). tomli is imported here and only
when a file is read, so importing any runner module never needs more than the stdlib (a zipapp
on a bare 3.9 box still runs: without a parser, loads raises ImportError and callers fall back).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

Loads = Callable[[str], dict[str, Any]]


def available() -> bool:
    """Whether this Python can read TOML (tomllib, or tomli below 3.11)."""
    return _loads() is not None


def loads(text: str) -> dict[str, Any]:
    """Parse TOML text. Raises ImportError without a parser and ValueError for bad TOML (both
    parsers' TOMLDecodeError is a ValueError)."""
    parse = _loads()
    if parse is None:
        raise ImportError("no TOML parser: Python < 3.11 without tomli")
    return parse(text)


@functools.cache
def _loads() -> Optional[Loads]:
    try:
        import tomllib  # novermin - Python >= 3.11; below it tomli, or no parser at all

        return tomllib.loads
    except ImportError:  # pragma: no cover - Python < 3.11
        pass
    try:
        import tomli  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    parse: Loads = tomli.loads
    return parse
