r"""cram and prysk `.t` files, read exactly as cram's `_test.test()` reads them. Stdlib only.

The format (cram's README, prysk's README): lines starting with the indent (two spaces) and
`$ ` are shell commands, the indent and `> ` continues the previous command, any other line
starting with the indent is expected output, everything else is a comment. Expected output
lines may end in ` (re)` (a Python regular expression, whole line), ` (glob)` (`*` and `?`,
backslash escapes), ` (esc)` (escaped bytes) or ` (no-eol)` (no final newline); `[N]` is a
non-zero exit status of the command before. A pattern line is first compared literally.

How cram runs a file, and how the imported pin does the same: the commands are fed on stdin to
one `/bin/sh -` whose stdout and stderr are a single pipe (merge_stderr), each command preceded
by `echo SALT LINE $?` so the output can be split per command with its exit status (cram salts
with the time; the pin uses a fixed salt, so its golden is stable). The shell runs in a fresh
folder named after the file; cram's variables are set: LANG, LC_ALL, LANGUAGE=C, TZ=GMT,
CDPATH and GREP_OPTIONS empty, COLUMNS=80, TESTSHELL=/bin/sh, TESTFILE, TESTDIR (the file's
folder in the checkout being replayed, found from the pins' PYTHONPATH, whose first entry is a
repository folder), CRAMTMP (prysk: PRYSK_TEMP) and TMPDIR=TEMP=TMP=$CRAMTMP/tmp. A test that
exits 80 is skipped by cram and not imported.

One verification run settles each file: its output is turned back into a `.t` as cram does
(indent, escaping, `(no-eol)`, `[N]`, and for prysk `$TMPDIR` for the temporary folder) and
must match the file line for line under cram's matchers. The golden is then that run's merged
stream: exact lines are what the file says, and each (re)/(glob) line becomes the exact text
the unchanged program printed there (its tolerance is not carried over).
"""

from __future__ import annotations

import codecs
import difflib
import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from charpin_runner.config import NormRule, PinsConfig
from charpin_runner.errors import UsageError
from charpin_runner.pins.cramview import SALT
from charpin_runner.pins.execute import Run
from charpin_runner.pins.imports.common import (
    DETAIL_CAP,
    Draft,
    Plan,
    Settled,
    pin_id,
    repo_relative,
)
from charpin_runner.pins.model import Case
from charpin_runner.pins.targets import pythonpath_dirs

SHELL = "/bin/sh"
SKIP_STATUS = 80
# The temporary folder cram makes in its CRAMTMP (TMPDIR, TEMP and TMP point there).
TMP_NAME = "tmp"

# cram's own escaping (cram/_test.py).
_needescape = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f-\xff]").search
_escapesub = re.compile(rb"[\x00-\x09\x0b-\x1f\\\x7f-\xff]").sub
_escapemap = {bytes([i]): rb"\x%02x" % i for i in range(256)}
_escapemap.update({b"\\": b"\\\\", b"\r": rb"\r", b"\t": rb"\t"})


def _cram_escape(s: bytes) -> bytes:
    return _escapesub(lambda m: _escapemap[m.group(0)], s[:-1]) + b" (esc)\n"


def _esc_unicode_c(c: str) -> bytes:
    if c == "\\":
        return b"\\\\"
    if c.isprintable():
        return c.encode()
    return c.encode("unicode_escape")


def _prysk_escape(b: bytes) -> bytes:
    """prysk's _escape_utf8: escape what is not printable UTF-8, suffix ` (esc)`."""
    ret: list[bytes] = []
    rest: Optional[bytes] = b
    while rest:
        try:
            s = rest.decode()
        except UnicodeDecodeError as e:
            s = rest[: e.start].decode()
            ret.extend(_esc_unicode_c(c) for c in s)
            ret.append(rest[e.start : e.end].decode("latin1").encode("unicode_escape"))
            rest = rest[e.end :]
        else:
            if not ret and s.isprintable():
                return rest
            ret.extend(_esc_unicode_c(c) for c in s)
            rest = None
    return b"".join(ret) + b" (esc)" if ret else b""


@dataclass(frozen=True)
class Dialect:
    """What differs between cram and prysk when a run is turned back into a `.t`."""

    name: str
    temp_var: str
    prysk: bool
    # The folder the tool makes for its tests (tempfile.mkdtemp's prefix, then random letters;
    # the pin's is fixed): a `.t` may match its name, as cram's env.t does (`*/cramtests*`).
    temp_name: str


DIALECTS = {
    "cram": Dialect("cram", "CRAMTMP", prysk=False, temp_name="cramtests-charpin"),
    "prysk": Dialect("prysk", "PRYSK_TEMP", prysk=True, temp_name="prysk-tests-charpin"),
}


