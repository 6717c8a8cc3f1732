"""`charpin-remote verify` end to end on the clean box: the demo's invoice exporter, with pins and
tests, judged against agent-style patches; each verdict right, and for the right reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.remote.demo import build_demo_repo

from tests.conftest import git
from tests.hostile.harness import require_bwrap

pytestmark = pytest.mark.slow

RUNNER_PATH = str(Path(__file__).resolve().parents[3] / "runner")
CODE = "export_invoices.py"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return build_demo_repo(tmp_path / "invoice-export", stale=False).path


def agent_patch(repo: Path, edits: dict[str, str | None]) -> bytes:
    """The diff an agent would hand over for these edits (None deletes); the tree is restored."""
    for rel, text in edits.items():
        path = repo / rel
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--binary"], capture_output=True, check=True
    ).stdout
    git(repo, "reset", "-q", "--hard", "HEAD")
    return diff


def replaced(repo: Path, rel: str, old: str, new: str) -> str:
    text = (repo / rel).read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {rel}"
    return text.replace(old, new, 1)


def verify(repo: Path, patch: bytes, *extra: str) -> tuple[int, dict[str, Any]]:
    patch_file = repo.parent / "agent.diff"
    patch_file.write_bytes(patch)
    out = repo.parent / "verify"
    run_id = f"v{len(list(out.glob('*'))) if out.exists() else 0}"
    argv = ["verify", "--repo", str(repo), "--patch", str(patch_file), "--out", str(out)]
    code = main([*argv, "--run-id", run_id, "--json", "--timeout", "120", *extra])
    return code, json.loads((out / run_id / "verify.json").read_text())


def failing(report: dict[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for gate in report["gates"]:
        if gate["status"] == "FAIL":
            found.setdefault(gate["gate"], []).append(gate["box"])
    return found


def seen(report: dict[str, Any], gate: str) -> list[dict[str, Any]]:
    return [o for o in report["observations"] if o["gate"] == gate]


EXTRACT_OLD = """        rate = rates.get(row.get("category") or "standard", rates["standard"])
        value = gross(amount, rate, rounding)
"""
EXTRACT_NEW = """        value = gross(amount, _rate_of(row, rates), rounding)
"""
HELPER = """

def _rate_of(row, rates):
    return rates.get(row.get("category") or "standard", rates["standard"])
