"""A crash is never recorded silently (#11 item 2); expect_crash lives in both pin formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_runner.config import PinsConfig
from charpin_runner.errors import IntegrityError, UsageError
from charpin_runner.pins.crash import find_fatal
from charpin_runner.pins.model import Case, Observation, Pin
from charpin_runner.pins.store import (
    load_folder,
    load_pins,
    parse_line,
    pin_line,
    save_case_folder,
)
from pins_helpers import Runner, write_pins

TRACE = b'Traceback (most recent call last):\n  File "/r/tool.py", line 3, in <module>\n    f()\n'


@pytest.mark.parametrize(
    ("exit_code", "stderr", "line"),
    [
        (1, TRACE + b"ValueError: bad row 'x'\n", "ValueError: bad row 'x'"),
        # Chained: the last traceback's exception; a multi-line message: its first line.
        (
            1,
            TRACE + b"KeyError: 'a'\n\nDuring handling of the above exception, another exception"
            b" occurred:\n\n"
            + TRACE
            + b"RuntimeError: lookup failed\n  details on the next line\n",
            "RuntimeError: lookup failed",
        ),
        # Carets and source lines are indented: they are not the last line.
        (1, TRACE + b"    ^^^^\nZeroDivisionError: division by zero\n", "ZeroDivisionError"),
        (-11, b"", "killed by SIGSEGV"),
        (-9, b"partial output\n", "killed by SIGKILL"),
    ],
)
def test_a_fatal_crash_is_an_uncaught_exception_or_a_signal(
    exit_code: int, stderr: bytes, line: str
) -> None:
    fatal = find_fatal(Observation(exit_code, b"", stderr))
    assert fatal is not None
    assert fatal.line.startswith(line)


@pytest.mark.parametrize(
    ("exit_code", "stderr"),
    [
        (0, TRACE + b"ValueError: logged, then handled\n"),  # exit 0: the program went on
        (2, TRACE + b"ValueError: x\n"),  # not exit 1: the program chose its status
        (1, b"error: no such customer\n"),  # a plain failure, no traceback
        (1, b"  Traceback (most recent call last):\n"),  # quoted, not at a line start
    ],
)
def test_other_failures_are_not_fatal_crashes(exit_code: int, stderr: bytes) -> None:
    assert find_fatal(Observation(exit_code, b"", stderr)) is None


PROGRAMS = {
    "boom.py": "rows = {}\nprint('reading')\nprint(rows['acme'])\n",
    "killed.py": "import os, signal\nprint('half', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "fails.py": "import sys\nprint('no such customer', file=sys.stderr)\nsys.exit(1)\n",
    "fine.py": "print('ok')\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for name, text in PROGRAMS.items():
        (tmp_path / name).write_text(text)
    write_pins(tmp_path, [])
    return tmp_path


def _record(charpin: Runner, repo: Path, *args: str) -> tuple[int, str, str]:
    return charpin("pins", "record", "--repo", str(repo), *args)


def _lines(repo: Path) -> dict[str, dict[str, object]]:
    rows = [json.loads(x) for x in (repo / "pins.jsonl").read_text().splitlines() if x]
    return {row["id"]: row for row in rows}


def test_an_uncaught_exception_is_refused_with_its_last_line(repo: Path, charpin: Runner) -> None:
    code, out, err = _record(charpin, repo, "--id", "boom", "--", "boom.py")
    assert code == 2, out + err
    assert (
        "refused: pin boom crashed with an uncaught exception (exit 1): \"KeyError: 'acme'\", "
        "so its golden would pin the crash, not the program;"
    ) in err
    assert "recorded boom" not in out
    assert _lines(repo) == {}
    code, out, err = _record(charpin, repo, "--id", "boom", "--expect-crash", "--", "boom.py")
    assert code == 0, out + err
    assert _lines(repo)["boom"]["expect_crash"] is True
    assert str(_lines(repo)["boom"]["stderr"]).endswith("KeyError: 'acme'\n")


def test_a_signal_is_refused_and_a_plain_failure_is_recorded(repo: Path, charpin: Runner) -> None:
    code, out, err = _record(charpin, repo, "--id", "killed", "--", "killed.py")
    assert code == 2, out + err
    assert "refused: pin killed was killed by SIGKILL (exit -9)" in err
    code, out, err = _record(charpin, repo, "--id", "fails", "--", "fails.py")
    assert code == 0, out + err
    assert _lines(repo)["fails"]["exit_code"] == 1
    assert "expect_crash" not in _lines(repo)["fails"]


def test_expecting_a_crash_that_does_not_happen_is_refused(repo: Path, charpin: Runner) -> None:
    code, out, err = _record(charpin, repo, "--id", "fine", "--expect-crash", "--", "fine.py")
    assert code == 2, out + err
    assert "pin fine expects a crash (expect_crash) but exited 0" in err


def test_expect_crash_names_one_pin(repo: Path, charpin: Runner) -> None:
    code, _out, err = _record(charpin, repo, "--expect-crash")
    assert code == 64
    assert "--expect-crash is said of one pin" in err


def test_prove_lists_crash_goldens_recorded_without_the_expectation(
    repo: Path, charpin: Runner
) -> None:
    assert _record(charpin, repo, "--id", "boom", "--expect-crash", "--", "boom.py")[0] == 0
    # What an older charpin recorded silently: the same golden, no expect_crash.
    line = _lines(repo)["boom"]
    del line["expect_crash"]
    (repo / "pins.jsonl").write_text(json.dumps(line) + "\n")
    code, out, err = charpin("pins", "check", "--repo", str(repo))
    assert code == 0, out + err
    assert "warning: pin boom's golden records a crash the pin does not expect" in err
    code, out, err = charpin("pins", "check", "--repo", str(repo), "--prove")
    assert code == 2, out + err
    assert (
        "prove: pin boom's golden records a crash the pin does not expect (it crashed with an "
        "uncaught exception (exit 1): \"KeyError: 'acme'\"); if that crash is the behaviour to "
        "pin, `charpin pins record --update boom --expect-crash`"
    ) in out
    assert "prove: FAILED, 1 golden(s) record a crash the pin does not expect" in out
    code, out, err = _record(charpin, repo, "--update", "boom", "--expect-crash")
    assert code == 0, out + err
    code, out, err = charpin("pins", "check", "--repo", str(repo), "--prove")
    assert code == 0, out + err
    assert "crash" not in out + err


def test_both_formats_hold_expect_crash_and_argv0_losslessly(tmp_path: Path) -> None:
    golden = Observation(1, b"", TRACE + b"KeyError: 'acme'\n", env_read=[])
    case = Case(
        id="boom",
        argv=("-m", "shop.export", "--all"),
        env={"K": "v"},
        stdin=b"\xff raw",
        argv0="shop.export",
        expect_crash=True,
    )
    line = parse_line(pin_line(Pin(case, golden)), "pins.jsonl line 1")
    assert line.golden == golden
    assert (line.case.argv, line.case.argv0, line.case.expect_crash) == (
        case.argv,
        case.argv0,
        True,
    )
    config = PinsConfig()
    folder = save_case_folder(tmp_path, config, case, golden)
    assert (folder / "target.txt").read_text() == "-m shop.export\n"
    assert json.loads((folder / "argv.json").read_text()) == ["shop.export", "--all"]
    assert json.loads((folder / "expect.json").read_text()) == {"crash": True}
    loaded = load_folder(tmp_path, folder, tmp_path / config.goldens)
    assert loaded.golden == golden
    for name in ("argv", "argv0", "env", "stdin", "cwd_rel", "expect_crash"):
        assert getattr(loaded.case, name) == getattr(line.case, name), name
    # A case without an argv0 keeps the name its target gave the program: $REPO/ + the script.
    plain = Case(id="plain", argv=("tools/run.py", "x"))
    folder = save_case_folder(tmp_path, config, plain)
    assert json.loads((folder / "argv.json").read_text()) == ["$REPO/tools/run.py", "x"]
    assert not (folder / "expect.json").exists()
    pins = load_pins(tmp_path, config)
    assert [p.case.id for p in pins.folders] == ["boom", "plain"]
    # Neither format holds an argv0 that does not name the target (the folder rule).
    with pytest.raises(IntegrityError, match=r"argv0 'sh' does not name the target 'tool.py'"):
        parse_line(json.dumps({"id": "x", "argv": ["tool.py"], "argv0": "sh"}), "line 1")
    with pytest.raises(UsageError, match="does not name the target"):
        save_case_folder(tmp_path, config, Case(id="y", argv=("tool.py",), argv0="sh"))


def test_a_jsonl_pin_written_as_a_case_folder_replays_green(repo: Path, charpin: Runner) -> None:
    (repo / "argv0.py").write_text("import sys\nprint(sys.argv)\n")
    assert _record(charpin, repo, "--id", "a0", "--", "argv0.py", "one")[0] == 0
    pin = load_pins(repo, PinsConfig()).jsonl[0]
    assert pin.golden is not None and b"$REPO/argv0.py" in pin.golden.stdout
    write_pins(repo, [])
    save_case_folder(repo, PinsConfig(), pin.case, pin.golden)
    code, out, err = charpin("pins", "check", "--repo", str(repo))
    assert code == 0, out + err


def test_a_command_gets_argv0_as_the_name_it_is_executed_under(repo: Path, charpin: Runner) -> None:
    folder = repo / "cases" / "sh-name"
    folder.mkdir(parents=True)
    (folder / "target.txt").write_text("sh\n")
    (folder / "argv.json").write_text('["/bin/sh", "-c", "echo $0"]\n')
    code, out, err = _record(charpin, repo)
    assert code == 0, out + err
    golden = json.loads((repo / "goldens" / "sh-name.json").read_text())
    assert golden["stdout"] == "/bin/sh\n"


def test_dash_m_of_a_package_without_main_is_refused(repo: Path, charpin: Runner) -> None:
    """Seen pinning more-itertools: `-- -m more_itertools` ran nothing of the program."""
    (repo / "lib").mkdir()
    (repo / "lib" / "__init__.py").write_text("X = 1\n")
    code, out, err = _record(charpin, repo, "--id", "m", "--", "-m", "lib")
    assert code == 2, out + err
    assert "is a package and cannot be directly executed" in err
    assert _lines(repo) == {}


MOVED = "# a refactor moved every line down\n\n\nrows = {}\nprint('reading')\nprint(rows['acme'])\n"


def test_a_crash_pin_compares_what_the_caller_sees_not_the_frames(
    repo: Path, charpin: Runner
) -> None:
    """#22: a refactor that only moves lines keeps a crash pin green; the exception, its message
    and the exit code still drift; --crash-frames compares the frames (line numbers) too."""
    assert _record(charpin, repo, "--id", "boom", "--expect-crash", "--", "boom.py")[0] == 0
    (repo / "boom2.py").write_text(PROGRAMS["boom.py"])
    args = ("--id", "framed", "--expect-crash", "--crash-frames", "--", "boom2.py")
    assert _record(charpin, repo, *args)[0] == 0
    assert _lines(repo)["framed"]["crash_frames"] is True
    assert "crash_frames" not in _lines(repo)["boom"]
    assert 'line 3, in <module>' in str(_lines(repo)["boom"]["stderr"])  # the golden keeps them

    (repo / "boom.py").write_text(MOVED)
    (repo / "boom2.py").write_text(MOVED)
    code, out, err = charpin("pins", "check", "--repo", str(repo), "--prove")
    assert code == 2, out + err
    assert "DRIFT boom " not in out  # only moved lines: what the caller sees is the same
    assert "DRIFT framed [stderr]" in out and "line 6, in <module>" in out

    (repo / "boom.py").write_text(MOVED.replace("rows['acme']", "rows['globex']"))
    code, out, err = charpin("pins", "check", "--repo", str(repo))
    assert code == 2 and "DRIFT boom [stderr]" in out, out + err
    # The diff shows the exception that changed, not the frames around it.
    assert "-KeyError: 'acme'" in out and "+KeyError: 'globex'" in out
    assert "-  File" not in out.split("DRIFT framed")[0]


def test_crash_frames_needs_a_pin_that_expects_a_crash(repo: Path, charpin: Runner) -> None:
    code, _out, err = _record(charpin, repo, "--id", "fine", "--crash-frames", "--", "fine.py")
    assert code == 64 and "--crash-frames is for a pin that expects a crash" in err


def test_expect_json_holds_crash_frames(tmp_path: Path) -> None:
    golden = Observation(1, b"", TRACE + b"KeyError: 'acme'\n", env_read=[])
    case = Case(id="boom", argv=("tool.py",), expect_crash=True, crash_frames=True)
    folder = save_case_folder(tmp_path, PinsConfig(), case, golden)
    assert json.loads((folder / "expect.json").read_text()) == {"crash": True, "frames": True}
    loaded = load_folder(tmp_path, folder, tmp_path / PinsConfig().goldens)
    assert (loaded.case.expect_crash, loaded.case.crash_frames) == (True, True)
    assert parse_line(pin_line(Pin(case, golden)), "line 1").case.crash_frames is True