# cram's matchers (cram/_diff.py; prysk's are the same).
def _regex(pattern: bytes, s: bytes) -> bool:
    try:
        return re.match(pattern + rb"\Z", s) is not None
    except re.error:
        return False


def _glob(el: bytes, line: bytes) -> bool:
    i, n = 0, len(el)
    res = b""
    while i < n:
        c = el[i : i + 1]
        i += 1
        if c == b"\\" and i < n and el[i : i + 1] in (b"*", b"?", b"\\"):
            res += el[i - 1 : i + 1]
            i += 1
        elif c == b"*":
            res += b".*"
        elif c == b"?":
            res += b"."
        else:
            res += re.escape(c)
    return _regex(res, line)


def _annotated(
    keyword: bytes, match: Callable[[bytes, bytes], bool], el: bytes, line: bytes
) -> bool:
    ann = b" (%s)\n" % keyword
    return el.endswith(ann) and match(el[: -len(ann)], line[:-1])


def _esc(el: bytes, line: bytes) -> bool:
    ann = b" (esc)\n"
    if el.endswith(ann):
        el = codecs.escape_decode(el[: -len(ann)])[0] + b"\n"
    if el == line:
        return True
    if line.endswith(ann):
        line = codecs.escape_decode(line[: -len(ann)])[0] + b"\n"
    return el == line


def line_matches(el: bytes, line: bytes) -> bool:
    """Whether expected line el matches actual line, as cram's diff decides."""
    return (
        el == line
        or _esc(el, line)
        or _annotated(b"glob", _glob, el, line)
        or _annotated(b"re", _regex, el, line)
    )


@dataclass(frozen=True)
class Parsed:
    """A `.t` file as cram reads it: its lines, comment placement, and the shell's stdin."""

    refout: list[bytes]
    after: dict[int, list[bytes]]
    script: bytes
    commands: int


def parse(lines: list[bytes], indent: int) -> Parsed:
    """cram's test(): the reference lines, the lines after each command, the shell's input."""
    pad = b" " * indent
    cmdline, conline = pad + b"$ ", pad + b"> "
    after: dict[int, list[bytes]] = {}
    refout: list[bytes] = []
    i = pos = prepos = -1
    stdin: list[bytes] = []
    commands = 0
    for i, raw in enumerate(lines):
        line = raw if raw.endswith(b"\n") else raw + b"\n"
        refout.append(line)
        if line.startswith(cmdline):
            after.setdefault(pos, []).append(line)
            prepos = pos
            pos = i
            stdin.append(b"echo %s %d $?\n" % (SALT, i))
            stdin.append(line[len(cmdline) :])
            commands += 1
        elif line.startswith(conline):
            after.setdefault(prepos, []).append(line)
            stdin.append(line[len(conline) :])
        elif not line.startswith(pad):
            after.setdefault(pos, []).append(line)
    stdin.append(b"echo %s %d $?\n" % (SALT, i + 1))
    return Parsed(refout, after, b"".join(stdin), commands)


def postout(
    output: bytes, parsed: Parsed, indent: int, dialect: Dialect, tmpdir: bytes
) -> list[bytes]:
    """The run's output turned back into a `.t`, as cram (or prysk) writes `.t.err`."""
    pad = b" " * indent
    after = {k: list(v) for k, v in parsed.after.items()}
    post: list[bytes] = []
    pos = -1
    for line in output[:-1].splitlines(True):
        out, cmd = line, b""
        if SALT in line:
            out, cmd = line.split(SALT, 1)
        if out:
            if dialect.prysk:
                out = out[:-1] if out.endswith(b"\n") else out + b" (no-eol)"
                out = _prysk_escape(out)
                if tmpdir:
                    out = re.sub(re.escape(tmpdir), b"$TMPDIR", out)
                post.append(pad + out + b"\n")
            else:
                if not out.endswith(b"\n"):
                    out += b" (no-eol)\n"
                if _needescape(out):
                    out = _cram_escape(out)
                post.append(pad + out)
        if cmd:
            words = cmd.split()
            ret = int(words[1])
            if ret != 0:
                post.append(pad + b"[%d]\n" % ret)
            post += after.pop(pos, [])
            pos = int(words[0])
    post += after.pop(pos, [])
    return post


