"""`charpin guard`: pins and production code never change in the same commit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from charpin_runner.cli import main
from charpin_runner.guard.protect import is_doc

from tests.conftest import git, make_repo
from tests.py39 import PY39, needs_py39

RUNNER_ROOT = Path(__file__).resolve().parents[2] / "runner"

PYPROJECT = (
    '[project]\nname = "shop"\nversion = "1"\ndependencies = []\n\n'
    '[tool.charpin]\nledger = "flake-ledger.json"\n\n'
    '[tool.charpin.pins]\ncases = "qa/cases"\n'
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "shop repo",  # a space, on purpose
        {
            "pyproject.toml": PYPROJECT,
            "app.py": "print('v1')\n",
            "pins.jsonl": '{"id": "a", "argv": ["app.py"]}\n',
            "qa/cases/a/argv.json": '["app.py"]\n',
            "README.md": "shop\n",
        },
    )


def _commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def _guard(repo: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["guard", "--repo", str(repo), *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_commit_changing_pins_and_code_together_is_refused(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "pins and code", {"app.py": "print('v2')\n", "pins.jsonl": "{}\n"})
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 2
    assert "refused commit" in out and "'pins and code'" in out
    protected, _, production = out.partition("production code:")
    assert "    pins.jsonl" in protected
    assert "    app.py" in production
    assert "refused 1 of 1 commit in " in out


def test_pins_and_code_in_separate_commits_are_accepted(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "code", {"app.py": "print('v2')\n", "README.md": "doc\n"})
    _commit(repo, "pins", {"pins.jsonl": "{}\n", "qa/cases/a/argv.json": "[]\n"})
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 0, out
    assert "ok, 2 commits in " in out


def test_each_commit_of_a_range_is_judged_alone(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "code", {"app.py": "print('v2')\n"})
    bad = _commit(repo, "sneaky", {"app.py": "print('v3')\n", "qa/cases/a/argv.json": "[]\n"})
    _commit(repo, "pins", {"pins.jsonl": "{}\n"})
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 2
    assert f"refused commit {bad[:12]} 'sneaky'" in out
    assert "qa/cases/a/argv.json" in out
    assert "refused 1 of 3 commits in " in out


def test_staged_pins_with_code_are_refused_and_alone_accepted(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "app.py").write_text("print('v2')\n")
    (repo / "flake-ledger.json").write_text("[]\n")
    git(repo, "add", "-A")
    code, out = _guard(repo, capsys, "--staged")
    assert code == 2
    assert "refused the staged change" in out
    # The summary names the staged change once, without a count ("refused 1 of the ...").
    assert "charpin guard: refused the staged change; put pin updates" in out
    assert "refused 1 of" not in out
    assert "    flake-ledger.json" in out and "    app.py" in out
    git(repo, "restore", "--staged", "app.py")
    code, out = _guard(repo, capsys, "--staged")
    assert code == 0, out


def test_staged_before_the_first_commit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "pins.jsonl").write_text("{}\n")
    (repo / "tool.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    code, out = _guard(repo, capsys, "--staged")
    assert code == 2 and "tool.py" in out


def test_charpin_table_is_protected_but_the_rest_of_pyproject_is_code(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    table = PYPROJECT.replace("flake-ledger.json", "ledger.json")
    deps = table.replace("dependencies = []", 'dependencies = ["rich"]')
    _commit(repo, "table only", {"pyproject.toml": table})
    _commit(repo, "deps and code", {"pyproject.toml": deps, "app.py": "print(2)\n"})
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 0, out  # neither commit mixes the two kinds

    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "table and code", {"pyproject.toml": deps + "timeout = 5\n", "app.py": "3\n"})
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 2
    assert "    pyproject.toml [tool.charpin]" in out
    assert "(outside [tool.charpin])" not in out

    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "deps and pins", {"pyproject.toml": PYPROJECT, "pins.jsonl": "[]\n"})
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 2
    assert "    pyproject.toml (outside [tool.charpin])" in out
    assert "    pyproject.toml [tool.charpin]" in out  # timeout line removed from the table too


def test_protected_paths_follow_the_configuration(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    # `cases` at the top is not the configured case folder (qa/cases), so it is plain code.
    _commit(repo, "unrelated", {"cases/x.txt": "x\n", "app.py": "print(9)\n"})
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 0, out


def test_a_rename_counts_on_both_paths(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = git(repo, "rev-parse", "HEAD")
    (repo / "lib").mkdir()
    git(repo, "mv", "qa/cases/a/argv.json", "lib/argv.json")
    git(repo, "commit", "-q", "-m", "move a case into code")
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 2
    assert "    qa/cases/a/argv.json" in out and "    lib/argv.json" in out


def test_docs_never_count_as_code(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = git(repo, "rev-parse", "HEAD")
    _commit(
        repo,
        "pins with notes",
        {"pins.jsonl": "[]\n", "README.md": "x\n", "docs/pins.txt": "y\n", "CHANGELOG": "z\n"},
    )
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 0, out


@pytest.mark.parametrize(
    ("path", "doc"),
    [
        ("README.md", True),
        ("LICENSE", True),
        ("LICENSE-MIT", True),
        ("LICENCE.txt", True),
        ("COPYING", True),
        ("CHANGELOG.md", True),
        ("changes.rst", True),
        ("NEWS", True),
        ("docs/conf.py", True),
        ("doc/guide/pins.txt", True),
        ("LICENSE.py", False),
        ("license_fees", False),
        ("billing/license_fees.py", False),
        ("src/changelog_parser.py", False),
        ("billing/README.md", False),
        ("templates/invoice.md", False),
        ("notes.md", False),
        ("requirements.txt", False),
        ("src/docs/helper.py", False),
    ],
)
def test_documentation_is_a_name_at_a_documentation_place(path: str, doc: bool) -> None:
    assert is_doc(path) is doc


def test_a_merge_of_a_well_split_branch_is_accepted(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "switch", "-q", "-c", "feature")
    _commit(repo, "code", {"app.py": "print('v2')\n"})
    _commit(repo, "pins", {"pins.jsonl": "[]\n"})
    git(repo, "switch", "-q", "main")
    _commit(repo, "docs on main", {"README.md": "more\n"})
    git(repo, "merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 0, out
    assert "4 commits in " in out


def test_an_evil_merge_is_judged_by_its_own_changes(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "switch", "-q", "-c", "feature")
    _commit(repo, "code", {"app.py": "print('v2')\n"})
    git(repo, "switch", "-q", "main")
    _commit(repo, "docs", {"README.md": "more\n"})
    git(repo, "merge", "-q", "--no-ff", "--no-commit", "feature")
    (repo / "pins.jsonl").write_text("[]\n")
    (repo / "app.py").write_text("print('edited in the merge')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "evil merge")
    code, out = _guard(repo, capsys, "--range", f"{base}..HEAD")
    assert code == 2
    assert "'evil merge'" in out and "    pins.jsonl" in out and "    app.py" in out


@pytest.mark.parametrize(
    "args",
    [
        ["--range", "main"],
        ["--range", "-x..y"],
        ["--range", "nope..HEAD"],
        [],
        ["--staged", "--pre-commit"],
    ],
)
def test_bad_invocations_are_usage_errors(
    repo: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    code, out = _guard(repo, capsys, *args)
    assert code == 64
    assert len(out.strip().splitlines()) == 1


def test_outside_a_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _guard(tmp_path, capsys, "--staged")
    assert code == 64 and "not inside a git work tree" in out


def _git_commit(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), "commit", "-q", "-m", "try"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_installed_hook_blocks_a_real_git_commit(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _guard(repo, capsys, "install")
    assert code == 0, out
    hook = repo / ".git" / "hooks" / "pre-commit"
    assert os.access(hook, os.X_OK)
    before = git(repo, "rev-parse", "HEAD")

    (repo / "app.py").write_text("print('v2')\n")
    (repo / "pins.jsonl").write_text("[]\n")
    git(repo, "add", "-A")
    done = _git_commit(repo)
    assert done.returncode != 0
    assert "charpin guard: refused the staged change" in done.stderr
    assert "pins.jsonl" in done.stderr and "app.py" in done.stderr
    assert git(repo, "rev-parse", "HEAD") == before

    git(repo, "restore", "--staged", "pins.jsonl")
    done = _git_commit(repo)
    assert done.returncode == 0, done.stderr
    assert git(repo, "rev-parse", "HEAD") != before


def test_install_respects_core_hooks_path_and_is_idempotent(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(repo, "config", "core.hooksPath", "githooks")
    assert _guard(repo, capsys, "install")[0] == 0
    assert _guard(repo, capsys, "install")[0] == 0  # our own hook is simply rewritten
    assert (repo / "githooks" / "pre-commit").is_file()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


def test_install_refuses_a_foreign_hook_unless_forced(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text("#!/bin/sh\necho mine\n")
    code, out = _guard(repo, capsys, "install")
    assert code == 64
    assert len(out.strip().splitlines()) == 1 and "--force" in out
    assert hook.read_text() == "#!/bin/sh\necho mine\n"
    code, out = _guard(repo, capsys, "install", "--force")
    assert code == 0
    assert (hook.parent / "pre-commit.bak").read_text() == "#!/bin/sh\necho mine\n"
    assert "charpin-guard hook" in hook.read_text()


def test_pre_commit_framework_manifest_runs_the_guard() -> None:
    manifest = (Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml").read_text()
    assert "- id: charpin-guard" in manifest
    assert "entry: charpin guard --pre-commit" in manifest
    assert "pass_filenames: false" in manifest and "always_run: true" in manifest


@needs_py39()
def test_guard_on_python_39_compares_the_table_text(repo: Path) -> None:
    (repo / "pyproject.toml").write_text(PYPROJECT + "timeout = 9\n")
    (repo / "app.py").write_text("print('v2')\n")
    git(repo, "add", "-A")
    done = subprocess.run(
        [str(PY39), "-m", "charpin_runner", "guard", "--staged"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(RUNNER_ROOT)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "pyproject.toml [tool.charpin]" in done.stderr


def test_installed_hook_sees_commit_all(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `git commit -a` stages into a temporary index (GIT_INDEX_FILE) the hook must read.
    assert _guard(repo, capsys, "install")[0] == 0
    (repo / "app.py").write_text("print('v2')\n")
    (repo / "pins.jsonl").write_text("[]\n")
    done = subprocess.run(
        ["git", "commit", "-q", "-a", "-m", "all"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "charpin guard: refused the staged change" in done.stderr
