"""gitcmd is the runner's only way to start git, and no GIT_* variable of the caller steers it."""

from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest
from charpin_runner import checkout, fixtures, gitcmd, gitstate
from charpin_runner.cli import main
from charpin_runner.errors import RunError
from charpin_runner.guard import check, gitio

from tests.conftest import git, make_repo

PACKAGE = Path(__file__).resolve().parents[2] / "runner" / "charpin_runner"
_STARTERS = {
    ("subprocess", name) for name in ("run", "Popen", "call", "check_call", "check_output")
} | {("os", name) for name in ("system", "popen", "execv", "execvp", "execvpe", "spawnvp")}


def _git_launches(source: str) -> list[int]:
    """Lines that start git themselves: an argv literal beginning with "git", or "git" handed
    straight to a subprocess or os function."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git":
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and (owner.id, node.func.attr) in _STARTERS:
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).split(" ")[0] == "git":
                        found.append(node.lineno)
    return found


def test_the_detector_finds_git_started_by_hand() -> None:
    assert _git_launches('import subprocess\nsubprocess.run(["git", "status"])\n') == [2]
    assert _git_launches('import os\nos.system("git status")\n') == [2]
    assert _git_launches('run(["python", "git"])\n') == []


def test_no_runner_module_starts_git_except_gitcmd() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "gitcmd.py" and path.parent == PACKAGE:
            continue
        for line in _git_launches(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.relative_to(PACKAGE)}:{line}")
    assert offenders == [], "start git through charpin_runner.gitcmd.run: " + ", ".join(offenders)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "real repo",
        {
            "pyproject.toml": "[project]\nname = 'shop'\n",
            "app.py": "print('v1')\n",
            "pins.jsonl": '{"id": "a", "argv": ["app.py"]}\n',
        },
    )


@pytest.fixture
def decoy(tmp_path: Path) -> Path:
    """Another repository, with a staged change that mixes pins and code and its own hooks
    folder: whatever reads it instead of the real one gives a different answer."""
    root = make_repo(tmp_path / "decoy", {"app.py": "decoy\n", "pins.jsonl": "decoy\n"})
    (root / "app.py").write_text("decoy v2\n")
    (root / "pins.jsonl").write_text("decoy v2\n")
    git(root, "add", "-A")
    return root


def _hostile(monkeypatch: pytest.MonkeyPatch, decoy: Path) -> None:
    """What a git hook, an alias or an earlier CI step could leave in the environment."""
    monkeypatch.setenv("GIT_DIR", str(decoy / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(decoy))
    monkeypatch.setenv("GIT_INDEX_FILE", str(decoy / ".git" / "index"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(decoy / ".git" / "objects"))
    monkeypatch.setenv("GIT_COMMON_DIR", str(decoy / ".git"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.hooksPath'='{decoy / 'hooks'}'")


def _plain_git(repo: Path, *args: str) -> str:
    """git as a user would run it, without the hostile variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_sealed_git_ignores_the_callers_git_variables_and_global_config(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = from-global\n")
    git(repo, "config", "core.hooksPath", str(tmp_path))
    blob = git(repo, "rev-parse", "HEAD:app.py")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.fsmonitor'='evil'")
    assert gitcmd.run(["config", "user.name"], cwd=repo).stdout == b""
    assert gitcmd.run(["config", "core.hooksPath"], cwd=repo).stdout == b"/dev/null\n"
    assert gitcmd.run(["config", "core.fsmonitor"], cwd=repo).stdout == b"false\n"
    hashed = gitcmd.run(["hash-object", "--stdin-paths"], cwd=repo, input=b"app.py\n")
    assert hashed.stdout.decode().strip() == blob


def test_git_has_a_deadline(repo: Path) -> None:
    os.mkfifo(repo / ".git" / "packed-refs.fifo")
    (repo / ".git" / "packed-refs").unlink(missing_ok=True)
    os.rename(repo / ".git" / "packed-refs.fifo", repo / ".git" / "packed-refs")
    with pytest.raises(RunError, match="git rev-parse did not finish within 1 s"):
        gitcmd.run(["rev-parse", "HEAD"], cwd=repo, timeout=1)


def test_checkout_install_and_verify_are_not_misled(
    repo: Path, decoy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    bundle = tmp_path / "snap.bundle"
    git(repo, "bundle", "create", "-q", str(bundle), "HEAD")
    sha = fixtures.hash_file(str(bundle))
    decoy_head = git(decoy, "rev-parse", "HEAD")
    _hostile(monkeypatch, decoy)
    dest = tmp_path / "box" / "checkout"
    got = checkout.install(tmp_path / "box" / "cache", bundle, sha, commit, dest, "HEAD", tree)
    checkout.verify(dest, tree)
    assert got == {"head": commit, "tree": tree}
    assert (dest / "app.py").read_text() == "print('v1')\n"
    assert _plain_git(decoy, "rev-parse", "HEAD") == decoy_head
    assert _plain_git(decoy, "for-each-ref", "refs/charpin") == ""


def test_measurement_is_not_misled(
    repo: Path, decoy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "app.py").write_text("print('edited')\n")
    head = git(repo, "rev-parse", "HEAD")
    _hostile(monkeypatch, decoy)
    assert gitstate.find_toplevel(repo / ".git" / "..") == Path(os.path.realpath(repo))
    state = gitstate.read_state(repo)
    assert (state.head, state.dirty) == (head, ["app.py"])
    assert state.git_dir == os.path.realpath(repo / ".git")


def test_guard_outside_a_hook_is_not_misled(
    repo: Path, decoy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("docs\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "docs")
    _hostile(monkeypatch, decoy)
    assert gitio.toplevel(repo) == Path(os.path.realpath(repo))
    assert gitio.hooks_dir(repo) == Path(os.path.realpath(repo)) / ".git" / "hooks"
    # The decoy's index stages pins and code together; the real index stages nothing.
    assert not check.check_staged(repo).refused
    assert [v.refused for v in check.check_range(repo, f"{base}..HEAD")] == [False]
    assert main(["guard", "--repo", str(repo), "--range", f"{base}..HEAD"]) == 0
    assert "ok, 1 commit in " in capsys.readouterr().out


def test_the_staged_index_is_only_read_where_it_is_named(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `git commit -a` does before the pre-commit hook: stage into a temporary index.
    other = tmp_path / "next-index"
    (repo / "app.py").write_text("print('v2')\n")
    (repo / "pins.jsonl").write_text("[]\n")
    env = {**os.environ, "GIT_INDEX_FILE": str(other)}
    subprocess.run(["git", "-C", str(repo), "read-tree", "HEAD"], env=env, check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], env=env, check=True)
    monkeypatch.setenv("GIT_INDEX_FILE", str(other))
    assert not check.check_staged(repo).refused
    verdict = check.check_staged(repo, index_file=str(other))
    assert verdict.refused and verdict.protected == ["pins.jsonl"] and verdict.code == ["app.py"]
