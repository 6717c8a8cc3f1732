"""`charpin import cram`: `.t` files from cram's and prysk's own documentation, imported green,
then turned red by a behaviour edit. The matchers are checked against cram's own doctests."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from charpin_runner.pins.imports import cram
from pins_helpers import Runner, edit

# cram's README points at "its own example tests" (examples/test.t); this is that file's text,
# every annotation the README lists: (re), (glob), literal lines ending in them, [N], stderr,
# (no-eol), (esc).
CRAM_EXAMPLE = r"""Simple commands:

  $ echo foo
  foo
  $ printf 'bar\nbaz\n' | cat
  bar
  baz

Multi-line command:

  $ foo() {
  >     echo bar
  > }
  $ foo
  bar

Regular expression:

  $ echo foobarbaz
  foobar.* (re)

Glob:

  $ printf '* \\foobarbaz {10}\n'
  \* \\fo?bar* {10} (glob)

Literal match ending in (re) and (glob):

  $ echo 'foo\Z\Z\Z bar (re)'
  foo\Z\Z\Z bar (re)
  $ echo 'baz??? quux (glob)'
  baz??? quux (glob)

Exit code:

  $ (exit 1)
  [1]

Write to stderr:

  $ echo foo >&2
  foo

No newline:

  $ printf foo
  foo (no-eol)
  $ printf 'foo\nbar'
  foo
  bar (no-eol)
  $ printf '  '
     (no-eol)
  $ printf '  \n  '
<FOUR SPACES>
     (no-eol)
  $ echo foo
  foo
  $ printf foo
  foo (no-eol)

Escaped output:

  $ printf '\00\01\02\03\04\05\06\07\010\011\013\014\016\017\020\021\022\n'
  \x00\x01\x02\x03\x04\x05\x06\x07\x08\t\x0b\x0c\x0e\x0f\x10\x11\x12 (esc)
  $ printf '\023\024\025\026\027\030\031\032\033\034\035\036\037\040\047\n'
  \x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ' (esc)
  $ echo hi
  \x68\x69 (esc)
  $ echo '(esc) in output (esc)'
  (esc) in output (esc)
  $ echo '(esc) in output (esc)'
  (esc) in output \x28esc\x29 (esc)

Command that closes a pipe:

  $ cat /dev/urandom | head -1 > /dev/null

If Cram let Python's SIGPIPE handler get inherited by this script, we
might see broken pipe messages.
""".replace("<FOUR SPACES>", " " * 4)  # the expected line is the indent and two spaces

# cram's examples/skip.t and examples/missingeol.t (the file ends without a newline).
CRAM_SKIP = (
    'This test is considered "skipped" because it exits with return code\n80.\n\n  $ exit 80\n'
)
CRAM_MISSINGEOL = "  $ printf foo\n  foo (no-eol)"

# prysk's "Create your first test" (docs/getting_started.rst), after `prysk -i` accepted it.
PRYSK_FIRST = 'This is a comment\n\n  $ echo "foo bar"\n  foo bar\n'

# A messy program and a test in the README's own style: commands, output, an exit status, a
# pattern for a value that depends on the input, output on stderr, $TESTDIR to reach the code.
TALLY = """\
import sys
total = 0
for line in sys.stdin:
    total += int(line)
print("total", total)
print("lines read", file=sys.stderr)
sys.exit(0 if total < 10 else 3)
"""
TALLY_T = """\
The tally sums stdin; stderr says it read (unbuffered, so before the buffered total), a total
of ten or more exits 3:

  $ printf '1\\n2\\n' | python3 "$TESTDIR/../tally.py"
  lines read
  total 3
  $ printf '7\\n8\\n' | python3 "$TESTDIR/../tally.py"
  lines read
  total \\d+ (re)
  [3]
  $ echo "$TESTFILE in $(basename "$PWD")"
  tally.t in tally.t
