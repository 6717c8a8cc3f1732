"""`charpin import trycmd`: cases from trycmd's own documentation, imported green, then turned
red by a behaviour edit. The elision rules are checked against snapbox's own test table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from charpin_runner.pins.imports import trycmd
from pins_helpers import Runner, edit

needs_tomllib = pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")

# examples/demo_trycmd/README.md (trycmd's demo crate), as written: a `console` block with two
# commands, a failure with `? 1` and an env prefix, a `~~~md` block holding a block for a bin
# trycmd does not know, and the [REPLACEMENT] variable its tests/trycmd.rs registers.
DEMO_README = """\
# Trycmd demo

This crate demos the `.trycmd` file format. In fact, the file you're reading right now is a trycmd
test, registered in `tests/trycmd.rs`.

Let's test our simple hello world binary (found in `src/main.rs`):

```console
$ simple World
Hello World!

$ simple Ferris
Hello Ferris!

```

The format looks for code blocks with the `console` or `trycmd` language:

~~~md
```console
$ command ...
```
~~~

You can also test for command failures and pass in environment variables:

```console
$ simple
? 1
Must supply exactly one argument.

$ GOODBYE=true simple World
Goodbye World!

```

Sometimes, your test might include output that is generated at runtime. When that's the case, you
can
use variables to replace those values. In our `tests/trycmd.rs`, we've defined a
variable `[REPLACEMENT]` such that whenever the value `runtime-value` appears, it will be
replaced with `[REPLACEMENT]`:

```console
$ simple "blah blah runtime-value blah"
Hello blah blah [REPLACEMENT] blah!

$ simple "blah blah runtime-value blah"
Hello blah blah runtime-value blah!

```

Note that the tests can still contain `runtime-value`: using `[REPLACEMENT]` is purely for
your convenience.
"""

# The demo's src/main.rs, in Python, declared as the console script `simple`.
SIMPLE = """\
import os
import sys


def main():
    args = sys.argv
    if len(args) == 2:
        if os.environ.get("GOODBYE") is not None:
            print(f"Goodbye {args[1]}!")
        else:
            print(f"Hello {args[1]}!")
    else:
        print("Must supply exactly one argument.", file=sys.stderr)
        sys.exit(1)
"""

# trycmd's bin-fixture (src/bin/bin-fixture.rs), in Python, as the console script `bin-fixture`:
# the `.toml` cases of trycmd's docs and tests drive it through env.add.
BIN_FIXTURE = """\
import os
import sys


def main():
    # flush: Rust's println! writes each line at once, as the merged stream shows.
    if "stdout" in os.environ:
        print(os.environ["stdout"], flush=True)
    if "stderr" in os.environ:
        print(os.environ["stderr"], file=sys.stderr, flush=True)
    if "cat" in os.environ:
        with open(os.environ["cat"]) as handle:
            print(handle.read(), file=sys.stderr, flush=True)
    sys.exit(int(os.environ.get("exit", "0")))
"""

PYPROJECT = """\
[project]
name = "demo"
version = "0"

