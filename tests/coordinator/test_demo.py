"""`charpin-remote demo`: the example repository, the explanation, and the whole tour end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from charpin_coordinator.drift import build_report
from charpin_coordinator.receipts import read_receipt_file
from charpin_coordinator.remote.demo import STALE_PATHS, DemoRepo, build_demo_repo, explain
from charpin_coordinator.remote.demo_cli import demo_verdict
from charpin_runner.errors import CharpinError
from charpin_runner.receipt import Receipt

from tests.conftest import git

ROOT = Path(__file__).resolve().parents[2]
STALE = "tests/fixtures/rates.json"
FAILING = "tests/test_export.py::test_quarter_total_matches_the_ledger"
TIMEOUT = 180


def _env(tmp: Path) -> dict[str, str]:
    """This checkout importable in a child process, and a private temp area to inspect."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")])
    env["TMPDIR"] = str(tmp)
    env["XDG_CACHE_HOME"] = str(
        tmp.parent / "xdg-cache"
    )  # the clean box's cache, off the real home
    return env


def _receipt(repo: Path, label: str, out: Path, tmp_path: Path) -> tuple[str, Receipt]:
    """A real receipt from the real runner, as a box would produce it."""
    path = out / f"{label}.json"
    argv = [sys.executable, "-m", "charpin_runner", "receipt", "--repo", str(repo)]
    argv += ["--label", label, "-o", str(path), "-q"]
    tmp = tmp_path / f"tmp-{label}"
    tmp.mkdir()
    subprocess.run(argv, env=_env(tmp), capture_output=True, timeout=TIMEOUT, check=False)
    return label, read_receipt_file(path)


def _clean_clone(demo: DemoRepo, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(demo.path), str(dest)], check=True, timeout=60)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> DemoRepo:
    return build_demo_repo(tmp_path_factory.mktemp("demo") / "invoice-export")


def test_demo_repo_is_committed_with_pins_ledger_and_fixtures(built: DemoRepo) -> None:
    repo = built.path
    tracked = set(git(repo, "ls-files").splitlines())
    assert {
        ".gitignore",
        "export_invoices.py",
        "pins.jsonl",
        "flake-ledger.json",
        "pyproject.toml",
        "tests/conftest.py",
        "tests/fixtures/rates.json",
        "tests/fixtures/invoices.csv",
        "tests/test_export.py",
    } <= tracked
    assert not any(name.endswith(".tmpl") for name in tracked)
    assert git(repo, "rev-parse", "HEAD") == built.commit
    # pins land in a commit of their own, after the code they pin
    assert git(repo, "show", "--name-only", "--format=", "HEAD").splitlines() == ["pins.jsonl"]
    assert "[tool.charpin]" in (repo / "pyproject.toml").read_text()


def test_demo_pins_are_recorded(built: DemoRepo) -> None:
    pins = [json.loads(line) for line in (built.path / "pins.jsonl").read_text().splitlines()]
    assert len(pins) >= 3
    assert all(isinstance(pin.get("exit_code"), int) for pin in pins)
    assert {pin["exit_code"] for pin in pins} >= {0, 2, 3}  # ok, no input, rows skipped
    assert any(pin["files"] for pin in pins)  # an output file is part of the contract


def test_demo_ledger_freezes_one_existing_test_until_far_ahead(built: DemoRepo) -> None:
    ledger = json.loads((built.path / "flake-ledger.json").read_text())
    [entry] = ledger["entries"]
    assert entry["owner"] and entry["reason"] and entry["expires"] >= "2090-01-01"
    path, name = entry["id"].split("::")
    assert f"def {name}(" in (built.path / path).read_text()


def test_demo_leaves_exactly_the_stale_fixture_dirty(built: DemoRepo) -> None:
    assert built.stale == STALE_PATHS == (STALE,)
    assert git(built.path, "status", "--porcelain") == f"M {STALE}"
    assert '"0.21"' in (built.path / STALE).read_text()
    assert '"0.20"' in git(built.path, "show", f"HEAD:{STALE}")


def test_demo_without_stale_is_clean(tmp_path: Path) -> None:
    demo = build_demo_repo(tmp_path / "repo", stale=False)
    assert demo.stale == ()
    assert git(demo.path, "status", "--porcelain") == ""


def test_demo_commit_is_the_same_on_every_build(built: DemoRepo, tmp_path: Path) -> None:
    assert build_demo_repo(tmp_path / "again").commit == built.commit


