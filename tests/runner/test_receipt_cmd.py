"""`charpin receipt` end to end: a real subprocess in a real repository with the real plugin."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, make_repo

RUNNER = Path(__file__).resolve().parents[2] / "runner"
VAT = "tests/test_rates.py::test_vat"


def charpin_env(**extra: str) -> dict[str, str]:
    """The environment for a charpin subprocess: ours, minus the outer pytest's own variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = str(RUNNER)
    env.update(extra)
    return env


def charpin(
    repo: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `python -m charpin_runner receipt ARGS` with cwd repo."""
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", "receipt", *args],
        cwd=repo,
        env=env or charpin_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def only_receipt(repo: Path) -> dict[str, Any]:
    """The single receipt under repo/.charpin/receipts, decoded."""
    found = sorted((repo / ".charpin" / "receipts").glob("*.json"))
    assert len(found) == 1, found
    data: dict[str, Any] = json.loads(found[0].read_text())
    return data


def add_test(repo: Path, name: str, body: str) -> None:
    """Commit one more test file so the tree stays clean."""
    (repo / "tests" / name).write_text(body)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"add {name}")


def test_passing_run_writes_a_receipt_and_a_five_line_summary(git_repo: Path) -> None:
    result = charpin(git_repo, "--run-id", "r-pass", "--label", "laptop")
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    head = git(git_repo, "rev-parse", "HEAD")
    assert receipt["run_id"] == "r-pass" and receipt["label"] == "laptop"
    assert receipt["identity"]["head_before"] == receipt["identity"]["head_after"] == head
    assert receipt["identity"]["tree_before"] == git(git_repo, "rev-parse", "HEAD^{tree}")
    assert receipt["tree"]["dirty_before"] == receipt["tree"]["written"] == []
    assert receipt["collection"]["executed"] == receipt["collection"]["selected"] == [VAT]
    assert receipt["outcomes"] == {VAT: "passed"}
    assert receipt["exit"] == {
        "status": 0,
        "interpretation": "ok",
        "reasons": [],
        "pytest_status": 0,
    }
    assert [f["path"] for f in receipt["fixtures"]["after"]] == ["tests/fixtures/rates.json"]
    lines = result.stdout.splitlines()[-5:]
    assert lines == [
        f"charpin receipt r-pass · label laptop · commit {head[:7]} · 0 dirty paths",
        "tests     collected 1 · ledger-deselected 0 · selected 1 · executed 1",
        "outcomes  1 passed",
        "fixtures  tests/fixtures: 1 file · unchanged",
        "exit      0 → ok · receipt .charpin/receipts/r-pass.json",
    ]
    # The receipt folder ignores itself, so the tree is still clean for git.
    assert git(git_repo, "status", "--porcelain") == ""


def test_failing_run_exits_1(git_repo: Path) -> None:
    add_test(git_repo, "test_bad.py", "def test_bad():\n    assert 1 == 2\n")
    result = charpin(git_repo, "-q")
    assert result.returncode == 1, result.stderr
    assert "charpin receipt" not in result.stdout  # -q: no summary
    receipt = only_receipt(git_repo)
    assert receipt["outcomes"] == {VAT: "passed", "tests/test_bad.py::test_bad": "failed"}
    assert receipt["exit"]["interpretation"] == "failed"


def test_arguments_after_double_dash_go_to_pytest(git_repo: Path) -> None:
    add_test(git_repo, "test_more.py", "def test_one():\n    pass\ndef test_two():\n    pass\n")
    result = charpin(git_repo, "--", "-k", "test_two or test_vat")
    assert result.returncode == 0, result.stderr
    collection = only_receipt(git_repo)["collection"]
    assert collection["executed"] == ["tests/test_more.py::test_two", VAT]
    assert collection["filtered"] == ["tests/test_more.py::test_one"]
    assert "-k" in only_receipt(git_repo)["command"]


def test_existing_output_is_refused_before_anything_runs(git_repo: Path) -> None:
    target = git_repo / "old.json"
    target.write_text("keep me")
    result = charpin(git_repo, "-o", str(target))
    assert result.returncode == 64
    assert str(target) in result.stderr and "never overwritten" in result.stderr
    assert target.read_text() == "keep me"
    assert "test session starts" not in result.stdout


def test_bad_config_value_is_one_line_with_its_path(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text('[tool.charpin]\nwatch = "tests/fixtures"\n')
    result = charpin(git_repo)
    assert result.returncode == 64
    assert result.stderr.count("\n") == 1, result.stderr
    assert "$.tool.charpin.watch" in result.stderr
    assert "Traceback" not in result.stderr


def test_watch_root_outside_the_repository_is_a_config_error(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text('[tool.charpin]\nwatch = ["../elsewhere"]\n')
    result = charpin(git_repo)
    assert result.returncode == 64
    assert "'../elsewhere'" in result.stderr


def test_not_a_git_repository_is_a_usage_error(tmp_path: Path) -> None:
    folder = tmp_path / "plain folder"
    folder.mkdir()
    result = charpin(folder)
    assert result.returncode == 64
    assert "plain folder is not inside a git repository" in result.stderr


def test_a_repository_owned_by_another_user_says_what_git_says(
    git_repo: Path, tmp_path: Path
) -> None:
    # git will not open it ("dubious ownership"): show git's first line and its fix, which names
    # the repository's top even when charpin runs in a subfolder (#10 item 13).
    if os.geteuid() != 0:
        pytest.skip("needs root to give the repository to another user (CI runs as root)")
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["chown", "-R", "65534", str(git_repo)], check=True)
    env = charpin_env(HOME=str(home))
    env.pop("GIT_CONFIG_GLOBAL", None)
    result = charpin(git_repo / "tests", env=env)
    assert result.returncode == 64, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"detected dubious ownership in repository at '{git_repo}'" in result.stderr
    assert (
        f"if you trust it, run: git config --global --add safe.directory {git_repo}\n"
        in result.stderr
    )
    assert "not inside a git repository" not in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--run-id", "../escape"], "--run-id"),
        (["--timeout", "soon"], "--timeout"),
        (["--today", "30/11/2026"], "--today"),
        (["--snapshot-sha256", "abc"], "--snapshot-sha256"),
        (["--host-key-fingerprint", "SHA256:a b\nc"], "--host-key-fingerprint"),
        (["--timeout", "-1"], "--timeout"),
    ],
)
def test_bad_flags_are_usage_errors(git_repo: Path, flags: list[str], message: str) -> None:
    result = charpin(git_repo, *flags)
    assert result.returncode == 64
    assert message in result.stderr and "Traceback" not in result.stderr


def test_config_json_flags_and_outputs_are_recorded(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / "data").mkdir()
    (git_repo / "data" / "golden.txt").write_text("gold\n")
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps({"watch": ["data"], "outputs": ["out"], "env_allow": ["X_OK"]}))
    (git_repo / "tests" / "test_writes.py").write_text(
        "import pathlib\ndef test_writes():\n"
        "    pathlib.Path('out').mkdir(exist_ok=True)\n"
        "    pathlib.Path('out/report.txt').write_text('r')\n"
    )
    head = git(git_repo, "rev-parse", "HEAD")
    out = tmp_path / "receipts" / "box.json"
    result = charpin(
        git_repo,
        "--config-json",
        str(settings),
        "-o",
        str(out),
        "--expected-commit",
        head,
        "--snapshot-sha256",
        "a" * 64,
        "--host-key-fingerprint",
        "SHA256:abc",
        "--host-key-accepted-new",
        "--no-pins",
        env=charpin_env(X_OK="shown"),
    )
    assert result.returncode == 0, result.stderr
    receipt = json.loads(out.read_text())
    assert receipt["fixtures"]["roots"] == ["data"]
    assert receipt["tree"]["outputs"] == ["out"]
    assert receipt["tree"]["dirty_before"] == ["data/golden.txt", "tests/test_writes.py"]
    assert receipt["tree"]["written"] == ["out/report.txt"]
    assert receipt["identity"]["expected_commit"] == head
    assert receipt["identity"]["snapshot_sha256"] == "a" * 64
    assert receipt["environment"]["host_key_fingerprint"] == "SHA256:abc"
    assert receipt["environment"]["host_key_accepted_new"] is True
    assert receipt["environment"]["variables"]["X_OK"] == "shown"
    assert receipt["pins"] == {"source": None, "replayed": False, "results": []}
    assert "· 2 dirty paths" in result.stdout


def test_explicit_ledger_that_does_not_exist_is_refused(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text('[tool.charpin]\nledger = "quarantine.json"\n')
    result = charpin(git_repo)
    assert result.returncode == 64
    assert "quarantine.json" in result.stderr


def test_conftest_is_hashed_by_the_parent(tmp_path: Path) -> None:
    conftest = "import pytest\n"
    repo = make_repo(
        tmp_path / "r",
        {"tests/conftest.py": conftest, "tests/test_a.py": "def test_a():\n    pass\n"},
    )
    assert charpin(repo).returncode == 0
    environment = only_receipt(repo)["environment"]
    expected = hashlib.sha256(conftest.encode()).hexdigest()
    assert environment["conftest_sha256"] == {"tests/conftest.py": expected}


def test_no_selected_tests_exit_16(git_repo: Path) -> None:
    result = charpin(git_repo, "--", "-k", "matches_nothing")
    assert result.returncode == 16, result.stderr
    assert only_receipt(git_repo)["exit"]["interpretation"] == "no-tests"
    assert "5 → no-tests" in result.stdout


def test_a_test_command_that_cannot_start_exits_4(git_repo: Path, tmp_path: Path) -> None:
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps({"test_command": [str(tmp_path / "no-such-python")]}))
    result = charpin(git_repo, "--config-json", str(settings))
    assert result.returncode == 4
    assert "no-such-python" in result.stderr and result.stderr.count("\n") == 1


def test_a_repository_without_commits_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q")
    result = charpin(repo)
    assert result.returncode == 64
    assert "has no commit" in result.stderr


def plain_repo(tmp_path: Path, **files: str) -> Path:
    """A committed repository with one passing test and no tests/fixtures folder."""
    return make_repo(tmp_path / "plain", {"tests/test_a.py": "def test_a():\n    pass\n", **files})


def test_default_fixture_root_that_does_not_exist_is_not_missing(tmp_path: Path) -> None:
    repo = plain_repo(tmp_path, **{"pyproject.toml": "[tool.charpin]\ntimeout = 60\n"})
    result = charpin(repo, "--no-pins")
    assert result.returncode == 0, result.stderr
    fixtures = only_receipt(repo)["fixtures"]
    assert (fixtures["roots"], fixtures["missing_roots"]) == ([], [])
    assert "fixtures  none watched: 0 files · unchanged" in result.stdout


def test_default_root_from_config_json_without_watch_is_not_missing(tmp_path: Path) -> None:
    repo = plain_repo(tmp_path)
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps({"timeout": 60}))
    result = charpin(repo, "--config-json", str(settings), "--no-pins")
    assert result.returncode == 0, result.stderr
    fixtures = only_receipt(repo)["fixtures"]
    assert (fixtures["roots"], fixtures["missing_roots"]) == ([], [])


@pytest.mark.parametrize("watch", [["tests/fixtures"], ["golden", "tests/fixtures"]])
def test_explicit_fixture_root_that_does_not_exist_stays_missing(
    tmp_path: Path, watch: list[str]
) -> None:
    repo = plain_repo(tmp_path, **{"pyproject.toml": f"[tool.charpin]\nwatch = {watch!r}\n"})
    result = charpin(repo, "--no-pins")
    assert result.returncode == 0, result.stderr
    fixtures = only_receipt(repo)["fixtures"]
    assert fixtures["roots"] == fixtures["missing_roots"] == sorted(watch)
    assert "missing roots" in result.stdout


def test_explicit_root_in_config_json_that_does_not_exist_stays_missing(tmp_path: Path) -> None:
    repo = plain_repo(tmp_path)
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps({"watch": ["tests/fixtures"]}))
    result = charpin(repo, "--config-json", str(settings), "--no-pins")
    assert result.returncode == 0, result.stderr
    assert only_receipt(repo)["fixtures"]["missing_roots"] == ["tests/fixtures"]


def test_an_unknown_option_before_double_dash_is_a_usage_error(git_repo: Path) -> None:
    result = charpin(git_repo, "--lable", "x", "--", "-k", "test_vat")
    assert result.returncode == 64
    assert result.stderr.count("\n") == 1, result.stderr
    assert "--lable x" in result.stderr and "Traceback" not in result.stderr
    assert not (git_repo / ".charpin").exists()
    assert "test session starts" not in result.stdout


def test_pytest_options_without_double_dash_are_refused(git_repo: Path) -> None:
    result = charpin(git_repo, "-k", "test_vat")
    assert result.returncode == 64
    assert "unrecognized arguments: -k test_vat" in result.stderr
    assert not (git_repo / ".charpin").exists()


def test_options_before_double_dash_and_pytest_args_after(git_repo: Path) -> None:
    add_test(git_repo, "test_invoices.py", "def test_invoices():\n    pass\n")
    result = charpin(git_repo, "--label", "x", "-o", "a.json", "--", "-k", "invoices")
    assert result.returncode == 0, result.stderr
    receipt = json.loads((git_repo / "a.json").read_text())
    assert receipt["label"] == "x"
    assert receipt["collection"]["executed"] == ["tests/test_invoices.py::test_invoices"]
    assert receipt["command"][-2:] == ["-k", "invoices"]


def test_a_receipt_written_inside_the_repository_gets_one_warning(git_repo: Path) -> None:
    result = charpin(git_repo, "-o", "receipts/box.json")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "charpin: warning: receipts/box.json is inside the repository, so the next receipt "
        "will count it as an uncommitted file; write receipts outside the tree or under .charpin/"
    ]
    assert (git_repo / "receipts" / "box.json").is_file()
    # The warning is true: the next receipt sees the first one as an untracked file.
    assert charpin(git_repo, "-o", str(git_repo / ".charpin" / "two.json")).returncode == 0
    second = json.loads((git_repo / ".charpin" / "two.json").read_text())
    assert second["tree"]["dirty_before"] == ["receipts/box.json"]


@pytest.mark.parametrize("where", ["outside", ".charpin/mine/box.json", "default"])
def test_receipts_outside_the_tree_or_under_charpin_are_not_warned(
    git_repo: Path, tmp_path: Path, where: str
) -> None:
    flags = {
        "outside": ["-o", str(tmp_path / "box.json")],
        "default": [],
    }.get(where, ["-o", where])
    result = charpin(git_repo, *flags)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr


def pinned_repo(tmp_path: Path) -> Path:
    """A repository with one passing test and one pin recorded by `charpin pins record`."""
    repo = plain_repo(tmp_path, **{"greet.py": "print('hello')\n", "other.py": "print(1)\n"})
    for pin_id, script in (("greet", "greet.py"), ("other", "other.py")):
        recorded = subprocess.run(
            [
                sys.executable,
                "-m",
                "charpin_runner",
                "pins",
                "record",
                "--id",
                pin_id,
                "--",
                script,
            ],
            cwd=repo,
            env=charpin_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert recorded.returncode == 0, recorded.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pins")
    return repo


def test_passing_pins_get_a_sixth_summary_line_and_exit_0(tmp_path: Path) -> None:
    repo = pinned_repo(tmp_path)
    result = charpin(repo)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "pins      2 passed · 0 drifted"
    statuses = {r["id"]: r["status"] for r in only_receipt(repo)["pins"]["results"]}
    assert statuses == {"greet": "passed", "other": "passed"}


def test_a_drifted_pin_is_named_and_sets_exit_bit_2(tmp_path: Path) -> None:
    repo = pinned_repo(tmp_path)
    (repo / "greet.py").write_text("print('goodbye')\n")
    git(repo, "commit", "-qam", "drift")
    result = charpin(repo)
    assert result.returncode == 2, result.stderr
    assert result.stdout.splitlines()[-1] == "pins      1 passed · 1 drifted (greet)"
    receipt = only_receipt(repo)
    assert receipt["exit"]["interpretation"] == "ok"
    assert {r["id"]: r["status"] for r in receipt["pins"]["results"]}["greet"] == "failed"


def test_a_drifted_pin_adds_bit_2_to_failed_tests(tmp_path: Path) -> None:
    repo = pinned_repo(tmp_path)
    (repo / "greet.py").write_text("print('goodbye')\n")
    (repo / "tests" / "test_b.py").write_text("def test_b():\n    assert False\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "drift and fail")
    result = charpin(repo, "-q")
    assert result.returncode == 1 | 2, result.stderr


def test_a_corrupt_pins_file_is_an_errored_pin(tmp_path: Path) -> None:
    repo = pinned_repo(tmp_path)
    with (repo / "pins.jsonl").open("a") as handle:
        handle.write('{"id": broken\n')
    git(repo, "commit", "-qam", "corrupt")
    result = charpin(repo)
    assert result.returncode & 2, result.stderr
    assert result.stdout.splitlines()[-1] == "pins      0 passed · 0 drifted · 1 errored (<pins>)"
    assert "charpin: pins were not replayed: pins.jsonl line 3" in result.stderr
    pins = only_receipt(repo)["pins"]
    receipt_error = pins["results"][0]["detail"][0]
    assert receipt_error.startswith("error: pins.jsonl line 3")
    assert pins == {
        "source": "pins.jsonl",
        "replayed": True,
        "results": [
            {
                "id": "<pins>",
                "status": "error",
                "exit_code": None,
                "stdout_sha256": "",
                "stderr_sha256": "",
                "files": {},
                "failure_class": "error",
                "detail": [receipt_error],
                "actual": [],
            }
        ],
    }


def test_a_python_without_pytest_is_named_with_the_fix(git_repo: Path) -> None:
    """#22: `local` on an interpreter without pytest said only "zero tests executed"."""
    bare = "/usr/bin/python3"
    probe = [bare, "-c", "import pytest"]
    if (
        not Path(bare).exists()
        or not subprocess.run(probe, capture_output=True, check=False).returncode
    ):
        pytest.skip(f"needs a {bare} without pytest")
    (git_repo / "pyproject.toml").write_text(
        f'[tool.charpin]\ntest_command = ["{bare}", "-m", "pytest"]\n'
    )
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-qm", "bare python")
    result = charpin(git_repo, "--no-pins")
    assert result.returncode != 0, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert f"charpin: {bare} cannot import pytest" in said
    assert f"{bare} -m pip install pytest" in said
    assert "Traceback" not in said
