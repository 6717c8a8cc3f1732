"""Behaviour beyond the asserts (#19) on a library nobody here wrote: inflection 0.5.1 from its
sdist (tests/data/inflection-0.5.1, unchanged), its own 455 tests, `charpin-remote verify` on
the clean box. An honest refactor is accepted; a behaviour change those tests stay green on is
rejected by the replayed calls, naming the call and both answers; a change to the one line the
tests never run is INCOMPLETE, named."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_runner.errors import EXIT_DRIFT, EXIT_VACUOUS

from tests.conftest import git

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SDIST = ROOT / "tests" / "data" / "inflection-0.5.1"
MODULE = "inflection/__init__.py"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "runner"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A git repository holding the sdist's files as they are (our provenance note left out)."""
    repo = tmp_path / "inflection"
    shutil.copytree(SDIST, repo, ignore=shutil.ignore_patterns("README.md", "__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "sdist inflection==0.5.1")
    return repo


def edited(repo: Path, old: str, new: str) -> bytes:
    """The patch replacing old by new in the library's module (the tree is left as it was)."""
    path = repo / MODULE
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--binary"], capture_output=True, check=True
    ).stdout
    git(repo, "checkout", "-q", "--", MODULE)
    return diff


def verify(repo: Path, patch: bytes) -> tuple[int, dict[str, Any]]:
    (repo.parent / "agent.diff").write_bytes(patch)
    out = repo.parent / "verify"
    run_id = f"v{len(list(out.glob('*'))) if out.exists() else 0}"
    argv = ["verify", "--repo", str(repo), "--patch", str(repo.parent / "agent.diff")]
    code = main([*argv, "--hosts", "clean", "--out", str(out), "--run-id", run_id])
    return code, json.loads((out / run_id / "verify.json").read_text())


def gate(report: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [g for g in report["gates"] if g["gate"] == name]
    return found


def findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in report["observations"] if o["gate"] == "Behaviour"]


def test_an_honest_extract_helper_refactor_of_the_library_is_accepted(library: Path) -> None:
    patch = edited(
        library,
        '    else:\n        return {\n            1: "st",\n            2: "nd",\n'
        '            3: "rd",\n        }.get(number % 10, "th")\n',
        "    else:\n        return _last_digit_suffix(number)\n\n\n"
        "def _last_digit_suffix(number: int) -> str:\n"
        '    return {\n        1: "st",\n        2: "nd",\n        3: "rd",\n'
        '    }.get(number % 10, "th")\n',
    )
    code, report = verify(library, patch)
    assert report["verdict"] == "ACCEPT", report["gates"]
    assert code == 0
    assert gate(report, "Tests")["detail"].startswith("455 passed")
    assert "(+1 extracted helper(s))" in gate(report, "Scope")["detail"]
    detail = gate(report, "Behaviour")["detail"]
    assert "captured call(s) answer the same on both versions" in detail
    assert "every changed line ran" in detail
    [box] = report["evidence"]
    # ordinal is called by the tests (directly and through ordinalize): its calls were
    # replayed on both versions, not merely counted.
    assert box["compared"] >= 10 and box["same"] == box["compared"] and box["differs"] == 0
    assert box["not_compared"] == {} and box["unreached"] == []


def test_a_behaviour_change_the_librarys_tests_do_not_see_is_rejected_naming_both_answers(
    library: Path,
) -> None:
    """transliterate now folds case. Its only caller, parameterize, lowercases afterwards, and no
    test calls transliterate itself: all 455 tests stay green. Its captured calls do not."""
    patch = edited(
        library,
        "    return normalized.encode('ascii', 'ignore').decode('ascii')\n",
        "    return normalized.encode('ascii', 'ignore').decode('ascii').lower()\n",
    )
    code, report = verify(library, patch)
    assert report["verdict"] == "REJECT"
    assert code & EXIT_DRIFT
    assert gate(report, "Tests")["status"] == "PASS"  # the asserts alone would accept it
    assert gate(report, "Tests")["detail"].startswith("455 passed; none lost")
    assert gate(report, "Behaviour")["status"] == "FAIL"
    found = {o["item"]: o for o in findings(report)}
    first = found[f"{MODULE}::transliterate#1"]
    assert first["what"] == (
        "transliterate('Donald E. Knuth') returned 'Donald E. Knuth' on base, "
        "'donald e. knuth' on patched (called from "
        "test_inflection.py::test_parameterize[Donald E. Knuth-donald-e-knuth])"
    )
    replay = f"reproduce: charpin-remote verify --replay {MODULE}::transliterate#1"
    assert replay in first["detail"]
    assert any("returned 'Malmo' on base, 'malmo' on patched" in o["what"] for o in found.values())
    [box] = report["evidence"]
    assert box["differs"] == len(found) and box["differs"] >= 10
    # A call whose text has no capital letter answers the same, and is counted as such.
    assert box["same"] == box["compared"] - box["differs"] >= 1


def test_a_change_to_the_line_the_librarys_tests_never_run_is_incomplete_and_named(
    library: Path,
) -> None:
    """inflection has no function its tests do not call (coverage.py: 80 of 81 statements); the
    statement they never run is pluralize's last `return word` (the rule `$` matches every
    word first). A change there is named, and never accepted on the replays that agree."""
    patch = edited(
        library,
        "                return re.sub(rule, replacement, word)\n        return word\n",
        '                return re.sub(rule, replacement, word)\n        return word + "s"\n',
    )
    code, report = verify(library, patch)
    assert report["verdict"] == "INCOMPLETE"
    assert code == EXIT_VACUOUS
    behaviour = gate(report, "Behaviour")
    assert behaviour["status"] == "INCOMPLETE"
    assert behaviour["action"] == f"add a pin or a test that reaches {MODULE}:pluralize"
    [gap] = findings(report)
    assert gap["item"] == f"{MODULE}:pluralize"
    assert gap["what"].endswith(f"{MODULE}:pluralize lines 306")
    [box] = report["evidence"]
    assert box["unreached"] == [f"{MODULE}:pluralize lines 306"]
    # pluralize's captured calls agree (they never reach the line): agreement is not coverage.
    assert box["compared"] >= 1 and box["differs"] == 0