"""


def _write(repo: Path, rel: str, text: str) -> Path:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


def test_cram_example_tests_import_green(repo: Path, charpin: Runner) -> None:
    _write(repo, "tests/cram/test.t", CRAM_EXAMPLE)
    _write(repo, "tests/cram/missingeol.t", CRAM_MISSINGEOL)
    _write(repo, "tests/cram/skip.t", CRAM_SKIP)
    _write(repo, "tests/cram/empty.t", "")
    code, out, err = charpin("import", "cram", "--repo", str(repo), str(repo / "tests" / "cram"))
    assert code == 0, out + err
    assert "imported tests.cram.test" not in out  # ids use '-', not '.'
    assert "imported tests-cram-test" in out
    assert "imported tests-cram-missingeol" in out
    assert "not imported: tests/cram/skip.t: cram skips this test here (it exits 80)" in out
    assert "not imported: tests/cram/empty.t: empty" in out
    assert "2 (re)/(glob) line(s) pinned to the exact text printed now" in out
    assert "not carried over: which line went to stderr" in out
    pins = [json.loads(x) for x in (repo / "pins.jsonl").read_text().splitlines()]
    test_pin = next(p for p in pins if p["id"] == "tests-cram-test")
    assert test_pin["argv"] == ["/bin/sh", "-"]
    assert test_pin["merge_stderr"] is True
    assert test_pin["stderr"] == ""
    assert test_pin["env"]["LANG"] == "C" and test_pin["env"]["TZ"] == "GMT"
    # The merged stream holds what went to stderr, in place: `echo foo >&2`.
    assert "\nfoo\n" in test_pin["stdout"]
    assert charpin("pins", "check", "--repo", str(repo))[0] == 0


def test_prysk_first_test_imports_with_the_prysk_dialect(repo: Path, charpin: Runner) -> None:
    _write(repo, "my_test.t", PRYSK_FIRST)
    code, out, err = charpin(
        "import", "cram", "--repo", str(repo), "--dialect", "prysk", str(repo / "my_test.t")
    )
    assert code == 0, out + err
    assert "prysk .t: 1 pin(s) written" in out
    pin = json.loads((repo / "pins.jsonl").read_text())
    assert "PRYSK_TEMP=" in pin["stdin"]


def test_a_behaviour_edit_turns_an_imported_cram_test_red(repo: Path, charpin: Runner) -> None:
    _write(repo, "tally.py", TALLY)
    _write(repo, "tests/tally.t", TALLY_T)
    code, out, err = charpin("import", "cram", "--repo", str(repo), str(repo / "tests/tally.t"))
    assert code == 0, out + err
    assert "1 (re)/(glob) line(s) pinned" in out
    assert charpin("pins", "check", "--repo", str(repo))[0] == 0

    edit(
        repo / "tally.py", 'print("lines read", file=sys.stderr)', 'print("read", file=sys.stderr)'
    )
    code, out, _ = charpin("pins", "check", "--repo", str(repo))
    assert code == 2
    assert "DRIFT tests-tally [stdout]" in out
    # The drift reads as cram's own form: the `.t` lines, indented, not the shell's markers.
    assert "-  lines read" in out and "+  read" in out


def test_a_test_that_fails_under_cram_is_refused_with_crams_diff(
    repo: Path, charpin: Runner
) -> None:
    # cram's README: its examples/fail.t fails; the first hunk of the diff it prints.
    _write(repo, "fail.t", "  $ echo 1\n  1\n  $ echo 1\n  2\n  $ echo 1\n  1\n")
    code, _, err = charpin("import", "cram", "--repo", str(repo), str(repo / "fail.t"))
    assert code == 2
    assert "fail.t: the unchanged program does not pass this test under cram's rules" in err
    assert "  --- fail.t\n  +++ fail.t.err\n" in err
    assert "  -  2\n  +  1\n" in err
    assert "nothing was written" in err
    assert not (repo / "pins.jsonl").exists()


def test_a_pattern_for_a_changing_value_is_not_carried_as_a_pattern(
    repo: Path, charpin: Runner
) -> None:
    # (re) tolerated a value that changes between runs; the exact pin cannot replay green.
    _write(repo, "clock.t", "  $ python3 -c 'import time; print(time.time_ns())'\n  \\d+ (re)\n")
    code, _, err = charpin("import", "cram", "--repo", str(repo), str(repo / "clock.t"))
    assert code == 2
    assert "clock.t: imported, but the pin does not replay green" in err
    assert "no imported pin replays green against the unchanged program" in err
    assert not (repo / "pins.jsonl").exists()


# cram's doctests (cram/_diff.py, cram/_test.py) for the matchers and the escaping.
@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (b"foo.* (re)\n", b"foobar\n", True),
        (b"*** (re)\n", b"foobar\n", False),  # an invalid regex never matches
        (b"\\* \\\\ \\? fo?b* (glob)\n", b"* \\ ? foobar\n", True),
        (b"? (glob)\n", b"b\n", True),
        (b"[a-z]{2} (re)\n", b"hi\n", True),
        (b"\\x68\\x69 (esc)\n", b"hi\n", True),
        (b"foo\n", b"bar\n", False),
    ],
)
def test_cram_matchers(expected: bytes, actual: bytes, ok: bool) -> None:
    assert cram.line_matches(expected, actual) is ok


def test_cram_and_prysk_escape_as_their_tools_do() -> None:
    parsed = cram.parse([b"  $ x\n", b"  x\n"], 2)
    output = b"CRAM-CHARPIN-SALT 0 0\n\xe2\x98\xba \tx\nCRAM-CHARPIN-SALT 2 0\n"
    as_cram = cram.postout(output, parsed, 2, cram.DIALECTS["cram"], b"")
    as_prysk = cram.postout(output, parsed, 2, cram.DIALECTS["prysk"], b"")
    assert as_cram[1] == b"  \\xe2\\x98\\xba \\tx (esc)\n"
    assert as_prysk[1] == "  ☺ \\tx (esc)\n".encode()


@pytest.mark.skipif(sys.platform != "linux", reason="/bin/sh semantics of the examples")
def test_the_pin_runs_the_shell_script_cram_would_feed(repo: Path) -> None:
    parsed = cram.parse(CRAM_MISSINGEOL.encode().splitlines(True), 2)
    assert parsed.script == (
        b"echo CRAM-CHARPIN-SALT 0 $?\nprintf foo\necho CRAM-CHARPIN-SALT 2 $?\n"
    )
