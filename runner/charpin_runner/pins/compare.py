"""Compare a golden observation with a replay, byte for byte, and classify the drift. Stdlib only.

Nothing is decoded on the comparison path; text is decoded only to render diffs. A hash-only
golden stream (Observation.hashed, an imported golden that kept only a sha256) is compared by the
digest of the actual stream, and its drift detail says there is no text to diff.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from typing import Callable, Optional

from charpin_runner.pins.model import Observation

EXIT_CODE = "exit-code"
STDOUT = "stdout"
STDERR = "stderr"
WHITESPACE = "whitespace"
FILE_SET = "file-set"
FILE_CONTENT = "file-content"
FILE_MODE = "file-mode"
ENV_READ = "env-read"
NORMALISATION_COUNT = "normalisation-count"
WRITE_OUTSIDE = "write-outside-output"
TIMEOUT = "timeout"
# A stream or the output files went over execute.STREAM_LIMIT / FILES_LIMIT.
OUTPUT_LIMIT = "output-limit"
ERROR = "error"

# Most specific first: the primary class of a failure is the first of these that applies.
PRIORITY = (
    ERROR,
    TIMEOUT,
    OUTPUT_LIMIT,
    WRITE_OUTSIDE,
    EXIT_CODE,
    FILE_SET,
    ENV_READ,
    NORMALISATION_COUNT,
    STDOUT,
    STDERR,
    WHITESPACE,
    FILE_CONTENT,
    FILE_MODE,
)

_SPACE = re.compile(rb"\s+")

Comparator = Callable[[Observation, Observation], list[str]]


def primary(classes: list[str]) -> Optional[str]:
    """The most specific class of a failure, or None when there is none."""
    for name in PRIORITY:
        if name in classes:
            return name
    return None


def _stream_class(golden: bytes, actual: bytes, name: str) -> Optional[str]:
    if golden == actual:
        return None
    if _SPACE.sub(b"", golden) == _SPACE.sub(b"", actual):
        return WHITESPACE
    return name


def compare(golden: Observation, actual: Observation, modes: bool = True) -> list[str]:
    """Every failure class that applies, in PRIORITY order; empty means identical."""
    found = set()
    if golden.exit_code != actual.exit_code:
        found.add(EXIT_CODE)
    for name, want, got in (
        (STDOUT, golden.stdout, actual.stdout),
        (STDERR, golden.stderr, actual.stderr),
    ):
        if name in golden.hashed:
            if _digest(got) != want:
                found.add(name)
            continue
        kind = _stream_class(want, got, name)
        if kind is not None:
            found.add(kind)
    if set(golden.files) != set(actual.files):
        found.add(FILE_SET)
    for path in set(golden.files) & set(actual.files):
        if golden.files[path].sha256 != actual.files[path].sha256:
            found.add(FILE_CONTENT)
        if modes and golden.files[path].mode != actual.files[path].mode:
            found.add(FILE_MODE)
    if new_env_reads(golden, actual):
        found.add(ENV_READ)
    if golden.norm_counts != actual.norm_counts:
        found.add(NORMALISATION_COUNT)
    return [name for name in PRIORITY if name in found]


def new_env_reads(golden: Observation, actual: Observation) -> bool:
    """Whether actual depends on input the golden did not: it reads an env key the golden's run
    did not read (or became observable where it was not, or the other way round). Reading
    fewer keys is no new input: two independent checks swapped, a lookup chain that stops
    earlier, give the same bytes in the recorded environment (fewer_env_reads says which)."""
    if golden.env_read is None or actual.env_read is None:
        return golden.env_read != actual.env_read
    return not set(actual.env_read) <= set(golden.env_read)


def fewer_env_reads(golden: Observation, actual: Observation) -> list[str]:
    """The env keys the golden's run read that actual no longer reads (not drift)."""
    if golden.env_read is None or actual.env_read is None:
        return []
    return sorted(set(golden.env_read) - set(actual.env_read))


def _digest(data: bytes) -> bytes:
    """The sha256 hex digest a hash-only golden stream holds, as ASCII bytes."""
    return hashlib.sha256(data).hexdigest().encode("ascii")


def _lines(data: bytes) -> list[str]:
    text = data.decode("utf-8", "backslashreplace")
    lines = text.splitlines(keepends=True)
    # Make a missing final newline visible, as diff(1) does.
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


