"""`charpin import` on what the seeds' own recipes write (issue #11 item 3).

Each test copies a seed's code from tests/data/seeds/ into a scratch git repository, runs it as
the seed document says (the recorder, the manifest harness, the command-matrix harness, the
evidence wrapper), imports what it wrote with the real `charpin` command, and checks the import
replays green against the unchanged program, then that an edit to the program turns it red.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git

ROOT = Path(__file__).resolve().parents[2]
RUNNER = str(ROOT / "runner")
COORDINATOR = str(ROOT / "coordinator")
SEEDS = ROOT / "tests" / "data" / "seeds"


def _copy_seed(number: str, repo: Path) -> None:
    """The seed's files under their real names (`x.py.seed` -> `x.py`)."""
    source = SEEDS / number
    for path in sorted(source.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(source).as_posix().removesuffix(".seed")
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)


def _repo(tmp_path: Path, number: str) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _copy_seed(number, repo)
    (repo / ".gitignore").write_text("__pycache__/\n.charpin/\n")
    git(repo, "init", "-q")
    return repo


def _commit(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "seed")


def _run(repo: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A seed's own script, as its document runs it."""
    return subprocess.run(
        [sys.executable, *argv], cwd=repo, capture_output=True, text=True, check=True, timeout=120
    )


def _charpin(repo: Path, *args: str, remote: bool = False) -> subprocess.CompletedProcess[str]:
    """The real `charpin` (or `charpin-remote`) command, run from the repository."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([RUNNER, COORDINATOR])}
    module = "charpin_coordinator" if remote else "charpin_runner"
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in {path.name}"
    path.write_text(text.replace(old, new))


# -- seed 000: pins.jsonl ------------------------------------------------------------------------


def _seed000(tmp_path: Path) -> Path:
    repo = _repo(tmp_path, "000")
    assert "wrote 3 pins" in _run(repo, "record_pins.py").stdout
    _commit(repo)
    return repo


def test_seed000_pins_jsonl_imports_green_then_an_edit_turns_it_red(tmp_path: Path) -> None:
    repo = _seed000(tmp_path)
    before = _charpin(repo, "pins", "check")
    assert before.returncode == 8
    assert "unknown field `stdin_sha256`" in before.stderr

    done = _charpin(repo, "import", "pins-jsonl", "pins.jsonl", "--target", "export_invoices.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported mixed-kinds" in done.stdout
    assert "not carried over: stdin_sha256" in done.stdout
    assert "replayed green against the unchanged program" in done.stdout
    lines = [json.loads(x) for x in (repo / "pins.jsonl").read_text().splitlines()]
    assert [p["argv"] for p in lines] == [["export_invoices.py", "-"]] * 3
    assert all("stdin_sha256" not in p for p in lines)
    assert _charpin(repo, "pins", "check").returncode == 0

    # The seed's first rule: do not change the empty-input exit code from 2 to 0.
    _edit(repo / "export_invoices.py", "return 0 if out else 2", "return 0")
    red = _charpin(repo, "pins", "check")
    assert red.returncode == 2
    assert "DRIFT empty-stdin [exit-code]" in red.stdout


def test_seed000_target_comes_from_the_configuration(tmp_path: Path) -> None:
    repo = _seed000(tmp_path)
    missing = _charpin(repo, "import", "pins-jsonl", "pins.jsonl")
    assert missing.returncode == 64
    assert "--target FILE or set [tool.charpin.pins] target" in missing.stderr
    (repo / "pyproject.toml").write_text('[tool.charpin.pins]\ntarget = "export_invoices.py"\n')
    done = _charpin(repo, "import", "pins-jsonl", "pins.jsonl")
    assert done.returncode == 0, done.stdout + done.stderr


def test_seed000_hand_edited_stdin_is_refused_by_its_hash(tmp_path: Path) -> None:
    repo = _seed000(tmp_path)
    path = repo / "pins.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[2]["stdin"] = rows[2]["stdin"].replace("99.99", "9.99")  # stdin_sha256 left as it was
    edited = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(edited)
    done = _charpin(repo, "import", "pins-jsonl", "pins.jsonl", "--target", "export_invoices.py")
    assert done.returncode == 8
    assert "pins.jsonl line 3: stdin does not match its stdin_sha256" in done.stderr
    assert "edited by hand" in done.stderr
    assert path.read_text() == edited  # nothing written


def test_an_import_that_does_not_replay_green_leaves_the_pins_file_as_it_was(
    tmp_path: Path,
) -> None:
    repo = _seed000(tmp_path)
    original = (repo / "pins.jsonl").read_bytes()
    # The program changed after the recorder ran: the imported goldens cannot replay green.
    _edit(repo / "export_invoices.py", 'print(f"count={len(SEEN)}"', 'print(f"n={len(SEEN)}"')
    done = _charpin(repo, "import", "pins-jsonl", "pins.jsonl", "--target", "export_invoices.py")
    assert done.returncode == 2
    assert "do not replay green against the unchanged program (3 drifted)" in done.stderr
    assert "-count=0" in done.stderr and "+n=0" in done.stderr
    assert (repo / "pins.jsonl").read_bytes() == original


# -- seed 001: golden.json -----------------------------------------------------------------------


def test_seed001_manifest_imports_as_hash_only_pins(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "001")
    inputs = repo / "fixtures" / "case-a" / "input"
    inputs.mkdir(parents=True)
    (inputs / "b.csv").write_text("b\n")
    (inputs / "a.csv").write_text("a\n")
    # golden_manifest.py as its document runs it, with the output root inside the fixture and
    # the generator found from there.
    _run(
        repo,
        "golden_manifest.py",
        "write",
        "--output-root",
        "fixtures/case-a/out",
        "--cmd",
        sys.executable,
        "../../report_gen.py",
        "--in",
        "input",
        "--out",
        "out",
    )
    manifest = json.loads((repo / "fixtures" / "case-a.golden.json").read_text())
    assert [f["path"] for f in manifest["files"]] == ["report.txt", "summary.json"]
    shutil.rmtree(repo / "fixtures" / "case-a" / "out")  # the harness's by-product
    _commit(repo)

    done = _charpin(
        repo,
        "import",
        "golden-manifest",
        "fixtures/case-a.golden.json",
        "--id",
        "report-case-a",
        "--fixtures",
        "fixtures/case-a",
        "--",
        "report_gen.py",
        "--in",
        "input",
        "--out",
        "out",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hash-only golden: no text to diff" in done.stdout
    pin = json.loads((repo / "pins.jsonl").read_text())
    assert pin["stdout"] == {"sha256": manifest["stdout_sha256"]}
    assert pin["stderr"] == {"sha256": manifest["stderr_sha256"]}
    assert {p: f["sha256"] for p, f in pin["files"].items()} == {
        f["path"]: f["sha256"] for f in manifest["files"]
    }
    assert _charpin(repo, "pins", "check", "--prove").returncode == 0

    _edit(
        repo / "report_gen.py",
        'print(f"wrote {summary_path.name} and',
        'print(f"wrote {summary_path.name} &',
    )
    red = _charpin(repo, "pins", "check")
    assert red.returncode == 2
    assert "DRIFT report-case-a [stdout]" in red.stdout
    assert "stdout: hash-only golden: no text to diff (golden sha256 " in red.stdout


def test_seed001_a_manifest_that_no_longer_matches_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "001")
    (repo / "fixtures" / "case-a" / "input").mkdir(parents=True)
    (repo / "fixtures" / "case-a" / "input" / "a.csv").write_text("a\n")
    _run(
        repo,
        "golden_manifest.py",
        "write",
        "--output-root",
        "fixtures/case-a/out",
        "--cmd",
        sys.executable,
        "../../report_gen.py",
        "--in",
        "input",
        "--out",
        "out",
    )
    shutil.rmtree(repo / "fixtures" / "case-a" / "out")
    _edit(repo / "report_gen.py", '"count": len(names)', '"n": len(names)')
    done = _charpin(
        repo,
        "import",
        "golden-manifest",
        "fixtures/case-a.golden.json",
        "--id",
        "r",
        "--fixtures",
        "fixtures/case-a",
        "--",
        "report_gen.py",
        "--in",
        "input",
        "--out",
        "out",
    )
    assert done.returncode == 2
    assert "out/summary.json hashes to" in done.stderr
    assert not (repo / "pins.jsonl").exists()


# -- seed 002: golden/<case>.json ----------------------------------------------------------------


def test_seed002_command_matrix_imports_green_then_an_edit_turns_it_red(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "002")
    assert "recorded exempt_basic" in _run(repo, "char_harness.py", "record").stdout
    assert "snapshot gate green" in _run(repo, "char_harness.py", "check").stdout
    _commit(repo)

    done = _charpin(
        repo, "import", "golden-matrix", "char_harness.py", "--target", "messy_invoice.py"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported us_basic" in done.stdout
    assert (repo / "charpin-work" / "fixtures" / "items_eu.csv").is_file()
    pins = {p["id"]: p for p in map(json.loads, (repo / "pins.jsonl").read_text().splitlines())}
    golden = json.loads((repo / "golden" / "us_basic.json").read_text())
    assert pins["us_basic"]["stdout"] == golden["stdout"] == "WROTE out/inv.json total=48.06\n"
    assert pins["us_basic"]["files"]["inv.json"]["sha256"] == golden["out_sha256"]
    assert pins["us_basic"]["files"]["inv.json"]["text"] == golden["out_text"]

    # The seed's own drift example: a one-cent rounding slip in the total.
    _edit(
        repo / "messy_invoice.py",
        "total = round(sub + tax, 2)",
        "total = round(sub + tax - 0.01, 2)",
    )
    red = _charpin(repo, "pins", "check")
    assert red.returncode == 2
    assert "-WROTE out/inv.json total=48.06" in red.stdout
    assert "+WROTE out/inv.json total=48.05" in red.stdout


# -- seed 003: the flake ledger and evidence manifests -------------------------------------------


def _seed003(tmp_path: Path) -> Path:
    repo = _repo(tmp_path, "003")
    (repo / "tests" / "fixtures").mkdir()
    (repo / "tests" / "fixtures" / "rates.json").write_text('{"vat": "0.20"}\n')
    (repo / "tests" / "test_upload.py").write_text(
        "def test_retry_budget():\n    assert True\n\n\n"
        "def test_retry_budget_other():\n    assert True\n"
    )
    (repo / "tests" / "test_sync.py").write_text(
        "def test_conflict_merge():\n    assert True\n\n\ndef test_plain():\n    assert True\n"
    )
    # The seed: "Exclude them with --deselect flags in addopts".
    (repo / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\naddopts = [\n"
        '  "--deselect", "tests/test_upload.py::test_retry_budget",\n'
        '  "--deselect", "tests/test_sync.py::test_conflict_merge",\n]\n'
    )
    (repo / ".gitignore").write_text("__pycache__/\n.charpin/\n.evidence/\n")
    _commit(repo)
    return repo


def _evidence_run(repo: Path, stamp_dir: Path) -> Path:
    """run_evidence.sh as written, minus `--timeout=120` (pytest-timeout is not installed here),
    with the manifest moved aside so a second run does not remove it."""
    script = (repo / "run_evidence.sh").read_text().replace(" --timeout=120", "")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", script], cwd=repo, env=env, check=True, capture_output=True)
    (made,) = (repo / ".evidence").glob("run-*.json")
    stamp_dir.mkdir(parents=True, exist_ok=True)
    return Path(shutil.move(str(made), str(stamp_dir / made.name)))


def test_seed003_ledger_converts_with_an_owner_and_an_expiry(tmp_path: Path) -> None:
    repo = _seed003(tmp_path)
    no_owner = _charpin(repo, "import", "ledger", "flake-ledger.json", "--expires", "2026-12-31")
    assert no_owner.returncode == 64
    assert "--owner" in no_owner.stderr
    in_place = _charpin(
        repo, "import", "ledger", "flake-ledger.json", "--owner", "o@example.com",
        "--expires", "2026-12-31",
    )  # fmt: skip
    assert in_place.returncode == 64
    assert "the seed's own ledger" in in_place.stderr

    done = _charpin(
        repo, "import", "ledger", "flake-ledger.json", "--owner", "ops@example.com",
        "--expires", "2026-12-31", "--out", "charpin-ledger.json",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "matches by prefix" in done.stdout
    ledger = json.loads((repo / "charpin-ledger.json").read_text())
    assert ledger["version"] == 1
    assert [e["id"] for e in ledger["entries"]] == [
        "tests/test_upload.py::test_retry_budget",
        "tests/test_sync.py::test_conflict_merge",
    ]
    assert {e["owner"] for e in ledger["entries"]} == {"ops@example.com"}
    assert {e["reason"] for e in ledger["entries"]} == {
        "no frozen node may appear in a run that gates a patch"
    }

    # charpin's ledger is exact: the test the seed's --deselect took out by prefix now runs.
    (repo / "pyproject.toml").write_text('[tool.charpin]\nledger = "charpin-ledger.json"\n')
    receipt = _charpin(repo, "receipt", "-o", str(tmp_path / "r.json"), "--today", "2026-06-01")
    assert receipt.returncode == 0, receipt.stdout + receipt.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert "tests/test_upload.py::test_retry_budget_other" in data["collection"]["executed"]
    assert data["quarantine"]["frozen"] == [
        "tests/test_sync.py::test_conflict_merge",
        "tests/test_upload.py::test_retry_budget",
    ]


def test_seed003_evidence_manifests_compare_incomplete_never_pass(tmp_path: Path) -> None:
    repo = _seed003(tmp_path)
    first = _evidence_run(repo, tmp_path / "ci")
    manifest = json.loads(first.read_text())
    # The seed's frozen_leak is computed before pytest applies --deselect: it names frozen
    # tests that were collected, and neither of them ran.
    assert manifest["frozen_leak"] == [
        "tests/test_sync.py::test_conflict_merge",
        "tests/test_upload.py::test_retry_budget",
    ]
    second = _evidence_run(repo, tmp_path / "laptop")

    out = tmp_path / "receipts"
    for label, path in (("ci", first), ("laptop", second)):
        done = _charpin(
            repo, "import", "evidence", str(path), "--label", label, "--out-dir", str(out)
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "frozen_leak is computed in a conftest collection hook" in done.stdout
    receipts = sorted(out.glob("*.json"))
    data = json.loads(receipts[0].read_text())
    assert data["imported"]["format"] == "seed-003 evidence manifest"
    assert "collection.executed" in data["imported"]["lacks"]

    compared = _charpin(repo, "compare", "--json", *map(str, receipts), remote=True)
    assert compared.returncode == 16, compared.stdout + compared.stderr  # vacuous, no drift
    report = json.loads(compared.stdout)
    statuses = {(g["gate"], g["box"]): g["status"] for g in report["gates"]}
    assert set(statuses.values()) == {"INCOMPLETE"}
    details = {g["detail"] for g in report["gates"]}
    assert any("lacks collection.executed" in d for d in details)

    # A run that rewrites a fixture: the manifest's own hashes are evidence enough to FAIL.
    (repo / "tests" / "test_sync.py").write_text(
        (repo / "tests" / "test_sync.py").read_text()
        + "\n\ndef test_writes():\n    open('tests/fixtures/rates.json', 'a').write('x')\n"
    )
    _commit(repo)
    third = _evidence_run(repo, tmp_path / "patched")
    done = _charpin(
        repo, "import", "evidence", str(third), "--label", "patched", "--out-dir", str(out)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    compared = _charpin(
        repo, "compare", "--json", *map(str, sorted(out.glob("*.json"))), remote=True
    )
    report = json.loads(compared.stdout)
    fixture = {g["box"]: g for g in report["gates"] if g["gate"] == "Fixture integrity"}
    assert fixture["patched"]["status"] == "FAIL"
    assert "tests/fixtures/rates.json" in fixture["patched"]["detail"]
    assert "PASS" not in {g["status"] for g in report["gates"]}


def test_seed003_an_edited_manifest_is_refused(tmp_path: Path) -> None:
    repo = _seed003(tmp_path)
    run = _evidence_run(repo, tmp_path / "ci")
    data = json.loads(run.read_text())
    data["fixtures_after"]["tests/fixtures/rates.json"] = "0" * 64  # mutated left empty
    run.write_text(json.dumps(data))
    done = _charpin(repo, "import", "evidence", str(run), "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 8
    assert "the file was edited after the run" in done.stderr


@pytest.mark.parametrize("fmt", ["cram", "trycmd", "pins-jsonl", "evidence"])
def test_every_format_has_its_help(tmp_path: Path, fmt: str) -> None:
    done = _charpin(tmp_path, "import", fmt, "--help")
    assert done.returncode == 0
    assert "usage: charpin import" in done.stdout