[project.scripts]
simple = "simple:main"
bin-fixture = "bin_fixture:main"
"""

# Cases written as trycmd's crate documentation and tests/cmd/ write them: `bin.name`, side
# files beside the .toml, `status.code`, `status = "failed"`, `stderr-to-stdout`, `args`, an
# X.in/ folder for the working directory, and a `.trycmd` step with merged streams.
TOML_CASES = {
    "tests/cmd/basic.toml": 'bin.name = "bin-fixture"\n',
    "tests/cmd/stdout.toml": 'bin.name = "bin-fixture"\n\n[env.add]\nstdout = """\nHello\nWorld!\n"""\n',
    "tests/cmd/stdout.stdout": "Hello\nWorld!\n\n",
    "tests/cmd/code.toml": 'bin.name = "bin-fixture"\nstatus.code = 30\n\n[env.add]\nexit = "30"\n',
    "tests/cmd/failure.toml": 'bin.name = "bin-fixture"\nstatus = "failed"\n\n[env.add]\nexit = "1"\n',
    "tests/cmd/stderr-to-stdout.toml": (
        'bin.name = "bin-fixture"\nstderr-to-stdout = true\n\n[env.add]\n'
        'stdout = """\nHello\nWorld!\n"""\nstderr = """\nGoodnight\nMoon!\n"""\n'
    ),
    "tests/cmd/stderr-to-stdout.stdout": "Hello\nWorld!\n\nGoodnight\nMoon!\n\n",
    "tests/cmd/infer-cwd.toml": 'bin.name = "bin-fixture"\n\n[env.add]\ncat = "file.txt"\n',
    "tests/cmd/infer-cwd.in/file.txt": "Hello World!\n",
    "tests/cmd/infer-cwd.stderr": "Hello World!\n\n",
    "tests/cmd/elide.toml": (
        'bin.name = "bin-fixture"\nargs = ["--flag", "two words"]\n\n[env.add]\n'
        'stdout = "run 1234 at [..]\\nline 2\\nline 3\\nend"\n'
    ),
    "tests/cmd/elide.stdout": "run [..] at [..]\n...\nend\n",
    "tests/cmd/stdout.trycmd": (
        "```\n$ stdout='Hello' stderr='Goodbye' bin-fixture\nHello\nGoodbye\n\n```\n"
    ),
}


def _write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _write(
        root,
        {"simple.py": SIMPLE, "bin_fixture.py": BIN_FIXTURE, "pyproject.toml": PYPROJECT},
    )
    return root


@needs_tomllib
def test_the_demo_readme_imports_green_then_an_edit_turns_it_red(
    repo: Path, charpin: Runner
) -> None:
    _write(repo, {"README.md": DEMO_README})
    code, out, err = charpin(
        "import", "trycmd", "--repo", str(repo), "--var", "[REPLACEMENT]=runtime-value",
        str(repo / "README.md"),
    )  # fmt: skip
    assert code == 0, out + err
    for line in (9, 12, 28, 32, 44, 47):
        assert f"imported README-{line}\n" in out
    assert "not imported: README.md:21: trycmd skips a bin it does not know (command)" in out
    assert "README.md:44: stdout matched through trycmd's elisions or redactions" in out
    pins = {p["id"]: p for p in map(json.loads, (repo / "pins.jsonl").read_text().splitlines())}
    assert pins["README-9"]["argv"] == ["simple", "World"]
    assert pins["README-28"]["exit_code"] == 1
    assert pins["README-28"]["stdout"] == "Must supply exactly one argument.\n"  # merged
    assert pins["README-32"]["env"] == {"GOODBYE": "true"}
    assert pins["README-44"]["stdout"] == "Hello blah blah runtime-value blah!\n"
    assert all(p["merge_stderr"] for p in pins.values())

    edit(repo / "simple.py", 'print(f"Hello {args[1]}!")', 'print(f"Hi {args[1]}!")')
    code, out, _ = charpin("pins", "check", "--repo", str(repo))
    assert code == 2
    assert "DRIFT README-9 [stdout]" in out
    assert "-Hello World!" in out and "+Hi World!" in out
    assert "DRIFT README-32" not in out  # Goodbye did not change


@needs_tomllib
def test_toml_cases_import_green_then_an_edit_turns_them_red(repo: Path, charpin: Runner) -> None:
    _write(repo, TOML_CASES)
    code, out, err = charpin("import", "trycmd", "--repo", str(repo), str(repo / "tests" / "cmd"))
    assert code == 0, out + err
    pins = {p["id"]: p for p in map(json.loads, (repo / "pins.jsonl").read_text().splitlines())}
    assert sorted(pins) == [
        "tests-cmd-basic",
        "tests-cmd-code",
        "tests-cmd-elide",
        "tests-cmd-failure",
        "tests-cmd-infer-cwd",
        "tests-cmd-stderr-to-stdout",
        "tests-cmd-stdout",
        "tests-cmd-stdout-2",
    ]
    assert pins["tests-cmd-code"]["exit_code"] == 30
    assert pins["tests-cmd-failure"]["exit_code"] == 1
    assert "status 'failed' pinned as exit 1" in out
    assert pins["tests-cmd-stderr-to-stdout"]["stdout"] == "Hello\nWorld!\n\nGoodnight\nMoon!\n\n"
    assert pins["tests-cmd-infer-cwd"]["fixtures"] == "tests/cmd/infer-cwd.in"
    assert pins["tests-cmd-elide"]["argv"] == ["bin-fixture", "--flag", "two words"]
    assert pins["tests-cmd-elide"]["stdout"] == "run 1234 at [..]\nline 2\nline 3\nend\n"
    assert "tests/cmd/elide.toml: stdout matched through trycmd's elisions" in out
    assert charpin("pins", "check", "--repo", str(repo))[0] == 0

    edit(repo / "bin_fixture.py", 'sys.exit(int(os.environ.get("exit", "0")))', "sys.exit(0)")
    code, out, _ = charpin("pins", "check", "--repo", str(repo))
    assert code == 2
    assert "DRIFT tests-cmd-code [exit-code]" in out
    assert "DRIFT tests-cmd-failure [exit-code]" in out


@needs_tomllib
def test_a_case_that_fails_under_trycmd_is_refused(repo: Path, charpin: Runner) -> None:
    _write(repo, {"a.toml": 'bin.name = "simple"\nargs = "World"\nstdout = "Hello Moon!\\n"\n'})
    code, _, err = charpin("import", "trycmd", "--repo", str(repo), str(repo / "a.toml"))
    assert code == 2
    assert "a.toml: stdout does not match under trycmd's rules:" in err
    assert "-Hello Moon!" in err and "+Hello World!" in err
    assert not (repo / "pins.jsonl").exists()


@needs_tomllib
@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a.toml": 'bin.name = "simple"\nbogus = 1\n'}, "unknown key `bogus`"),
        ({"a.toml": 'bin.name = "simple"\n[fs]\nsandbox = true\n'}, "a sandboxed case"),
        ({"a.toml": 'bin.name = "simple"\n', "a.out/f.txt": "x"}, "a sandboxed case"),
        ({"a.toml": 'bin.name = "simple"\nstatus = "maybe"\n'}, "`status` 'maybe'"),
    ],
)
def test_what_cannot_be_carried_is_refused(
    repo: Path, charpin: Runner, files: dict[str, str], message: str
) -> None:
    _write(repo, files)
    code, _, err = charpin("import", "trycmd", "--repo", str(repo), str(repo / "a.toml"))
    assert code == 8
    assert message in err


# snapbox's own table (filter/pattern.rs, str_normalize_redactions_line_matches_cases).
@pytest.mark.parametrize(
    ("line", "pattern", "expected"),
    [
        ("", "", True),
        ("", "[..]", True),
        ("hello", "hello", True),
        ("hello", "goodbye", False),
        ("hello", "[..]", True),
        ("hello", "he[..]", True),
        ("hello", "go[..]", False),
        ("hello", "[..]o", True),
        ("hello", "[..]e", False),
        ("hello", "he[..]o", True),
        ("hello", "he[..]e", False),
        ("hello", "go[..]o", False),
        ("hello", "go[..]e", False),
        ("hello world, goodbye moon", "hello [..], goodbye [..]", True),
        ("hello world, goodbye moon", "goodbye [..], goodbye [..]", False),
        ("hello world, goodbye moon", "goodbye [..], hello [..]", False),
        ("hello world, goodbye moon", "hello [..], [..] moon", True),
        ("hello world, goodbye moon", "goodbye [..], [..] moon", False),
        ("hello world, goodbye moon", "hello [..], [..] world", False),
    ],
)
def test_line_matches_as_snapbox(line: str, pattern: str, expected: bool) -> None:
    assert trycmd.line_matches(line, pattern, {}) is expected


def test_elision_and_redaction_as_snapbox() -> None:
    values = {"[EXE]": "", "[ROOT]": "$WORK"}
    assert trycmd.text_matches(b"a\nb\nc\nend\n", "a\n...\nend\n", values)[0]
    assert trycmd.text_matches(b"cargo\n", "cargo[EXE]\n", values)[0]
    assert trycmd.text_matches(b"at $WORK/x\n", "at [ROOT]/x\n", values)[0]
    assert trycmd.text_matches(b"a\\b\r\n", "a/b\n", values)[0]  # paths and newlines
    assert not trycmd.text_matches(b"a\nb\n", "a\n", values)[0]


def test_parse_trycmd_as_trycmd() -> None:
    text = "```\n$ cmd1\n? 1\n$ KEY=v 'a b' x\n> 'arg with space'\nout\n\n```\n```rust\n$ no\n```\n"
    steps = trycmd.parse_trycmd(text, "f.trycmd")
    assert [(s.where, s.bin_name, s.args, s.status) for s in steps] == [
        ("f.trycmd:2", "cmd1", [], 1),
        ("f.trycmd:4", "a b", ["x", "arg with space"], "success"),
    ]
    assert steps[1].env == {"KEY": "v"}
    assert steps[1].stdout == b"out\n"