class _Matcher(difflib.SequenceMatcher):  # type: ignore[type-arg]
    """cram's _SequenceMatcher: an expected line that matches its actual line counts as equal,
    so a diff shows only real mismatches (and keeps the pattern as written)."""

    a: list[bytes]
    b: list[bytes]

    def find_longest_match(
        self, alo: int = 0, ahi: Optional[int] = None, blo: int = 0, bhi: Optional[int] = None
    ) -> Any:
        ahi = len(self.a) if ahi is None else ahi
        bhi = len(self.b) if bhi is None else bhi
        swapped = []
        for n, (el, line) in enumerate(zip(self.a[alo:ahi], self.b[blo:bhi])):
            if el != line and line_matches(el, line):
                self.a[alo + n] = line
                swapped.append((n, el))
        found = super().find_longest_match(alo, ahi, blo, bhi)
        for n, el in swapped:
            self.a[alo + n] = el
        return found


def unified_diff(refout: list[bytes], post: list[bytes], rel: str) -> list[str]:
    """The diff cram prints (`--- FILE`, `+++ FILE.err`), decoded for display."""
    a = [x.decode("utf-8", "backslashreplace") for x in refout]
    b = [x.decode("utf-8", "backslashreplace") for x in post]
    raw_a, raw_b = list(refout), list(post)
    matcher = _Matcher(None, raw_a, raw_b)
    out = [f"--- {rel}", f"+++ {rel}.err"]
    for group in matcher.get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out.extend(" " + line.rstrip("\n") for line in a[a1:a2])
                continue
            out.extend("-" + line.rstrip("\n") for line in a[a1:a2])
            out.extend("+" + line.rstrip("\n") for line in b[b1:b2])
    return out


def passes(refout: list[bytes], post: list[bytes]) -> bool:
    return len(refout) == len(post) and all(line_matches(e, a) for e, a in zip(refout, post))


def _prologue(
    repo: Path, config: PinsConfig, test: Path, dialect: Dialect, mentions_testdir: bool
) -> bytes:
    """Shell lines run before the first command: cram's per-test variables and folders."""
    dirs = pythonpath_dirs(repo, config.pythonpath)
    lines = []
    if dirs:
        rel = os.path.relpath(test.parent.resolve(), dirs[0])
        if rel == ".":
            lines.append('TESTDIR="${PYTHONPATH%%:*}"')
        elif rel.startswith(".."):
            lines.append(
                f'TESTDIR=$(CDPATH= cd -- "${{PYTHONPATH%%:*}}"/{shlex.quote(rel)} && pwd)'
            )
        else:
            lines.append(f'TESTDIR="${{PYTHONPATH%%:*}}"/{shlex.quote(rel)}')
    elif mentions_testdir:
        raise UsageError(
            f"{test.name} uses TESTDIR, which the pin finds from its PYTHONPATH; "
            "[tool.charpin.pins] pythonpath is empty: give it a repository folder"
        )
    temp = dialect.temp_var
    lines += [
        f'{temp}="${{PWD%/*}}"',
        f'TMPDIR="${temp}/{TMP_NAME}"',
        'TEMP="$TMPDIR"',
        'TMP="$TMPDIR"',
        f"export {'TESTDIR ' if dirs else ''}{temp} TMPDIR TEMP TMP",
        'mkdir -p "$TMPDIR"',
    ]
    return "".join(line + "\n" for line in lines).encode()


def cram_env(test: Path) -> dict[str, str]:
    """The variables cram (and prysk) set for every test, besides the folders."""
    return {
        "LANG": "C",
        "LC_ALL": "C",
        "LANGUAGE": "C",
        "TZ": "GMT",
        "CDPATH": "",
        "COLUMNS": "80",
        "GREP_OPTIONS": "",
        "TESTSHELL": SHELL,
        "TESTFILE": test.name,
    }


def kept_and_lost(dialect: Dialect, output: str) -> tuple[list[str], list[str]]:
    kept = [
        f"every command and continuation line, fed on stdin to one {SHELL} session as "
        f"{dialect.name} feeds it; the expected output, [N] exit statuses, (esc) and (no-eol) "
        "lines, byte for byte",
        f"the variables {dialect.name} sets (TESTDIR, TESTFILE, TESTSHELL, {dialect.temp_var}, "
        "TMPDIR/TEMP/TMP, LANG/LC_ALL/LANGUAGE=C, TZ=GMT, CDPATH, COLUMNS=80, GREP_OPTIONS)",
        f"stdout and stderr as one interleaved stream (merge_stderr), as {dialect.name} "
        "captures them",
    ]
    temp = f"{output}/{dialect.temp_name}"
    lost = [
        "which line went to stderr: the merged stream cannot be split",
        "(re) and (glob) tolerance: each such line is pinned to the exact text the unchanged "
        "program prints (checked against the pattern), so a value that changes between runs "
        "replays red",
        f"the rest of your shell's environment ({dialect.name} passes it through); "
        "--preserve-env, --shell and --shell-opts are not emulated (always /bin/sh)",
        f"the test's folder is {temp}/<file>.t in the pin's work folder ({dialect.temp_var} "
        f"is {temp}/): files a test leaves there are now checked as output files",
    ]
    if dialect.prysk:
        lost.append(
            f"prysk writes the temporary folder as $TMPDIR in output: the golden holds it as "
            f"$WORK/{temp}/{TMP_NAME} (charpin's `work` normalisation)"
        )
    return kept, lost


