"""A pin that drifts on a box whose run folder is removed after the run (#22): the receipt brings
back the pin's actual outputs (bounded, masked like the logs), the run folder keeps them under
`<box>/pins-actual/<pin>/`, and every report shows golden against actual. Real `charpin-remote
run --hosts clean` (the agent's pipeline: a fresh checkout in its own folder, removed after)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_runner.pins.execute import Run
from charpin_runner.pins.model import Case, Observation, Pin
from charpin_runner.pins.replay import Outcome, actual_outputs
from charpin_runner.receipt import ACTUAL_BYTES

from tests.conftest import git, make_repo
from tests.coordinator.test_html_since import dom, links

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")
SECRET = "tok-0123456789-abcdef"  # the coordinator's secret, which the program also prints

REPORT = (
    "import sys\n"
    "rows = [('acme', 10), ('globex', 20)]\n"
    "for name, n in rows:\n"
    "    print(f'{name:10} {n:5d}')\n"
    "print('TOTAL', sum(n for _, n in rows))\n"
    "print('token " + SECRET + "', file=sys.stderr)\n"
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.mark.slow
def test_a_drifted_pins_actual_outputs_come_back_masked_and_the_report_diffs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {"report.py": REPORT, "tests/test_ok.py": "def test_ok():\n    pass\n"}
    repo = make_repo(tmp_path / "repo", files)
    record = ["pins", "record", "--id", "totals", "--", "report.py"]
    recorded = subprocess.run(
        [sys.executable, "-m", "charpin_runner", *record],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert recorded.returncode == 0, recorded.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pin the totals")
    (repo / "report.py").write_text(REPORT.replace("('globex', 20)", "('globex', 21)"))
    git(repo, "commit", "-qam", "an agent's change")

    monkeypatch.setenv("DEPLOY_API_TOKEN", SECRET)  # credential-looking: masked everywhere
    out, junit = tmp_path / "runs", tmp_path / "drift.xml"
    said = io.StringIO()
    with redirect_stdout(said):
        argv = ["run", "--repo", str(repo), "--hosts", "clean", "--out", str(out), "-q"]
        code = main([*argv, "--junit", str(junit)])
    assert code & 2, said.getvalue()  # the pin drifted: Pin replay FAIL
    [folder] = list(out.iterdir())
    actual = folder / "clean" / "pins-actual" / "totals"
    assert (actual / "stdout").read_text() == "acme          10\nglobex        21\nTOTAL 31\n"
    assert (actual / "exit_code").read_text() == "0\n"
    stderr = (actual / "stderr").read_text()
    assert SECRET not in stderr and "[redacted:DEPLOY_API_TOKEN]" in stderr
    about = json.loads((actual / "about.json").read_text())
    assert about["stdout"] == {"name": "stdout", "size": 43, "exact": True}
    for path in folder.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path

    text = said.getvalue()
    assert "pins that did not pass (golden against actual" in text
    assert "  clean: pin totals\n" in text
    assert "\n      -TOTAL 30\n      +globex        21\n      +TOTAL 31\n" in text, text
    page = dom((folder / "drift.html").read_text())
    pins = page.by_id("pins")
    assert "+TOTAL 31" in pins.text and "-TOTAL 30" in pins.text
    assert "clean/pins-actual/totals/stdout" in links(pins)
    for href in links(pins):
        assert (folder / href).is_file()
    md = (folder / "drift.md").read_text()
    assert "### Pins that did not pass" in md and "+TOTAL 31" in md
    suites = {s.get("name"): s for s in ET.parse(junit).getroot().iter("testsuite")}
    [case] = list(suites["charpin.clean.pins"].iter("testcase"))
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == "failed (stdout)"
    assert "+TOTAL 31" in (failure.text or "")


def _outcome(stdout: bytes, files: dict[str, bytes]) -> Outcome:
    golden = Observation(exit_code=0, stdout=b"", stderr=b"")
    observed = Observation(exit_code=0, stdout=stdout, stderr=b"")
    return Outcome(Pin(Case(id="p", argv=("x.py",)), golden), Run(observed, files, []), ["stdout"])


def test_actual_outputs_are_bounded_and_say_when_they_are_not_exact() -> None:
    big = b"x" * (ACTUAL_BYTES + 10)
    parts = actual_outputs(_outcome(big, {"report.bin": b"\xff\xfe"}))
    by_name = {p.name: p for p in parts}
    assert len(by_name["stdout"].text) == ACTUAL_BYTES and not by_name["stdout"].exact
    assert by_name["stdout"].size == ACTUAL_BYTES + 10
    # Past the budget the rest come back empty, still named with their size.
    assert by_name["out/report.bin"].text == "" and by_name["out/report.bin"].size == 2
    small = {p.name: p for p in actual_outputs(_outcome(b"ok\n", {"r.bin": b"\xff"}))}
    assert small["stdout"].exact and small["out/r.bin"].text == "\\xff"
    assert not small["out/r.bin"].exact