# Trailing whitespace on a changed line is shown, as `git diff --ws-error-highlight=all` shows
# it, with the Unicode control pictures: a diff that only adds a space must not look empty.
_PICTURES = {" ": "\u2420", "\t": "\u2409", "\r": "\u240d", "\x0b": "\u240b", "\x0c": "\u240c"}
WHITESPACE_LEGEND = (
    "(trailing whitespace shown as \u2420 space, \u2409 tab, \u240d carriage return)"
)


def mark_trailing(line: str) -> str:
    """A diff line (tag first) with the trailing whitespace of its text spelled visibly."""
    body = line[:1] + line[1:].rstrip()
    if body == line:
        return line
    return body + "".join(_PICTURES.get(c, f"\\u{ord(c):04x}") for c in line[len(body) :])


def mark_changed_lines(lines: list[str]) -> list[str]:
    """A unified diff's lines with trailing whitespace made visible on removed and added lines
    (not on context lines or the ---/+++ headers before the first hunk), and a legend line
    after them when any was."""
    out = []
    in_hunks = False
    for line in lines:
        in_hunks = in_hunks or line.startswith("@@")
        out.append(mark_trailing(line) if in_hunks and line[:1] in ("-", "+") else line)
    if out != lines:
        out.append(WHITESPACE_LEGEND)
    return out


def unified(golden: bytes, actual: bytes, label: str, cap: int) -> list[str]:
    """A unified diff of two byte streams, capped at cap lines; trailing whitespace on changed
    lines made visible, and a missing final newline said as diff(1) says it."""
    out = []
    for line in difflib.unified_diff(
        _lines(golden), _lines(actual), f"golden/{label}", f"actual/{label}"
    ):
        out.extend(line.rstrip("\n").split("\n"))
    if len(out) > cap:
        hidden = len(out) - cap
        out = [*out[:cap], f"... {hidden} more diff lines (see the actual outputs folder)"]
    return mark_changed_lines(out)


def describe(golden: Observation, actual: Observation, cap: int) -> list[str]:
    """Human-readable detail lines for a drift: exit code, stream diffs, file set and content."""
    lines: list[str] = []
    if golden.exit_code != actual.exit_code:
        lines.append(f"exit code: golden {golden.exit_code}, actual {actual.exit_code}")
    for label, want, got in (
        ("stdout", golden.stdout, actual.stdout),
        ("stderr", golden.stderr, actual.stderr),
    ):
        if label in golden.hashed:
            digest = _digest(got)
            if digest != want:
                lines.append(
                    f"{label}: hash-only golden: no text to diff (golden sha256 "
                    f"{want.decode('ascii')[:12]}, actual {digest.decode('ascii')[:12]}, "
                    f"{len(got)} bytes; see the actual outputs folder)"
                )
        elif want != got:
            lines.extend(unified(want, got, label, cap))
    added = sorted(set(actual.files) - set(golden.files))
    missing = sorted(set(golden.files) - set(actual.files))
    for path in added:
        lines.append(f"new file: {path}")
    for path in missing:
        lines.append(f"missing file: {path}")
    for path in sorted(set(golden.files) & set(actual.files)):
        want_file, got_file = golden.files[path], actual.files[path]
        if want_file.mode != got_file.mode:
            lines.append(f"mode of {path}: golden {want_file.mode:o}, actual {got_file.mode:o}")
        if want_file.sha256 != got_file.sha256:
            lines.append(
                f"changed file: {path} sha256 {want_file.sha256[:12]} -> {got_file.sha256[:12]}"
            )
            if want_file.text is not None and got_file.text is not None:
                lines.extend(
                    unified(want_file.text.encode(), got_file.text.encode(), f"out/{path}", cap)
                )
    if golden.env_read != actual.env_read:
        want_keys = set(golden.env_read or [])
        got_keys = set(actual.env_read or [])
        lines.append(
            "env keys read: "
            f"new {sorted(got_keys - want_keys)}, no longer read {sorted(want_keys - got_keys)}"
        )
    if golden.norm_counts != actual.norm_counts:
        for name in sorted(set(golden.norm_counts) | set(actual.norm_counts)):
            want_n, got_n = golden.norm_counts.get(name, 0), actual.norm_counts.get(name, 0)
            if want_n != got_n:
                lines.append(f"normalisation rule {name!r}: {want_n} hits recorded, {got_n} now")
    return lines
