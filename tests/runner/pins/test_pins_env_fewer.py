"""A pin whose program reads fewer env keys than its golden is not drift (#22): no new input.
`pins check` stays green and says which keys are no longer read; a new key still drifts, and
recording still wants the same keys on every run."""

from __future__ import annotations

from pathlib import Path

from charpin_runner.pins import compare as cmp
from charpin_runner.pins.model import Observation
from pins_helpers import Runner, write_pins

CHECKS = 'if "NO_COLOR" in os.environ:\n    print("plain")\n    raise SystemExit(0)\n'
FORCE = 'if "FORCE_COLOR" in os.environ:\n    print("colour")\n    raise SystemExit(0)\n'


def test_fewer_env_reads_stay_green_with_a_note(tmp_path: Path, charpin: Runner) -> None:
    (tmp_path / "color.py").write_text("import os\n" + CHECKS + FORCE)
    write_pins(tmp_path, [])
    args = ("--id", "forced", "--env", "FORCE_COLOR=1", "--", "color.py")
    code, out, err = charpin("pins", "record", "--repo", str(tmp_path), *args)
    assert code == 0, out + err
    # Swapped: FORCE_COLOR is checked first, so NO_COLOR is never looked up in the pin's env.
    (tmp_path / "color.py").write_text("import os\n" + FORCE + CHECKS)
    code, out, err = charpin("pins", "check", "--repo", str(tmp_path))
    assert code == 0, out + err
    assert "note: pin forced no longer reads env NO_COLOR (no new input, not drift)" in out
    assert "pins: 1 passed, 0 drifted, of 1" in out


def test_only_a_key_the_golden_did_not_read_is_env_drift() -> None:
    golden = Observation(0, b"", b"", env_read=["A", "B"])
    assert cmp.compare(golden, Observation(0, b"", b"", env_read=["A"])) == []
    assert cmp.fewer_env_reads(golden, Observation(0, b"", b"", env_read=["A"])) == ["B"]
    assert cmp.compare(golden, Observation(0, b"", b"", env_read=["A", "C"])) == [cmp.ENV_READ]
    # Observable on one side only (a Python target against a command): still drift.
    assert cmp.compare(golden, Observation(0, b"", b"", env_read=None)) == [cmp.ENV_READ]
