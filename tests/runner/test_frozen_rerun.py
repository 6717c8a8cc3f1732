"""`charpin receipt --include-frozen`: the frozen tests run on the side, after every measurement.

Real subprocesses, a real repository, the real plugin. The side run must leave the receipt of
record exactly as a run without it would be, and say honestly whether the frozen tests ran clean.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.conftest import git
from tests.runner.test_receipt_cmd import VAT, add_test, charpin, charpin_env, only_receipt

FLAKY = "tests/test_frozen.py::test_frozen"
OTHER = "tests/test_frozen.py::test_other"


def freeze(repo: Path, body: str, *, ids: tuple[str, ...] = (FLAKY,)) -> None:
    """Commit a test file and a ledger freezing ids."""
    entries = [
        {"id": nodeid, "reason": "flaky on CI", "owner": "ana", "expires": "2099-01-01"}
        for nodeid in ids
    ]
    (repo / ".charpin-ledger.json").write_text(json.dumps({"version": 1, "entries": entries}))
    (repo / "pyproject.toml").write_text('[tool.charpin]\nledger = ".charpin-ledger.json"\n')
    add_test(repo, "test_frozen.py", body)


def side(receipt: dict[str, Any]) -> dict[str, Any]:
    found = receipt["frozen_rerun"]
    assert isinstance(found, dict)
    return found


PASSING = "def test_frozen():\n    pass\n\ndef test_other():\n    pass\n"


def test_frozen_tests_run_on_the_side_and_the_receipt_of_record_is_unchanged(
    git_repo: Path,
) -> None:
    freeze(git_repo, PASSING)
    plain = charpin(git_repo, "--run-id", "r-plain", "-o", str(git_repo.parent / "plain.json"))
    assert plain.returncode == 0, plain.stderr
    result = charpin(git_repo, "--run-id", "r-side", "--include-frozen")
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    before = json.loads((git_repo.parent / "plain.json").read_text())
    # The receipt of record: the frozen test deselected and never executed, as without the flag.
    assert FLAKY not in receipt["collection"]["executed"]
    assert receipt["outcomes"] == before["outcomes"]
    assert receipt["quarantine"]["frozen"] == [FLAKY] and receipt["quarantine"]["leaked"] == []
    assert before["frozen_rerun"] is None
    rerun = side(receipt)
    assert rerun["requested"] == [FLAKY]
    assert rerun["outcomes"] == {FLAKY: "passed"}
    assert rerun["interpretation"] == "ok" and rerun["clean"] is True
    assert rerun["reasons"] == [] and rerun["fixtures_changed"] == []
    assert rerun["tainted"] == []
    assert "frozen    re-run outside the gate: 1 of 1 passed · clean" in result.stdout


def test_a_failing_frozen_test_is_not_clean_and_never_fails_the_run(git_repo: Path) -> None:
    freeze(git_repo, "def test_frozen():\n    assert False\n\ndef test_other():\n    pass\n")
    result = charpin(git_repo, "--run-id", "r-fail", "--include-frozen")
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    assert receipt["exit"]["interpretation"] == "ok"
    rerun = side(receipt)
    assert rerun["outcomes"] == {FLAKY: "failed"}
    assert rerun["clean"] is False and rerun["interpretation"] == "failed"
    assert any("did not pass" in reason and FLAKY in reason for reason in rerun["reasons"])


def test_a_frozen_test_that_mutates_a_fixture_is_not_clean_and_the_run_stays_clean(
    git_repo: Path,
) -> None:
    body = (
        "from pathlib import Path\n\n"
        "def test_frozen():\n"
        "    Path('tests/fixtures/rates.json').write_text('{}')\n\n"
        "def test_other():\n    pass\n"
    )
    freeze(git_repo, body)
    result = charpin(git_repo, "--run-id", "r-mut", "--include-frozen")
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    # Measured before the side run: the receipt of record saw no fixture move.
    assert receipt["fixtures"]["changed"] == [] and receipt["exit"]["interpretation"] == "ok"
    rerun = side(receipt)
    assert rerun["outcomes"] == {FLAKY: "passed"}
    assert rerun["fixtures_changed"] == ["tests/fixtures/rates.json"]
    assert rerun["clean"] is False


def test_a_parametrized_family_runs_whole_and_only_it(git_repo: Path) -> None:
    body = (
        "import pytest\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_frozen(n):\n    assert n\n\n"
        "def test_frozen_other():\n    pass\n"
    )
    freeze(git_repo, body)
    result = charpin(git_repo, "--run-id", "r-fam", "--include-frozen")
    assert result.returncode == 0, result.stderr
    rerun = side(only_receipt(git_repo))
    family = [f"{FLAKY}[1]", f"{FLAKY}[2]"]
    # Exact: `test_frozen_other` shares the prefix and must not join the side run.
    assert rerun["requested"] == family
    assert sorted(rerun["outcomes"]) == family and rerun["clean"] is True


def test_no_ledger_or_nothing_frozen_means_no_side_run(git_repo: Path) -> None:
    result = charpin(git_repo, "--run-id", "r-none", "--include-frozen")
    assert result.returncode == 0, result.stderr
    assert only_receipt(git_repo)["frozen_rerun"] is None


def test_a_frozen_test_that_commits_and_plants_a_file_is_not_clean(git_repo: Path) -> None:
    body = (
        "import subprocess\nfrom pathlib import Path\n\n"
        "def test_frozen():\n"
        "    Path('planted.py').write_text('x = 1\\n')\n"
        "    Path('README.txt').write_text('rewritten\\n')\n"
        "    subprocess.run(['git', 'commit', '-qam', 'side'], check=True)\n\n"
        "def test_other():\n    pass\n"
    )
    freeze(git_repo, body)
    before = git(git_repo, "rev-parse", "HEAD")
    (git_repo / "README.txt").write_text("readme\n")
    git(git_repo, "add", "README.txt")
    git(git_repo, "commit", "-qm", "readme")
    head = git(git_repo, "rev-parse", "HEAD")
    assert head != before
    # Without bubblewrap, whose read-only .git would stop the commit before the side run sees it.
    result = charpin(git_repo, "--run-id", "r-git", "--include-frozen", "--sandbox", "off")
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    # The record was measured before: its identity and tree are the commit's.
    assert receipt["identity"]["head_after"] == head and receipt["tree"]["written"] == []
    rerun = side(receipt)
    assert rerun["outcomes"] == {FLAKY: "passed"} and rerun["clean"] is False
    said = " | ".join(rerun["reasons"])
    assert f"moved HEAD from {head[:12]}" in said, said
    assert "planted.py" in said, said
    assert rerun["tainted"] and all(t in rerun["reasons"] for t in rerun["tainted"])


def test_a_side_run_on_a_tree_the_measured_run_rewrote_is_not_clean(git_repo: Path) -> None:
    # The frozen test fails as committed; a measured test "regenerates" it into a passing one.
    body = (
        "from pathlib import Path\n\n"
        "def test_frozen():\n    assert False\n\n"
        "def test_other():\n"
        "    path = Path('tests/test_frozen.py')\n"
        "    path.write_text(path.read_text().replace('assert False', 'assert True'))\n"
    )
    freeze(git_repo, body)
    result = charpin(git_repo, "--run-id", "r-regen", "--include-frozen")
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    assert receipt["tree"]["written"] == ["tests/test_frozen.py"]
    rerun = side(receipt)
    assert rerun["outcomes"] == {FLAKY: "passed"}
    assert rerun["clean"] is False
    assert any("measured run had changed the checkout" in r for r in rerun["tainted"])


def test_a_side_run_write_into_a_protected_path_is_the_side_runs_not_the_records(
    git_repo: Path, tmp_path: Path
) -> None:
    guarded = tmp_path / "guarded"
    guarded.mkdir()
    (guarded / "lib.py").write_text("ok = 1\n")
    body = (
        "from pathlib import Path\n\n"
        f"def test_frozen():\n    Path({str(guarded / 'lib.py')!r}).write_text('ok = 0\\n')\n\n"
        "def test_other():\n    pass\n"
    )
    freeze(git_repo, body)
    result = charpin(
        git_repo,
        "--run-id",
        "r-prot",
        "--include-frozen",
        "--sandbox",
        "off",
        "--protect",
        str(guarded),
    )
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    # The record's verdict is the measured run's; the side run's write is said, not blamed.
    assert receipt["exit"]["interpretation"] == "ok"
    assert any("side run" in r and str(guarded) in r for r in receipt["exit"]["reasons"])
    rerun = side(receipt)
    assert rerun["clean"] is False
    assert any(str(guarded) in r for r in rerun["reasons"])


def test_ctrl_c_during_the_side_run_leaves_the_records_verdict_alone(git_repo: Path) -> None:
    marker = git_repo.parent / "side-started"
    body = (
        "import time\nfrom pathlib import Path\n\n"
        f"def test_frozen():\n    Path({str(marker)!r}).write_text('1')\n    time.sleep(60)\n\n"
        "def test_other():\n    pass\n"
    )
    freeze(git_repo, body)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "charpin_runner",
            "receipt",
            "--run-id",
            "r-int",
            "--include-frozen",
            # The marker lies outside the repository, where the sandbox's view shows nothing.
            "--sandbox",
            "off",
        ],
        cwd=git_repo,
        env=charpin_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    receipt = only_receipt(git_repo)
    assert receipt["exit"]["interpretation"] == "ok", receipt["exit"]
    assert receipt["outcomes"] == {VAT: "passed", OTHER: "passed"}
    rerun = side(receipt)
    assert rerun["interpretation"] == "interrupted" and rerun["clean"] is False
