"""Explicit normalisation of a run's bytes before the exact comparison. Runs on boxes; stdlib only.

Order (documented in the README): rules apply one after another in the order they are listed in
`[tool.charpin.pins] normalise` (default: work, home, repo), each over stdout, then stderr, then
every output file. Path rules are anchored at path boundaries: `/tmp/x/repo` rewrites
`/tmp/x/repo/a` and `/tmp/x/repo` but never `/tmp/x/repository` or `/private/tmp/x/repo`.
Every rule counts its hits; the counts are part of the pin, so a new leak or an over-eager rule
shows up as drift.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from re import Match, Pattern

from charpin_runner.config import NormRule
from charpin_runner.errors import ConfigError

TOKENS = {"work": b"$WORK", "tmp": b"$TMP", "home": b"$HOME", "repo": b"$REPO"}
TIMESTAMP = re.compile(
    rb"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
)
# A path ends where the next byte cannot continue a file name ('.' only when a name follows).
_AFTER = rb"(?![\w~+@-]|\.[\w])"
_BEFORE = rb"(?<![\w.~+@/-])"


@dataclass(frozen=True)
class Places:
    """The concrete paths of one run that path rules turn into tokens."""

    work: str
    tmp: str
    home: str
    repo: str


# The repository path is the same for every pin of a batch; compiling its pattern (and resolving
# its realpath) once instead of once per pin saves a visible share of the per-pin overhead.
@functools.lru_cache(maxsize=64)
def _path_pattern_cached(path: str) -> Pattern[bytes]:
    return _path_pattern([path])


def _path_pattern(paths: list[str]) -> Pattern[bytes]:
    variants = []
    for path in paths:
        for form in {path, os.path.realpath(path)}:
            variants.append(re.escape(form.rstrip("/").encode("utf-8")))
    # Longest first so a path and its realpath never half-match.
    variants.sort(key=len, reverse=True)
    return re.compile(_BEFORE + b"(?:" + b"|".join(variants) + b")" + _AFTER)


def compile_rules(rules: list[NormRule], places: Places) -> list[tuple[str, Pattern[bytes], bytes]]:
    """Turn configured rules into (name, regex, replacement) for one run."""
    out = []
    names = set()
    for index, rule in enumerate(rules):
        where = f"$.tool.charpin.pins.normalise[{index}]"
        if rule.name in names:
            raise ConfigError(
                f"normalisation rule name {rule.name!r} repeats - at `{where}`; rename it"
            )
        names.add(rule.name)
        if rule.kind in TOKENS:
            token = rule.replace.encode("utf-8") if rule.replace else TOKENS[rule.kind]
            path = getattr(places, rule.kind)
            pattern = _path_pattern_cached(path) if rule.kind == "repo" else _path_pattern([path])
            out.append((rule.name, pattern, token))
        elif rule.kind == "timestamp":
            token = rule.replace.encode("utf-8") if rule.replace else b"$TIMESTAMP"
            out.append((rule.name, TIMESTAMP, token))
        else:
            if not rule.pattern:
                raise ConfigError(
                    f"regex rule {rule.name!r} has no pattern - at `{where}`; add one"
                )
            try:
                regex = re.compile(rule.pattern.encode("utf-8"))
            except re.error as exc:
                raise ConfigError(
                    f"bad regex in rule {rule.name!r}: {exc} - at `{where}`"
                ) from None
            out.append((rule.name, regex, (rule.replace or "").encode("utf-8")))
    return out


class _Literal:
    """A replacement callable keeps the token literal (no backslash-group expansion surprises)."""

    def __init__(self, token: bytes) -> None:
        self.token = token

    def __call__(self, _match: Match[bytes]) -> bytes:
        return self.token


def normalise_all(
    rules: list[tuple[str, Pattern[bytes], bytes]], blobs: list[bytes]
) -> tuple[list[bytes], dict[str, int]]:
    """Apply every rule, in order, to every blob; return the new blobs and per-rule hit counts."""
    counts: dict[str, int] = {}
    for name, regex, token in rules:
        total = 0
        literal = _Literal(token)
        for index, blob in enumerate(blobs):
            blobs[index], hits = regex.subn(literal, blob)
            total += hits
        counts[name] = total
    return blobs, counts