def test_demo_refuses_a_folder_with_files(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(CharpinError, match="not empty"):
        build_demo_repo(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_explanation_names_the_stale_fixture_and_the_test_it_broke(
    built: DemoRepo, tmp_path: Path
) -> None:
    clean = _clean_clone(built, tmp_path / "clean")
    receipts = [
        _receipt(clean, "clean", tmp_path, tmp_path),
        _receipt(built.path, "local", tmp_path, tmp_path),
    ]
    lines = explain(build_report(receipts), receipts)
    assert len(lines) == 2
    assert lines[0].startswith(f"local ran with an uncommitted edit to {STALE}: ")
    assert "Clean tree" in lines[0] and "Fixture integrity" in lines[0]
    assert f"{FAILING} passed; on local it failed" in lines[1]
    assert built.commit[:12] in lines[1] and f"git diff -- {STALE}" in lines[1]


def test_explanation_is_empty_when_nothing_is_stale(tmp_path: Path) -> None:
    demo = build_demo_repo(tmp_path / "repo", stale=False)
    clean = _clean_clone(demo, tmp_path / "clean")
    receipts = [
        _receipt(clean, "clean", tmp_path, tmp_path),
        _receipt(demo.path, "local", tmp_path, tmp_path),
    ]
    report = build_report(receipts)
    assert report.exit_code == 0
    assert explain(report, receipts) == []


def test_explanation_follows_what_the_stale_file_did(tmp_path: Path) -> None:
    # An uncommitted fixture no test reads: caught by the gates, but no outcome moves.
    demo = build_demo_repo(tmp_path / "repo", stale=False)
    clean = _clean_clone(demo, tmp_path / "clean")
    (demo.path / "tests/fixtures/notes.txt").write_text("left by a local run\n")
    receipts = [
        _receipt(clean, "clean", tmp_path, tmp_path),
        _receipt(demo.path, "local", tmp_path, tmp_path),
    ]
    lines = explain(build_report(receipts), receipts)
    assert lines[0].startswith("local ran with an uncommitted edit to tests/fixtures/notes.txt: ")
    assert "every test gives the same result" in lines[1]
    assert FAILING not in lines[1]


def _demo(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    area = tmp_path / "area"
    area.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "charpin_coordinator", "demo", "--dir", str(area), *extra]
    done = subprocess.run(
        argv, env=_env(area), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    return done, area


@pytest.mark.slow
def test_demo_command_catches_the_stale_fixture_and_cleans_up(tmp_path: Path) -> None:
    done, area = _demo(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr  # it caught what it planted
    out = done.stdout
    [verdict] = [ln for ln in out.splitlines() if ln.startswith("the run itself exited")]
    assert verdict.startswith("the run itself exited 3 (1 ")  # 1 tests failed | 2 drift
    assert verdict.endswith("that is what it is meant to catch")
    assert "run folder:" not in out  # it is removed with the example: never show it
    assert "Clean tree" in out and "FAIL" in out  # the run's own report
    act_one, act_two = out.split("Act two: an agent proposes a patch")
    _, explanation = act_one.split("What the demo caught:\n")
    lines = [line for line in explanation.splitlines() if line.startswith("  ")]
    assert len(lines) == 2
    assert lines[0].strip().startswith(f"local ran with an uncommitted edit to {STALE}")
    assert FAILING in lines[1]
    # Act two: the agent's rounding patch is verified base against patched and rejected.
    assert "charpin verify · REJECT" in act_two
    _, caught = act_two.split("What verify caught:\n")
    assert "19.99,20.99,EUR became INV-1002,Bücherei Süd,19.99,20.98,EUR" in caught
    assert list(area.iterdir()) == []  # example repo, clean box and run folders all removed


@pytest.mark.slow
def test_demo_command_control_run_catches_nothing(tmp_path: Path) -> None:
    done, area = _demo(tmp_path, "--no-stale")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "What the demo caught" not in done.stdout
    assert "Nothing was caught" in done.stdout
    assert "the run itself exited" not in done.stdout and "NOT caught" not in done.stdout
    assert list(area.iterdir()) == []


@pytest.mark.slow
def test_demo_command_keep_prints_the_kept_repository(tmp_path: Path) -> None:
    done, area = _demo(tmp_path, "--keep")
    assert done.returncode == 0, done.stderr
    assert "run folder:" in done.stdout
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("kept the example")]
    kept = Path(line.split(": ", 1)[1])
    assert kept.parent.parent == area
    assert (kept / ".git").is_dir() and git(kept, "status", "--porcelain") == f"M {STALE}"
    assert list((kept / ".charpin" / "runs").iterdir())  # the run folder is kept with it


def test_demo_dir_must_exist(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "charpin_coordinator", "demo", "--dir", str(tmp_path / "nope")]
    done = subprocess.run(
        argv, env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 64
    assert done.stderr.strip().splitlines() == [
        f"charpin-remote: error: --dir {tmp_path / 'nope'} is not a folder; "
        "create it or leave --dir out"
    ]


def test_demo_needs_pytest_in_this_interpreter(tmp_path: Path) -> None:
    # `sys.modules[name] = None` makes the import system report the module as absent.
    code = (
        "import sys; sys.modules['pytest'] = None; "
        "from charpin_coordinator.cli import main; sys.exit(main(['demo', '--dir', sys.argv[1]]))"
    )
    argv = [sys.executable, "-c", code, str(tmp_path)]
    done = subprocess.run(
        argv, env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 64
    assert "cannot import; install it (pip install pytest)" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_demo_verdict_succeeds_only_when_the_planted_drift_is_caught() -> None:
    bits = ["1 tests failed", "2 drift or a gate blocked"]
    code, line = demo_verdict(["local ran with ...", "which broke ..."], 3, bits, stale=True)
    assert code == 0 and "exited 3 (1 tests failed; 2 drift" in line
    code, line = demo_verdict([], 1, bits[:1], stale=True)  # nothing explained: not caught
    assert code == 1 and "NOT caught" in line and "exited 1" in line
    code, line = demo_verdict(["an explanation"], 1, bits[:1], stale=True)  # no drift bit
    assert code == 1 and "NOT caught" in line
    assert demo_verdict([], 0, [], stale=False) == (0, "")  # the control run keeps its code
    assert demo_verdict([], 4, ["4 a box was not evaluated"], stale=False) == (4, "")
