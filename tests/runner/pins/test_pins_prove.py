"""--prove shows the comparator can fail; weak pins are warned about."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from charpin_runner.pins import compare as cmp
from charpin_runner.pins.execute import Run
from charpin_runner.pins.model import Case, Observation, OutFile, Pin
from charpin_runner.pins.prove import mutants, prove, weak_pins
from charpin_runner.pins.replay import judge
from pins_helpers import Runner, write_pins

GOLDEN = Observation(
    exit_code=0,
    stdout=b"total 3\n",
    stderr=b"note\n",
    files={"a.txt": OutFile("ab" * 32, 0o644, None)},
    env_read=[],
)


def _green(golden: Observation = GOLDEN, pin_id: str = "p") -> list:  # type: ignore[type-arg]
    pin = Pin(Case(id=pin_id, argv=("x.py", pin_id)), golden)
    return [judge(pin, Run(golden, {}, []))]


def test_every_perturbation_is_caught_by_the_real_comparator() -> None:
    assert [label for label, _m in mutants(GOLDEN)] == [
        "one stdout byte",
        "one stderr byte",
        "the exit code",
        "the hash of a.txt",
    ]
    assert prove(_green()) == []


def test_a_blind_comparator_is_caught() -> None:
    def ignores_stdout(golden: Observation, actual: Observation) -> list[str]:
        return [c for c in cmp.compare(golden, actual) if c not in (cmp.STDOUT, cmp.WHITESPACE)]

    problems = prove(_green(), ignores_stdout)
    assert problems == ["pin p: the comparator did not notice a change to one stdout byte"]

    def ignores_files(golden: Observation, actual: Observation) -> list[str]:
        stripped = dataclasses.replace(golden, files=actual.files)
        return cmp.compare(stripped, actual)

    assert prove(_green(), ignores_files) == [
        "pin p: the comparator did not notice a change to the hash of a.txt"
    ]


def test_empty_streams_are_perturbed_too() -> None:
    empty = Observation(exit_code=0, stdout=b"", stderr=b"")
    assert all(m != empty for _l, m in mutants(empty))
    assert prove(_green(empty)) == []


def test_weak_pins_are_warned_about() -> None:
    nothing = Observation(exit_code=0, stdout=b"", stderr=b"")
    pins = [
        Pin(Case(id="silent", argv=("a.py",)), nothing),
        Pin(Case(id="one", argv=("a.py", "1")), GOLDEN),
        Pin(Case(id="two", argv=("a.py", "2")), GOLDEN),
        Pin(Case(id="three", argv=("a.py", "3")), dataclasses.replace(GOLDEN, exit_code=1)),
    ]
    assert weak_pins(pins) == [
        "pin silent asserts nothing distinctive (exit 0, empty streams, no files)",
        "pins one and two have identical outputs for different inputs",
    ]


def test_cli_prove(messy_repo: Path, charpin: Runner) -> None:
    (messy_repo / "quiet.py").write_text("import sys\n")
    pins = [
        {"id": "quiet", "argv": ["quiet.py"]},
        {"id": "legacy", "argv": ["legacy_sync.py", "x"]},
    ]
    write_pins(messy_repo, pins)
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    code, out, err = charpin("pins", "check", "--repo", str(messy_repo), "--prove")
    assert code == 0, out + err
    assert "prove: every perturbation of 2 green pin(s) was caught" in out
    assert "warning: pin quiet asserts nothing distinctive" in err
