"""The two pin-model capabilities the importers need: hash-only golden streams
({"sha256": HEX}, compared by digest, no text to diff) and merge_stderr (one stream, as cram
and trycmd run commands). Both round-trip through pins.jsonl and are written only when used."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from charpin_runner.errors import IntegrityError
from charpin_runner.pins import compare as cmp
from charpin_runner.pins.model import Observation
from charpin_runner.pins.prove import mutants
from charpin_runner.pins.store import parse_line, pin_line
from pins_helpers import Runner

DIGEST = hashlib.sha256(b"hello\n").hexdigest()
LINE = {
    "id": "h",
    "argv": ["tool.py"],
    "env": {},
    "stdin": "",
    "cwd_rel": ".",
    "merge_stderr": True,
    "exit_code": 0,
    "stdout": {"sha256": DIGEST},
    "stderr": "",
    "files": {},
    "env_read": None,
    "norm_counts": {},
}


def test_a_hash_only_line_round_trips() -> None:
    text = json.dumps(LINE)
    pin = parse_line(text, "pins.jsonl line 1")
    assert pin.case.merge_stderr is True
    assert pin.golden is not None and pin.golden.hashed == ("stdout",)
    assert json.loads(pin_line(pin)) == LINE


def test_unset_fields_are_not_written() -> None:
    plain = {**LINE, "stdout": "hello\n"}
    del plain["merge_stderr"]
    pin = parse_line(json.dumps(plain), "x")
    assert "merge_stderr" not in json.loads(pin_line(pin))


def test_a_bad_digest_is_refused() -> None:
    bad = {**LINE, "stdout": {"sha256": "XYZ"}}
    with pytest.raises(IntegrityError, match="is not 64 lowercase hex digits"):
        parse_line(json.dumps(bad), "pins.jsonl line 4")


def test_hash_only_streams_compare_by_digest_and_have_no_text_to_diff() -> None:
    golden = Observation(0, DIGEST.encode(), b"", hashed=("stdout",))
    assert cmp.compare(golden, Observation(0, b"hello\n", b"")) == []
    drift = Observation(0, b"hello!\n", b"")
    assert cmp.compare(golden, drift) == [cmp.STDOUT]
    [line] = cmp.describe(golden, drift, 40)
    assert line.startswith("stdout: hash-only golden: no text to diff (golden sha256 ")
    # --prove's perturbation of a hash-only stream is still caught.
    for label, mutant in mutants(golden):
        assert cmp.compare(mutant, Observation(0, b"hello\n", b"")), label


def test_merge_stderr_records_one_interleaved_stream(tmp_path: Path, charpin: Runner) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tool.py").write_text(
        "import sys\nprint('out', flush=True)\nprint('err', file=sys.stderr, flush=True)\n"
        "print('out again', flush=True)\n"
    )
    line = {"id": "m", "argv": ["tool.py"], "merge_stderr": True}
    (repo / "pins.jsonl").write_text(json.dumps(line) + "\n")
    code, out, err = charpin("pins", "record", "--repo", str(repo))
    assert code == 0, out + err
    recorded = json.loads((repo / "pins.jsonl").read_text())
    assert recorded["stdout"] == "out\nerr\nout again\n"
    assert recorded["stderr"] == ""
    assert charpin("pins", "check", "--repo", str(repo))[0] == 0