def plan(
    repo: Path,
    config: PinsConfig,
    files: Iterable[Path],
    dialect_name: str = "cram",
    indent: int = 2,
    prefix: str = "",
) -> Plan:
    """One pin per `.t` file (a file is one shell session, so it cannot be split)."""
    dialect = DIALECTS[dialect_name]
    kept, lost = kept_and_lost(dialect, config.output)
    # Each file is its own shell session, so one bad file does not stop the others; the
    # source's patterns are matched against what the program printed, before normalisation
    # (prysk keeps the work path rule: it writes the temporary folder as $TMPDIR).
    raw = [NormRule(name="work", kind="work")] if dialect.prysk else []
    result = Plan(
        f"{dialect.name} .t", [], kept=kept, lost=lost, partial=True, raw_normalise=raw
    )
    for test in files:
        rel = repo_relative(repo, test, "test file")
        try:
            data = test.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {rel}: {exc.strerror}") from None
        if not data:
            result.skipped.append(f"{rel}: empty ({dialect.name} skips an empty test)")
            continue
        parsed = parse(data.splitlines(True), indent)
        prologue = _prologue(repo, config, test, dialect, b"TESTDIR" in data)
        case = Case(
            id=pin_id(prefix, rel[:-2] if rel.endswith(".t") else rel),
            argv=(SHELL, "-"),
            env=cram_env(test),
            stdin=prologue + parsed.script,
            cwd_rel=f"{config.output}/{dialect.temp_name}/{test.name}",
            origin=rel,
            merge_stderr=True,
        )
        tmpdir = f"$WORK/{config.output}/{dialect.temp_name}/{TMP_NAME}".encode()
        check = _raw_checker(parsed, rel, indent, dialect, tmpdir)
        settle = _settler(parsed, indent, dialect, tmpdir, rel)
        result.drafts.append(Draft(case, rel, settle, check_raw=check))
    return result


def _raw_checker(
    parsed: Parsed, rel: str, indent: int, dialect: Dialect, tmpdir: bytes
) -> Callable[[Run], Optional[Settled]]:
    """The file's expectation under its tool's rules, on the run made without charpin's
    normalisation (what the program printed): a skip, the refusal with the tool's diff, or
    None (it passes)."""

    def check(run: Run) -> Optional[Settled]:
        obs = run.observation
        if obs.exit_code == SKIP_STATUS:
            return Settled(skip=f"{dialect.name} skips this test here (it exits {SKIP_STATUS})")
        post = postout(obs.stdout, parsed, indent, dialect, tmpdir)
        if passes(parsed.refout, post):
            return None
        diff = unified_diff(parsed.refout, post, rel)
        if len(diff) > DETAIL_CAP:
            diff = [*diff[:DETAIL_CAP], f"... {len(diff) - DETAIL_CAP} more diff lines"]
        return Settled(
            problems=[
                f"{rel}: the unchanged program does not pass this test under "
                f"{dialect.name}'s rules in a pin's environment; the test as it ran:",
                *(f"  {line}" for line in diff),
            ]
        )

    return check


def _settler(
    parsed: Parsed, indent: int, dialect: Dialect, tmpdir: bytes, rel: str
) -> Callable[[Run], Settled]:
    def settle(run: Run) -> Settled:
        obs = run.observation
        if obs.exit_code == SKIP_STATUS:
            return Settled(skip=f"{dialect.name} skips this test here (it exits {SKIP_STATUS})")
        post = postout(obs.stdout, parsed, indent, dialect, tmpdir)
        resolved = sum(
            1
            for want, got in zip(parsed.refout, post)
            if want != got and (want.endswith((b" (re)\n", b" (glob)\n")))
        )
        notes = []
        if resolved:
            notes.append(
                f"{rel}: {resolved} (re)/(glob) line(s) pinned to the exact text printed now"
                " (after normalisation)"
            )
        if len(post) != len(parsed.refout):
            notes.append(f"{rel}: normalisation changed the number of lines cram compares")
        if parsed.commands == 0:
            notes.append(f"{rel}: no `$ ` command; the pin checks an empty session")
        return Settled(golden=obs, notes=notes)

    return settle
