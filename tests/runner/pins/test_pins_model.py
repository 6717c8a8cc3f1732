"""Both pin formats load into one model; bytes survive; corrupt files are refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_runner.config import PinsConfig
from charpin_runner.errors import IntegrityError
from charpin_runner.pins.model import Case, Observation, OutFile, Pin
from charpin_runner.pins.store import load_jsonl, load_pins, save_golden, save_jsonl
from pins_helpers import Runner

RAW = b"caf\xe9 \xff\x00 not utf-8\n"


def test_jsonl_and_case_folder_load_into_the_same_model(tmp_path: Path) -> None:
    repo = tmp_path
    obs = Observation(
        exit_code=3,
        stdout=RAW,
        stderr="ünïcode\n".encode(),
        files={"a/b.txt": OutFile("0" * 64, 0o644, "x\n")},
        env_read=["CURRENCY"],
        norm_counts={"work": 1},
    )
    jsonl_case = Case(
        id="one",
        argv=("tool.py", "--x", "1"),
        env={"K": "v"},
        stdin=RAW,
        argv0="tool.py",
        expect_crash=True,
    )
    save_jsonl(repo / "pins.jsonl", [Pin(jsonl_case, obs)])
    folder = repo / "cases" / "two"
    (folder / "work").mkdir(parents=True)
    (folder / "target.txt").write_text("tool.py\n")
    # The whole process vector, as seed 004 lays it out: the program's name, then its arguments.
    (folder / "argv.json").write_text(json.dumps(["tool.py", "--x", "1"]))
    (folder / "env.json").write_text(json.dumps({"K": "v"}))
    (folder / "stdin.bin").write_bytes(RAW)
    (folder / "expect.json").write_text('{"crash": true}\n')
    save_golden(repo / "goldens", "two", obs)

    pins = load_pins(repo, PinsConfig())
    one, two = pins.all
    assert one.golden == two.golden == obs
    same = ("argv", "argv0", "env", "stdin", "cwd_rel", "expect_crash")
    assert [getattr(one.case, f) for f in same] == [getattr(two.case, f) for f in same]
    assert two.case.argv == ("tool.py", "--x", "1") and two.case.argv0 == "tool.py"
    assert two.case.fixtures == "cases/two/work"
    assert two.case.stdin == RAW
    line = (repo / "pins.jsonl").read_text()
    assert '"stdout": {"b64": ' in line
    assert "ünïcode" in line
    assert '"argv0": "tool.py"' in line and '"expect_crash": true' in line


def _line(repo: Path, text: str) -> Path:
    path = repo / "pins.jsonl"
    ok = json.dumps({"id": "fine", "argv": ["a.py"]})
    path.write_text(ok + "\n" + text + "\n")
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "pins.jsonl line 2: not JSON"),
        ('{"id": "x", "argv": ["a.py"], "colour": 1}', "unknown field `colour` - at `$`"),
        ('{"id": "x", "argv": "a.py"}', "Expected `array`, got `str` - at `$.argv`"),
        ('{"id": "x", "argv": ["a.py"], "stdout": {"b64": "!!"}, "exit_code": 0}', "base64"),
        ('{"id": "../x", "argv": ["a.py"]}', "not a plain name"),
        ('{"id": "x", "argv": ["a.py"], "cwd_rel": "../up"}', "leaves its root"),
        ('{"id": "fine", "argv": ["a.py"]}', "appears in pins.jsonl line 1 and pins.jsonl line 2"),
    ],
)
def test_corrupt_line_is_refused_with_its_number(tmp_path: Path, text: str, message: str) -> None:
    _line(tmp_path, text)
    with pytest.raises(IntegrityError) as info:
        load_pins(tmp_path, PinsConfig())
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_corrupt_file_exits_8_and_missing_pins_exit_64(tmp_path: Path, charpin: Runner) -> None:
    code, _out, err = charpin("pins", "check", "--repo", str(tmp_path))
    assert code == 64
    assert "no pins" in err
    _line(tmp_path, '{"id": "x"}')
    code, _out, err = charpin("pins", "check", "--repo", str(tmp_path))
    assert code == 8
    assert "pins.jsonl line 2" in err and "argv" in err
    assert "Traceback" not in err


def test_pending_lines_have_no_golden(tmp_path: Path) -> None:
    _line(tmp_path, '{"id": "y", "argv": ["b.py"], "stdin": "hi"}')
    pins = load_jsonl(tmp_path / "pins.jsonl", "pins.jsonl")
    assert [p.golden for p in pins] == [None, None]
    assert pins[1].case.stdin == b"hi"