"""


def test_a_pure_extract_function_refactor_is_accepted(repo: Path) -> None:
    text = replaced(repo, CODE, EXTRACT_OLD, EXTRACT_NEW)
    text = text.replace("\n\ndef export(", HELPER + "\n\ndef export(", 1)
    code, report = verify(repo, agent_patch(repo, {CODE: text}))
    assert report["verdict"] == "ACCEPT", failing(report)
    assert code == 0
    assert report["scope"] == [f"{CODE}:export"] and report["helpers"] == [f"{CODE}:_rate_of"]
    assert [b["label"] for b in report["boxes"]] == ["clean"]


def test_a_stderr_wording_change_is_rejected_as_behaviour(repo: Path) -> None:
    text = replaced(repo, CODE, '"; row skipped"', '" (row skipped)"')
    code, report = verify(repo, agent_patch(repo, {CODE: text}))
    assert report["verdict"] == "REJECT" and code & 2
    assert failing(report) == {"Behaviour": ["clean"]}
    [drift] = seen(report, "Behaviour")
    assert drift["item"] == "skipped-row" and drift["what"] == "failed (stderr)"
    assert drift["action"].startswith("stderr drift: a contract")
    assert any(line.startswith("+warning:") and "(row skipped)" in line for line in drift["detail"])


def test_a_rounding_change_shows_the_one_cent_diff(repo: Path) -> None:
    text = replaced(repo, CODE, "rounding=rounding)", "rounding=ROUND_DOWN)")
    text = text.replace("from decimal import ", "from decimal import ROUND_DOWN, ", 1)
    _, report = verify(repo, agent_patch(repo, {CODE: text}))
    assert report["verdict"] == "REJECT"
    assert "Behaviour" in failing(report) and "Tests" in failing(report)
    [first, *_] = seen(report, "Behaviour")
    assert first["item"] == "eur-quarter" and first["what"] == "failed (stdout)"
    assert "-INV-1002,Bücherei Süd,19.99,20.99,EUR" in first["detail"]
    assert "+INV-1002,Bücherei Süd,19.99,20.98,EUR" in first["detail"]
    assert report["scope"] == [f"{CODE}:gross"]  # the new import is not a change of its own


def test_a_pin_rewritten_together_with_the_code_is_rejected(repo: Path) -> None:
    text = replaced(repo, CODE, '"; row skipped"', '" (row skipped)"')
    pins = (repo / "pins.jsonl").read_text().replace("row skipped", "(row skipped)")
    _, report = verify(repo, agent_patch(repo, {CODE: text, "pins.jsonl": pins}))
    assert report["verdict"] == "REJECT"
    assert failing(report)["Protected paths"] == ["all boxes"]
    assert [o["item"] for o in seen(report, "Protected paths")] == ["pins.jsonl"]
    # The base's pins ran against the patched code: the rewrite changed nothing about the gate.
    assert "Behaviour" in failing(report)


def test_a_deleted_test_is_shown_and_can_no_longer_hide_anything(repo: Path) -> None:
    """#18 item 2: the patched code is judged with the base's tests, so a test the patch
    deletes still runs (and must pass); the deletion is shown, and hides nothing."""
    rel = "tests/test_export.py"
    text = (repo / rel).read_text()
    start = text.index("def test_bad_amount_is_skipped_with_its_line_number")
    end = text.index("\ndef ", start + 1)
    _, report = verify(repo, agent_patch(repo, {rel: text[:start] + text[end + 1 :]}))
    assert report["verdict"] == "ACCEPT", failing(report)
    assert report["test_side"]["edited"] == [rel]
    judged = json.loads(
        (repo.parent / "verify" / "v0" / "patched" / "clean" / "receipt.json").read_text()
    )
    assert any(
        t.endswith("::test_bad_amount_is_skipped_with_its_line_number") for t in judged["outcomes"]
    )
    # With the production code broken as well, the deleted test is what catches it.
    broken = replaced(repo, CODE, "rounding=rounding)", "rounding=ROUND_DOWN)")
    broken = broken.replace("from decimal import ", "from decimal import ROUND_DOWN, ", 1)
    _, report = verify(repo, agent_patch(repo, {rel: text[:start] + text[end + 1 :], CODE: broken}))
    assert report["verdict"] == "REJECT"
    assert "Tests" in failing(report)


def test_a_ledger_entry_hiding_a_failing_test_changes_nothing(repo: Path) -> None:
    text = replaced(repo, CODE, "rounding=rounding)", "rounding=ROUND_DOWN)")
    text = text.replace("from decimal import ", "from decimal import ROUND_DOWN, ", 1)
    ledger = json.loads((repo / "flake-ledger.json").read_text())
    ledger["entries"].append(
        {
            "id": "tests/test_export.py::test_quarter_total_matches_the_ledger",
            "reason": "flaky",
            "owner": "agent@example.invalid",
            "expires": "2099-12-31",
        }
    )
    patch = agent_patch(repo, {CODE: text, "flake-ledger.json": json.dumps(ledger, indent=2)})
    _, report = verify(repo, patch)
    assert report["verdict"] == "REJECT"
    assert [o["item"] for o in seen(report, "Protected paths")] == ["flake-ledger.json"]
    # The base's ledger applied: the test still ran, and failed.
    items = {o["item"]: o["what"] for o in seen(report, "Tests")}
    quarter = "tests/test_export.py::test_quarter_total_matches_the_ledger"
    assert items[quarter] == "passed → failed"


def test_narrowing_watch_does_not_hide_a_test_that_rewrites_a_fixture(repo: Path) -> None:
    toml = replaced(repo, "pyproject.toml", 'watch = ["tests/fixtures"]', "watch = []")
    writer = (
        "from pathlib import Path\n\n\ndef test_refresh_rates():\n"
        "    path = Path(__file__).parent / 'fixtures' / 'rates.json'\n"
        "    path.write_text(path.read_text().replace('0.20', '0.19'))\n"
    )
    patch = agent_patch(repo, {"pyproject.toml": toml, "tests/test_refresh.py": writer})
    _, report = verify(repo, patch)
    assert report["verdict"] == "REJECT"
    assert "pyproject.toml [tool.charpin]" in [o["item"] for o in seen(report, "Protected paths")]
    whats = [o["what"] for o in seen(report, "Tests")]
    assert any("Fixture integrity" in w and "tests/fixtures/rates.json" in w for w in whats), whats


def test_four_changed_functions_exceed_the_scope(repo: Path) -> None:
    text = (repo / CODE).read_text()
    for name in ("load_rates", "gross", "export", "main"):
        head = text.index(f"def {name}(")
        colon = text.index(":\n", head) + 2
        text = text[:colon] + f'    """{name}."""\n' + text[colon:]
    _, report = verify(repo, agent_patch(repo, {CODE: text}))
    assert report["verdict"] == "REJECT"
    assert failing(report) == {"Scope": ["all boxes"]}
    assert len(report["scope"]) == 4
    _, report = verify(repo, agent_patch(repo, {CODE: text}), "--max-changed", "4")
    assert report["verdict"] == "ACCEPT"


def test_a_changed_conftest_is_a_harness_change_and_no_scope(repo: Path) -> None:
    conftest = (
        (repo / "tests/conftest.py")
        .read_text()
        .replace("def rates():\n", 'def rates():\n    """Rates."""\n', 1)
    )
    _, report = verify(repo, agent_patch(repo, {"tests/conftest.py": conftest}))
    assert report["verdict"] == "REJECT"
    assert failing(report) == {"Protected paths": ["all boxes"]}
    assert report["scope"] == []
    [found] = seen(report, "Protected paths")
    assert found["item"] == "tests/conftest.py (a conftest)"


def test_a_patch_that_does_not_apply_is_one_line_and_exit_64(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = replaced(repo, CODE, '"; row skipped"', '" (row skipped)"')
    patch = agent_patch(repo, {CODE: text})
    (repo / CODE).write_text(text.replace("exported %d invoices", "wrote %d invoices"))
    git(repo, "commit", "-qam", "upstream moved on")
    (repo / CODE).write_text(text.replace('" (row skipped)"', '"; dropped"'))
    git(repo, "commit", "-qam", "and again")
    patch_file = repo.parent / "stale.diff"
    patch_file.write_bytes(patch)
    code = main(["verify", "--repo", str(repo), "--patch", str(patch_file)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 64
    assert len(err) == 1 and err[0].startswith("charpin-remote: error: the patch does not apply")


def test_a_red_base_makes_the_verdict_incomplete(repo: Path) -> None:
    broken = replaced(repo, "tests/test_export.py", 'Decimal("391.05")', 'Decimal("391.06")')
    (repo / "tests/test_export.py").write_text(broken)
    git(repo, "commit", "-qam", "a red base")
    text = replaced(repo, CODE, EXTRACT_OLD, EXTRACT_NEW)
    text = text.replace("\n\ndef export(", HELPER + "\n\ndef export(", 1)
    code, report = verify(repo, agent_patch(repo, {CODE: text}))
    assert report["verdict"] == "INCOMPLETE"
    assert code & 16 and not code & 2
    health = [g for g in report["gates"] if g["gate"] == "Base health"]
    assert health[0]["status"] == "INCOMPLETE" and "failed" in health[0]["detail"]


def test_the_local_box_is_refused(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    patch_file = repo.parent / "p.diff"
    patch_file.write_bytes(b"")
    code = main(["verify", "--repo", str(repo), "--patch", str(patch_file), "--hosts", "local"])
    assert code == 64
    assert "`local` runs the working tree" in capsys.readouterr().err


def test_a_new_environment_read_is_rejected_as_an_entry_point_change(repo: Path) -> None:
    text = replaced(
        repo,
        CODE,
        '    currency = os.environ.get("INVOICE_CURRENCY", "EUR")\n',
        '    currency = os.environ.get("INVOICE_CURRENCY", os.environ.get("INVOICE_DEFAULT", "EUR"))\n',
    )
    _, report = verify(repo, agent_patch(repo, {CODE: text}))
    assert report["verdict"] == "REJECT"
    assert failing(report)["Entry points"] == ["all boxes"]
    [moved] = seen(report, "Entry points")
    assert "INVOICE_DEFAULT (new)" in moved["item"] and CODE in moved["item"]
    # The pins that record env reads say so too, even though none of them sets the key.
    assert {o["what"] for o in seen(report, "Behaviour")} == {"failed (env-read)"}


def test_a_new_dependency_is_rejected(repo: Path) -> None:
    toml = "[project]\nname = 'invoice-export'\nversion = '1'\ndependencies = ['requests>=2']\n\n"
    toml += (repo / "pyproject.toml").read_text()
    _, report = verify(repo, agent_patch(repo, {"pyproject.toml": toml}))
    assert report["verdict"] == "REJECT"
    assert [o["item"] for o in seen(report, "Dependencies")] == [
        "pyproject.toml: [project].dependencies"
    ]


def test_a_conftest_that_rewrites_outcomes_is_caught(repo: Path) -> None:
    text = replaced(repo, CODE, "rounding=rounding)", "rounding=ROUND_DOWN)")
    text = text.replace("from decimal import ", "from decimal import ROUND_DOWN, ", 1)
    liar = (
        (repo / "tests/conftest.py").read_text()
        + "\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    report = outcome.get_result()\n"
        "    if report.failed:\n        report.outcome = 'passed'\n"
    )
    _, report = verify(repo, agent_patch(repo, {CODE: text, "tests/conftest.py": liar}))
    assert report["verdict"] == "REJECT"
    # The pins are replayed by the runner, outside pytest: the conftest cannot touch them.
    assert "Behaviour" in failing(report)
    [box] = report["boxes"]
    assert box["patched"] != "ok" or "Tests" in failing(report), report["boxes"]


def test_a_patched_test_cannot_plant_code_for_later_runs(repo: Path) -> None:
    require_bwrap()
    planted = Path(sys.prefix) / "zz_charpin_verify_planted.pth"
    attack = (
        "import sys\nfrom pathlib import Path\n\n\ndef test_plants():\n"
        f"    target = Path({str(planted)!r})\n"
        "    try:\n        target.write_text('import os\\n')\n    except OSError:\n        pass\n"
    )
    try:
        _, report = verify(repo, agent_patch(repo, {"tests/test_plant.py": attack}))
        assert not planted.exists(), "the patched test wrote into the interpreter's environment"
        [box] = report["boxes"]
        assert box["patched"] == "ok"
    finally:
        planted.unlink(missing_ok=True)


def test_verify_writes_a_signed_bundle_that_verify_bundle_accepts(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "reviewer"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    allowed = tmp_path / "allowed"
    public = (tmp_path / "reviewer.pub").read_text().strip()
    allowed.write_text(f'reviewer@example namespaces="charpin-verify-v1" {public}\n')
    bundle = tmp_path / "evidence.tar"
    text = replaced(repo, CODE, '"; row skipped"', '" (row skipped)"')
    _, report = verify(
        repo, agent_patch(repo, {CODE: text}), "--bundle", str(bundle), "--sign", str(key)
    )
    assert report["verdict"] == "REJECT"
    capsys.readouterr()
    assert main(["verify-bundle", str(bundle), "--allowed-signers", str(allowed)]) == 0
    line = capsys.readouterr().out
    assert "checks · REJECT" in line and "signed by reviewer@example" in line


def test_a_bundle_binds_the_commit_that_ran_when_protected_paths_were_put_back(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = replaced(repo, CODE, '"; row skipped"', '" (row skipped)"')
    pins = (repo / "pins.jsonl").read_text().replace("row skipped", "(row skipped)")
    bundle = tmp_path / "evidence.tar"
    _, report = verify(
        repo, agent_patch(repo, {CODE: text, "pins.jsonl": pins}), "--bundle", str(bundle)
    )
    assert report["verdict"] == "REJECT" and report["ran"] != report["patched"]
    capsys.readouterr()
    assert main(["verify-bundle", str(bundle)]) == 0
    assert "checks · REJECT" in capsys.readouterr().out


def test_reuse_base_takes_the_base_receipts_of_an_earlier_verify_only_when_asked(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from charpin_coordinator.verify.reuse import reuse_root

    text = replaced(repo, CODE, '"; row skipped"', '" (row skipped)"')
    patch = agent_patch(repo, {CODE: text})
    _, first = verify(repo, patch)
    _, again = verify(repo, patch)
    assert first["base_from"] == "" and again["base_from"] == ""  # never by default
    _, reused = verify(repo, patch, "--reuse-base")
    assert reused["base_from"] == "v1" and reused["verdict"] == first["verdict"] == "REJECT"
    # Kept outside the repository, private to this user.
    kept = reuse_root(repo) / "v1"
    assert sorted(p.name for p in kept.parent.iterdir()) == ["v0", "v1"]
    assert (kept.stat().st_mode & 0o777, (kept / "record.mac").stat().st_mode & 0o777) == (
        0o700,
        0o600,
    )
    # The verify folder's copy is output, not evidence: editing it changes nothing.
    shown = repo.parent / "verify" / "v1" / "base" / "clean" / "receipt.json"
    shown.write_bytes(shown.read_bytes().replace(b'"passed"', b'"failed"', 1))
    _, still = verify(repo, patch, "--reuse-base")
    assert still["base_from"] == "v1"
    # The kept copy changed after the fact: not reused (one note), the next newest one is.
    stored = kept / "base" / "clean" / "receipt.json"
    stored.write_bytes(stored.read_bytes().replace(b'"passed"', b'"failed"', 1))
    capsys.readouterr()
    _, fresh = verify(repo, patch, "--reuse-base")
    assert fresh["base_from"] == "v0"
    [note] = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
    assert f"{kept} is not reused: base/clean/receipt.json changed since it was stored" in note


def test_ctrl_c_during_the_base_run_stops_the_whole_verify(repo: Path, tmp_path: Path) -> None:
    import os
    import signal
    import time

    started = tmp_path / "started"
    hang = (
        "import time\nfrom pathlib import Path\n\n\ndef test_hang():\n"
        f"    Path({str(started)!r}).write_text('x')\n    time.sleep(600)\n"
    )
    git_add = {"tests/test_hang.py": hang}
    for rel, text in git_add.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a slow base")
    patch_file = tmp_path / "p.diff"
    patch_file.write_bytes(
        agent_patch(repo, {CODE: replaced(repo, CODE, '"; row skipped"', '" (x)"')})
    )
    out = tmp_path / "verify"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([RUNNER_PATH, str(Path(RUNNER_PATH).parent / "coordinator")]),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "charpin_coordinator", "verify", "--repo", str(repo), "--patch",
         str(patch_file), "--out", str(out), "--run-id", "v1", "--json", "-q", "--sandbox", "off"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        ends = time.monotonic() + 60
        while not started.exists() and time.monotonic() < ends:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    report = json.loads((out / "v1" / "verify.json").read_text())
    assert proc.returncode & 4 and report["verdict"] != "ACCEPT"
    assert not (out / "v1" / "patched").exists()  # the patched run never started
