"""#18 through the real CLI on the demo's invoice exporter: each cheat of the issue's list, as the
patch an agent would write to turn a behaviour change green, is REJECTed for the reason a
reviewer needs to see; the honest patches are ACCEPTed.

The patches are the verify corpus's (tests/bench/corpus_demo.py, corpus_demo_cheats.py), which
tests/bench/bench_verify_corpus.py measures whole (108 patches on three subjects, one to
two minutes each here). The suite keeps a few: one per way a cheat hides (an outcome turned to
skipped, an assert weakened, the harness edited, code that recognises pytest, a script without
`.py`) and two honest patches: 10 tests, about 13 minutes on this loaded machine, marked slow. One demo repository (with the corpus's
extra base commit) serves the whole module; --reuse-base reuses the base run where the patch
captures the same functions' calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench.corpus_demo import BEHAVIOUR, HONEST
from tests.bench.corpus_demo_cheats import CHEATS
from tests.bench.corpus_model import REFUSED, Entry, said
from tests.bench.corpus_subjects import build_demo, code_env
from tests.coordinator.verify.test_verify_cli import RUNNER_PATH, failing, verify

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the module: the demo repository and the clean box's cache."""
    return tmp_path_factory.mktemp("cheats")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, shared: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(shared / "xdg-state"))


@pytest.fixture(scope="module")
def demo(shared: Path) -> Iterator[Path]:
    env = code_env(ROOT)
    env.update(XDG_CACHE_HOME=str(shared / "xdg-cache"), XDG_STATE_HOME=str(shared / "xdg-state"))
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        env.pop(name, None)
    yield build_demo(shared / "invoice-export", env)


def judged(
    demo: Path, entry: Entry, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any] | None, str]:
    """verify's exit code, report (None when it refused the patch) and stderr."""
    patch = entry.patch(demo)
    capsys.readouterr()
    try:
        code, report = verify(demo, patch, "--reuse-base")
    except FileNotFoundError:  # no verify.json: the patch was refused, with one line
        return 64, None, capsys.readouterr().err
    return code, report, capsys.readouterr().err


def _cases(entries: list[Entry], missed: dict[str, str]) -> list[Any]:
    return [
        pytest.param(
            e,
            id=e.name,
            marks=[pytest.mark.xfail(strict=True, reason=missed[e.name])] if e.name in missed else [],
        )
        for e in entries
    ]


# Cheats today's verify does not catch (see the #18 corpus report); the test stays until it does.
MISSED: dict[str, str] = {}
# One cheat per way of hiding; the bench (tests/bench/bench_verify_corpus.py) runs them all.
KEPT_CHEATS = (
    "demo-skip-mark",
    "demo-weakened-assert",
    "demo-conftest-old-function",
    "demo-pytest-in-sys-modules",
    "demo-shebang-three-functions",
)
ISSUE_HONEST = [e for e in HONEST if e.name in ("demo-extract-helper", "demo-test-rename")]
SOME_CHEATS = [e for e in CHEATS if e.name in KEPT_CHEATS]


def test_the_kept_entries_are_in_the_corpus() -> None:
    assert len(SOME_CHEATS) == len(KEPT_CHEATS) and len(ISSUE_HONEST) == 2


@pytest.mark.parametrize("entry", _cases(ISSUE_HONEST, {}))
def test_an_honest_patch_is_accepted(
    demo: Path, entry: Entry, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, error = judged(demo, entry, capsys)
    assert report is not None, error
    assert report["verdict"] == "ACCEPT", failing(report)
    assert code == 0


@pytest.mark.parametrize("entry", _cases(SOME_CHEATS, MISSED))
def test_a_cheat_is_rejected_for_the_reason_a_reviewer_needs(
    demo: Path, entry: Entry, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, error = judged(demo, entry, capsys)
    reasons = [(entry.gate, entry.reason), *entry.also]
    if report is None:
        assert any(g == REFUSED and r in error for g, r in reasons), error
        return
    assert report["verdict"] == "REJECT" and code & 2, failing(report)
    shown = {gate: said(report, gate) for gate, _ in reasons if gate in failing(report)}
    assert any(r in shown.get(g, "") for g, r in reasons), (entry.gate, entry.reason, shown, failing(report))


def test_the_behaviour_change_the_cheats_hide_is_rejected_on_its_own(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reference: without a cheat, the base's test sees the change, the pins do not."""
    [entry] = [e for e in BEHAVIOUR if e.name == "demo-truncate-by-default"]
    _, report, error = judged(demo, entry, capsys)
    assert report is not None, error
    assert failing(report) == {"Tests": ["clean"]}
    assert f"tests/test_export.py::{entry.reason}: passed → failed" in said(report, "Tests")


def test_an_edited_test_is_shown_and_judged_with_the_base_s(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [entry] = [e for e in CHEATS if e.name == "demo-weakened-assert"]
    _, report, error = judged(demo, entry, capsys)
    assert report is not None, error
    assert report["test_side"]["edited"] == ["tests/test_export.py"]
    [box] = report["boxes"]
    assert box["own"] == "ok"  # the weakened test passes on its own, and hides nothing
    assert report["ran"] != report["patched"]  # the judged commit: the base's tests put back
